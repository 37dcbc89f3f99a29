// bench_fused (fused_bench.hpp): the fused scan of a synthetic record, timed with CUDA events.
#include "fused_bench.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "bppsa/core/device.hpp"
#include "bppsa/core/error.hpp"
#include "core/cuda/buffer.hpp"
#include "core/cuda/check.hpp"
#include "nn/cuda/fused_scan.hpp"

namespace bppsa::detail::gpu {
namespace {

/// n values uniform in (lo, hi), uploaded.
template <class T>
cuda::DeviceBuffer<T> random_buffer(std::size_t n, double lo, double hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(rng));
  return cuda::to_device(v);
}

}  // namespace

template <class T>
FusedBenchResult bench_fused(std::int32_t cell, Idx hidden, Idx steps, Idx batch, int reps,
                             const FusedScanOptions& options) {
  if (reps < 1) raise<InvalidArgument>("bench_fused", "reps must be ≥ 1 (got " + std::to_string(reps) + ")");
  if (cuda_device_count() == 0) raise<DeviceError>("bench_fused", cuda_summary());
  FusedRecurrentScan<T> scan = FusedRecurrentScan<T>::plan(cell, hidden, steps, batch, options);
  const Idx H = hidden, G = cell_gates(cell), S = cell_state(cell, H), B = batch;
  const std::size_t TB = static_cast<std::size_t>(steps * B), T1B = TB + static_cast<std::size_t>(B);
  const bool gated = cell == kGru || cell == kLstm;
  const double sz = sizeof(T);
  cuda::require_device_memory(
      "bench_fused", "the synthetic record of " + std::to_string(steps) + " steps × batch " + std::to_string(B),
      {{"states", sz * H * T1B * (cell == kLstm ? 2 : 1)},
       {"gates and aux", gated ? sz * (G + 1) * H * TB : 0},
       {"injections", options.injections ? sz * H * TB : 0},
       {"gradients", sz * S * T1B},
       {"pre-activation gradients", sz * G * H * TB * (cell == kGru ? 2 : 1)}},
      "use fewer steps or a smaller batch");

  std::mt19937_64 rng(4202);
  const double bound = 1.0 / std::sqrt(static_cast<double>(H));
  FusedDevicePtrs<T> p;
  auto w = random_buffer<T>(static_cast<std::size_t>(G * H * H), -bound, bound, rng);
  auto h = random_buffer<T>(static_cast<std::size_t>(H) * T1B, -0.95, 0.95, rng);
  cuda::DeviceBuffer<T> c, gates, aux, above;
  if (cell == kLstm) c = random_buffer<T>(static_cast<std::size_t>(H) * T1B, -2.0, 2.0, rng);
  if (gated) {
    gates = random_buffer<T>(static_cast<std::size_t>(G * H) * TB, 0.02, 0.98, rng);
    aux = random_buffer<T>(static_cast<std::size_t>(H) * TB, -0.95, 0.95, rng);
  }
  if (options.injections) above = random_buffer<T>(static_cast<std::size_t>(H) * TB, -1.0, 1.0, rng);
  auto g_last = random_buffer<T>(static_cast<std::size_t>(S * B), -1.0, 1.0, rng);
  cuda::DeviceBuffer<T> g(static_cast<std::size_t>(S) * T1B);
  // The pre-activation gradients too, as a layer's backward has the push write them.
  cuda::DeviceBuffer<T> dx(static_cast<std::size_t>(G * H) * TB), dh(cell == kGru ? dx.size() : 0);
  p.dx = dx.data();
  p.dh = cell == kGru ? dh.data() : nullptr;
  p.w_hh = w.data();
  p.h = h.data();
  p.c = c.data();
  p.gates = gates.data();
  p.aux = aux.data();
  p.above = above.data();
  p.g_last = g_last.data();
  p.g = g.data();

  cuda::Stream stream;
  for (int i = 0; i < 2; ++i) scan.run(stream.get(), p);  // warm-up; the second captures a graph
  stream.synchronize();
  cuda::Event start, stop;
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    BPPSA_CUDA_CHECK(cudaEventRecord(start, stream.get()));
    scan.run(stream.get(), p);
    BPPSA_CUDA_CHECK(cudaEventRecord(stop, stream.get()));
    BPPSA_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0;
    BPPSA_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  FusedBenchResult r;
  r.reps = reps;
  r.min_ms = ms.front();
  r.max_ms = ms.back();
  r.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  r.stats = scan.stats();
  r.device = cuda_summary();
  // Every result is checked before it is reported (the harness's own test): a run that timed
  // nothing or a plan without work is an error, never a figure.
  if (!(r.median_ms > 0 && r.min_ms <= r.median_ms && r.median_ms <= r.max_ms && r.stats.flops > 0 &&
        r.stats.bytes > 0 && !r.device.empty()))
    raise<DeviceError>("bench_fused", "an inconsistent timing (median " + std::to_string(r.median_ms) + " ms, min " +
                                          std::to_string(r.min_ms) + ", max " + std::to_string(r.max_ms) + ", " +
                                          std::to_string(r.stats.flops) + " flops, " + std::to_string(r.stats.bytes) +
                                          " bytes, device '" + r.device + "')");
  return r;
}

template FusedBenchResult bench_fused<float>(std::int32_t, Idx, Idx, Idx, int, const FusedScanOptions&);
template FusedBenchResult bench_fused<double>(std::int32_t, Idx, Idx, Idx, int, const FusedScanOptions&);

}  // namespace bppsa::detail::gpu
