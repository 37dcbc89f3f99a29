// The CPU half of a pass: each step runs to its end when it is queued (gather on the host,
// forward, loss, backward, the optimizer step), so wait() only hands back what queue() kept.
#pragma once

#include <omp.h>

#include <array>
#include <vector>

#include "train/pass.hpp"

namespace bppsa::detail {

/// After an optimizer step: a pruned ConvNet keeps its masked weights at zero.
template <class T>
void after_step(SequenceClassifier<T>&) {}
template <class T>
void after_step(ConvNet<T>& model) {
  model.apply_masks();
}

template <class Model, class Data, class T>
class HostPass final : public Pass {
 public:
  HostPass(Model& model, Optimizer<T>* optimizer, const Data& data, std::span<const Index> order,
           const BackwardOptions& options)
      : model_(model), optimizer_(optimizer), data_(data), order_(order), options_(options) {
    if (optimizer_) params_ = model_.parameters();
  }

  void queue(Index first, Index n, int slot) override {
    idx_.resize(static_cast<std::size_t>(n));
    for (Index k = 0; k < n; ++k)
      idx_[static_cast<std::size_t>(k)] = order_.empty() ? first + k : order_[static_cast<std::size_t>(first + k)];
    gather_batch(data_, idx_, x_, y_);
    Step& s = steps_[static_cast<std::size_t>(slot)];
    s = Step{};
    const T loss = batch_loss(model_, data_, idx_, x_, y_, optimizer_ ? &options_ : nullptr, &s.times, &pred_);
    if (optimizer_) {
      const double t0 = omp_get_wtime();
      optimizer_->step(params_);
      after_step(model_);
      s.optimizer_seconds = omp_get_wtime() - t0;
    }
    totals_.loss_sum += static_cast<double>(loss) * static_cast<double>(n);
    for (Index k = 0; k < n; ++k)
      totals_.correct += pred_[static_cast<std::size_t>(k)] == y_[static_cast<std::size_t>(k)];
    totals_.samples += n;
    s.totals = totals_;
  }

  PassTotals wait(int slot, StepTimes& times, double& optimizer_seconds) override {
    const Step& s = steps_[static_cast<std::size_t>(slot)];
    times = s.times;
    optimizer_seconds = s.optimizer_seconds;
    return s.totals;
  }

 private:
  struct Step {
    PassTotals totals;
    StepTimes times;
    double optimizer_seconds = 0;
  };
  Model& model_;
  Optimizer<T>* optimizer_;
  const Data& data_;
  std::span<const Index> order_;
  BackwardOptions options_;
  std::vector<NamedParam<T>> params_;
  std::vector<Index> idx_;
  std::vector<float> x_;
  std::vector<std::int64_t> y_, pred_;
  PassTotals totals_;
  std::array<Step, kPassSlots> steps_;
};

template <class Model, class Data, class T>
std::unique_ptr<Pass> make_pass_cpu(Model& model, Optimizer<T>* optimizer, const Data& data,
                                     std::span<const Index> order, const BackwardOptions& options) {
  return std::make_unique<HostPass<Model, Data, T>>(model, optimizer, data, order, options);
}

}  // namespace bppsa::detail
