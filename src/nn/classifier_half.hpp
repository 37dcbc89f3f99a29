// The two halves of SequenceClassifier<T>. The front (src/nn/model.cpp) validates batches and
// call order and holds the Recurrent stack and the Linear head; a ClassifierHalf runs the batch,
// the loss and the backward: the CPU half (src/nn/cpu/classifier.cpp) through the stack's and
// the head's host API, the CUDA half (src/nn/cuda/classifier.hpp) on the device over the
// stack's CUDA half.
// The half is on the stack's device: the front asks the stack's half for it
// (RecurrentHalf::make_classifier: make_classifier_cpu, or the CUDA stack's make_classifier_cuda).
// A training or evaluation pass (src/train/pass.cpp) runs its steps through the same half, and the
// optimizer's CUDA half finds the parameters through it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/nn/model.hpp"

namespace bppsa::detail {

namespace gpu {
template <class T>
struct DeviceParameters;  // nn/cuda/device_parameters.hpp
}  // namespace gpu

/// A pass's step read back: the pass's totals up to that step and, when training, its times.
struct StepReport {
  double loss_sum = 0;  ///< Σ batch-mean loss × batch size
  std::int64_t correct = 0;
  std::int64_t samples = 0;
  StepTimes times;
  double optimizer_seconds = 0;
};

/// Step slots a pass cycles through: step b uses slot b % kStepSlots, so step b − 1 can be read
/// while step b runs.
inline constexpr int kStepSlots = 2;

template <class T>
class ClassifierHalf {
 public:
  virtual ~ClassifierHalf() = default;

  /// Stores a batch the front has checked (x: [batch][steps][I], one label per sample; lengths
  /// empty or one per sample in 1..steps, any order).
  virtual void set_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                         std::span<const Index> lengths) = 0;
  /// Forward and loss of the stored batch (∂loss/∂logits kept when grad); the last step's predictions.
  virtual T forward_loss(bool grad, std::vector<std::int64_t>* predictions) = 0;
  virtual void backward(const BackwardOptions& options, BackwardTimes* times) = 0;
  /// backward() after a forward_loss that took `forward_seconds` on the host's clock, returning
  /// when it is done, with the step's times: the host's clock on the CPU, CUDA events on the GPU.
  virtual void backward_timed(const BackwardOptions& options, double forward_seconds, StepTimes* times) = 0;
  virtual void head_backward(const Matrix<T>& dlogits, Matrix<T>& dout) = 0;

  /// Brings the host copies of every parameter and gradient up to date (raising what the
  /// device reported); host_written: the head's host copy is the newest.
  virtual void pull() = 0;
  virtual void host_written() = 0;
  /// Waits for the queued work and raises what it reported (NonFiniteError).
  virtual void synchronize() = 0;
  virtual std::size_t device_bytes() const = 0;

  // --- A pass's steps (src/train/pass.cpp), on this half's device ------------------------------
  /// Starts a pass over `data` (its shapes checked by ClassifierAccess::pass_half) whose batches
  /// take samples in `order` (empty: 0, 1, 2, …), training or evaluating; the totals restart. One
  /// pass per model at a time: a new one replaces the last.
  virtual void begin_pass(const SequenceDataset& data, std::span<const Index> order, bool training) = 0;
  /// Queues the batch order[first, first + n) into slot `slot` (< kStepSlots): forward and loss,
  /// and with `options` the backward and then `optimizer_step` (which queues its work on this
  /// half's device). The CPU half runs it to its end here; the CUDA half returns once queued.
  virtual void queue_step(Index first, Index n, const BackwardOptions* options,
                          const std::function<void()>& optimizer_step, int slot) = 0;
  /// Waits for the step queued last in `slot` and throws what it failed with (NonFiniteError, as
  /// the CPU engine throws it at that step).
  virtual StepReport wait_step(int slot) = 0;

  /// The CUDA half's parameters on its device, for the optimizer's CUDA half (src/train/cuda/):
  /// host changes uploaded first; the caller may write the values (the host copies are stale from
  /// then on). The CPU half has none (null).
  virtual const gpu::DeviceParameters<T>* device_parameters() = 0;
};

/// The half of a model, for what runs on the model's device beside it: a pass's steps and the
/// optimizer's step (src/train/).
template <class T>
struct ClassifierAccess {
  static ClassifierHalf<T>& half(SequenceClassifier<T>& model);
  /// The half for a pass over `data`, whose shapes and lengths it checks against the model
  /// (ShapeError, InvalidArgument); the front forgets its stored batch (a forward_loss or backward
  /// without a batch raises until set_batch: the pass's batches replaced it).
  static ClassifierHalf<T>& pass_half(SequenceClassifier<T>& model, const SequenceDataset& data);
};

/// The CPU half (src/nn/cpu/classifier.cpp), which the CPU stack's make_classifier returns; rnn
/// and head outlive it. The CUDA half's factory takes the CUDA stack (src/nn/cuda/classifier.hpp).
template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cpu(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head);

}  // namespace bppsa::detail
