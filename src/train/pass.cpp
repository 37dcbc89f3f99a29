// The passes of one process: a sequence model's steps run by the model's half on its device
// (the pass itself chooses nothing), a ConvNet's on the host.
#include "train/pass.hpp"

#include <omp.h>

#include <array>
#include <vector>

#include "bppsa/train/batch.hpp"

namespace bppsa::detail {
namespace {

template <class T>
class SequencePass final : public Pass {
 public:
  SequencePass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
               std::span<const Index> order, const BackwardOptions& options)
      : half_(ClassifierAccess<T>::pass_half(model, data)), options_(options) {
    if (optimizer) step_ = [&model, optimizer] { optimizer->step(model); };
    half_.begin_pass(data, order, optimizer != nullptr);
  }

  void queue(Index first, Index n, int slot) override {
    half_.queue_step(first, n, step_ ? &options_ : nullptr, step_, slot);
  }

  PassTotals wait(int slot, StepTimes& times, double& optimizer_seconds) override {
    const StepReport r = half_.wait_step(slot);
    times = r.times;
    optimizer_seconds = r.optimizer_seconds;
    return {r.loss_sum, r.correct, r.samples};
  }

 private:
  ClassifierHalf<T>& half_;
  BackwardOptions options_;
  std::function<void()> step_;  ///< the optimizer step (empty: an evaluation)
};

/// A ConvNet's pass: each step runs to its end when it is queued, so wait() only hands back what
/// queue() kept. A pruned network keeps its masked weights at zero after every step.
template <class T>
class ImagePass final : public Pass {
 public:
  ImagePass(ConvNet<T>& model, Optimizer<T>* optimizer, const ImageDataset& data, std::span<const Index> order,
            const BackwardOptions& options)
      : model_(model), optimizer_(optimizer), data_(data), order_(order), options_(options) {
    if (optimizer_) params_ = model_.parameters();
  }

  void queue(Index first, Index n, int slot) override {
    batch_indices(order_, first, n, idx_);
    gather_batch(data_, idx_, x_, y_);
    Step& s = steps_[static_cast<std::size_t>(slot)];
    s = Step{};
    const T loss = batch_loss(model_, data_, idx_, x_, y_, optimizer_ ? &options_ : nullptr, &s.times, &pred_);
    if (optimizer_) {
      const double t0 = omp_get_wtime();
      optimizer_->step(params_);
      model_.apply_masks();
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
  ConvNet<T>& model_;
  Optimizer<T>* optimizer_;
  const ImageDataset& data_;
  std::span<const Index> order_;
  BackwardOptions options_;
  std::vector<NamedParam<T>> params_;
  std::vector<Index> idx_;
  std::vector<float> x_;
  std::vector<std::int64_t> y_, pred_;
  PassTotals totals_;
  std::array<Step, kPassSlots> steps_;
};

}  // namespace

template <class T>
std::unique_ptr<Pass> make_pass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
                                std::span<const Index> order, const BackwardOptions& options) {
  return std::make_unique<SequencePass<T>>(model, optimizer, data, order, options);
}

template <class T>
std::unique_ptr<Pass> make_pass(ConvNet<T>& model, Optimizer<T>* optimizer, const ImageDataset& data,
                                std::span<const Index> order, const BackwardOptions& options) {
  return std::make_unique<ImagePass<T>>(model, optimizer, data, order, options);
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
