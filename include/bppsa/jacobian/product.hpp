// Products of compact transposed Jacobians (docs/method.md §3): the two operations the scan is made of.
//  - multiply (mm): C = A · B, A the element later in the scan (the smaller layer index, farther
//    from the loss), B the earlier one;
//    kinds combine without densifying what need not be dense.
//  - apply (mv):    y = A · x for a batch of vectors.
#pragma once

#include <cstdint>
#include <vector>

#include "bppsa/jacobian/jacobian.hpp"

namespace bppsa {

/// Per-thread temporary storage for the kernels; reuse one per thread across calls.
template <class T>
struct Scratch {
  AlignedVector<T> values;             ///< row-scaled copies, S·diag temporaries
  std::vector<std::int32_t> position;  ///< SpGEMM: column → slot in the current output row
};

/// The product A · B worked out once from layouts alone: the result's layout (for csr·csr
/// this runs the symbolic SpGEMM and holds the fill-in pattern) and its cost.
///
/// Result kinds (rows: A, columns: B; "copy" = the other operand unchanged):
///
///   A \ B              identity  diagonal            dense  csr    shared_dense_diag
///   identity           identity  diagonal            dense  csr    shared_dense_diag
///   diagonal           diagonal  diagonal            dense  csr    dense
///   dense              dense     dense               dense  dense  dense
///   csr                csr       csr                 dense  csr    dense
///   shared_dense_diag  s_d_d     shared_dense_diag   dense  dense  dense
///
/// The result is shared by the batch only when both operands are.
template <class T>
struct ProductPlan {
  Layout<T> out;
  double flops_per_sample = 0;  ///< multiply-adds ×2, scalings ×1, copies 0
};

/// Plans A · B for a batch of `batch` samples. Throws ShapeError when A.cols != B.rows or
/// a per-sample operand's count is not `batch`.
template <class T>
ProductPlan<T> plan_product(const Layout<T>& a, const Layout<T>& b, Index batch);

/// Writes sample s of A · B into `out` (the values of that sample, laid out as plan.out).
/// Both views must have the layouts the plan was made from.
template <class T>
void multiply(const ProductPlan<T>& plan, const JacobianView<T>& a, const JacobianView<T>& b, Index s, T* out,
              Scratch<T>& scratch);

/// Convenience: the whole batch of A · B as a new Jacobian.
template <class T>
Jacobian<T> multiply(const Jacobian<T>& a, const Jacobian<T>& b);

/// Columns [b0, b1) of Y = A · X (+ Y when accumulate): X is A.cols × B, Y is A.rows × B,
/// both column-major with leading dimensions ldx, ldy. Column b uses sample b of A. Each
/// column's arithmetic is the same whatever the block [b0, b1) it is part of.
template <class T>
void apply(const JacobianView<T>& a, Index b0, Index b1, const T* x, Index ldx, T* y, Index ldy, bool accumulate,
           Scratch<T>& scratch);

/// Flops of one matrix-vector product with A (one sample).
template <class T>
double apply_flops(const Layout<T>& a);

}  // namespace bppsa
