// The training loop and evaluation.
#include "bppsa/train/trainer.hpp"

#include <omp.h>

#include <algorithm>

#include "bppsa/core/error.hpp"

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

void gather_batch(const SequenceDataset& data, std::span<const Index> indices, std::vector<float>& x,
                  std::vector<std::int64_t>& y) {
  const std::size_t per = static_cast<std::size_t>(data.steps * data.features);
  x.resize(indices.size() * per);
  y.resize(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const auto s = data.sample(indices[k]);
    std::copy(s.begin(), s.end(), x.begin() + static_cast<std::ptrdiff_t>(k * per));
    y[k] = data.y[static_cast<std::size_t>(indices[k])];
  }
}

template <class T>
EvalReport evaluate(SequenceClassifier<T>& model, const SequenceDataset& data, Index batch) {
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
    loss_sum += static_cast<double>(model.evaluate(x, n, data.steps, y, &pred)) * static_cast<double>(n);
    for (Index k = 0; k < n; ++k) correct += pred[static_cast<std::size_t>(k)] == y[static_cast<std::size_t>(k)];
  }
  r.samples = data.size();
  r.loss = r.samples ? loss_sum / static_cast<double>(r.samples) : 0;
  r.accuracy = r.samples ? static_cast<double>(correct) / static_cast<double>(r.samples) : 0;
  r.seconds = omp_get_wtime() - t0;
  return r;
}

template <class T>
EpochReport train_epoch(SequenceClassifier<T>& model, Optimizer<T>& optimizer, const SequenceDataset& train,
                        Index epoch, const TrainConfig& config, const ProgressFn& progress) {
  if (config.batch < 1)
    detail::raise<InvalidArgument>("train", "batch size must be ≥ 1 (got " + std::to_string(config.batch) + ")");
  model.rnn().check_backward_memory(train.steps, std::min(config.batch, train.size()), config.backward);
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
    const T loss = model.loss_and_grad(x, n, train.steps, y, config.backward, &st, &pred);
    const double t_opt = omp_get_wtime();
    optimizer.step(params);
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

template EvalReport evaluate<float>(SequenceClassifier<float>&, const SequenceDataset&, Index);
template EvalReport evaluate<double>(SequenceClassifier<double>&, const SequenceDataset&, Index);
template EpochReport train_epoch<float>(SequenceClassifier<float>&, Optimizer<float>&, const SequenceDataset&, Index,
                                        const TrainConfig&, const ProgressFn&);
template EpochReport train_epoch<double>(SequenceClassifier<double>&, Optimizer<double>&, const SequenceDataset&, Index,
                                         const TrainConfig&, const ProgressFn&);

}  // namespace bppsa
