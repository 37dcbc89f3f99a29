// Per-thread arithmetic of the head and loss kernels (logits + bias, cross-entropy or MSE per
// column with PyTorch's mean, ∂loss/∂logits, last-step predictions) and the fixed-order
// reductions that make every GPU sum deterministic, as __host__ __device__ functions; the
// status the GPU reports to the host. Same formulas and rounding steps as src/nn/loss.cpp.
// Used by head_kernels.cu and replayed by tests/nn/cuda/test_recurrent_host.cpp.
#pragma once

#include <cmath>
#include <cstdint>

#include "nn/cuda/recurrent_math.hpp"

namespace bppsa::detail::gpu {

/// What the GPU reports about the last step (one small struct, copied to pinned memory when
/// the host asks: the only per-step transfer of a training epoch). Flags are sticky until the
/// host clears them: once a loss or a gradient is not finite, every later optimizer step
/// leaves the parameters alone, as the CPU's throw would.
enum StatusFlag : std::int32_t { kLossNotFinite = 1, kGradNotFinite = 2, kParamNotFinite = 4 };
struct DeviceStatus {
  double loss = 0;           ///< the last batch's loss (the T value, widened)
  double loss_sum = 0;       ///< Σ loss · batch since the totals were reset (an epoch, an evaluation)
  std::int64_t correct = 0;  ///< correct last-step predictions since the reset
  std::int64_t samples = 0;  ///< samples since the reset
  double grad_norm = 0;      ///< global gradient 2-norm of the last optimizer step (before clipping)
  std::int32_t flags = 0;    ///< StatusFlag bits
  std::int32_t pad = 0;
  /// Smallest flat index (over the optimizer's parameters, in order) of a value that is not
  /// finite after a step; kNoIndex when none.
  std::uint64_t bad_param = ~std::uint64_t{0};
};
inline constexpr std::uint64_t kNoIndex = ~std::uint64_t{0};

/// Threads of the single-block reductions (a power of two).
inline constexpr int kReduceThreads = 256;

/// Column j of the head's output, N columns of C logits: adds the bias to the logits in place
/// (the CPU: logits = W x, then += bias), returns this column's share of the loss before the
/// mean (cross-entropy: log Σ e^z − z_y; MSE: Σ (z − onehot)²) and, when d is given, writes
/// ∂loss/∂logits of the column (the mean's factor included), as src/nn/loss.cpp.
template <class T>
BPPSA_HD inline double loss_column(bool mse, Idx C, Idx N, T* z, const T* bias, Idx y, T* d) {
  for (Idx c = 0; c < C; ++c) z[c] += bias[c];
  if (!mse) {
    T m = z[0];
    for (Idx c = 1; c < C; ++c) m = z[c] > m ? z[c] : m;
    T sum = T(0);
    for (Idx c = 0; c < C; ++c) sum += hd_exp(z[c] - m);
    const double lse = static_cast<double>(m) + log(static_cast<double>(sum));
    if (d != nullptr) {
      const T l = static_cast<T>(lse);
      for (Idx c = 0; c < C; ++c) d[c] = hd_exp(z[c] - l) / static_cast<T>(N);
      d[y] -= T(1) / static_cast<T>(N);
    }
    return lse - static_cast<double>(z[y]);
  }
  const T scale = T(2) / static_cast<T>(C * N);
  double total = 0;
  for (Idx c = 0; c < C; ++c) {
    const T dv = z[c] - (c == y ? T(1) : T(0));
    total += static_cast<double>(dv) * dv;
    if (d != nullptr) d[c] = scale * dv;
  }
  return total;
}

/// The label of column j: every step predicts its sequence's label (head = every: column
/// t·B + b belongs to sample b), or one column per sample (head = last).
BPPSA_HD inline Idx column_label(const std::int64_t* labels, Idx batch, Idx j) { return labels[j % batch]; }

/// With lengths, the head reads N chosen output columns (nn/lengths.hpp's head_columns): value
/// `item` of its input (H × N) is value item % H of output column cols[item / H] (H × T·B).
BPPSA_HD inline Idx head_column_source(Idx H, const Idx* cols, Idx item) { return cols[item / H] * H + item % H; }
/// The label of chosen column j: its sample's (output column cols[j] of a batch of B).
BPPSA_HD inline std::int64_t head_column_label(const std::int64_t* labels, const Idx* cols, Idx B, Idx j) {
  return labels[cols[j] % B];
}

/// Index of the first largest of C values (the prediction of a column).
template <class T>
BPPSA_HD inline Idx argmax(const T* z, Idx C) {
  Idx best = 0;
  for (Idx c = 1; c < C; ++c)
    if (z[c] > z[best]) best = c;
  return best;
}

/// Thread `thread` of the loss's final block (nthreads threads): the sum of its columns' loss
/// shares (strided, in order) and, for its samples b = thread, thread + nthreads, …, the
/// last-step prediction (written when predictions is not null) and whether it is correct.
template <class T>
BPPSA_HD inline void loss_finish_thread(Idx C, Idx N, Idx B, const double* col_loss, const T* logits,
                                        const std::int64_t* labels, std::int64_t* predictions, Idx thread, Idx nthreads,
                                        double& sum, long long& hits) {
  sum = 0;
  for (Idx j = thread; j < N; j += nthreads) sum += col_loss[j];
  hits = 0;
  for (Idx b = thread; b < B; b += nthreads) {
    const Idx p = argmax(logits + (N - B + b) * C, C);
    if (predictions != nullptr) predictions[b] = p;
    hits += p == labels[b] ? 1 : 0;
  }
}

/// After the block's reductions (thread 0): the batch's loss as the CPU returns it (the double
/// mean rounded to T), added to the totals; kLossNotFinite when it is not finite.
template <class T>
BPPSA_HD inline void loss_finish_status(bool mse, Idx C, Idx N, Idx B, double sum, long long hits, DeviceStatus* st) {
  const double total = sum / static_cast<double>(mse ? C * N : N);
  const T loss = static_cast<T>(total);
  st->loss = static_cast<double>(loss);
  st->loss_sum += static_cast<double>(loss) * static_cast<double>(B);
  st->correct += hits;
  st->samples += B;
  if (!hd_finite(total)) st->flags |= kLossNotFinite;
}

/// Thread `thread` of a reduction over n values: its values thread, thread + nthreads, … summed
/// in that order (the first phase; then block_tree_step halves the partial sums).
template <class T>
BPPSA_HD inline double strided_sum(const T* x, Idx n, Idx thread, Idx nthreads) {
  double s = 0;
  for (Idx i = thread; i < n; i += nthreads) s += static_cast<double>(x[i]);
  return s;
}
/// One level of a block's tree reduction over `width` partial sums (a power of two):
/// partial[thread] += partial[thread + width/2] for thread < width/2. A barrier between levels.
template <class A>
BPPSA_HD inline void block_tree_step(A* partial, Idx width, Idx thread) {
  const Idx half = width / 2;
  if (thread < half) partial[thread] += partial[thread + half];
}

}  // namespace bppsa::detail::gpu
