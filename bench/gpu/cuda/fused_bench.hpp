// Timing harness of the fused chunked scan (src/nn/cuda/fused_scan.hpp) for bench_fused_scan: one layer's backward on a synthetic record, timed with CUDA events. No CUDA types
// here; compile fused_bench.cpp into the program (link bppsa::bppsa and CUDA::cudart, include <source>/src).
#pragma once

#include <cstdint>
#include <string>

#include "scan/cuda/fused/options.hpp"

namespace bppsa::detail::gpu {

struct FusedBenchResult {
  double median_ms = 0, min_ms = 0, max_ms = 0;  ///< one run() each, CUDA events around it
  int reps = 0;
  FusedScanStats stats;  ///< flops and bytes per run: achieved = flops / (median_ms · 1e-3)
  std::string device;    ///< cuda_summary() of the device it ran on
};

/// Plans the fused scan for `cell` (kRnnTanh, kRnnRelu, kGru, kLstm), H, T, B in precision T,
/// fills a random record in the ranges a real forward produces (states in (−1, 1), gates in
/// (0, 1), W_hh ~ U(−1/√H, 1/√H)), warms up (2 runs, which also captures the graph when the plan
/// uses one), then times `reps` runs (≥ 1) one by one with CUDA events. Throws DeviceError
/// without a device, ResourceError when the sizes do not fit.
template <class T>
FusedBenchResult bench_fused(std::int32_t cell, Idx hidden, Idx steps, Idx batch, int reps,
                             const FusedScanOptions& options = {});

}  // namespace bppsa::detail::gpu
