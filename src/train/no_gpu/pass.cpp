// A pass in a build without CUDA: every model runs the host pass (a Device::cuda model cannot
// be made there: its constructor throws UnsupportedError).
#include "train/pass.hpp"

#include "train/cpu/host_pass.hpp"

namespace bppsa::detail {

template <class T>
std::unique_ptr<Pass> make_pass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
                                std::span<const Index> order, const BackwardOptions& options) {
  return make_host_pass(model, optimizer, data, order, options);
}

BPPSA_SEQUENCE_PASS(float)
BPPSA_SEQUENCE_PASS(double)

}  // namespace bppsa::detail
