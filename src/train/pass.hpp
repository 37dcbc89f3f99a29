// One pass of the training loop over a data set (an epoch, or an evaluation). The loop in
// trainer.cpp queues each batch into a slot and reads the step in that slot back later. A
// sequence model's pass runs its steps through the model's half (src/nn/classifier_half.hpp):
// the CPU half runs a step when it is queued, the CUDA half queues it on the GPU and it is read
// back one step later. A ConvNet's pass runs on the host; a model-parallel pass across ranks
// (src/mpi/train.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "bppsa/train/trainer.hpp"
#include "nn/classifier_half.hpp"

namespace bppsa::detail {

/// Totals of a pass so far: every sample of every step read back.
struct PassTotals {
  double loss_sum = 0;  ///< Σ batch-mean loss × batch size
  std::int64_t correct = 0;
  std::int64_t samples = 0;
};

/// Slots a pass cycles through: step b uses slot b % kPassSlots, so step b − 1 can be read
/// while step b runs (a model half's step slots).
inline constexpr int kPassSlots = kStepSlots;

class Pass {
 public:
  virtual ~Pass() = default;
  /// Queues the batch of samples order[first, first + n) (order empty: first, first + 1, …):
  /// forward and loss, and when training, backward and one optimizer step.
  virtual void queue(Index first, Index n, int slot) = 0;
  /// Waits for the step queued last in `slot`; throws what it failed with (NonFiniteError),
  /// before a later step is read. Returns the pass's totals up to that step; when training, the
  /// step's times.
  virtual PassTotals wait(int slot, StepTimes& times, double& optimizer_seconds) = 0;
  /// Seconds the step last read by wait(slot) spent summing gradients across processes (a
  /// model-parallel pass, src/mpi/train.cpp); 0 for a pass in one process.
  virtual double reduce_seconds(int /*slot*/) const { return 0; }
};

/// Makes the pass of an epoch over the samples in `order` (or of an evaluation: order empty).
using PassMaker = std::function<std::unique_ptr<Pass>(std::span<const Index> order)>;

/// The loop itself, whatever the model (trainer.cpp): one epoch over `samples` samples,
/// shuffled by permutation(samples, config.seed + epoch), in batches of config.batch; every
/// step queued into its slot and read back one step later, the running loss to `progress`.
/// The model's own checks come before (train_epoch's before_epoch).
EpochReport run_epoch(const PassMaker& make, Index samples, Index epoch, const TrainConfig& config,
                      const ProgressFn& progress);
/// Evaluation of `samples` samples in order, in batches of `batch`.
EvalReport run_evaluation(const PassMaker& make, Index samples, Index batch);

/// The pass of a model on a data set: `optimizer` null evaluates, otherwise it trains with
/// `options`. The spans and objects must outlive the pass.
template <class T>
std::unique_ptr<Pass> make_pass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
                                std::span<const Index> order, const BackwardOptions& options);
template <class T>
std::unique_ptr<Pass> make_pass(ConvNet<T>& model, Optimizer<T>* optimizer, const ImageDataset& data,
                                std::span<const Index> order, const BackwardOptions& options);

}  // namespace bppsa::detail
