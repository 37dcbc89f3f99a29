// The CUDA half of Optimizer<T> in a build without CUDA: never reached (a Device::cuda model
// cannot be made there), and refused with the fix if it were.
#include "bppsa/core/error.hpp"
#include "train/optimizer_half.hpp"

namespace bppsa::detail {

template <class T>
std::unique_ptr<OptimizerHalf<T>> make_optimizer_cuda(const gpu::DeviceParameters<T>&) {
  raise<UnsupportedError>("optimizer", "built without CUDA: a Device::cuda model's step needs bppsa's CUDA backend; "
                                       "rebuild with -DBPPSA_WITH_CUDA=ON, or use --device cpu");
}
template std::unique_ptr<OptimizerHalf<float>> make_optimizer_cuda(const gpu::DeviceParameters<float>&);
template std::unique_ptr<OptimizerHalf<double>> make_optimizer_cuda(const gpu::DeviceParameters<double>&);

}  // namespace bppsa::detail
