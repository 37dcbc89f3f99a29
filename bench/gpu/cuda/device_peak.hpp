// The GPU's FP32 and memory-bandwidth roofline, from its attributes (bench_fused_scan's report).
//   peak FP32 = SMs × SM clock × FP32 lanes per SM × 2 (a fused multiply-add is 2 FLOPs)
//   peak bandwidth = 2 (double data rate) × memory clock × bus width / 8
// The clocks are the attributes' peak (boost) values: CUDA 13's cudaDeviceProp has no clock fields,
// cudaDeviceGetAttribute has. FP32 lanes per SM: the CUDA C++ Programming Guide's throughput table
// (32-bit floating-point add, multiply, multiply-add results per clock per multiprocessor).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace bppsa_bench {

struct DevicePeak {
  std::string name;
  int multiprocessors = 0, major = 0, minor = 0;
  int clock_khz = 0, memory_clock_khz = 0, bus_bits = 0;
  int fp32_lanes_per_sm = 0;
  double peak_fp32_flops = 0, peak_bytes_per_s = 0;
  std::string lanes_note;  ///< where the lane count comes from
};

/// FP32 lanes per SM for compute capability major.minor (0 where the table has no entry).
inline int fp32_lanes_per_sm(int major, int minor) {
  switch (major) {
    case 5:
      return 128;
    case 6:
      return minor == 0 ? 64 : 128;
    case 7:
      return 64;
    case 8:
      return minor == 0 ? 64 : 128;
    case 9:
      return 128;  // H100, H200
    case 10:
      return 128;  // B200
    case 12:
      return 128;
    default:
      return 0;
  }
}

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("[device_peak] ") + what + ": " + cudaGetErrorName(e) + ": " +
                             cudaGetErrorString(e));
}

inline DevicePeak device_peak(int device = 0) {
  DevicePeak d;
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  d.name = p.name;
  d.multiprocessors = p.multiProcessorCount;
  d.major = p.major;
  d.minor = p.minor;
  check(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, device), "cudaDevAttrClockRate");
  check(cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, device), "cudaDevAttrMemoryClockRate");
  check(cudaDeviceGetAttribute(&d.bus_bits, cudaDevAttrGlobalMemoryBusWidth, device),
        "cudaDevAttrGlobalMemoryBusWidth");
  d.fp32_lanes_per_sm = fp32_lanes_per_sm(d.major, d.minor);
  d.lanes_note =
      "CUDA C++ Programming Guide, arithmetic throughput of sm_" + std::to_string(d.major) + std::to_string(d.minor);
  if (d.fp32_lanes_per_sm == 0) {
    d.fp32_lanes_per_sm = 128;
    d.lanes_note = "sm_" + std::to_string(d.major) + std::to_string(d.minor) + " is not in the table: 128 assumed";
  }
  d.peak_fp32_flops = 2.0 * d.multiprocessors * (1e3 * d.clock_khz) * d.fp32_lanes_per_sm;
  d.peak_bytes_per_s = 2.0 * (1e3 * d.memory_clock_khz) * (d.bus_bits / 8.0);
  return d;
}

}  // namespace bppsa_bench
