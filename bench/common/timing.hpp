// Timing helpers the plain GPU-machine benchmark programs share (bench_cpu_scaling, bench_gpu_step).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <vector>

namespace bppsa_bench {

using Clock = std::chrono::steady_clock;

/// Seconds from t0 to now.
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Median, min and max of the samples (seconds), and the samples in the order they were taken.
inline nlohmann::json stats(std::vector<double> v) {
  const std::vector<double> samples = v;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {{"median", median}, {"min", v.front()}, {"max", v.back()}, {"samples", samples}};
}

}  // namespace bppsa_bench
