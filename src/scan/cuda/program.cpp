// Compiles a scan schedule into a GPU program (see program.hpp); packs and unpacks its data.
#include "scan/cuda/program.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "bppsa/core/error.hpp"
#include "scan/cuda/executor.hpp"

namespace bppsa::detail::gpu {

static_assert(static_cast<int>(Kind::identity) == kIdentity && static_cast<int>(Kind::diagonal) == kDiagonal &&
                  static_cast<int>(Kind::dense) == kDense && static_cast<int>(Kind::csr) == kCsr &&
                  static_cast<int>(Kind::shared_dense_diag) == kSdd && kKindCount == kKinds,
              "gpu::KindCode must mirror bppsa::Kind");

namespace {

/// Regions of the value arena start on 128-byte boundaries (float; 256 for double): what
/// cuBLAS and cuSPARSE prefer for the matrices they are given.
constexpr Idx kAlign = 32;
Idx aligned(Idx x) { return (x + kAlign - 1) / kAlign * kAlign; }

template <class T>
class Compiler {
 public:
  Compiler(const Schedule<T>& s, const std::vector<ElementInfo<T>>& elements, Index batch)
      : s_(s), el_(elements), batch_(batch) {}

  Program<T> run() {
    layout_arena();
    for (const bool shared_pass : {true, false}) {
      for (std::size_t ph = 0; ph < s_.phases.size(); ++ph) {
        const Phase& phase = s_.phases[ph];
        std::size_t steps = 0;
        for (const Task& t : phase.tasks) steps = std::max(steps, t.ops.size());
        for (std::size_t j = 0; j < steps; ++j) {
          for (const Task& t : phase.tasks)
            if (j < t.ops.size()) add(t.ops[j], shared_pass);
          flush(shared_pass, static_cast<std::int32_t>(ph), static_cast<std::int32_t>(j));
        }
      }
      if (shared_pass) p_.shared_launches = p_.launches.size();
    }
    return std::move(p_);
  }

 private:
  const Layout<T>& layout(const MatRef& m) const {
    return m.node ? s_.nodes[static_cast<std::size_t>(m.index)].plan.out : *el_[static_cast<std::size_t>(m.index)].layout;
  }

  void layout_arena() {
    const Index n = static_cast<Index>(el_.size()) - 1;
    if (n < 1) throw std::logic_error("bppsa gpu program: a scan needs at least one element");
    p_.n = n;
    p_.batch = batch_;
    const auto size = static_cast<std::size_t>(n) + 1;
    p_.element_offset.assign(size, -1);
    p_.element_values.assign(size, 0);
    p_.injection_offset.assign(size, -1);
    p_.prefix_offset.assign(size, -1);
    p_.prefix_rows.assign(size, 0);
    Idx off = 0;
    for (Index i = 1; i <= n; ++i) {
      const Layout<T>& l = *el_[static_cast<std::size_t>(i)].layout;
      const Idx values = l.count * l.values_per_sample();
      p_.element_values[static_cast<std::size_t>(i)] = values;
      if (values > 0) {
        p_.element_offset[static_cast<std::size_t>(i)] = off;
        off = aligned(off + values);
      }
      if (l.kind == Kind::shared_dense_diag && !matrices_.count(l.shared_dense.get())) {
        matrices_[l.shared_dense.get()] = static_cast<Idx>(p_.shared_matrices.size());
        p_.shared_matrices.push_back({0, l.rows, l.cols, i});
      }
    }
    for (SharedMatrix& m : p_.shared_matrices) {
      m.offset = off;
      off = aligned(off + m.rows * m.cols);
    }
    for (Index i = 1; i <= n; ++i)
      if (el_[static_cast<std::size_t>(i)].has_v) {
        p_.injection_offset[static_cast<std::size_t>(i)] = off;
        off = aligned(off + el_[static_cast<std::size_t>(i)].layout->rows * batch_);
      }
    for (Index i = 0; i <= n; ++i) {
      const Idx rows = i == 0 ? el_[1].layout->cols : el_[static_cast<std::size_t>(i)].layout->rows;
      p_.prefix_rows[static_cast<std::size_t>(i)] = rows;
      p_.prefix_offset[static_cast<std::size_t>(i)] = off;
      off = aligned(off + rows * batch_);
      if (i == 0) p_.upload_values = off;
    }
    p_.download_begin = p_.prefix_offset[1];
    p_.download_end = off;
    const Idx workspace_begin = off;
    slot_offset_.resize(s_.slot_values.size());
    for (std::size_t k = 0; k < s_.slot_values.size(); ++k) {
      slot_offset_[k] = off;
      off = aligned(off + s_.slot_values[k] * (s_.slot_shared[k] ? 1 : batch_));
    }
    v_slot_offset_.resize(s_.v_slot_values.size());
    for (std::size_t k = 0; k < s_.v_slot_values.size(); ++k) {
      v_slot_offset_[k] = off;
      off = aligned(off + s_.v_slot_values[k] * batch_);
    }
    p_.workspace_values = off - workspace_begin;
    p_.values = off;
  }

  /// The pattern's arrays in the index arena (each pattern stored once).
  std::pair<Idx, Idx> pattern(const CsrPattern& pat) {
    auto it = patterns_.find(&pat);
    if (it != patterns_.end()) return it->second;
    const Idx rp = static_cast<Idx>(p_.indices.size());
    p_.indices.insert(p_.indices.end(), pat.row_ptr().begin(), pat.row_ptr().end());
    const Idx ci = static_cast<Idx>(p_.indices.size());
    p_.indices.insert(p_.indices.end(), pat.col_idx().begin(), pat.col_idx().end());
    return patterns_[&pat] = {rp, ci};
  }

  MatArg arg(const MatRef& m) {
    const Layout<T>& l = layout(m);
    MatArg a;
    a.kind = static_cast<std::int32_t>(l.kind);
    a.rows = l.rows;
    a.cols = l.cols;
    if (m.node) {
      const Node<T>& node = s_.nodes[static_cast<std::size_t>(m.index)];
      const auto slot = static_cast<std::size_t>(node.slot);
      a.values = l.values_per_sample() > 0 ? slot_offset_[slot] : -1;
      a.stride = l.shared() ? 0 : s_.slot_values[slot];
    } else {
      a.values = p_.element_offset[static_cast<std::size_t>(m.index)];
      a.stride = l.shared() ? 0 : l.values_per_sample();
    }
    if (l.kind == Kind::csr) {
      std::tie(a.row_ptr, a.col_idx) = pattern(*l.pattern);
      a.nnz = l.pattern->nnz();
    }
    if (l.kind == Kind::shared_dense_diag) {
      const auto it = matrices_.find(l.shared_dense.get());
      if (it == matrices_.end()) throw std::logic_error("bppsa gpu program: a product's S is no element's S");
      a.s = p_.shared_matrices[static_cast<std::size_t>(it->second)].offset;
    }
    return a;
  }

  /// An affine part: (offset, leading dimension), or (-1, 0) when absent.
  std::pair<Idx, Idx> vec(const MatRef& m) const {
    if (!m.node) {
      const Idx off = p_.injection_offset[static_cast<std::size_t>(m.index)];
      return {off, off >= 0 ? el_[static_cast<std::size_t>(m.index)].layout->rows : 0};
    }
    const Node<T>& node = s_.nodes[static_cast<std::size_t>(m.index)];
    if (!node.has_v) return {-1, 0};
    const auto slot = static_cast<std::size_t>(node.v_slot);
    return {v_slot_offset_[slot], s_.v_slot_values[slot]};
  }

  void add_vec(VecOp op) {
    op.items = op.a.rows;
    const bool shared_csr = op.a.kind == kCsr && op.a.stride == 0;
    vec_groups_[{op.a.kind, shared_csr ? 1 : 0}].push_back(op);
  }

  void add(const Op& op, bool shared_pass) {
    if (op.type == Op::Type::mv) {
      if (shared_pass) return;
      VecOp v;
      v.a = arg(op.a);
      v.x = p_.prefix_offset[static_cast<std::size_t>(op.in)];
      v.ldx = p_.prefix_rows[static_cast<std::size_t>(op.in)];
      v.y = p_.prefix_offset[static_cast<std::size_t>(op.out)];
      v.ldy = p_.prefix_rows[static_cast<std::size_t>(op.out)];
      std::tie(v.z, v.ldz) = vec(op.a);
      add_vec(v);
      return;
    }
    const Node<T>& node = s_.nodes[static_cast<std::size_t>(op.out)];
    const Layout<T>& out = node.plan.out;
    if (out.shared() == shared_pass) {
      MatOp m;
      m.a = arg(op.a);
      m.b = arg(op.b);
      const auto slot = static_cast<std::size_t>(node.slot);
      m.out = slot_offset_[slot];
      m.out_stride = out.shared() ? 0 : s_.slot_values[slot];
      if (m.a.kind == kCsr && m.b.kind == kCsr) {
        std::tie(m.out_row_ptr, m.out_col_idx) = pattern(*out.pattern);
        m.out_nnz = out.pattern->nnz();
      }
      m.out_values = out.values_per_sample();
      m.items = mat_items(m.a.kind, m.b.kind, m.a.rows, m.b.cols, m.a.nnz, m.b.nnz, m.out_values);
      mat_groups_[{m.a.kind, m.b.kind}].push_back(m);
    }
    if (!shared_pass && node.has_v) {  // v = A · v_B (+ v_A), or v = v_A
      const auto [v_out, ld_out] = vec(MatRef{true, op.out});
      const auto [vb, ldb] = vec(op.b);
      const auto [va, lda] = vec(op.a);
      VecOp v;
      v.y = v_out;
      v.ldy = ld_out;
      if (vb >= 0) {
        v.a = arg(op.a);
        v.x = vb;
        v.ldx = ldb;
        v.z = va;
        v.ldz = lda;
      } else {
        v.a.kind = kIdentity;
        v.a.rows = v.a.cols = layout(op.a).rows;
        v.x = va;
        v.ldx = lda;
      }
      add_vec(v);
    }
  }

  void flush(bool shared_pass, std::int32_t phase, std::int32_t step) {
    for (auto& [key, ops] : mat_groups_) {
      Launch l;
      l.type = Launch::Type::mat;
      l.ka = key.first;
      l.kb = key.second;
      l.shared = shared_pass;
      l.first = static_cast<Idx>(p_.mat_ops.size());
      l.count = static_cast<Idx>(ops.size());
      l.batch = shared_pass ? 1 : batch_;
      for (const MatOp& m : ops) l.items = std::max(l.items, m.items);
      l.phase = phase;
      l.step = step;
      p_.mat_ops.insert(p_.mat_ops.end(), ops.begin(), ops.end());
      if (l.items > 0) p_.launches.push_back(l);
    }
    for (auto& [key, ops] : vec_groups_) {
      Launch l;
      l.type = Launch::Type::vec;
      l.ka = key.first;
      l.first = static_cast<Idx>(p_.vec_ops.size());
      l.count = static_cast<Idx>(ops.size());
      l.batch = batch_;
      for (const VecOp& v : ops) l.items = std::max(l.items, v.items);
      l.phase = phase;
      l.step = step;
      p_.vec_ops.insert(p_.vec_ops.end(), ops.begin(), ops.end());
      if (l.items > 0) p_.launches.push_back(l);
    }
    mat_groups_.clear();
    vec_groups_.clear();
  }

  const Schedule<T>& s_;
  const std::vector<ElementInfo<T>>& el_;
  Index batch_;
  Program<T> p_;
  std::map<const CsrPattern*, std::pair<Idx, Idx>> patterns_;
  std::map<const Matrix<T>*, Idx> matrices_;
  std::vector<Idx> slot_offset_, v_slot_offset_;
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<MatOp>> mat_groups_;
  std::map<std::pair<std::int32_t, std::int32_t>, std::vector<VecOp>> vec_groups_;
};

template <class T>
void copy_values(const T* src, Idx count, T* dst) {
  if (count > 0) std::memcpy(dst, src, static_cast<std::size_t>(count) * sizeof(T));
}

const char* kind_name(std::int32_t k) { return to_string(static_cast<Kind>(k)); }

}  // namespace

template <class T>
Program<T> compile_program(const Schedule<T>& schedule, const std::vector<ElementInfo<T>>& elements, Index batch) {
  return Compiler<T>(schedule, elements, batch).run();
}

template <class T>
void pack_inputs(const Program<T>& p, const Chain<T>& chain, const Matrix<T>& g_last, T* dst, int threads) {
  const Index n = p.n;
  if (chain.size() != n || chain.batch() != p.batch || g_last.rows() != p.prefix_rows[0] || g_last.cols() != p.batch)
    throw std::logic_error("bppsa gpu program: the chain does not match the program's plan");
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelElements)
  for (Index i = 1; i <= n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const Jacobian<T>& j = chain.jacobian(n - i + 1);
    if (p.element_offset[k] >= 0) copy_values(j.values().data(), p.element_values[k], dst + p.element_offset[k]);
    if (p.injection_offset[k] >= 0)
      copy_values(chain.injection(n - i)->data(), p.prefix_rows[k] * p.batch, dst + p.injection_offset[k]);
  }
  for (const SharedMatrix& m : p.shared_matrices)
    copy_values(chain.jacobian(n - m.position + 1).layout().shared_dense->data(), m.rows * m.cols, dst + m.offset);
  copy_values(g_last.data(), p.prefix_rows[0] * p.batch, dst + p.prefix_offset[0]);
}

template <class T>
void unpack_outputs(const Program<T>& p, const Chain<T>& chain, const Matrix<T>& g_last, const T* src,
                    Gradients<T>& out, int threads) {
  const Index n = p.n;
  std::vector<Index> dims(static_cast<std::size_t>(n) + 1);
  for (Index k = 0; k <= n; ++k) dims[static_cast<std::size_t>(k)] = chain.dim(k);
  out.resize(dims, p.batch, threads);
  out.g(n) = g_last;
#pragma omp parallel for num_threads(threads) schedule(static) if (n >= kParallelElements)
  for (Index i = 1; i <= n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    copy_values(src + (p.prefix_offset[k] - p.download_begin), p.prefix_rows[k] * p.batch, out.g(n - i).data());
  }
}

template <class T>
std::string describe(const Program<T>& p) {
  std::string s;
  for (const Launch& l : p.launches) {
    s += std::string(l.shared ? "shared " : "") + "phase " + std::to_string(l.phase) + " step " +
         std::to_string(l.step) + ": ";
    if (l.type == Launch::Type::mat)
      s += std::string("mm ") + kind_name(l.ka) + "·" + kind_name(l.kb);
    else
      s += std::string("mv ") + kind_name(l.ka);
    s += " ×" + std::to_string(l.count) + " ops ×" + std::to_string(l.batch) + " samples, " + std::to_string(l.items) +
         " items\n";
  }
  return s;
}

#define BPPSA_INSTANTIATE(T)                                                                                    \
  template Program<T> compile_program(const Schedule<T>&, const std::vector<ElementInfo<T>>&, Index);          \
  template void pack_inputs(const Program<T>&, const Chain<T>&, const Matrix<T>&, T*, int);                    \
  template void unpack_outputs(const Program<T>&, const Chain<T>&, const Matrix<T>&, const T*, Gradients<T>&, \
                               int);                                                                            \
  template std::string describe(const Program<T>&);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu

// The product policy lives here, with the program, because every build has it (the CUDA-free
// tests and a CPU-only CLI can name it) even though only the CUDA executor acts on it.
namespace bppsa::detail {
namespace {
std::atomic<int> g_products{-1};  // -1: not set, read the environment
}  // namespace

const char* to_string(CudaProducts products) {
  switch (products) {
    case CudaProducts::automatic:
      return "auto";
    case CudaProducts::kernels:
      return "kernels";
    case CudaProducts::libraries:
      return "libraries";
  }
  return "unknown";
}

CudaProducts cuda_products() {
  const int set = g_products.load();
  if (set >= 0) return static_cast<CudaProducts>(set);
  const char* env = std::getenv("BPPSA_CUDA_PRODUCTS");
  if (env == nullptr || *env == 0) return CudaProducts::automatic;
  for (const CudaProducts p : {CudaProducts::automatic, CudaProducts::kernels, CudaProducts::libraries})
    if (std::string_view(env) == to_string(p)) return p;
  raise<InvalidArgument>("scan", "BPPSA_CUDA_PRODUCTS is '" + std::string(env) + "'; expected auto, kernels or libraries");
}

void set_cuda_products(CudaProducts products) { g_products.store(static_cast<int>(products)); }

}  // namespace bppsa::detail
