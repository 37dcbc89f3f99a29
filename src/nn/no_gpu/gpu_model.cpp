// The GPU halves of the recurrent model in a build without CUDA (-DBPPSA_WITH_CUDA=OFF): the
// factories throw UnsupportedError, so Device::cuda fails clearly and the library links.
#include "nn/cuda/gpu_model.hpp"

#include "bppsa/core/error.hpp"

namespace bppsa::detail::gpu {
namespace {
[[noreturn]] void unsupported(const char* op) {
  raise<UnsupportedError>(op,
                          "built without CUDA: Device::cuda (--device cuda) needs bppsa's CUDA backend; rebuild "
                          "with -DBPPSA_WITH_CUDA=ON on a machine with the CUDA toolkit, or use --device cpu");
}
}  // namespace

template <class T>
std::unique_ptr<RecurrentGpu<T>> make_recurrent_gpu(const RecurrentConfig&) {
  unsupported("Recurrent");
}
template <class T>
std::unique_ptr<ModelGpu<T>> make_model_gpu(RecurrentGpu<T>&, const RecurrentConfig&, Index, bool, LossType) {
  unsupported("SequenceClassifier");
}
template <class T>
std::unique_ptr<OptimizerGpu<T>> make_optimizer_gpu(ModelGpu<T>&) {
  unsupported("optimizer");
}

#define BPPSA_INSTANTIATE(T)                                                                                  \
  template std::unique_ptr<RecurrentGpu<T>> make_recurrent_gpu(const RecurrentConfig&);                       \
  template std::unique_ptr<ModelGpu<T>> make_model_gpu(RecurrentGpu<T>&, const RecurrentConfig&, Index, bool, \
                                                       LossType);                                             \
  template std::unique_ptr<OptimizerGpu<T>> make_optimizer_gpu(ModelGpu<T>&);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
