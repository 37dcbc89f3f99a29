// bppsa.scan's CUDA half in a build without CUDA: CUDA tensors are refused with the fix.
#include "scan.hpp"

#include "bppsa/core/error.hpp"

namespace bppsa::python {

template <class T>
void affine_scan_cuda(const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                      const std::vector<TensorRef>&, bool, const std::string&, bool, std::uintptr_t) {
  detail::raise<UnsupportedError>(
      "bppsa.scan",
      "this build of bppsa has no CUDA backend (it was built without nvcc): move the tensors to the "
      "CPU with .cpu(), or reinstall bppsa with its CUDA backend (docs/pytorch.md)");
}
BPPSA_SCAN_HALF(affine_scan_cuda, const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                const std::vector<TensorRef>&, bool, const std::string&, bool, std::uintptr_t)

}  // namespace bppsa::python
