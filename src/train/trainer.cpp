// The training loop and evaluation.
#include "bppsa/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "bppsa/core/error.hpp"
#include "nn/cuda/gpu_model.hpp"

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
    detail::raise<InvalidArgument>("data", what + " has " + std::to_string(data.classes) +
                                               " classes but the network has " + std::to_string(classes) +
                                               " outputs (end the architecture with linear:" +
                                               std::to_string(data.classes) + ")");
  if (data.size() == 0) detail::raise<InvalidArgument>("data", what + " is empty");
}

template <class T>
T batch_loss(SequenceClassifier<T>& model, const SequenceDataset& data, std::span<const float> x, Index n,
             std::span<const std::int64_t> y, const BackwardOptions* options, StepTimes* times,
             std::vector<std::int64_t>* predictions) {
  return options ? model.loss_and_grad(x, n, data.steps, y, *options, times, predictions)
                 : model.evaluate(x, n, data.steps, y, predictions);
}

template <class T>
T batch_loss(ConvNet<T>& model, const ImageDataset&, std::span<const float> x, Index n,
             std::span<const std::int64_t> y, const BackwardOptions* options, StepTimes* times,
             std::vector<std::int64_t>* predictions) {
  return options ? model.loss_and_grad(x, n, y, *options, times, predictions) : model.evaluate(x, n, y, predictions);
}

namespace {
/// What a model must do before an epoch (refuse a scan that cannot fit) and after each
/// optimizer step (keep pruned weights at zero).
template <class T>
void before_epoch(SequenceClassifier<T>& model, const SequenceDataset& data, Index batch, const BackwardOptions& o) {
  model.rnn().check_backward_memory(data.steps, batch, o);
}
template <class T>
void before_epoch(ConvNet<T>&, const ImageDataset&, Index, const BackwardOptions&) {}
template <class T>
void after_step(SequenceClassifier<T>&) {}
template <class T>
void after_step(ConvNet<T>& model) {
  model.apply_masks();
}

/// Device::cuda: the status of a step, read from its pinned snapshot; throws what the CPU
/// engine would have thrown at that step.
template <class T>
detail::gpu::DeviceStatus status_of(SequenceClassifier<T>& model, detail::gpu::ModelGpu<T>& g, int slot) {
  const detail::gpu::DeviceStatus st = g.snapshot_wait(slot);
  if (st.flags != 0) {
    g.stack().clear_flags();
    detail::gpu::raise_status(model.config(), st);
  }
  return st;
}

/// One epoch on the GPU: the data set resident there (uploaded once), batches gathered on the
/// device in the CPU trainer's shuffled order, forward, loss, backward and the optimizer step
/// all queued without waiting. The host reads step k − 1's status (a few bytes, through pinned
/// memory) and its CUDA-event times while step k runs: one step of lag, no other transfer.
template <class T>
EpochReport train_epoch_gpu(SequenceClassifier<T>& model, Optimizer<T>& optimizer, const SequenceDataset& train,
                            Index epoch, const TrainConfig& config, const ProgressFn& progress) {
  EpochReport r;
  r.epoch = epoch;
  const double t0 = omp_get_wtime();
  const std::vector<Index> order = permutation(train.size(), config.seed + static_cast<std::uint64_t>(epoch));
  const Index total = (train.size() + config.batch - 1) / config.batch;
  detail::gpu::ModelGpu<T>* g = model.gpu();
  g->use_data(0, train);
  g->set_order(0, order);
  g->reset_totals();
  detail::gpu::DeviceStatus last;
  auto finish = [&](Index b) {
    const int slot = static_cast<int>(b % detail::gpu::kSlots);
    last = status_of(model, *g, slot);
    StepTimes times;
    double optimizer_seconds = 0;
    g->step_times(slot, times, optimizer_seconds);
    r.forward_seconds += times.forward;
    r.backward_seconds += times.backward;
    r.jacobian_seconds += times.detail.jacobians;
    r.scan_seconds += times.detail.scan;
    r.optimizer_seconds += optimizer_seconds;
    r.steps = b + 1;
    if (progress) progress(b + 1, total, last.loss_sum / static_cast<double>(std::max<std::int64_t>(last.samples, 1)));
  };
  for (Index b = 0; b < total; ++b) {
    const int slot = static_cast<int>(b % detail::gpu::kSlots);
    const Index start = b * config.batch, n = std::min(config.batch, train.size() - start);
    g->gather(0, start, n, slot);
    g->forward_loss(true, slot);
    g->backward(config.backward, slot);
    g->stack().sync.grads_newer = true;
    g->head_sync.grads_newer = true;
    optimizer.step(model);
    g->mark(slot, detail::gpu::kOptimizerEnd);
    g->snapshot(slot);
    if (b > 0) finish(b - 1);
  }
  if (total > 0) finish(total - 1);
  r.samples = static_cast<Index>(last.samples);
  r.train_loss = r.samples ? last.loss_sum / static_cast<double>(r.samples) : 0;
  r.train_accuracy = r.samples ? static_cast<double>(last.correct) / static_cast<double>(r.samples) : 0;
  r.seconds = omp_get_wtime() - t0;
  return r;
}

/// Evaluation on the GPU: the data set resident there, batches in order, loss and correct
/// counts accumulated on the device and read once at the end.
template <class T>
EvalReport evaluate_gpu(SequenceClassifier<T>& model, const SequenceDataset& data, Index batch) {
  EvalReport r;
  const double t0 = omp_get_wtime();
  detail::gpu::ModelGpu<T>* g = model.gpu();
  g->use_data(1, data);
  g->set_order(1, {});
  g->reset_totals();
  for (Index start = 0; start < data.size(); start += batch) {
    g->gather(1, start, std::min(batch, data.size() - start), 0);
    g->forward_loss(false, 0);
  }
  g->snapshot(0);
  const detail::gpu::DeviceStatus st = status_of(model, *g, 0);
  r.samples = data.size();
  r.loss = r.samples ? st.loss_sum / static_cast<double>(r.samples) : 0;
  r.accuracy = r.samples ? static_cast<double>(st.correct) / static_cast<double>(r.samples) : 0;
  r.seconds = omp_get_wtime() - t0;
  return r;
}

/// Whether a model runs on the GPU (only sequence models can).
template <class T>
bool on_gpu(const SequenceClassifier<T>& model) {
  return model.device() == Device::cuda;
}
template <class T>
bool on_gpu(const ConvNet<T>&) {
  return false;
}
}  // namespace

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

template <class Model, class Data>
EvalReport evaluate(Model& model, const Data& data, Index batch) {
  if constexpr (std::is_same_v<Data, SequenceDataset>)
    if (on_gpu(model)) return evaluate_gpu(model, data, batch);
  EvalReport r;
  const double t0 = omp_get_wtime();
  std::vector<Index> idx;
  std::vector<float> x;
  std::vector<std::int64_t> y, pred;
  double loss_sum = 0;
  Index correct = 0;
  for (Index start = 0; start < data.size(); start += batch) {
    const Index n = std::min(batch, data.size() - start);
    idx.resize(static_cast<std::size_t>(n));
    for (Index k = 0; k < n; ++k) idx[static_cast<std::size_t>(k)] = start + k;
    gather_batch(data, idx, x, y);
    loss_sum += static_cast<double>(batch_loss(model, data, x, n, y, nullptr, nullptr, &pred)) * static_cast<double>(n);
    for (Index k = 0; k < n; ++k) correct += pred[static_cast<std::size_t>(k)] == y[static_cast<std::size_t>(k)];
  }
  r.samples = data.size();
  r.loss = r.samples ? loss_sum / static_cast<double>(r.samples) : 0;
  r.accuracy = r.samples ? static_cast<double>(correct) / static_cast<double>(r.samples) : 0;
  r.seconds = omp_get_wtime() - t0;
  return r;
}

template <class Model, class Data, class T>
EpochReport train_epoch(Model& model, Optimizer<T>& optimizer, const Data& train, Index epoch,
                        const TrainConfig& config, const ProgressFn& progress) {
  if (config.batch < 1)
    detail::raise<InvalidArgument>("train", "batch size must be ≥ 1 (got " + std::to_string(config.batch) + ")");
  before_epoch(model, train, std::min(config.batch, train.size()), config.backward);
  if constexpr (std::is_same_v<Data, SequenceDataset>)
    if (on_gpu(model)) return train_epoch_gpu(model, optimizer, train, epoch, config, progress);
  EpochReport r;
  r.epoch = epoch;
  const double t0 = omp_get_wtime();
  const std::vector<Index> order = permutation(train.size(), config.seed + static_cast<std::uint64_t>(epoch));
  const Index total = (train.size() + config.batch - 1) / config.batch;
  std::vector<float> x;
  std::vector<std::int64_t> y, pred;
  auto params = model.parameters();
  double loss_sum = 0;
  Index correct = 0;
  for (Index b = 0; b < total; ++b) {
    const Index start = b * config.batch, n = std::min(config.batch, train.size() - start);
    gather_batch(train,
                 std::span<const Index>(order).subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(n)), x,
                 y);
    StepTimes st;
    const T loss = batch_loss(model, train, x, n, y, &config.backward, &st, &pred);
    const double t_opt = omp_get_wtime();
    optimizer.step(params);
    after_step(model);
    r.optimizer_seconds += omp_get_wtime() - t_opt;
    r.forward_seconds += st.forward;
    r.backward_seconds += st.backward;
    r.jacobian_seconds += st.detail.jacobians;
    r.scan_seconds += st.detail.scan;
    loss_sum += static_cast<double>(loss) * static_cast<double>(n);
    for (Index k = 0; k < n; ++k) correct += pred[static_cast<std::size_t>(k)] == y[static_cast<std::size_t>(k)];
    r.samples += n;
    ++r.steps;
    if (progress) progress(b + 1, total, loss_sum / static_cast<double>(r.samples));
  }
  r.train_loss = r.samples ? loss_sum / static_cast<double>(r.samples) : 0;
  r.train_accuracy = r.samples ? static_cast<double>(correct) / static_cast<double>(r.samples) : 0;
  r.seconds = omp_get_wtime() - t0;
  return r;
}

#define BPPSA_TRAINER(M, D, T)                                                                                  \
  template EvalReport evaluate(M<T>&, const D&, Index);                                                       \
  template EpochReport train_epoch(M<T>&, Optimizer<T>&, const D&, Index, const TrainConfig&, const ProgressFn&); \
  template T batch_loss(M<T>&, const D&, std::span<const float>, Index, std::span<const std::int64_t>,       \
                        const BackwardOptions*, StepTimes*, std::vector<std::int64_t>*);
BPPSA_TRAINER(SequenceClassifier, SequenceDataset, float)
BPPSA_TRAINER(SequenceClassifier, SequenceDataset, double)
BPPSA_TRAINER(ConvNet, ImageDataset, float)
BPPSA_TRAINER(ConvNet, ImageDataset, double)
#undef BPPSA_TRAINER
template void gather_batch(const SequenceDataset&, std::span<const Index>, std::vector<float>&,
                           std::vector<std::int64_t>&);
template void gather_batch(const ImageDataset&, std::span<const Index>, std::vector<float>&,
                           std::vector<std::int64_t>&);

}  // namespace bppsa
