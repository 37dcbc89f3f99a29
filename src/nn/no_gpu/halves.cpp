// The CUDA halves of the recurrent model in a build without CUDA (-DBPPSA_WITH_CUDA=OFF): their
// factories throw UnsupportedError, so Device::cuda fails clearly and the library links;
// Device::cpu gets the CPU halves.
#include "bppsa/core/error.hpp"
#include "nn/classifier_half.hpp"
#include "nn/recurrent_half.hpp"

namespace bppsa::detail {
namespace {
[[noreturn]] void unsupported(const char* op) {
  raise<UnsupportedError>(op,
                          "built without CUDA: Device::cuda (--device cuda) needs bppsa's CUDA backend; rebuild "
                          "with -DBPPSA_WITH_CUDA=ON on a machine with the CUDA toolkit, or use --device cpu");
}
}  // namespace

template <class T>
std::unique_ptr<RecurrentHalf<T>> make_recurrent_cuda(const RecurrentConfig&) {
  unsupported("Recurrent");
}
template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cuda(const ModelConfig&, Recurrent<T>&, Linear<T>&) {
  unsupported("SequenceClassifier");
}
template std::unique_ptr<RecurrentHalf<float>> make_recurrent_cuda(const RecurrentConfig&);
template std::unique_ptr<RecurrentHalf<double>> make_recurrent_cuda(const RecurrentConfig&);
template std::unique_ptr<ClassifierHalf<float>> make_classifier_cuda(const ModelConfig&, Recurrent<float>&,
                                                                     Linear<float>&);
template std::unique_ptr<ClassifierHalf<double>> make_classifier_cuda(const ModelConfig&, Recurrent<double>&,
                                                                      Linear<double>&);

}  // namespace bppsa::detail
