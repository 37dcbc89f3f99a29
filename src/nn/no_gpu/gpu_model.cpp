// The GPU halves of the recurrent model in a build without CUDA (-DBPPSA_WITH_CUDA=OFF): the
// factories throw UnsupportedError for Device::cuda, so it fails clearly and the library links;
// Device::cpu gets the CPU halves.
#include "nn/cuda/gpu_model.hpp"

#include "bppsa/core/error.hpp"
#include "nn/classifier_half.hpp"
#include "nn/recurrent_half.hpp"

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

}  // namespace bppsa::detail::gpu

namespace bppsa::detail {

template <class T>
std::unique_ptr<RecurrentHalf<T>> make_recurrent_cuda(const RecurrentConfig&) {
  gpu::unsupported("Recurrent");
}
template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cuda(const ModelConfig&, Recurrent<T>&, Linear<T>&) {
  gpu::unsupported("SequenceClassifier");
}
template std::unique_ptr<RecurrentHalf<float>> make_recurrent_cuda(const RecurrentConfig&);
template std::unique_ptr<RecurrentHalf<double>> make_recurrent_cuda(const RecurrentConfig&);
template std::unique_ptr<ClassifierHalf<float>> make_classifier_cuda(const ModelConfig&, Recurrent<float>&,
                                                                     Linear<float>&);
template std::unique_ptr<ClassifierHalf<double>> make_classifier_cuda(const ModelConfig&, Recurrent<double>&,
                                                                      Linear<double>&);

}  // namespace bppsa::detail

namespace bppsa::detail::gpu {

#define BPPSA_INSTANTIATE(T)                                                                                  \
  template std::unique_ptr<RecurrentGpu<T>> make_recurrent_gpu(const RecurrentConfig&);                       \
  template std::unique_ptr<ModelGpu<T>> make_model_gpu(RecurrentGpu<T>&, const RecurrentConfig&, Index, bool, \
                                                       LossType);                                             \
  template std::unique_ptr<OptimizerGpu<T>> make_optimizer_gpu(ModelGpu<T>&);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
