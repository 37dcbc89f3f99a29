// The fused chunked scan on the GPU (docs/method.md §2 hybrid, §8): the state gradients g_0 … g_T of ONE
// recurrent layer from its forward record, without ever storing a Jacobian. Plan once per
// (cell, H, T, B), then run() on device data as often as needed (launches only).
//
// Algorithm. Steps 1..T are cut into C chunks: chunk 0 holds the first len0 = T − (C−1)·L steps,
// chunks 1..C−1 exactly L each. (1) Reduce: for every (chunk c ≥ 1, sample) the affine total
// g_{a} = M_c g_{b} + v_c of its steps (a, b], M_c = J_{a+1}^T ⋯ J_b^T, built column by column:
// each column of [M_c | v_c] runs the BP recurrence x ← J_t^T x (+ e_{t−1} on v) from [I | 0],
// with J_t^T x = W_hh^T (y_t(x)) + direct_t(x) formed on the fly from W_hh (on chip) and the
// recorded gates (the CPU cells' formulas, src/nn/cpu/*_cell.cpp). (2) Carry: per sample, the
// chunk boundaries g_{b_{C−2}}, …, g_{b_0} from g_T through the totals (C − 1 mat-vecs).
// (3) Push: every chunk runs BP from its boundary through its own steps (chunk 0 is never
// reduced). Memory: the totals, (C−1)·B·S·(S+1) values, and a padded copy of W_hh; never a
// Jacobian. Results equal sequential BP up to float reassociation (FMA, summation order).
//
// Launches per run: prepare (padded W_hh, g_T), reduce, carry, push; 2 when C = 1. Kernels and
// their thread mapping: fused_math.hpp (every H: a thread keeps a row tile of W_hh^T y for 1 or 4
// columns in registers; W_hh in shared memory when it fits, else read from global memory through
// L1/L2 — the "tiled kernel" choice for large H, plain FP32, no tensor cores, so no TF32 error).
// The chunk length and the mapping come from a cost model (fused_plan.hpp): C = 1 (a plain BP
// push) when the reduce's extra work (≈ S + 1 times BP's) would not pay off, e.g. large H with
// few samples. The carry is sequential over chunks (≈ 0.1 µs a chunk); the model keeps C where
// that is small against the reduce, so no log-depth scan of the totals is needed at these sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/cuda/grid.hpp"
#include "nn/cuda/fused_options.hpp"
#include "nn/cuda/recurrent_math.hpp"

namespace bppsa::detail::gpu {

/// The layer's device data, laid out exactly as the CPU's LayerRecord (src/nn/cell.hpp):
/// column-major, time-major blocks of B columns (column t·B + b = step t of sample b for the
/// (T+1)B arrays; column (t−1)·B + b belongs to step t for the TB arrays). All device pointers;
/// they must stay valid until the run's work on its stream is done; `g` must not overlap any input.
template <class T>
struct FusedDevicePtrs {
  const T* w_hh = nullptr;    ///< W_hh, G·H × H row-major (PyTorch's weight_hh_l*)
  const T* h = nullptr;       ///< H × (T+1)B hidden states (block 0 = h_0)
  const T* c = nullptr;       ///< LSTM: H × (T+1)B cell states; others: unused
  const T* gates = nullptr;   ///< GRU (r, z, n), LSTM (i, f, g, o): G·H × TB after their nonlinearity
  const T* aux = nullptr;     ///< GRU: M = W_hn h + b_hn; LSTM: tanh(c_t) (H × TB)
  const T* g_last = nullptr;  ///< g_T, S × B: the final state's TOTAL gradient (head/above on h_T + next stage)
  /// Injections, H × TB: block t − 1 holds the gradient on h_t from the head or the layer above
  /// (the CPU's `above`); blocks 0 … T−2 are used (block T − 1 is part of g_last). Required when
  /// planned with injections, must be null otherwise.
  const T* above = nullptr;
  T* g = nullptr;  ///< out: every g_t = ∂ℓ/∂s_t, S × (T+1)B (LSTM: h rows over c rows)
};

/// The cell codes of recurrent_math.hpp: kRnnTanh, kRnnRelu, kGru, kLstm.
template <class T>
class FusedRecurrentScan {
 public:
  /// Plans for the current CUDA device: chooses the chunking and mapping, allocates the totals and
  /// the W_hh copy (ResourceError before allocating when they do not fit), sets the kernels'
  /// shared-memory limits. InvalidArgument for sizes < 1, an unknown cell, bad overrides.
  static FusedRecurrentScan plan(std::int32_t cell, Idx hidden, Idx steps, Idx batch,
                                 const FusedScanOptions& options = {});
  /// What plan() would choose and allocate, without allocating (queries the current device).
  static FusedScanStats estimate(std::int32_t cell, Idx hidden, Idx steps, Idx batch,
                                 const FusedScanOptions& options = {});

  FusedRecurrentScan(FusedRecurrentScan&&) noexcept;
  FusedRecurrentScan& operator=(FusedRecurrentScan&&) noexcept;
  ~FusedRecurrentScan();

  /// Queues the backward on `stream` (launches, or one graph launch; no allocation, no
  /// synchronisation): writes every block of p.g. InvalidArgument for missing pointers or a
  /// device other than the plan's; launch errors throw DeviceError, faults surface at the next
  /// synchronising call.
  void run(cudaStream_t stream, const FusedDevicePtrs<T>& p);

  const FusedScanStats& stats() const;

 private:
  struct Impl;
  explicit FusedRecurrentScan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

extern template class FusedRecurrentScan<float>;
extern template class FusedRecurrentScan<double>;

}  // namespace bppsa::detail::gpu
