// The CUDA half of SequenceClassifier<T>: the Linear head and the loss on the device over the
// stack's CUDA half (recurrent.hpp), batches uploaded or gathered on the device from data
// sets kept resident there, CUDA-event timing per step slot, and status snapshots through pinned
// memory. It implements ClassifierHalf over the device API below: the front's host calls, and a
// pass's steps queued without waiting (the loop reads step k − 1 while step k runs: only a few
// bytes of status come back per step).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/cuda/buffer.hpp"
#include "nn/classifier_half.hpp"
#include "nn/cuda/device_parameters.hpp"
#include "nn/cuda/recurrent.hpp"

namespace bppsa {
struct SequenceDataset;
}  // namespace bppsa

namespace bppsa::detail::gpu {

template <class T>
class ClassifierCuda final : public ClassifierHalf<T> {
 public:
  /// Over `stack`, the CUDA half of `rnn`.
  ClassifierCuda(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head, RecurrentCuda<T>& stack);
  ~ClassifierCuda() override;
  ClassifierCuda(const ClassifierCuda&) = delete;
  ClassifierCuda& operator=(const ClassifierCuda&) = delete;

  // --- ClassifierHalf: the front's calls, on host memory --------------------------------------
  void set_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                 std::span<const Index> lengths) override;
  T forward_loss(bool grad, std::vector<std::int64_t>* predictions) override;
  void backward(const BackwardOptions& options, BackwardTimes* times) override;
  void backward_timed(const BackwardOptions& options, double forward_seconds, StepTimes* times) override;
  void head_backward(const Matrix<T>& dlogits, Matrix<T>& dout) override;
  void pull() override;
  void host_written() override;
  void synchronize() override;
  std::size_t device_bytes() const override;
  void begin_pass(const SequenceDataset& data, std::span<const Index> order, bool training) override;
  void queue_step(Index first, Index n, const BackwardOptions* options, const std::function<void()>& optimizer_step,
                  int slot) override;
  StepReport wait_step(int slot) override;
  const DeviceParameters<T>* device_parameters() override;

 private:
  // --- The device API ----------------------------------------------------------------------------
  /// Uploads what the host changed since the device last read it: the stack's parameters and
  /// the head's. Every device computation below starts with it.
  void make_current();

  /// Data resident on the GPU: slot 0 (training) or 1 (evaluation) holds `data`, uploaded at
  /// its first use and kept while the same data set (same object, same sizes) is passed again;
  /// ResourceError, with the numbers, when it does not fit.
  void use_data(int slot, const SequenceDataset& data);
  /// The order batches are gathered in (an epoch's shuffle); empty = 0, 1, 2, …
  void set_order(int slot, std::span<const Index> order);
  /// The batch of samples order[first … first + n) of the slot's data; times point kStepBegin.
  void gather(int slot, Index first, Index n, int time_slot);
  /// The batch of samples ids (host indices into the slot's data, in this order); kStepBegin.
  void gather_ids(int slot, std::span<const std::int64_t> ids, int time_slot);
  /// Per-sample lengths of the batch just stored (upload, gather, gather_ids clear them),
  /// sorted longest first as RecurrentCuda::set_lengths takes them: the stack runs each sample
  /// at its length and the head reads what the CPU's reads (nn/lengths.hpp's head_columns).
  void set_sorted_lengths(std::span<const Index> lengths);
  /// Forward and loss of the current batch (∂loss/∂logits kept when grad), the last-step
  /// predictions and the status (loss, totals, flags), queued; times kForwardEnd.
  void queue_forward_loss(bool grad, int time_slot);
  /// Head backward, every recurrent layer's backward, the gradients' finiteness, queued;
  /// kBackwardEnd. The host copies of the gradients are stale from here on.
  void queue_backward(const BackwardOptions& options, int time_slot);
  void mark(int time_slot, int point);
  /// forward, backward (with its detail) and optimizer seconds of a slot (waits for it).
  void step_times(int time_slot, StepTimes& times, double& optimizer_seconds);
  /// Zeroes the status totals (loss_sum, correct, samples).
  void reset_totals();
  /// Queues a copy of the status into pinned host slot `slot`; snapshot_wait returns it.
  void snapshot(int slot);
  DeviceStatus snapshot_wait(int slot);
  /// What a step's status reports, raised as the CPU engine would have thrown it at that step
  /// (NonFiniteError naming the loss, the gradients or the parameter), after clearing the
  /// stack's flags so that the next step starts clean; nothing when no flag is set.
  void raise_flagged(const DeviceStatus& status);

  /// A data set resident on the GPU, and what identifies the host copy it came from.
  struct Resident {
    const SequenceDataset* source = nullptr;
    const float* host_x = nullptr;
    const std::int64_t* host_y = nullptr;
    Index samples = 0, steps = 0, features = 0;
    cuda::DeviceBuffer<float> x;
    cuda::DeviceBuffer<std::int64_t> y, order;
    bool ordered = false;
  };

  /// A host batch (x: [batch][steps][I] floats, labels checked) → the device.
  void upload_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels);
  void download_predictions(std::vector<std::int64_t>& predictions);
  cudaStream_t s() const { return stack_.stream(); }
  Idx columns() const;
  /// The head's input: every step's outputs (H × TB), the last step's (H × B), or with lengths
  /// the columns head_columns chose, gathered (H × columns()).
  const T* head_input() const;

  ModelConfig config_;
  Recurrent<T>& rnn_;
  Linear<T>& head_host_;
  RecurrentCuda<T>& stack_;
  Coherence head_sync_;
  Idx I_, H_, C_;
  bool every_, mse_;
  std::unique_ptr<BlasHandle> blas_;
  cuda::DeviceBuffer<T> head_, head_grads_;  ///< weight (C × H, row-major) then bias (C)
  cuda::DeviceBuffer<T> logits_, dlogits_, dout_, ones_;
  cuda::DeviceBuffer<double> col_loss_;
  cuda::DeviceBuffer<std::int64_t> labels_, labels_in_, predictions_;
  cuda::DeviceBuffer<float> batch_in_;
  // With lengths (set_sorted_lengths): the output columns the head reads, its gathered input,
  // the chosen columns' labels, the gradient on every output column (per-step head), the ids.
  bool lengths_ = false;
  std::vector<Idx> cols_host_;
  cuda::DeviceBuffer<Idx> cols_;
  cuda::DeviceBuffer<T> head_in_, dfull_;
  cuda::DeviceBuffer<std::int64_t> col_labels_, ids_;
  cuda::StagedUploads uploads_;  ///< the ids' and columns' copies, queued without waiting
  std::array<Resident, 2> data_;
  std::array<std::array<cuda::Event, kTimePoints>, kSlots> events_;
  std::array<std::array<bool, kTimePoints>, kSlots> marked_{};
  cuda::PinnedBuffer<DeviceStatus> pinned_;
  static_assert(kSlots == 2, "one snapshot event per slot");
  std::array<cuda::Event, kSlots> snap_{cuda::Event(false), cuda::Event(false)};  ///< ordering only
  std::vector<Index> order_, sorted_lengths_;  ///< the stored batch's order (longest first) and lengths
  // The current pass (begin_pass): its data slot (0 training, 1 evaluation), data and order.
  int pass_slot_ = 0;
  bool training_ = false;
  const SequenceDataset* pass_data_ = nullptr;
  std::vector<Index> pass_order_;
  DeviceParameters<T> params_;  ///< device_parameters()'s answer
};

static_assert(kSlots == kStepSlots, "a pass's step slot is a timing slot");

/// The CUDA half of a SequenceClassifier over `stack` (the CUDA stack's make_classifier).
template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cuda(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head,
                                                        RecurrentCuda<T>& stack);

extern template class ClassifierCuda<float>;
extern template class ClassifierCuda<double>;

}  // namespace bppsa::detail::gpu
