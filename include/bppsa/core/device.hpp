// Where a computation runs (the CPU or a CUDA GPU) and what this build and machine offer.
// Every function here exists in every build: without CUDA, cuda_built() is false,
// cuda_device_count() is 0 and cuda_device_info() throws UnsupportedError.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "bppsa/core/error.hpp"

namespace bppsa {

/// cpu: the OpenMP engine. cuda: the current CUDA device (cudaSetDevice picks it; device 0
/// unless the caller or CUDA_VISIBLE_DEVICES says otherwise).
enum class Device { cpu, cuda };

inline const char* to_string(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

/// "cpu" or "cuda"; throws InvalidArgument otherwise.
inline Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  detail::raise<InvalidArgument>("parse_device", "unknown device '" + std::string(name) + "'; expected cpu or cuda");
}

/// Whether this build of bppsa has its CUDA backend (-DBPPSA_WITH_CUDA=ON).
bool cuda_built();

/// Number of usable CUDA devices: 0 when bppsa was built without CUDA, when there is no
/// driver (or one too old for the runtime) and when there is no GPU. Never throws.
int cuda_device_count();

/// What a results file and the GPU check script record about a device.
struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int multiprocessors = 0;
  int compute_major = 0;  ///< compute capability, e.g. 9.0 for H100/H200
  int compute_minor = 0;
  std::size_t total_memory = 0;  ///< bytes
  std::size_t free_memory = 0;   ///< bytes, when queried
  int driver_version = 0;        ///< CUDA version the driver supports, 1000·major + 10·minor
  int runtime_version = 0;       ///< CUDA runtime bppsa was linked against, same encoding
  std::string architectures;     ///< the architectures bppsa's kernels were compiled for ("90")
};

/// Facts about device `ordinal`. Throws UnsupportedError without CUDA, DeviceError when the
/// device does not exist or the driver cannot be reached.
CudaDeviceInfo cuda_device_info(int ordinal = 0);

/// Makes CUDA device `index` current for the scope and restores the previous one after (what a
/// caller holding tensors on several GPUs, as PyTorch, needs around each call); nothing for
/// index < 0. Construction throws UnsupportedError without CUDA, DeviceError when the device
/// cannot be selected.
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int index);
  ~CudaDeviceScope();
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  int previous_ = -1;  ///< the device to restore, or −1
};

/// One line for logs: "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB, driver 13.0,
/// runtime 13.0"; "no CUDA device (…why…)" or "built without CUDA" otherwise. Never throws.
std::string cuda_summary();

}  // namespace bppsa
