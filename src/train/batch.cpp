// One batch: gathered from a data set, and its loss on a model (bppsa/train/batch.hpp). Below
// the loop and its passes: the passes call it, it calls neither.
#include "bppsa/train/batch.hpp"

#include <algorithm>

namespace bppsa {

template <class Data>
void gather_batch(const Data& data, std::span<const Index> indices, std::vector<float>& x,
                  std::vector<std::int64_t>& y) {
  const std::size_t per = data.sample(0).size();
  x.resize(indices.size() * per);
  y.resize(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const auto s = data.sample(indices[k]);
    std::copy(s.begin(), s.end(), x.begin() + static_cast<std::ptrdiff_t>(k * per));
    y[k] = data.y[static_cast<std::size_t>(indices[k])];
  }
}

std::vector<Index> sample_lengths(const SequenceDataset& data, std::span<const Index> indices) {
  std::vector<Index> lengths;
  if (!data.lengths.empty())
    for (const Index i : indices) lengths.push_back(data.length(i));
  return lengths;
}

std::vector<Index> sample_lengths(const ImageDataset&, std::span<const Index>) { return {}; }

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
template void gather_batch(const SequenceDataset&, std::span<const Index>, std::vector<float>&,
                           std::vector<std::int64_t>&);
template void gather_batch(const ImageDataset&, std::span<const Index>, std::vector<float>&,
                           std::vector<std::int64_t>&);

}  // namespace bppsa
