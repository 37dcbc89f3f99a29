// CUDA half of the Jacobian products, the arithmetic: one "item" of a product A · B (mm) or of
// y = A · x (+ z) (mv) for one sample, as __host__ __device__ functions over two flat arenas
// (values of type T, CSR indices int32). The kernels (kernels.cu) are loops over items; the
// g++ tests run the same functions on the CPU against the CPU half (src/jacobian/cpu/).
//
// Operand order and the association of every rounding step follow the CPU half where it is
// cheap to do so (S·diag(d) is applied as S·(d ⊙ x); CSR·CSR sums in Gustavson order), so the
// two halves differ only by fused multiply-adds and by the order inside dense dot products.
// Nothing here includes Eigen or CUDA headers: nvcc compiles it cheaply.
#pragma once

#include <cstdint>

#include "core/cuda/grid.hpp"
#include "core/cuda/hd.hpp"

namespace bppsa::detail::gpu {

/// The kinds of bppsa::Kind, same numbering (program.cpp checks it).
enum KindCode : std::int32_t { kIdentity = 0, kDiagonal = 1, kDense = 2, kCsr = 3, kSdd = 4 };
inline constexpr int kKinds = 5;

/// A matrix operand as a kernel reads it. Offsets index the value arena (T) or the index
/// arena (int32); -1 means absent.
struct MatArg {
  Idx values = -1;   ///< values of sample 0: diagonal d, dense column-major, csr in pattern order, sdd's d
  Idx stride = 0;    ///< between the values of consecutive samples; 0 = shared by the batch
  Idx rows = 0;
  Idx cols = 0;
  Idx row_ptr = -1;  ///< csr: rows + 1 entries
  Idx col_idx = -1;  ///< csr: nnz entries
  Idx nnz = 0;       ///< csr
  Idx s = -1;        ///< sdd: S, rows × cols column-major (shared by the batch)
  std::int32_t kind = kIdentity;
  std::int32_t pad = 0;
};

/// out = A · B for one sample; out is laid out as the CPU plan's result (ProductPlan::out).
struct MatOp {
  MatArg a;
  MatArg b;
  Idx out = -1;
  Idx out_stride = 0;     ///< 0 for a product shared by the batch
  Idx out_row_ptr = -1;   ///< csr · csr: the result's pattern (fill-in, computed once on the host)
  Idx out_col_idx = -1;
  Idx out_nnz = 0;
  Idx out_values = 0;     ///< values of one sample of the result
  Idx items = 0;          ///< mat_items(…) of this op
};

/// y = A · x (+ z) for one sample: a prefix through an element (mv), or the affine part of a
/// product, v = A · v_B (+ v_A), or a copy v = v_A (A the identity).
struct VecOp {
  MatArg a;
  Idx x = -1, ldx = 0;  ///< x of sample s at x + s·ldx (a.cols values)
  Idx y = -1, ldy = 0;  ///< y of sample s at y + s·ldy (a.rows values)
  Idx z = -1, ldz = 0;  ///< added when present (a.rows values)
  Idx items = 0;        ///< a.rows
};

BPPSA_HD inline constexpr int pair_code(int ka, int kb) { return ka * kKinds + kb; }

/// Values one sample of an operand holds (what the layout's values_per_sample() says).
BPPSA_HD inline Idx arg_values(const MatArg& m) {
  switch (m.kind) {
    case kDiagonal:
      return m.rows;
    case kDense:
      return m.rows * m.cols;
    case kCsr:
      return m.nnz;
    case kSdd:
      return m.cols;
    default:
      return 0;
  }
}

/// Work items of one sample of A · B: the result's values for elementwise products, its rows
/// where a thread owns a row (dense·csr, sdd·csr, csr·csr), its entries otherwise.
inline Idx mat_items(int ka, int kb, Idx m, Idx n, Idx nnz_a, Idx nnz_b, Idx out_values) {
  if (ka == kIdentity || kb == kIdentity) return out_values;
  switch (pair_code(ka, kb)) {
    case pair_code(kDiagonal, kDiagonal):
      return m;
    case pair_code(kDiagonal, kCsr):
      return nnz_b;
    case pair_code(kCsr, kDiagonal):
      return nnz_a;
    case pair_code(kSdd, kDiagonal):
      return out_values;  // the cols of d
    case pair_code(kDense, kCsr):
    case pair_code(kSdd, kCsr):
    case pair_code(kCsr, kCsr):
      return m;
    default:
      return m * n;  // one output entry each
  }
}

/// The row holding entry p of a CSR matrix: the last r with row_ptr[r] ≤ p (p < row_ptr[rows]).
BPPSA_HD inline Idx row_of(const std::int32_t* row_ptr, Idx rows, Idx p) {
  Idx lo = 0, hi = rows - 1;
  while (lo < hi) {
    const Idx mid = (lo + hi + 1) / 2;
    if (row_ptr[mid] <= p)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Position of column j among col_idx[begin, end) (sorted; j must be present).
BPPSA_HD inline Idx find_column(const std::int32_t* col_idx, Idx begin, Idx end, std::int32_t j) {
  while (end - begin > 1) {
    const Idx mid = begin + (end - begin) / 2;
    if (col_idx[mid] <= j)
      begin = mid;
    else
      end = mid;
  }
  return begin;
}

template <class T>
BPPSA_HD inline const T* sample_values(const MatArg& m, Idx s, const T* v) {
  return m.values >= 0 ? v + m.values + s * m.stride : nullptr;
}

/// Item `item` of sample s of op.out = op.a · op.b.
template <class T>
BPPSA_HD inline void mat_item(const MatOp& op, Idx s, Idx item, T* v, const std::int32_t* ix) {
  const MatArg& A = op.a;
  const MatArg& B = op.b;
  const T* av = sample_values(A, s, static_cast<const T*>(v));
  const T* bv = sample_values(B, s, static_cast<const T*>(v));
  T* out = v + op.out + s * op.out_stride;
  const Idx m = A.rows, k = A.cols, n = B.cols;
  if (A.kind == kIdentity || B.kind == kIdentity) {  // the other operand, copied
    out[item] = A.kind == kIdentity ? bv[item] : av[item];
    return;
  }
  switch (pair_code(A.kind, B.kind)) {
    case pair_code(kDiagonal, kDiagonal):
      out[item] = av[item] * bv[item];
      return;
    case pair_code(kDiagonal, kDense):
      out[item] = av[item % m] * bv[item];
      return;
    case pair_code(kDiagonal, kCsr): {
      const Idx i = row_of(ix + B.row_ptr, B.rows, item);
      out[item] = av[i] * bv[item];
      return;
    }
    case pair_code(kDiagonal, kSdd): {  // (d_a[i] · S_b[i, j]) · d_b[j]
      const Idx i = item % m, j = item / m;
      const T* sb = v + B.s;
      out[item] = (av[i] * sb[item]) * bv[j];
      return;
    }
    case pair_code(kDense, kDiagonal):
      out[item] = av[item] * bv[item / m];
      return;
    case pair_code(kDense, kDense): {
      const Idx i = item % m, j = item / m;
      T acc = T(0);
      for (Idx l = 0; l < k; ++l) acc += av[i + l * m] * bv[l + j * k];
      out[item] = acc;
      return;
    }
    case pair_code(kDense, kSdd): {  // (A · S_b)[i, j] · d_b[j]
      const Idx i = item % m, j = item / m;
      const T* sb = v + B.s;
      T acc = T(0);
      for (Idx l = 0; l < k; ++l) acc += av[i + l * m] * sb[l + j * k];
      out[item] = acc * bv[j];
      return;
    }
    case pair_code(kDense, kCsr):
    case pair_code(kSdd, kCsr): {  // row i of A · B (A = S_a · diag(d_a) for sdd)
      const Idx i = item;
      const bool sdd = A.kind == kSdd;
      const T* a = sdd ? v + A.s : av;
      const std::int32_t* rp = ix + B.row_ptr;
      const std::int32_t* ci = ix + B.col_idx;
      for (Idx j = 0; j < n; ++j) out[i + j * m] = T(0);
      for (Idx l = 0; l < k; ++l) {
        const T ail = a[i + l * m];
        for (Idx p = rp[l]; p < rp[l + 1]; ++p) out[i + ci[p] * m] += ail * (sdd ? av[l] * bv[p] : bv[p]);
      }
      return;
    }
    case pair_code(kCsr, kDiagonal):
      out[item] = av[item] * bv[ix[A.col_idx + item]];
      return;
    case pair_code(kCsr, kDense): {
      const Idx i = item % m, j = item / m;
      const std::int32_t* rp = ix + A.row_ptr;
      const std::int32_t* ci = ix + A.col_idx;
      T acc = T(0);
      for (Idx p = rp[i]; p < rp[i + 1]; ++p) acc += av[p] * bv[ci[p] + j * k];
      out[item] = acc;
      return;
    }
    case pair_code(kCsr, kCsr): {  // Gustavson row i into the fixed fill-in pattern
      const Idx i = item;
      const std::int32_t* arp = ix + A.row_ptr;
      const std::int32_t* aci = ix + A.col_idx;
      const std::int32_t* brp = ix + B.row_ptr;
      const std::int32_t* bci = ix + B.col_idx;
      const std::int32_t* crp = ix + op.out_row_ptr;
      const std::int32_t* cci = ix + op.out_col_idx;
      const Idx c0 = crp[i], c1 = crp[i + 1];
      for (Idx p = c0; p < c1; ++p) out[p] = T(0);
      for (Idx p = arp[i]; p < arp[i + 1]; ++p) {
        const T x = av[p];
        const Idx kk = aci[p];
        for (Idx q = brp[kk]; q < brp[kk + 1]; ++q) out[find_column(cci, c0, c1, bci[q])] += x * bv[q];
      }
      return;
    }
    case pair_code(kCsr, kSdd): {  // (A · S_b)[i, j] · d_b[j]
      const Idx i = item % m, j = item / m;
      const std::int32_t* rp = ix + A.row_ptr;
      const std::int32_t* ci = ix + A.col_idx;
      const T* sb = v + B.s;
      T acc = T(0);
      for (Idx p = rp[i]; p < rp[i + 1]; ++p) acc += av[p] * sb[ci[p] + j * k];
      out[item] = acc * bv[j];
      return;
    }
    case pair_code(kSdd, kDiagonal):  // S_a · diag(d_a ⊙ d_b): only the diagonal changes
      out[item] = av[item] * bv[item];
      return;
    case pair_code(kSdd, kDense): {  // S_a · (d_a ⊙rows B)
      const Idx i = item % m, j = item / m;
      const T* sa = v + A.s;
      T acc = T(0);
      for (Idx l = 0; l < k; ++l) acc += sa[i + l * m] * (av[l] * bv[l + j * k]);
      out[item] = acc;
      return;
    }
    case pair_code(kSdd, kSdd): {  // (S_a · (d_a ⊙rows S_b))[i, j] · d_b[j]
      const Idx i = item % m, j = item / m;
      const T* sa = v + A.s;
      const T* sb = v + B.s;
      T acc = T(0);
      for (Idx l = 0; l < k; ++l) acc += sa[i + l * m] * (av[l] * sb[l + j * k]);
      out[item] = acc * bv[j];
      return;
    }
    default:
      return;
  }
}

/// Row `r` of sample s of y = A · x (+ z).
template <class T>
BPPSA_HD inline void vec_item(const VecOp& op, Idx s, Idx r, T* v, const std::int32_t* ix) {
  const MatArg& A = op.a;
  const T* av = sample_values(A, s, static_cast<const T*>(v));
  const T* x = v + op.x + s * op.ldx;
  const Idx m = A.rows, k = A.cols;
  T acc = T(0);
  switch (A.kind) {
    case kIdentity:
      acc = x[r];
      break;
    case kDiagonal:
      acc = av[r] * x[r];
      break;
    case kDense:
      for (Idx j = 0; j < k; ++j) acc += av[r + j * m] * x[j];
      break;
    case kCsr: {
      const std::int32_t* rp = ix + A.row_ptr;
      const std::int32_t* ci = ix + A.col_idx;
      for (Idx p = rp[r]; p < rp[r + 1]; ++p) acc += av[p] * x[ci[p]];
      break;
    }
    case kSdd: {  // S · (d ⊙ x)
      const T* sa = v + A.s;
      for (Idx j = 0; j < k; ++j) acc += sa[r + j * m] * (av[j] * x[j]);
      break;
    }
    default:
      break;
  }
  if (op.z >= 0) acc += v[op.z + s * op.ldz + r];
  v[op.y + s * op.ldy + r] = acc;
}

/// Row `r` of sample s of y += z: the affine part, after a library call (cuSPARSE) wrote y = A · x.
template <class T>
BPPSA_HD inline void add_item(const VecOp& op, Idx s, Idx r, T* v) {
  if (op.z >= 0) v[op.y + s * op.ldy + r] += v[op.z + s * op.ldz + r];
}

/// One item of an op: a matrix-product item or a matrix-vector item (what op_thread dispatches on).
template <class T>
BPPSA_HD inline void op_item(const MatOp& op, Idx s, Idx i, T* v, const std::int32_t* ix) {
  mat_item(op, s, i, v, ix);
}
template <class T>
BPPSA_HD inline void op_item(const VecOp& op, Idx s, Idx i, T* v, const std::int32_t* ix) {
  vec_item(op, s, i, v, ix);
}

/// The body of a flat kernel over MatOps (mm) or VecOps (mv) for thread (block, thread) of a grid
/// of `grid` blocks of `block_dim`: every item of `count` ops (batch samples each, `items` items
/// per sample), grid-strided.
template <class T, class Op>
BPPSA_HD inline void op_thread(const Op* ops, Idx count, Idx batch, Idx items, T* v, const std::int32_t* ix,
                               unsigned block, unsigned block_dim, unsigned thread, unsigned grid) {
  const Idx total = count * batch * items;
  const Idx stride = work_stride(grid, block_dim);
  for (Idx g = work_start(block, block_dim, thread); g < total; g += stride) {
    const Work w = decompose(g, batch, items);
    const Op& op = ops[w.op];
    if (w.item < op.items) op_item(op, w.sample, w.item, v, ix);
  }
}

/// The mm kernel's body.
template <class T>
BPPSA_HD inline void mat_thread(const MatOp* ops, Idx count, Idx batch, Idx items, T* v, const std::int32_t* ix,
                                unsigned block, unsigned block_dim, unsigned thread, unsigned grid) {
  op_thread(ops, count, batch, items, v, ix, block, block_dim, thread, grid);
}

/// The mv kernel's body.
template <class T>
BPPSA_HD inline void vec_thread(const VecOp* ops, Idx count, Idx batch, Idx items, T* v, const std::int32_t* ix,
                                unsigned block, unsigned block_dim, unsigned thread, unsigned grid) {
  op_thread(ops, count, batch, items, v, ix, block, block_dim, thread, grid);
}

/// The body of the flat y += z kernel (see mat_thread).
template <class T>
BPPSA_HD inline void add_thread(const VecOp* ops, Idx count, Idx batch, Idx items, T* v, unsigned block,
                                unsigned block_dim, unsigned thread, unsigned grid) {
  const Idx total = count * batch * items;
  const Idx stride = work_stride(grid, block_dim);
  for (Idx g = work_start(block, block_dim, thread); g < total; g += stride) {
    const Work w = decompose(g, batch, items);
    const VecOp& op = ops[w.op];
    if (w.item < op.items) add_item(op, w.sample, w.item, v);
  }
}

}  // namespace bppsa::detail::gpu
