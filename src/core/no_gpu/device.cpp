// Device queries of a build without CUDA (-DBPPSA_WITH_CUDA=OFF): no devices, and a clear
// error for anything that needs one.
#include "bppsa/core/device.hpp"

namespace bppsa {

bool cuda_built() { return false; }

int cuda_device_count() { return 0; }

CudaDeviceInfo cuda_device_info(int) {
  detail::raise<UnsupportedError>("cuda_device_info",
                                  "built without CUDA: no GPU queries; rebuild with -DBPPSA_WITH_CUDA=ON on a machine "
                                  "with the CUDA toolkit");
}

std::string cuda_summary() { return "built without CUDA"; }

CudaDeviceScope::CudaDeviceScope(int index) {
  if (index >= 0)
    detail::raise<UnsupportedError>("CudaDeviceScope",
                                    "built without CUDA: no CUDA device to select; rebuild with "
                                    "-DBPPSA_WITH_CUDA=ON on a machine with the CUDA toolkit, or use the CPU");
}
CudaDeviceScope::~CudaDeviceScope() = default;

}  // namespace bppsa
