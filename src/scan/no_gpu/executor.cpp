// The scan's CUDA half in a build without CUDA (-DBPPSA_WITH_CUDA=OFF): its factory and the
// resident scanner, throwing UnsupportedError, so that the library links in every configuration.
#include <string>

#include "bppsa/core/error.hpp"
#include "scan/plan.hpp"
#include "scan/scan_half.hpp"

namespace bppsa::detail {

namespace {
[[noreturn]] void unsupported(const char* what = "ScanOptions::device = Device::cuda") {
  raise<UnsupportedError>("scan", std::string("built without CUDA: ") + what +
                                      " needs bppsa's CUDA backend; rebuild with -DBPPSA_WITH_CUDA=ON on a machine "
                                      "with the CUDA toolkit, or use Device::cpu");
}
}  // namespace

template <class T>
std::unique_ptr<ScanHalf<T>> make_scan_cuda(const Schedule<T>&, const Chain<T>&, const HostMemoryCheck&) {
  unsupported();
}
BPPSA_INSTANTIATE_SCAN_CUDA(float)
BPPSA_INSTANTIATE_SCAN_CUDA(double)

}  // namespace bppsa::detail

namespace bppsa {

/// Never constructed here: the constructor throws after checking its arguments.
template <class T>
struct ResidentScanner<T>::Impl {};

template <class T>
ResidentScanner<T>::ResidentScanner(const ResidentChain<T>& chain, const ScanOptions& options) {
  const char* op = "ResidentScanner";
  const auto elements = detail::resident_elements(chain, op);
  detail::resident_chunks(options, static_cast<Index>(elements.size()) - 1, op);
  detail::unsupported("ResidentScanner (a chain resident on the GPU)");
}
template <class T>
ResidentScanner<T>::~ResidentScanner() = default;
template <class T>
ResidentScanner<T>::ResidentScanner(ResidentScanner&&) noexcept = default;
template <class T>
ResidentScanner<T>& ResidentScanner<T>::operator=(ResidentScanner&&) noexcept = default;
template <class T>
Index ResidentScanner<T>::size() const {
  detail::unsupported();
}
template <class T>
Index ResidentScanner<T>::batch() const {
  detail::unsupported();
}
template <class T>
Index ResidentScanner<T>::dim(Index) const {
  detail::unsupported();
}
template <class T>
T* ResidentScanner<T>::values(Index) {
  detail::unsupported();
}
template <class T>
T* ResidentScanner<T>::shared_matrix(Index) {
  detail::unsupported();
}
template <class T>
T* ResidentScanner<T>::injection(Index) {
  detail::unsupported();
}
template <class T>
T* ResidentScanner<T>::g_last() {
  detail::unsupported();
}
template <class T>
const T* ResidentScanner<T>::gradient(Index) const {
  detail::unsupported();
}
template <class T>
void ResidentScanner<T>::run(void*) {
  detail::unsupported();
}
template <class T>
const ScanStats& ResidentScanner<T>::stats() const {
  detail::unsupported();
}
template <class T>
std::size_t ResidentScanner<T>::device_bytes() const {
  detail::unsupported();
}

template class ResidentScanner<float>;
template class ResidentScanner<double>;

}  // namespace bppsa
