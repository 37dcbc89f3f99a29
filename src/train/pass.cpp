// The front of a sequence model's pass: the device decides the half (the CUDA half for a model
// on Device::cuda, the host pass for every other).
#include "train/pass.hpp"

#include "train/cpu/pass.hpp"

namespace bppsa::detail {

template <class T>
std::unique_ptr<Pass> make_pass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
                                std::span<const Index> order, const BackwardOptions& options) {
  if (model.device() == Device::cuda) return make_pass_cuda(model, optimizer, data, order, options);
  return make_pass_cpu(model, optimizer, data, order, options);
}

/// A CNN runs on the CPU only.
template <class T>
std::unique_ptr<Pass> make_pass(ConvNet<T>& model, Optimizer<T>* optimizer, const ImageDataset& data,
                                std::span<const Index> order, const BackwardOptions& options) {
  return make_pass_cpu(model, optimizer, data, order, options);
}

template std::unique_ptr<Pass> make_pass(SequenceClassifier<float>&, Optimizer<float>*, const SequenceDataset&,
                                         std::span<const Index>, const BackwardOptions&);
template std::unique_ptr<Pass> make_pass(SequenceClassifier<double>&, Optimizer<double>*, const SequenceDataset&,
                                         std::span<const Index>, const BackwardOptions&);
template std::unique_ptr<Pass> make_pass(ConvNet<float>&, Optimizer<float>*, const ImageDataset&,
                                         std::span<const Index>, const BackwardOptions&);
template std::unique_ptr<Pass> make_pass(ConvNet<double>&, Optimizer<double>*, const ImageDataset&,
                                         std::span<const Index>, const BackwardOptions&);

}  // namespace bppsa::detail
