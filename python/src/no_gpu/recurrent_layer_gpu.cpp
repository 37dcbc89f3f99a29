// bppsa.nn's CUDA half in a build without CUDA: every CUDA tensor is refused with the fix.
#include "bppsa/core/error.hpp"
#include "layer_half.hpp"

namespace bppsa::python {

template <class T>
std::unique_ptr<LayerHalf<T>> make_layer_gpu(const RecurrentConfig&, int) {
  detail::raise<UnsupportedError>(
      "bppsa.nn",
      "this build of bppsa has no CUDA backend (it was built without nvcc): move the module and its "
      "inputs to the CPU with .cpu(), or reinstall bppsa with its CUDA backend (docs/pytorch.md)");
}
template std::unique_ptr<LayerHalf<float>> make_layer_gpu(const RecurrentConfig&, int);
template std::unique_ptr<LayerHalf<double>> make_layer_gpu(const RecurrentConfig&, int);

}  // namespace bppsa::python
