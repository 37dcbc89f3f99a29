// CUDA half of the device queries (bppsa/core/device.hpp) and the device-memory guard.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "bppsa/core/device.hpp"
#include "bppsa/core/memory.hpp"
#include "core/cuda/buffer.hpp"
#include "core/cuda/check.hpp"

namespace bppsa {
namespace {

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

/// Why there is no device, from cudaGetDeviceCount's status (and clearing it).
std::string count_error(cudaError_t e) {
  cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

bool cuda_built() { return true; }

int cuda_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

CudaDeviceInfo cuda_device_info(int ordinal) {
  int n = 0;
  BPPSA_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (ordinal < 0 || ordinal >= n)
    detail::raise<DeviceError>("cuda_device_info", "no CUDA device " + std::to_string(ordinal) + "; this machine has " +
                                                       std::to_string(n));
  cudaDeviceProp p{};
  BPPSA_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  info.name = p.name;
  info.multiprocessors = p.multiProcessorCount;
  info.compute_major = p.major;
  info.compute_minor = p.minor;
  info.total_memory = p.totalGlobalMem;
  int current = 0;
  BPPSA_CUDA_CHECK(cudaGetDevice(&current));
  if (current == ordinal) {
    std::size_t free = 0, total = 0;
    BPPSA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    info.free_memory = free;
  }
  BPPSA_CUDA_CHECK(cudaDriverGetVersion(&info.driver_version));
  BPPSA_CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime_version));
  info.architectures = BPPSA_CUDA_ARCHS;
  return info;
}

std::string cuda_summary() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return "no CUDA device (" + count_error(e) + ")";
  if (n == 0) return "no CUDA device";
  try {
    const CudaDeviceInfo d = cuda_device_info(0);
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(d.total_memory) / (1024.0 * 1024.0 * 1024.0));
    return d.name + ", sm_" + std::to_string(d.compute_major) + std::to_string(d.compute_minor) + ", " +
           std::to_string(d.multiprocessors) + " SMs, " + mem + ", driver " + version_string(d.driver_version) +
           ", runtime " + version_string(d.runtime_version) + ", kernels for sm_" + d.architectures +
           (n > 1 ? " (device 0 of " + std::to_string(n) + ")" : "");
  } catch (const Error& err) {
    return std::string("CUDA device present but not usable: ") + err.what();
  }
}

CudaDeviceScope::CudaDeviceScope(int index) {
  if (index < 0) return;
  int current = 0;
  BPPSA_CUDA_CHECK(cudaGetDevice(&current));
  if (current == index) return;
  BPPSA_CUDA_CHECK(cudaSetDevice(index));
  previous_ = current;
}

CudaDeviceScope::~CudaDeviceScope() {
  if (previous_ >= 0) detail::cuda::discard(cudaSetDevice(previous_));
}

namespace detail::cuda {

void require_device_memory(const std::string& op, const std::string& what, const std::vector<DeviceBytes>& items,
                           const std::string& fix) {
  double need = 0;
  for (const DeviceBytes& i : items) need += i.bytes;
  std::size_t free = 0, total = 0;
  BPPSA_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  // cuBLAS and cuSPARSE allocate workspace of their own, and fragmentation costs some: keep a margin.
  const double usable = 0.95 * static_cast<double>(free) - 256.0 * 1024 * 1024;
  if (need <= usable) return;
  std::string parts;
  for (const DeviceBytes& i : items)
    if (i.bytes > 0) parts += (parts.empty() ? "" : ", ") + i.what + " " + format_bytes(i.bytes);
  int device = 0;
  BPPSA_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp p{};
  BPPSA_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  raise<ResourceError>(op, what + " needs " + format_bytes(need) + " of GPU memory (" + parts + ") but GPU " +
                               std::to_string(device) + " (" + p.name + ") has " +
                               format_bytes(static_cast<double>(free)) + " free of " +
                               format_bytes(static_cast<double>(total)) + "; " + fix);
}

}  // namespace detail::cuda
}  // namespace bppsa
