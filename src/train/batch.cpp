// One batch's loss on a model (bppsa/train/batch.hpp). Below the loop and its passes: the
// passes call it, it calls neither.
#include "bppsa/train/batch.hpp"

namespace bppsa {

template <class T>
T batch_loss(SequenceClassifier<T>& model, const SequenceDataset& data, std::span<const Index> indices,
             std::span<const float> x, std::span<const std::int64_t> y, const BackwardOptions* options,
             StepTimes* times, std::vector<std::int64_t>* predictions) {
  const auto n = static_cast<Index>(indices.size());
  const std::vector<Index> lengths = sample_lengths(data, indices);
  return options ? model.loss_and_grad(x, n, data.steps, y, *options, times, predictions, lengths)
                 : model.evaluate(x, n, data.steps, y, predictions, lengths);
}

template <class T>
T batch_loss(ConvNet<T>& model, const ImageDataset&, std::span<const Index> indices, std::span<const float> x,
             std::span<const std::int64_t> y, const BackwardOptions* options, StepTimes* times,
             std::vector<std::int64_t>* predictions) {
  const auto n = static_cast<Index>(indices.size());
  return options ? model.loss_and_grad(x, n, y, *options, times, predictions) : model.evaluate(x, n, y, predictions);
}

#define BPPSA_BATCH(M, D, T)                                                                                     \
  template T batch_loss(M<T>&, const D&, std::span<const Index>, std::span<const float>,                         \
                        std::span<const std::int64_t>, const BackwardOptions*, StepTimes*, std::vector<std::int64_t>*);
BPPSA_BATCH(SequenceClassifier, SequenceDataset, float)
BPPSA_BATCH(SequenceClassifier, SequenceDataset, double)
BPPSA_BATCH(ConvNet, ImageDataset, float)
BPPSA_BATCH(ConvNet, ImageDataset, double)
#undef BPPSA_BATCH

}  // namespace bppsa
