// The device layer on a GPU: device queries, the device-resident entry point the GPU training
// will use (data written straight into the plan's buffers, execute(), gradients read back),
// checked calls, and refusing a plan that does not fit before allocating it.
#include <cuda_runtime_api.h>

#include "bppsa/core/memory.hpp"
#include "cuda/gpu_compare.hpp"
#include "core/cuda/buffer.hpp"
#include "expect_error.hpp"
#include "scan/cuda/device_scan.hpp"
#include "scan/plan.hpp"

namespace {

using namespace bppsa;
namespace cuda = bppsa::detail::cuda;

TEST(GpuSmall, DeviceInfoDescribesTheGpu) {
  ASSERT_TRUE(cuda_built());
  ASSERT_GT(cuda_device_count(), 0);
  const CudaDeviceInfo d = cuda_device_info(0);
  EXPECT_FALSE(d.name.empty());
  EXPECT_GT(d.multiprocessors, 0);
  EXPECT_GE(d.compute_major, 7);
  EXPECT_GT(d.total_memory, d.free_memory);
  EXPECT_GT(d.free_memory, 0u);
  EXPECT_GE(d.driver_version, d.runtime_version) << "the driver must support the runtime bppsa was built with";
  EXPECT_NE(cuda_summary().find(d.name), std::string::npos);
  EXPECT_THROW(cuda_device_info(cuda_device_count()), DeviceError);
}

TEST(GpuSmall, CheckedCallsThrowDeviceErrorWithCallFileAndLine) {
  const std::string m = testutil::message_of<DeviceError>([] {
    void* p = nullptr;
    BPPSA_CUDA_CHECK(cudaMalloc(&p, std::size_t{1} << 62));  // 4 EiB: refused by the runtime
  });
  EXPECT_NE(m.find("cudaMalloc"), std::string::npos) << m;
  EXPECT_NE(m.find("core/cuda/test_device_gpu.cpp:"), std::string::npos) << m;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a failed allocation is not a sticky error";
}

TEST(GpuSmall, DeviceBuffersMoveAndRoundTrip) {
  std::vector<float> host{1, 2, 3, 4, 5};
  cuda::DeviceBuffer<float> a = cuda::to_device(host);
  cuda::DeviceBuffer<float> b = std::move(a);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.size(), 5u);
  std::vector<float> back(5);
  BPPSA_CUDA_CHECK(cudaMemcpy(back.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host);
}

template <class T>
void device_resident(detail::CudaProducts products) {
  // A mixed, rectangular, affine chain with a shared S: every kind of buffer the entry point has.
  const Index n = 11, batch = 3;
  RandomProblem<T> p = random_problem<T>({n, 5, batch, ChainKind::mixed, false, true, 21});
  auto s = std::make_shared<const Matrix<T>>(Matrix<T>::Random(p.chain.dim(n), p.chain.dim(n)));
  for (T& v : p.chain.push_back(Jacobian<T>::shared_dense_diag(s, batch)).values()) v = T(0.9);
  p.g_last = Matrix<T>::Random(p.chain.dim(n + 1), batch);
  p.chain.set_injection(n, Matrix<T>::Random(p.chain.dim(n), batch));
  const Chain<T>& chain = p.chain;
  const Index N = chain.size();

  const ScanOptions options{Algorithm::blelloch, 2, 0, true};
  const auto elements = detail::scan_elements(chain);
  const detail::PlannedSchedule<T> planned = detail::plan_run(elements, batch, options, 2);
  const gpu_test::ProductsScope scope(products);
  detail::DeviceScanPtr<T> scan = detail::make_device_scan(planned.schedule, elements, batch);
  const cudaStream_t stream = scan->stream();
  auto put = [&](T* dst, const T* src, Index count) {
    ASSERT_NE(dst, nullptr);
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(count) * sizeof(T), cudaMemcpyHostToDevice,
                                     stream));
  };
  for (Index i = 1; i <= N; ++i) {
    const Jacobian<T>& j = chain.jacobian(N - i + 1);
    if (!j.values().empty()) put(scan->element_values(i), j.values().data(), static_cast<Index>(j.values().size()));
    if (const Matrix<T>* e = chain.injection(N - i)) put(scan->injection(i), e->data(), e->size());
    else EXPECT_EQ(scan->injection(i), nullptr);
  }
  const auto& shared = scan->program().shared_matrices;
  ASSERT_GE(shared.size(), 1u);
  for (std::size_t k = 0; k < shared.size(); ++k) {
    const Matrix<T>& m = *chain.jacobian(N - shared[k].position + 1).layout().shared_dense;
    put(scan->shared_matrix(k), m.data(), m.size());
  }
  put(scan->prefix(0), p.g_last.data(), p.g_last.size());
  scan->execute();
  BPPSA_CUDA_CHECK(cudaStreamSynchronize(stream));

  const Gradients<T> want = backward(chain, p.g_last, options);
  for (Index i = 1; i <= N; ++i) {
    Matrix<T> g(scan->prefix_rows(i), batch);
    BPPSA_CUDA_CHECK(cudaMemcpy(g.data(), scan->prefix(i), static_cast<std::size_t>(g.size()) * sizeof(T),
                                cudaMemcpyDeviceToHost));
    const Matrix<T>& w = want.g(N - i);
    EXPECT_LE((g - w).norm(), gpu_test::kTol<T> * std::max<double>(1, w.norm())) << "g_" << N - i;
  }
}

TEST(GpuSmall, DeviceResidentExecuteMatchesTheCpuEngine) {
  for (const auto products : gpu_test::all_products()) {
    device_resident<float>(products);
    device_resident<double>(products);
  }
}

TEST(GpuSmall, APlanTooLargeForTheGpuIsRefusedBeforeAllocating) {
  // Small on the host, huge on the device: per-sample 4096² products of an RNN-like chain, whose
  // Blelloch workspace (≈ N/2 live 64 MiB × 64-sample nodes) exceeds any GPU's memory.
  const Index n = 200, h = 4096, batch = 64;
  auto s = std::make_shared<const Matrix<float>>(Matrix<float>::Identity(h, h));
  Chain<float> chain(batch);
  for (Index k = 0; k < n; ++k) {
    Jacobian<float>& j = chain.push_back(Jacobian<float>::shared_dense_diag(s, batch));
    std::fill(j.values().begin(), j.values().end(), 1.0f);
  }
  set_memory_limit(1e18);  // this test is about the GPU's memory, not the host's
  std::size_t free_before = 0, total = 0;
  BPPSA_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  const std::string m = testutil::message_of<ResourceError>([&] {
    backward(chain, Matrix<float>::Ones(h, batch).eval(), ScanOptions{Algorithm::blelloch, 2, 0, false, Device::cuda});
  });
  set_memory_limit(0);
  EXPECT_NE(m.find("GPU memory"), std::string::npos) << m;
  EXPECT_NE(m.find("intermediate products"), std::string::npos) << m;
  std::size_t free_after = 0;
  BPPSA_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  EXPECT_GE(free_after + (std::size_t{64} << 20), free_before) << "nothing large was allocated";
}

}  // namespace
