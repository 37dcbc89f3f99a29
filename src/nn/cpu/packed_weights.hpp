// A recurrence's weight, packed once per forward for its per-step products: W · h_{t−1} at every
// step reads W in the panel layout of Eigen's GEMM micro-kernel instead of repacking it per step.
#pragma once

#include "bppsa/core/aligned.hpp"
#include "bppsa/core/types.hpp"

namespace bppsa::detail {

template <class T>
class PackedWeights {
 public:
  /// Packs w (rows × depth, row-major with rows `stride` apart; column-major with columns `stride`
  /// apart when `col_major`), which must stay alive and unchanged while product() is used (the
  /// fallback reads it). Packing happens at the first product that uses it (none for products of
  /// fewer than 4 columns, a T 1 call's); the buffer is kept for the next pack().
  void pack(const T* w, Index rows, Index depth, Index stride, bool col_major = false);

  /// dst = W · h: dst rows × n and h depth × n, both column-major with columns dst_stride and
  /// h_stride apart, on up to `threads` threads in parallel_product's blocks of rows: the same bits at every
  /// thread count. Products of few columns (Eigen's matrix-vector path) or many (many steps at
  /// once: blocks of columns) and Eigen versions other than 3.4 run through parallel_product.
  /// With `accumulate`, dst += W · h.
  void product(int threads, T* dst, Index dst_stride, const T* h, Index h_stride, Index n, bool accumulate = false);
  /// The same on Eigen blocks of whole columns (dst: the weight's rows × n; h: its depth × n).
  template <class D, class H>
  void product(int threads, D&& dst, const H& h, bool accumulate = false) {
    product(threads, dst.data(), dst.outerStride(), h.data(), h.outerStride(), dst.cols(), accumulate);
  }
  /// Packs a layer weight's map (row-major, contiguous rows).
  template <class W>
  void pack(const W& w) {
    pack(w.data(), w.rows(), w.cols(), w.cols());
  }
  /// Packs the transpose of a layer weight's map (BP's W_hh^T · δ).
  template <class W>
  void pack_transposed(const W& w) {
    pack(w.data(), w.cols(), w.rows(), w.cols(), /*col_major=*/true);
  }

 private:
  const T* w_ = nullptr;
  Index rows_ = 0, depth_ = 0, stride_ = 0;
  bool col_major_ = false, packed_now_ = false;
  AlignedVector<T> packed_, rhs_;  // W's blocks; the step's h, packed
};

}  // namespace bppsa::detail
