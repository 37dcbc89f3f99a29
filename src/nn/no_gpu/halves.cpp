// The CUDA half of the recurrent model in a build without CUDA (-DBPPSA_WITH_CUDA=OFF): its
// factory throws UnsupportedError, so Device::cuda fails clearly and the library links;
// Device::cpu gets the CPU halves (the classifier's is made by the CPU stack's half).
#include "bppsa/core/error.hpp"
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
template std::unique_ptr<RecurrentHalf<float>> make_recurrent_cuda(const RecurrentConfig&);
template std::unique_ptr<RecurrentHalf<double>> make_recurrent_cuda(const RecurrentConfig&);

}  // namespace bppsa::detail
