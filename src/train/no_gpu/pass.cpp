// The CUDA half of the pass in a build without CUDA: never reached (a Device::cuda model cannot
// be made there: its constructor throws UnsupportedError), and refused with the fix if it were.
#include "bppsa/core/error.hpp"
#include "train/pass.hpp"

namespace bppsa::detail {

template <class T>
std::unique_ptr<Pass> make_pass_cuda(SequenceClassifier<T>&, Optimizer<T>*, const SequenceDataset&,
                                     std::span<const Index>, const BackwardOptions&) {
  raise<UnsupportedError>("train", "built without CUDA: a Device::cuda model's training pass needs bppsa's CUDA "
                                   "backend; rebuild with -DBPPSA_WITH_CUDA=ON, or use --device cpu");
}

BPPSA_CUDA_PASS(float)
BPPSA_CUDA_PASS(double)

}  // namespace bppsa::detail
