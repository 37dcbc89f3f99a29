// GPU test helpers: the same Scanner run on Device::cpu and Device::cuda, compared value by
// value and statistic by statistic, under each way the GPU can compute products.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "oracle.hpp"
#include "scan/cuda/executor.hpp"
#include "tolerance.hpp"

namespace gpu_test {

using namespace bppsa;
using oracle::Md;

/// Float chains of 10^4 steps accumulate rounding differently on the two sides (fused
/// multiply-adds, cuBLAS's order): norm-wise relative bounds per g_k.
template <class T>
constexpr double kTol = testutil::tol<T>(testutil::Op::scan);

/// Sets the GPU product policy for a scope (restored after).
class ProductsScope {
 public:
  explicit ProductsScope(detail::CudaProducts p) : old_(detail::cuda_products()) { detail::set_cuda_products(p); }
  ~ProductsScope() { detail::set_cuda_products(old_); }

 private:
  detail::CudaProducts old_;
};

/// BPPSA_GPU_TESTS_REDUCED=1 (scripts/gpu_check.sh sets it under compute-sanitizer, which runs
/// 10–100× slower): each small test runs a representative part of its cases.
inline bool reduced() {
  const char* e = std::getenv("BPPSA_GPU_TESTS_REDUCED");
  return e != nullptr && *e != 0 && std::string(e) != "0";
}
template <class C>
C pick(const C& full, const C& few) {
  return reduced() ? few : full;
}

/// Every product policy (reduced: bppsa's kernels and the libraries; automatic mixes the two).
inline std::vector<detail::CudaProducts> all_products() {
  return pick<std::vector<detail::CudaProducts>>(
      {detail::CudaProducts::automatic, detail::CudaProducts::kernels, detail::CudaProducts::libraries},
      {detail::CudaProducts::kernels, detail::CudaProducts::libraries});
}

template <class T>
std::vector<Md> as_double(const Gradients<T>& g) {
  std::vector<Md> out;
  for (Index k = 0; k < g.size(); ++k) out.push_back(g.g(k).template cast<double>());
  return out;
}

/// The CPU run's statistics and the GPU run's agree (same schedule), and the GPU run says so.
inline ::testing::AssertionResult same_schedule(const ScanStats& cpu, const ScanStats& gpu) {
  if (gpu.device != Device::cuda) return ::testing::AssertionFailure() << "the GPU run reports device cpu";
  if (gpu.algorithm != cpu.algorithm || gpu.chunks != cpu.chunks || gpu.levels != cpu.levels ||
      gpu.depth != cpu.depth || gpu.mm != cpu.mm || gpu.mv != cpu.mv || gpu.flops != cpu.flops ||
      gpu.mm_by_kind != cpu.mm_by_kind || gpu.mv_by_kind != cpu.mv_by_kind)
    return ::testing::AssertionFailure() << "schedules differ: cpu " << to_string(cpu.algorithm) << "/" << cpu.chunks
                                         << " levels " << cpu.levels << " mm " << cpu.mm << " mv " << cpu.mv
                                         << "; gpu " << to_string(gpu.algorithm) << "/" << gpu.chunks << " levels "
                                         << gpu.levels << " mm " << gpu.mm << " mv " << gpu.mv;
  if (gpu.launches <= 0) return ::testing::AssertionFailure() << "the GPU run counts no launches";
  return ::testing::AssertionSuccess();
}

/// Runs `options` on the CPU (or takes `cpu_result`) and on the GPU under `products`; exact:
/// every value equal to the naive oracle; else within kTol of the CPU engine.
template <class T>
::testing::AssertionResult gpu_matches_cpu(const Chain<T>& chain, const Matrix<T>& g_last, ScanOptions options,
                                           detail::CudaProducts products, bool exact) {
  options.device = Device::cpu;
  Scanner<T> cpu(options);
  Gradients<T> want;
  const ScanStats cpu_stats = cpu.run(chain, g_last, want);
  const ProductsScope scope(products);
  options.device = Device::cuda;
  Scanner<T> gpu(options);
  Gradients<T> got;
  const ScanStats gpu_stats = gpu.run(chain, g_last, got);
  const std::string where = std::string(" [products ") + detail::to_string(products) + ", " +
                            to_string(options.algorithm) + "/" + std::to_string(options.chunks) + ", N " +
                            std::to_string(chain.size()) + ", batch " + std::to_string(chain.batch()) + "]";
  const auto schedule = same_schedule(cpu_stats, gpu_stats);
  if (!schedule) return ::testing::AssertionFailure() << schedule.message() << where;
  if (exact) {
    const auto values = oracle::equal_to(got, oracle::naive_backward(chain, g_last));
    if (!values) return ::testing::AssertionFailure() << values.message() << where;
    return ::testing::AssertionSuccess();
  }
  if (oracle::close_to(got, as_double(want), kTol<T>)) return ::testing::AssertionSuccess();
  // Long float chains lose digits in any order of the products: then the GPU is held to 4× the
  // CPU engine's own error against sequential BP in double on the same chain.
  const std::vector<oracle::Md> ref = oracle::naive_backward(chain, g_last);
  double cpu_error = 0;
  for (Index k = 0; k < want.size(); ++k)
    cpu_error = std::max(cpu_error, testutil::norm_rel_error(want.g(k), ref[static_cast<std::size_t>(k)]));
  if (cpu_error > 10 * kTol<T>)  // no bound to lend: the CPU engine itself is off
    return ::testing::AssertionFailure() << "the CPU engine's own error " << cpu_error
                                         << " against sequential BP in double exceeds 10× the tolerance" << where;
  const double bound = std::max(kTol<T>, 4 * cpu_error);
  const auto values = oracle::close_to(got, ref, bound);
  if (!values)
    return ::testing::AssertionFailure() << values.message() << " (the CPU engine's own error " << cpu_error
                                         << ", against sequential BP in double)" << where;
  return ::testing::AssertionSuccess();
}

}  // namespace gpu_test
