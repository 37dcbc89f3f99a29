// CPU half of the Jacobian products: planning (kinds, shapes, fill-in) and the kernels.
// Dense and sparse arithmetic goes through Eigen; SpGEMM with a fixed pattern is our own.
#include "bppsa/jacobian/product.hpp"

#include <Eigen/SparseCore>
#include <algorithm>

#include "bppsa/core/error.hpp"
#include "jacobian/cpu/spgemm.hpp"

namespace bppsa {
namespace {

template <class T>
using CMap = Eigen::Map<const Matrix<T>>;
template <class T>
using MMap = Eigen::Map<Matrix<T>>;
template <class T>
using CVec = Eigen::Map<const Vector<T>>;
template <class T>
using MVec = Eigen::Map<Vector<T>>;
template <class T>
using SparseMap = Eigen::Map<const Eigen::SparseMatrix<T, Eigen::RowMajor, std::int32_t>>;
template <class T>
using StridedC = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
template <class T>
using StridedM = Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>>;

template <class T>
SparseMap<T> sparse(const CsrPattern& p, const T* v) {
  return SparseMap<T>(p.rows(), p.cols(), p.nnz(), p.row_ptr().data(), p.col_idx().data(), v);
}

template <class T>
T* scratch_values(Scratch<T>& scratch, Index n) {
  if (scratch.values.size() < static_cast<std::size_t>(n)) scratch.values.resize(static_cast<std::size_t>(n));
  return scratch.values.data();
}

/// Dense O = A · B. Small products go through Eigen's coefficient-based (vectorised, no
/// packing) path, large ones through its blocked GEMM.
template <class T, class A, class B>
void gemm(MMap<T> o, const A& a, const B& b) {
  if (a.rows() * a.cols() * b.cols() <= 48 * 48 * 48)
    o.noalias() = a.lazyProduct(b);
  else
    o.noalias() = a * b;
}

template <class T>
void scale_columns(MMap<T> o, const T* d) {
  o.array().rowwise() *= CVec<T>(d, o.cols()).transpose().array();
}

double mn(Index m, Index n) { return static_cast<double>(m) * static_cast<double>(n); }

}  // namespace

template <class T>
ProductPlan<T> plan_product(const Layout<T>& a, const Layout<T>& b, Index batch) {
  const char* op = "multiply";
  if (a.cols != b.rows)
    detail::raise<ShapeError>(op, "A (" + a.describe() + ") · B (" + b.describe() + "): A has " +
                                      std::to_string(a.cols) + " columns but B has " + std::to_string(b.rows) +
                                      " rows");
  for (const Layout<T>* l : {&a, &b})
    if (l->count != 1 && l->count != batch)
      detail::raise<ShapeError>(op, l->describe() + " has " + std::to_string(l->count) + " samples but the batch has " +
                                        std::to_string(batch));
  ProductPlan<T> plan;
  Layout<T>& out = plan.out;
  out.rows = a.rows;
  out.cols = b.cols;
  out.count = (a.shared() && b.shared()) ? 1 : batch;
  const Index m = a.rows, k = a.cols, n = b.cols;
  const double nnz_a = a.kind == Kind::csr ? static_cast<double>(a.pattern->nnz()) : 0;
  const double nnz_b = b.kind == Kind::csr ? static_cast<double>(b.pattern->nnz()) : 0;
  double& f = plan.flops_per_sample;
  if (a.kind == Kind::identity || b.kind == Kind::identity) {
    const Layout<T>& other = a.kind == Kind::identity ? b : a;
    out.kind = other.kind;
    out.pattern = other.pattern;
    out.shared_dense = other.shared_dense;
    out.count = other.kind == Kind::identity ? 1 : other.count;
    return plan;
  }
  out.kind = Kind::dense;  // the default of the table in product.hpp
  switch (a.kind) {
    case Kind::diagonal:
      switch (b.kind) {
        case Kind::diagonal:
          out.kind = Kind::diagonal;
          f = static_cast<double>(m);
          break;
        case Kind::dense:
          f = mn(m, n);
          break;
        case Kind::csr:
          out.kind = Kind::csr;
          out.pattern = b.pattern;
          f = nnz_b;
          break;
        case Kind::shared_dense_diag:
          f = 2 * mn(m, n);
          break;
        default:
          break;
      }
      break;
    case Kind::dense:
      switch (b.kind) {
        case Kind::diagonal:
          f = mn(m, n);
          break;
        case Kind::dense:
          f = 2 * mn(m, k) * static_cast<double>(n);
          break;
        case Kind::csr:
          f = 2 * static_cast<double>(m) * nnz_b;
          break;
        case Kind::shared_dense_diag:
          f = 2 * mn(m, k) * static_cast<double>(n) + mn(m, n);
          break;
        default:
          break;
      }
      break;
    case Kind::csr:
      switch (b.kind) {
        case Kind::diagonal:
          out.kind = Kind::csr;
          out.pattern = a.pattern;
          f = nnz_a;
          break;
        case Kind::dense:
          f = 2 * nnz_a * static_cast<double>(n);
          break;
        case Kind::csr: {
          auto sym = detail::spgemm_symbolic(*a.pattern, *b.pattern);
          out.kind = Kind::csr;
          out.pattern = std::move(sym.pattern);
          f = 2 * sym.terms;
          break;
        }
        case Kind::shared_dense_diag:
          f = 2 * nnz_a * static_cast<double>(n) + mn(m, n);
          break;
        default:
          break;
      }
      break;
    case Kind::shared_dense_diag:
      switch (b.kind) {
        case Kind::diagonal:
          out.kind = Kind::shared_dense_diag;
          out.shared_dense = a.shared_dense;
          f = static_cast<double>(n);
          break;
        case Kind::dense:
          f = mn(k, n) + 2 * mn(m, k) * static_cast<double>(n);
          break;
        case Kind::csr:
          f = nnz_b + 2 * static_cast<double>(m) * nnz_b;
          break;
        case Kind::shared_dense_diag:
          f = mn(k, n) + 2 * mn(m, k) * static_cast<double>(n) + mn(m, n);
          break;
        default:
          break;
      }
      break;
    default:
      break;
  }
  return plan;
}

template <class T>
void multiply(const ProductPlan<T>& plan, const JacobianView<T>& a, const JacobianView<T>& b, Index s, T* out,
              Scratch<T>& scratch) {
  const Layout<T>& la = *a.layout;
  const Layout<T>& lb = *b.layout;
  const T* av = a.sample(s);
  const T* bv = b.sample(s);
  if (la.kind == Kind::identity || lb.kind == Kind::identity) {
    const Layout<T>& other = la.kind == Kind::identity ? lb : la;
    const T* ov = la.kind == Kind::identity ? bv : av;
    std::copy_n(ov, other.values_per_sample(), out);
    return;
  }
  const Index m = la.rows, k = la.cols, n = lb.cols;
  MMap<T> o(out, plan.out.kind == Kind::dense ? m : 0, plan.out.kind == Kind::dense ? n : 0);
  switch (la.kind) {
    case Kind::diagonal: {
      const CVec<T> da(av, m);
      switch (lb.kind) {
        case Kind::diagonal:
          MVec<T>(out, m) = da.cwiseProduct(CVec<T>(bv, m));
          break;
        case Kind::dense:
          o.noalias() = da.asDiagonal() * CMap<T>(bv, k, n);
          break;
        case Kind::csr: {
          const auto rp = lb.pattern->row_ptr();
          for (Index i = 0; i < m; ++i)
            for (std::int32_t p = rp[i]; p < rp[i + 1]; ++p) out[p] = da[i] * bv[p];
          break;
        }
        case Kind::shared_dense_diag:
          o.noalias() = da.asDiagonal() * *lb.shared_dense;
          scale_columns<T>(o, bv);
          break;
        default:
          break;
      }
      break;
    }
    case Kind::dense: {
      const CMap<T> ma(av, m, k);
      switch (lb.kind) {
        case Kind::diagonal:
          o.noalias() = ma * CVec<T>(bv, n).asDiagonal();
          break;
        case Kind::dense:
          gemm<T>(o, ma, CMap<T>(bv, k, n));
          break;
        case Kind::csr:
          o.noalias() = ma * sparse(*lb.pattern, bv);
          break;
        case Kind::shared_dense_diag:
          gemm<T>(o, ma, *lb.shared_dense);
          scale_columns<T>(o, bv);
          break;
        default:
          break;
      }
      break;
    }
    case Kind::csr: {
      switch (lb.kind) {
        case Kind::diagonal: {
          const auto ci = la.pattern->col_idx();
          for (Index p = 0; p < la.pattern->nnz(); ++p) out[p] = av[p] * bv[ci[p]];
          break;
        }
        case Kind::dense:
          o.noalias() = sparse(*la.pattern, av) * CMap<T>(bv, k, n);
          break;
        case Kind::csr:
          detail::spgemm_numeric(*la.pattern, av, *lb.pattern, bv, *plan.out.pattern, out, scratch.position);
          break;
        case Kind::shared_dense_diag:
          o.noalias() = sparse(*la.pattern, av) * *lb.shared_dense;
          scale_columns<T>(o, bv);
          break;
        default:
          break;
      }
      break;
    }
    case Kind::shared_dense_diag: {
      const Matrix<T>& sa = *la.shared_dense;
      const CVec<T> da(av, k);
      switch (lb.kind) {
        case Kind::diagonal:
          MVec<T>(out, n) = da.cwiseProduct(CVec<T>(bv, n));
          break;
        case Kind::dense: {
          MMap<T> tmp(scratch_values(scratch, k * n), k, n);
          tmp.noalias() = da.asDiagonal() * CMap<T>(bv, k, n);
          gemm<T>(o, sa, tmp);
          break;
        }
        case Kind::csr: {
          const CsrPattern& pb = *lb.pattern;
          T* scaled = scratch_values(scratch, pb.nnz());
          const auto rp = pb.row_ptr();
          for (Index i = 0; i < k; ++i)
            for (std::int32_t p = rp[i]; p < rp[i + 1]; ++p) scaled[p] = da[i] * bv[p];
          o.noalias() = sa * sparse(pb, static_cast<const T*>(scaled));
          break;
        }
        case Kind::shared_dense_diag: {
          MMap<T> tmp(scratch_values(scratch, k * n), k, n);
          tmp.noalias() = da.asDiagonal() * *lb.shared_dense;
          gemm<T>(o, sa, tmp);
          scale_columns<T>(o, bv);
          break;
        }
        default:
          break;
      }
      break;
    }
    default:
      break;
  }
}

template <class T>
Jacobian<T> multiply(const Jacobian<T>& a, const Jacobian<T>& b) {
  const Index batch = std::max(a.count(), b.count());
  const ProductPlan<T> plan = plan_product(a.layout(), b.layout(), batch);
  Jacobian<T> out(plan.out);
  Scratch<T> scratch;
  for (Index s = 0; s < out.count(); ++s) multiply(plan, view(a), view(b), s, out.sample(s).data(), scratch);
  return out;
}

template <class T>
void apply(const JacobianView<T>& a, Index b0, Index b1, const T* x, Index ldx, T* y, Index ldy, bool accumulate,
           Scratch<T>& scratch) {
  const Index nb = b1 - b0;
  if (nb <= 0) return;
  const Layout<T>& l = *a.layout;
  const Index m = l.rows, k = l.cols;
  const StridedC<T> X(x + b0 * ldx, k, nb, Eigen::OuterStride<>(ldx));
  StridedM<T> Y(y + b0 * ldy, m, nb, Eigen::OuterStride<>(ldy));
  auto put = [accumulate](auto&& dst, auto&& expr) {
    if (accumulate)
      dst.noalias() += expr;
    else
      dst.noalias() = expr;
  };
  if (l.kind == Kind::identity) {
    put(Y, X);
    return;
  }
  // Shared diagonal and CSR operands take the whole column block at once: their kernels
  // compute every column in the same order whatever the block width. Dense products go
  // column by column (below) even when shared, because Eigen's GEMM and GEMV round
  // differently, and the executor's block width depends on the thread count.
  if (l.shared() && l.kind == Kind::diagonal) {
    put(Y, CVec<T>(a.values, m).asDiagonal() * X);
    return;
  }
  if (l.shared() && l.kind == Kind::csr) {
    put(Y, sparse(*l.pattern, a.values) * X);
    return;
  }
  for (Index j = 0; j < nb; ++j) {
    const T* v = a.sample(b0 + j);
    auto xj = X.col(j);
    auto yj = Y.col(j);
    switch (l.kind) {
      case Kind::diagonal:
        put(yj, CVec<T>(v, m).cwiseProduct(xj));
        break;
      case Kind::dense:
        put(yj, CMap<T>(v, m, k) * xj);
        break;
      case Kind::csr:
        put(yj, sparse(*l.pattern, v) * xj);
        break;
      case Kind::shared_dense_diag: {
        MVec<T> tmp(scratch_values(scratch, k), k);
        tmp = CVec<T>(v, k).cwiseProduct(xj);
        put(yj, *l.shared_dense * tmp);
        break;
      }
      default:
        break;
    }
  }
}

template <class T>
double apply_flops(const Layout<T>& a) {
  switch (a.kind) {
    case Kind::identity:
      return 0;
    case Kind::diagonal:
      return static_cast<double>(a.rows);
    case Kind::dense:
      return 2 * mn(a.rows, a.cols);
    case Kind::csr:
      return 2 * static_cast<double>(a.pattern->nnz());
    case Kind::shared_dense_diag:
      return static_cast<double>(a.cols) + 2 * mn(a.rows, a.cols);
  }
  return 0;
}

#define BPPSA_INSTANTIATE(T)                                                                                \
  template ProductPlan<T> plan_product(const Layout<T>&, const Layout<T>&, Index);                          \
  template void multiply(const ProductPlan<T>&, const JacobianView<T>&, const JacobianView<T>&, Index, T*,  \
                         Scratch<T>&);                                                                      \
  template Jacobian<T> multiply(const Jacobian<T>&, const Jacobian<T>&);                                    \
  template void apply(const JacobianView<T>&, Index, Index, const T*, Index, T*, Index, bool, Scratch<T>&); \
  template double apply_flops(const Layout<T>&);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa
