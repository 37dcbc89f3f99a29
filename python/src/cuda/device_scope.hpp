// The caller's CUDA device for the scope of a call from Python, restored after it: PyTorch reads
// the same runtime's current device.
#pragma once

#include <cuda_runtime_api.h>

#include "core/cuda/check.hpp"

namespace bppsa::python {

class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    BPPSA_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index)
      BPPSA_CUDA_CHECK(cudaSetDevice(index));
    else
      previous_ = -1;
  }
  ~DeviceScope() {
    if (previous_ >= 0) detail::cuda::discard(cudaSetDevice(previous_));
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace bppsa::python
