// The training loop and evaluation: one loop for every model and device. A model's pass
// (src/train/pass.hpp) runs each step on its device (or, with bppsa::mpi, across ranks:
// src/mpi/train.cpp); the loop (run_epoch, run_evaluation) orders the batches, reads the steps
// back and reports. A sequence model's pass hands its steps to the model's half; a batch is
// gathered by gather_batch (src/data/), below both.
#include "bppsa/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <memory>

#include "bppsa/core/error.hpp"
#include "train/pass.hpp"

namespace bppsa {

void check_data_fits(const ModelConfig& model, const SequenceDataset& data, const std::string& what) {
  if (data.features != model.rnn.input)
    detail::raise<ShapeError>("data", what + " has " + std::to_string(data.features) +
                                          " input features per step but the model's input size is " +
                                          std::to_string(model.rnn.input) + " (change --data or the checkpoint)");
  if (data.classes > model.classes)
    detail::raise<InvalidArgument>("data", what + " has " + std::to_string(data.classes) +
                                               " classes but the model's head has " + std::to_string(model.classes) +
                                               " outputs");
  if (data.size() == 0) detail::raise<InvalidArgument>("data", what + " is empty");
}

void check_data_fits(const ConvNetConfig& model, Index classes, const ImageDataset& data, const std::string& what) {
  const Shape3 shape{data.channels, data.height, data.width};
  if (!(shape == model.input))
    detail::raise<ShapeError>("data", what + " holds " + shape.str() + " images but the model takes " +
                                          model.input.str() + " (change --data or the checkpoint)");
  if (data.classes > classes)
    detail::raise<InvalidArgument>(
        "data", what + " has " + std::to_string(data.classes) + " classes but the network has " +
                    std::to_string(classes) +
                    " outputs (end the architecture with linear:" + std::to_string(data.classes) + ")");
  if (data.size() == 0) detail::raise<InvalidArgument>("data", what + " is empty");
}

namespace {
/// What a model must do before an epoch: refuse a scan that cannot fit.
template <class T>
void before_epoch(SequenceClassifier<T>& model, const SequenceDataset& data, Index batch, const BackwardOptions& o) {
  model.rnn().check_backward_memory(data.steps, batch, o);
}
template <class T>
void before_epoch(ConvNet<T>&, const ImageDataset&, Index, const BackwardOptions&) {}
/// The optimizer of an evaluation pass: none, of the model's scalar type.
template <template <class> class Model, class T>
Optimizer<T>* no_optimizer(const Model<T>&) {
  return nullptr;
}
}  // namespace

namespace detail {
EvalReport run_evaluation(const PassMaker& make, Index samples, Index batch) {
  if (batch < 1)
    detail::raise<InvalidArgument>("evaluate", "batch size must be ≥ 1 (got " + std::to_string(batch) + ")");
  EvalReport r;
  const double t0 = omp_get_wtime();
  const std::unique_ptr<Pass> pass = make({});
  Index steps = 0;
  for (Index start = 0; start < samples; start += batch, ++steps)
    pass->queue(start, std::min(batch, samples - start), static_cast<int>(steps % kPassSlots));
  PassTotals totals;
  if (steps > 0) {
    StepTimes times;
    double optimizer_seconds = 0;
    totals = pass->wait(static_cast<int>((steps - 1) % kPassSlots), times, optimizer_seconds);
  }
  r.samples = samples;
  r.loss = r.samples ? totals.loss_sum / static_cast<double>(r.samples) : 0;
  r.accuracy = r.samples ? static_cast<double>(totals.correct) / static_cast<double>(r.samples) : 0;
  r.seconds = omp_get_wtime() - t0;
  return r;
}

EpochReport run_epoch(const PassMaker& make, Index samples, Index epoch, const TrainConfig& config,
                      const ProgressFn& progress) {
  if (config.batch < 1)
    detail::raise<InvalidArgument>("train", "batch size must be ≥ 1 (got " + std::to_string(config.batch) + ")");
  EpochReport r;
  r.epoch = epoch;
  const double t0 = omp_get_wtime();
  const std::vector<Index> order = permutation(samples, config.seed + static_cast<std::uint64_t>(epoch));
  const Index total = (samples + config.batch - 1) / config.batch;
  const std::unique_ptr<Pass> pass = make(order);
  PassTotals totals;
  // Reads step b back: its times into the report, the running loss to the progress callback.
  auto finish = [&](Index b) {
    StepTimes times;
    double optimizer_seconds = 0;
    const int slot = static_cast<int>(b % kPassSlots);
    totals = pass->wait(slot, times, optimizer_seconds);
    r.forward_seconds += times.forward;
    r.backward_seconds += times.backward;
    r.jacobian_seconds += times.detail.jacobians;
    r.scan_seconds += times.detail.scan;
    r.optimizer_seconds += optimizer_seconds;
    r.reduce_seconds += pass->reduce_seconds(slot);
    r.steps = b + 1;
    if (progress)
      progress(b + 1, total, totals.loss_sum / static_cast<double>(std::max<std::int64_t>(totals.samples, 1)));
  };
  for (Index b = 0; b < total; ++b) {
    const Index start = b * config.batch;
    pass->queue(start, std::min(config.batch, samples - start), static_cast<int>(b % kPassSlots));
    if (b > 0) finish(b - 1);
  }
  if (total > 0) finish(total - 1);
  r.samples = static_cast<Index>(totals.samples);
  r.train_loss = r.samples ? totals.loss_sum / static_cast<double>(r.samples) : 0;
  r.train_accuracy = r.samples ? static_cast<double>(totals.correct) / static_cast<double>(r.samples) : 0;
  r.seconds = omp_get_wtime() - t0;
  return r;
}

}  // namespace detail

template <class Model, class Data>
EvalReport evaluate(Model& model, const Data& data, Index batch) {
  return detail::run_evaluation(
      [&](std::span<const Index> order) {
        return detail::make_pass(model, no_optimizer(model), data, order, BackwardOptions{});
      },
      data.size(), batch);
}

template <class Model, class Data, class T>
EpochReport train_epoch(Model& model, Optimizer<T>& optimizer, const Data& train, Index epoch,
                        const TrainConfig& config, const ProgressFn& progress) {
  if (config.batch < 1)
    detail::raise<InvalidArgument>("train", "batch size must be ≥ 1 (got " + std::to_string(config.batch) + ")");
  before_epoch(model, train, std::min(config.batch, train.size()), config.backward);
  return detail::run_epoch(
      [&](std::span<const Index> order) {
        return detail::make_pass(model, &optimizer, train, order, config.backward);
      },
      train.size(), epoch, config, progress);
}

#define BPPSA_TRAINER(M, D, T)                                                                                    \
  template EvalReport evaluate(M<T>&, const D&, Index);                                                           \
  template EpochReport train_epoch(M<T>&, Optimizer<T>&, const D&, Index, const TrainConfig&, const ProgressFn&);
BPPSA_TRAINER(SequenceClassifier, SequenceDataset, float)
BPPSA_TRAINER(SequenceClassifier, SequenceDataset, double)
BPPSA_TRAINER(ConvNet, ImageDataset, float)
BPPSA_TRAINER(ConvNet, ImageDataset, double)
#undef BPPSA_TRAINER

}  // namespace bppsa
