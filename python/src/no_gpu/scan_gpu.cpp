// bppsa.scan's CUDA half in a build without CUDA: CUDA tensors are refused with the fix.
#include "bppsa/core/error.hpp"
#include "scan.hpp"

namespace bppsa::python {

template <class T>
void affine_scan_gpu(const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                     const std::vector<TensorRef>&, const std::string&, std::uintptr_t) {
  detail::raise<UnsupportedError>(
      "bppsa.scan",
      "this build of bppsa has no CUDA backend (it was built without nvcc): move the tensors to the "
      "CPU with .cpu(), or reinstall bppsa with its CUDA backend (docs/pytorch.md)");
}
template void affine_scan_gpu<float>(const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                                     const std::vector<TensorRef>&, const std::string&, std::uintptr_t);
template void affine_scan_gpu<double>(const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                                      const std::vector<TensorRef>&, const std::string&, std::uintptr_t);

}  // namespace bppsa::python
