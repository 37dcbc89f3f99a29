// The scan's GPU half in a build without CUDA (-DBPPSA_WITH_CUDA=OFF): the same functions,
// throwing UnsupportedError, so that the library links in every configuration.
#include "scan/cuda/executor.hpp"

#include "bppsa/core/error.hpp"
#include "scan/scan_half.hpp"

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

template <class T>
std::unique_ptr<ScanHalf<T>> make_scan_half(Device device, const Schedule<T>& schedule, const Chain<T>& chain,
                                            int threads, const HostMemoryCheck& check_host) {
  if (device == Device::cuda) unsupported();
  return make_scan_cpu(schedule, chain, threads, check_host);
}
BPPSA_INSTANTIATE_SCAN_HALF(make_scan_half, float)
BPPSA_INSTANTIATE_SCAN_HALF(make_scan_half, double)

BPPSA_INSTANTIATE_DEVICE_SCAN(float)
BPPSA_INSTANTIATE_DEVICE_SCAN(double)

}  // namespace bppsa::detail
