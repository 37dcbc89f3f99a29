// A recurrence's weight, packed once per forward for its per-step products: W · h_{t−1} at every
// step reads W in the panel layout of Eigen's GEMM micro-kernel instead of repacking it per step.
#pragma once

#include "bppsa/core/aligned.hpp"
#include "bppsa/core/types.hpp"

namespace bppsa::detail {

/// A cell's part of a recurrence run by PackedWeights::recurrence: where each step's product goes
/// and what it reads, and the elementwise work around it.
template <class T>
class RecurrenceStep {
 public:
  virtual ~RecurrenceStep() = default;
  /// Columns of step t's product (1-based).
  virtual Index width(Index t) const = 0;
  /// Columns of step t's pointwise work: at least width(t + 1) (the next product's input), which
  /// may be more than width(t) (a backward pass, where samples join as the steps go back).
  virtual Index pointwise_width(Index t) const { return width(t); }
  /// Step t's product W · h_{t−1} accumulates onto dst(t) (W's rows × width(t), column-major,
  /// columns dst_stride() apart) from h(t) (W's depth × width(t), columns h_stride() apart).
  virtual T* dst(Index t) = 0;
  virtual Index dst_stride() const = 0;
  virtual const T* h(Index t) const = 0;
  virtual Index h_stride() const = 0;
  /// Sets rows [r0, r0 + rows) of dst(t)'s columns [j0, j0 + cols), before the product accumulates
  /// onto them.
  virtual void init(Index t, Index r0, Index rows, Index j0, Index cols) = 0;
  /// Step t's columns [j0, j0 + cols) (of pointwise_width(t)) after its product; writes those of
  /// h(t + 1), the next product's input.
  virtual void pointwise(Index t, Index j0, Index cols) = 0;
};

template <class T>
class PackedWeights {
 public:
  /// Packs w (rows × depth, row-major with rows `stride` apart; column-major with columns `stride`
  /// apart when `col_major`), which must stay alive and unchanged while product() is used (the
  /// fallback reads it). Packing happens at the first product that uses it: not for a T 1 call's
  /// products of fewer than 4 columns, nor for a recurrence of 1 column, which reads a column-major W
  /// by rows from a copy once the steps repay it. The buffers are kept for the next pack().
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
  /// Runs steps 1..steps of a recurrence on one team of up to `threads` threads, forked once for
  /// all steps instead of once per step's product: per step, init and W · h in blocks of
  /// kProductRows rows, then pointwise in blocks of a few columns, each packing its columns of
  /// h_t for the next step's product. A W of one block of rows (kProductRows or fewer) shares its
  /// samples instead: slices of whole pointwise blocks of columns, each running every step, with no
  /// wait between steps. The blocks are those of a team of one (no thread count changes a bit);
  /// wide steps (kWideColumns) and small ones (one thread's work) run step by step.
  void recurrence(int threads, Index steps, RecurrenceStep<T>& step);
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
  void pack_now();  // W into packed_, unless it is there
  /// A column-major W copied into row_major_ as contiguous rows, unless it is there: a product of few
  /// columns then reads W by whole rows, where on W as it is each block of rows would read a few
  /// floats from each of depth_ columns (a page apart at H ≥ 1024).
  void transpose_now();
  /// rows [r0, r0 + len) of dst += W · h, through Eigen's product (so few columns that it is a matrix-vector product)
  void rows_product(Index r0, Index len, T* dst, Index dst_stride, const T* h, Index h_stride, Index n) const;

  const T* w_ = nullptr;
  Index rows_ = 0, depth_ = 0, stride_ = 0;
  bool col_major_ = false, packed_now_ = false, transposed_now_ = false;
  AlignedVector<T> packed_, rhs_, row_major_;  // W's blocks; the step's h, packed; a column-major W by rows
};

}  // namespace bppsa::detail
