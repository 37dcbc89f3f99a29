// The fused chunked scan of ONE recurrent layer (docs/method.md §2 hybrid, §8): the state
// gradients g_0 … g_T from the layer's forward record, without ever storing a Jacobian. The scan
// itself is the scan's (scan/cuda/fused/fused_scan.hpp, over a Step); this is the layer's side of
// it: the cell code chooses the Step (the cell's file), the record's arrays are named. Plan once
// per (cell, H, T, B), then run() on device data as often as needed (launches only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <utility>

#include "core/cuda/grid.hpp"
#include "nn/cuda/recurrent_math.hpp"
#include "scan/cuda/fused/fused_scan.hpp"

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
  /// Per-sample lengths (PackedSequence), a device array of B, non-increasing, each 1 … T; null =
  /// every sample runs all T steps. Steps t > len[b] of sample b are padding: identities without
  /// injection, their record and `above` never read; g_last then holds the TOTAL gradient on
  /// s_{len[b]} (above on h_{len[b]} + the final-state gradient), and g_t = g_last for t ≥ len[b].
  const Idx* len = nullptr;
  /// Out, where set: the pre-activation gradients, G·H × TB as the layer's preact kernel writes
  /// them (zeros at padded steps): dx the input side, and for a GRU dh the recurrent side (both
  /// required then); the caller then needs no preact launch.
  T* dx = nullptr;
  T* dh = nullptr;
};

/// The cell codes of recurrent_math.hpp: kRnnTanh, kRnnRelu, kGru, kLstm.
template <class T>
class FusedRecurrentScan {
 public:
  /// FusedScan::plan for the cell's Step. InvalidArgument for an unknown cell, and as FusedScan.
  static FusedRecurrentScan plan(std::int32_t cell, Idx hidden, Idx steps, Idx batch,
                                 const FusedScanOptions& options = {});
  /// What plan() would choose and allocate, without allocating (queries the current device).
  static FusedScanStats estimate(std::int32_t cell, Idx hidden, Idx steps, Idx batch,
                                 const FusedScanOptions& options = {});

  /// Queues the backward on `stream`, as FusedScan::run; InvalidArgument naming the record's
  /// arrays that are missing.
  void run(cudaStream_t stream, const FusedDevicePtrs<T>& p);

  const FusedScanStats& stats() const { return scan_.stats(); }

 private:
  FusedRecurrentScan(std::int32_t cell, FusedScan<T> scan) : cell_(cell), scan_(std::move(scan)) {}
  std::int32_t cell_;
  FusedScan<T> scan_;
};

extern template class FusedRecurrentScan<float>;
extern template class FusedRecurrentScan<double>;

}  // namespace bppsa::detail::gpu
