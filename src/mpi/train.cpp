// Model-parallel training as a pass of the training loop (src/train/pass.hpp): the loop in
// trainer.cpp orders the batches, reads the steps back and reports, as for a single process;
// this pass runs each step through the pipeline. A step runs to its end when it is queued
// (every rank takes part), so wait() hands back what queue() kept.
#include "bppsa/mpi/train.hpp"

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "train/pass.hpp"

namespace bppsa {
namespace {

using mpi::ModelParallel;

template <class T, class Data>
class PipelinePass final : public detail::Pass {
 public:
  /// `optimizer` null evaluates; `epoch` names the epoch in a divergence's message.
  PipelinePass(ModelParallel<T>& model, Optimizer<T>* optimizer, const Data& data, std::span<const Index> order,
               Index epoch)
      : model_(model), optimizer_(optimizer), data_(data), order_(order), epoch_(epoch) {}

  void queue(Index first, Index n, int slot) override {
    ++batches_;
    batch_indices(order_, first, n, idx_);
    gather_batch(data_, idx_, x_, y_);
    const std::vector<Index> lengths = sample_lengths(data_, idx_);
    Step& s = steps_[static_cast<std::size_t>(slot)];
    s = Step{};
    if (optimizer_) {
      mpi::PipelineStats st;
      const T loss = model_.loss_and_grad(x_, n, y_, &st, lengths);
      if (!std::isfinite(loss))  // every rank has the same loss: every rank stops here
        bppsa::detail::raise<NonFiniteError>("train", "the loss became " + std::to_string(loss) + " at epoch " +
                                                          std::to_string(epoch_) + ", batch " +
                                                          std::to_string(batches_) + ": lower the learning rate");
      const double t0 = mpi::Comm::now();
      optimizer_->step(model_.parameters());
      model_.parameters_changed();
      s.optimizer_seconds = mpi::Comm::now() - t0;
      s.times.forward = st.forward;
      s.times.backward = st.backward;
      s.reduce_seconds = st.reduce;
      totals_.loss_sum += static_cast<double>(loss) * static_cast<double>(n);
      totals_.correct += model_.last_correct();
    } else {
      const auto [loss_sum, correct] = model_.evaluate(x_, n, y_, lengths);
      totals_.loss_sum += loss_sum;
      totals_.correct += correct;
    }
    totals_.samples += n;
    s.totals = totals_;
  }

  detail::PassTotals wait(int slot, StepTimes& times, double& optimizer_seconds) override {
    const Step& s = steps_[static_cast<std::size_t>(slot)];
    times = s.times;
    optimizer_seconds = s.optimizer_seconds;
    return s.totals;
  }

  double reduce_seconds(int slot) const override { return steps_[static_cast<std::size_t>(slot)].reduce_seconds; }

 private:
  struct Step {
    detail::PassTotals totals;
    StepTimes times;
    double optimizer_seconds = 0, reduce_seconds = 0;
  };
  ModelParallel<T>& model_;
  Optimizer<T>* optimizer_;
  const Data& data_;
  std::span<const Index> order_;
  Index epoch_;
  Index batches_ = 0;  ///< queued so far
  std::vector<Index> idx_;
  std::vector<float> x_;
  std::vector<std::int64_t> y_;
  detail::PassTotals totals_;
  std::array<Step, detail::kPassSlots> steps_;
};

}  // namespace

template <class T, class Data>
EpochReport train_epoch(ModelParallel<T>& model, Optimizer<T>& optimizer, const Data& train, Index epoch,
                        const TrainConfig& config, const ProgressFn& progress) {
  return detail::run_epoch(
      [&](std::span<const Index> order) -> std::unique_ptr<detail::Pass> {
        return std::make_unique<PipelinePass<T, Data>>(model, &optimizer, train, order, epoch);
      },
      train.size(), epoch, config, progress);
}

template <class T, class Data>
EvalReport evaluate(ModelParallel<T>& model, const Data& data, Index batch) {
  return detail::run_evaluation(
      [&](std::span<const Index> order) -> std::unique_ptr<detail::Pass> {
        return std::make_unique<PipelinePass<T, Data>>(model, nullptr, data, order, 0);
      },
      data.size(), batch);
}

#define BPPSA_MP_TRAINER(T, D)                                                                              \
  template EpochReport train_epoch(ModelParallel<T>&, Optimizer<T>&, const D&, Index, const TrainConfig&, \
                                   const ProgressFn&);                                                    \
  template EvalReport evaluate(ModelParallel<T>&, const D&, Index);
BPPSA_MP_TRAINER(float, SequenceDataset)
BPPSA_MP_TRAINER(float, ImageDataset)
BPPSA_MP_TRAINER(double, SequenceDataset)
BPPSA_MP_TRAINER(double, ImageDataset)
#undef BPPSA_MP_TRAINER

}  // namespace bppsa
