// The fused chunked scan on the GPU (docs/method.md §2 hybrid, §8): the state gradients g_0 … g_T
// of a chain whose transposed Jacobians J_t^T x = W^T y_t(x) + D_t(x) are never stored, only
// applied, as a Step (step.hpp) forms them from the model's forward record. It is the scan's entry
// for such chains, as ResidentScan (resident_scan.hpp) is for chains of stored elements; the
// recurrent layers reach it through nn/cuda/fused_scan.hpp. Plan once per (Step, H, T, B), then
// run() on device data as often as needed (launches only).
//
// Algorithm. Steps 1..T are cut into C chunks: chunk 0 holds the first len0 = T − (C−1)·L steps,
// chunks 1..C−1 exactly L each. (1) Reduce: for every (chunk c ≥ 1, sample) the affine total
// g_{a} = M_c g_{b} + v_c of its steps (a, b], M_c = J_{a+1}^T ⋯ J_b^T, built column by column:
// each column of [M_c | v_c] runs the BP recurrence x ← J_t^T x (+ e_{t−1} on v) from [I | 0],
// with J_t^T x formed on the fly from W (on chip) and the record. (2) Carry: per sample, the
// chunk boundaries g_{b_{C−2}}, …, g_{b_0} from g_T through the totals (C − 1 mat-vecs).
// (3) Push: every chunk runs BP from its boundary through its own steps (chunk 0 is never
// reduced). Memory: the totals, (C−1)·B·S·(S+1) values, and a padded copy of W; never a
// Jacobian. Results equal sequential BP up to float reassociation (FMA, summation order).
//
// Launches per run: prepare (padded W, g_T), reduce, carry, push; 2 when C = 1. Kernels and
// their thread mapping: math.hpp (every H: a thread keeps a row tile of W^T y for 1 or 4 columns
// in registers; W in shared memory when it fits, else read from global memory through L1/L2 —
// the "tiled kernel" choice for large H, plain FP32, no tensor cores, so no TF32 error). The
// chunk length and the mapping come from a cost model (plan.hpp): C = 1 (a plain BP push) when
// the reduce's extra work (≈ S + 1 times BP's) would not pay off, e.g. large H with few samples.
// The carry is sequential over chunks (≈ 0.1 µs a chunk); the model keeps C where that is small
// against the reduce, so no log-depth scan of the totals is needed at these sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/cuda/grid.hpp"
#include "scan/cuda/fused/kernels.hpp"
#include "scan/cuda/fused/options.hpp"

namespace bppsa::detail::gpu {

/// The chain's device data. Column-major, time-major blocks of B columns (column t·B + b = step
/// t of sample b for the (T+1)B arrays; column (t−1)·B + b belongs to step t for the TB arrays).
/// They must stay valid until the run's work on its stream is done; `g` must not overlap any input.
template <class T>
struct FusedChainPtrs {
  const T* w = nullptr;                      ///< W, G·H × H row-major
  const T* record[kFusedRecordArrays] = {};  ///< the Step's record (its kFusedRecordNeeded are required)
  const T* g_last = nullptr;                 ///< g_T, S × B: the final state's total gradient
  /// Injections, H × TB: block t − 1 holds the gradient added on h_t (the first H rows of g_t);
  /// blocks 0 … T−2 are used (block T − 1 is part of g_last). Required when planned with
  /// injections, must be null otherwise.
  const T* above = nullptr;
  T* g = nullptr;  ///< out: every g_t = ∂ℓ/∂s_t, S × (T+1)B
  /// Per-sample lengths (a device array of B, non-increasing, each 1 … T; not checked here);
  /// null = every sample runs all T steps. Step t of sample b is padding when t > len[b]: the
  /// identity, without injection; its record and injection are never read (may hold anything).
  /// g_last then holds the total gradient on the sample's last real state s_{len[b]} (the
  /// injection on h_{len[b]} included), and g_t = g_last for len[b] ≤ t ≤ T.
  const Idx* len = nullptr;
  /// Out, where set: the Step's y of every step (G·H × TB, column (t−1)·B + b), and its input
  /// side where it has one (FusedArgs::y_out, yi_out; yi required then), zeros at padded steps.
  T* y_out = nullptr;
  T* yi_out = nullptr;
};

template <class T>
class FusedScan {
 public:
  /// Plans `step` (with `variant`, passed to it as it is) for the current CUDA device: chooses
  /// the chunking and mapping, allocates the totals and the W copy (ResourceError before
  /// allocating when they do not fit), sets the kernels' shared-memory limits. InvalidArgument
  /// for sizes < 1, an empty Step, bad overrides. `label` names the chain in messages (empty:
  /// the Step's name).
  static FusedScan plan(const FusedStep<T>& step, std::int32_t variant, Idx hidden, Idx steps, Idx batch,
                        const FusedScanOptions& options = {}, const std::string& label = "");
  /// What plan() would choose and allocate, without allocating (queries the current device).
  static FusedScanStats estimate(const FusedStep<T>& step, std::int32_t variant, Idx hidden, Idx steps, Idx batch,
                                 const FusedScanOptions& options = {}, const std::string& label = "");

  FusedScan(FusedScan&&) noexcept;
  FusedScan& operator=(FusedScan&&) noexcept;
  ~FusedScan();

  /// Queues the backward on `stream` (launches, or one graph launch; no allocation, no
  /// synchronisation): writes every block of p.g. InvalidArgument for missing pointers or a
  /// device other than the plan's; launch errors throw DeviceError, faults surface at the next
  /// synchronising call.
  void run(cudaStream_t stream, const FusedChainPtrs<T>& p);

  const FusedScanStats& stats() const;

 private:
  struct Impl;
  explicit FusedScan(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

extern template class FusedScan<float>;
extern template class FusedScan<double>;

}  // namespace bppsa::detail::gpu
