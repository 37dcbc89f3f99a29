// One recurrent layer's state gradients through the generic GPU scan engine, by the scan's entry
// for resident chains (scan/cuda/resident_scan.hpp): J_t^T generated on the device straight into
// the plan's element buffers (RNN: W_hh^T shared by the batch × a per-sample diagonal; GRU, LSTM:
// dense S × S per sample), the injections and g_T written into its affine parts and prefix 0, the
// schedule executed, and the prefixes g_{T−1} … g_0 gathered into the layer's g. It stores T·B
// Jacobians (and Blelloch's intermediate products): the general path, for --backward linear,
// blelloch and hybrid on Device::cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "bppsa/scan/scanner.hpp"
#include "core/cuda/buffer.hpp"
#include "nn/cuda/recurrent_math.hpp"
#include "scan/cuda/resident_scan.hpp"

namespace bppsa::detail::gpu {

template <class T>
class GenericLayerScan {
 public:
  /// Plans the scan of `steps` Jacobians of a `cell` layer (hidden H) for `batch` samples,
  /// with injections at steps 1 … steps − 1 when `inject`; `chunks` for hybrid (0: √steps).
  /// Allocates everything (the DeviceScan refuses what does not fit with ResourceError).
  GenericLayerScan(std::int32_t cell, Index hidden, Index steps, Index batch, bool inject, Algorithm algorithm,
                   int chunks);
  ~GenericLayerScan();
  GenericLayerScan(const GenericLayerScan&) = delete;
  GenericLayerScan& operator=(const GenericLayerScan&) = delete;

  bool matches(Index steps, Index batch, bool inject, Algorithm algorithm, int chunks) const;
  /// Fills a.g's blocks 0 … T−1 from its block T (g_T, already set) on `stream`: Jacobians from
  /// the record (a.w: W_hh row-major), injections from a.above. With lengths (a.len; a plan with
  /// injections), each sample's Jacobians past its length are zero and its g_T is injected at its
  /// length (injection_by_length). `jacobians_done` is recorded
  /// on `stream` after the generation.
  void run(const LayerArgs<T>& a, cudaStream_t stream, cudaEvent_t jacobians_done);

  const ScanStats& stats() const { return scan_->stats(); }
  std::size_t device_bytes() const;

 private:
  std::int32_t cell_;
  Index hidden_, steps_, batch_;
  bool inject_;
  Algorithm algorithm_;
  int chunks_;
  Layout<T> layout_;
  std::unique_ptr<ResidentScan<T>> scan_;
  cuda::DeviceBuffer<T*> elements_, injections_;
  cuda::DeviceBuffer<const T*> prefixes_;
};

}  // namespace bppsa::detail::gpu
