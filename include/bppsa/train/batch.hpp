// One batch of a data set: its samples gathered, and its loss (and gradients) on a model. What
// every pass of the training loop runs per step (src/train/pass.hpp: the host pass, a
// model-parallel pass), and what the CLI's --check runs on one batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/data/image.hpp"
#include "bppsa/nn/conv_net.hpp"
#include "bppsa/nn/model.hpp"

namespace bppsa {

/// Gathers samples `indices` of `data` into x (batch × sample) and y.
template <class Data>
void gather_batch(const Data& data, std::span<const Index> indices, std::vector<float>& x,
                  std::vector<std::int64_t>& y);

/// Each sample's length of samples `indices` of a sequence data set that has lengths; empty
/// otherwise (every sample has every step, as every image does).
std::vector<Index> sample_lengths(const SequenceDataset& data, std::span<const Index> indices);
std::vector<Index> sample_lengths(const ImageDataset& data, std::span<const Index> indices);

/// Loss (and gradients when `options` is given) of one batch, whatever the model: x and y hold
/// the samples `indices` of `data` (gather_batch); the sequence models take the step count and
/// each sample's length from the data set.
template <class T>
T batch_loss(SequenceClassifier<T>& model, const SequenceDataset& data, std::span<const Index> indices,
             std::span<const float> x, std::span<const std::int64_t> y, const BackwardOptions* options,
             StepTimes* times, std::vector<std::int64_t>* predictions);
template <class T>
T batch_loss(ConvNet<T>& model, const ImageDataset& data, std::span<const Index> indices, std::span<const float> x,
             std::span<const std::int64_t> y, const BackwardOptions* options, StepTimes* times,
             std::vector<std::int64_t>* predictions);

}  // namespace bppsa
