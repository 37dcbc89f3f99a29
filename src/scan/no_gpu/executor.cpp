// The scan's GPU half in a build without CUDA (-DBPPSA_WITH_CUDA=OFF): the same functions,
// throwing UnsupportedError, so that the library links in every configuration.
#include "bppsa/core/error.hpp"
#include "scan/cuda/executor.hpp"

namespace bppsa::detail {

/// Never constructed here: make_device_scan throws first.
template <class T>
class DeviceScan {};

namespace {
[[noreturn]] void unsupported() {
  raise<UnsupportedError>("scan",
                          "built without CUDA: ScanOptions::device = Device::cuda needs bppsa's CUDA backend; rebuild "
                          "with -DBPPSA_WITH_CUDA=ON on a machine with the CUDA toolkit, or use Device::cpu");
}
}  // namespace

template <class T>
void DeviceScanDeleter<T>::operator()(DeviceScan<T>* p) const noexcept {
  delete p;
}

template <class T>
DeviceScanPtr<T> make_device_scan(const Schedule<T>&, const std::vector<ElementInfo<T>>&, Index) {
  unsupported();
}

template <class T>
void run_device_scan(DeviceScan<T>&, const Chain<T>&, const Matrix<T>&, Gradients<T>&, int) {
  unsupported();
}

template <class T>
DeviceScanInfo device_scan_info(const DeviceScan<T>&) {
  return {};
}

BPPSA_INSTANTIATE_DEVICE_SCAN(float)
BPPSA_INSTANTIATE_DEVICE_SCAN(double)

}  // namespace bppsa::detail
