// One batch's loss (and gradients) on a model, its samples gathered by gather_batch
// (bppsa/data/dataset.hpp): what the image pass and the model-parallel pass run per step
// (src/train/pass.cpp, src/mpi/train.cpp), and what the CLI's --check runs on one batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/data/image.hpp"
#include "bppsa/nn/conv_net.hpp"
#include "bppsa/nn/model.hpp"

namespace bppsa {

/// Loss (and gradients when `options` is given) of one batch, whatever the model: x and y hold
/// the samples `indices` of `data` (gather_batch); the sequence models take the step count and
/// each sample's length from the data set (sample_lengths).
template <class T>
T batch_loss(SequenceClassifier<T>& model, const SequenceDataset& data, std::span<const Index> indices,
             std::span<const float> x, std::span<const std::int64_t> y, const BackwardOptions* options,
             StepTimes* times, std::vector<std::int64_t>* predictions);
template <class T>
T batch_loss(ConvNet<T>& model, const ImageDataset& data, std::span<const Index> indices, std::span<const float> x,
             std::span<const std::int64_t> y, const BackwardOptions* options, StepTimes* times,
             std::vector<std::int64_t>* predictions);

}  // namespace bppsa
