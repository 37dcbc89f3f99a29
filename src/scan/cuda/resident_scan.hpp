// The scan's entry for chains resident on the GPU, behind the public ResidentScanner
// (bppsa/scan/resident_scanner.hpp), and what the GPU model calls with its own position tables;
// Scanner is the entry for chains in host memory. It plans with the scan's planner from layouts alone, compiles
// the plan for the current device and allocates everything once; the caller writes the values
// straight into the plan's buffers on the device, and each run executes the schedule there.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <vector>

#include "bppsa/scan/scanner.hpp"
#include "core/cuda/buffer.hpp"
#include "scan/cuda/device_scan.hpp"
#include "scan/schedule.hpp"

namespace bppsa::detail {

template <class T>
class ResidentScan {
 public:
  /// Plans `elements` (layouts only; position 0, g_N, has none) for `batch` samples with
  /// `algorithm` (not automatic or fused; hybrid with `chunks` ≥ 1), compiles and allocates.
  /// ResourceError, before allocating, for what does not fit in the GPU's memory.
  ResidentScan(const std::vector<ElementInfo<T>>& elements, Index batch, Algorithm algorithm, int chunks);
  ~ResidentScan();
  ResidentScan(const ResidentScan&) = delete;
  ResidentScan& operator=(const ResidentScan&) = delete;

  /// The compiled plan and its device buffers (DeviceScan's accessors: element values, shared
  /// matrices, injections, prefixes); their addresses stay fixed for the plan's life.
  const gpu::Program<T>& program() const { return scan_->program(); }
  DeviceScan<T>& buffers() { return *scan_; }
  /// Runs the schedule after the work queued on `stream` so far (the values written there); work
  /// queued on `stream` afterwards sees the prefixes.
  void run(cudaStream_t stream);
  /// The plan's statistics (algorithm, chunks, products, levels, launches; device cuda).
  const ScanStats& stats() const { return stats_; }
  std::size_t device_bytes() const;

 private:
  DeviceScanPtr<T> scan_;
  /// The caller's stream → the scan's stream → back; made after the plan, so that a machine
  /// without a GPU gets make_device_scan's error.
  std::optional<cuda::Event> ready_, done_;
  ScanStats stats_;
};

}  // namespace bppsa::detail
