// Sequence classifier = recurrent stack + Linear head: the PyTorch module
//   self.rnn = nn.RNN|nn.GRU|nn.LSTM(I, H, num_layers, batch_first=True); self.head = nn.Linear(H, C)
// with output head(out[:, -1]) (many-to-one) or head(out) at every step (many-to-many, the loss
// averaged over steps, each step predicting the sequence's label). Parameters carry
// PyTorch's state_dict names, so checkpoints load with model.load_state_dict.
//
// config.rnn.device = Device::cuda runs all of it on the GPU, the loss and the optimizer step
// included (see "On the GPU" at the class).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bppsa/io/safetensors.hpp"
#include "bppsa/nn/linear.hpp"
#include "bppsa/nn/loss.hpp"
#include "bppsa/nn/params.hpp"
#include "bppsa/nn/recurrent.hpp"

namespace bppsa {

namespace detail {
template <class T>
struct ClassifierAccess;
}  // namespace detail

enum class HeadMode { last, every };
const char* to_string(HeadMode h);
/// "last", "every"; InvalidArgument otherwise.
HeadMode parse_head(std::string_view name);

struct ModelConfig {
  RecurrentConfig rnn;  ///< rnn.device: where the whole model runs
  Index classes = 10;
  HeadMode head = HeadMode::last;
  LossType loss = LossType::cross_entropy;
};
/// "gru I=28 H=64 layers=1 C=10 head=last loss=ce".
std::string describe(const ModelConfig& c);

/// Time of one training step by phase (seconds). backward includes Jacobian generation.
struct StepTimes {
  double forward = 0;
  double backward = 0;
  BackwardTimes detail;
};

/// On the GPU (config.rnn.device = Device::cuda): the recurrent stack (see Recurrent), the
/// head, the loss, the gradients and Optimizer<T>::step(model) all run on the device; per step
/// only the loss travels to the host (forward_loss returns it). backward() and optimizer steps
/// are queued without waiting; errors of queued work (NaN/Inf gradients or parameters) surface
/// at the next call that waits: forward_loss, evaluate, synchronize, sync_to_host, parameters.
/// Host copies are caches: after backward() or a step, parameters() / sync_to_host() /
/// state_dict() download what the GPU changed, and a change made through parameters(), rnn()
/// or head() is uploaded before the next device computation. The trainer keeps data sets
/// resident on the GPU and gathers batches there (bppsa/train/trainer.hpp).
template <class T>
class SequenceClassifier {
 public:
  explicit SequenceClassifier(ModelConfig config);
  ~SequenceClassifier();
  SequenceClassifier(SequenceClassifier&&) noexcept;
  SequenceClassifier& operator=(SequenceClassifier&&) noexcept;

  const ModelConfig& config() const { return config_; }
  Device device() const { return config_.rnn.device; }
  void reset_parameters(std::uint64_t seed);

  /// Forward and loss for a batch: x row-major [batch][steps][input] (batch_first), labels
  /// [batch]. predictions (optional) receives the argmax of the last step's logits.
  ///
  /// lengths (empty = every sample has all steps): each sample's length, 1..steps, in any
  /// order. Sample b then runs steps 1..lengths[b] only (Recurrent::forward's lengths: the
  /// steps after are padding that nothing reads), head `last` reads its step lengths[b], head
  /// `every` its steps 1..lengths[b] (the loss is the mean over the real steps of the batch),
  /// and its prediction is that of its last real step.
  T evaluate(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
             std::vector<std::int64_t>* predictions = nullptr, std::span<const Index> lengths = {});
  /// Forward, loss and every parameter gradient (parameters()[i].grad): forward_loss then
  /// backward, timed.
  T loss_and_grad(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                  const BackwardOptions& options, StepTimes* times = nullptr,
                  std::vector<std::int64_t>* predictions = nullptr, std::span<const Index> lengths = {});

  /// The two halves of loss_and_grad, for callers that measure them apart (bench/): the
  /// forward pass and the loss, keeping what backward needs; then every parameter gradient
  /// from that loss. backward without a forward_loss before it throws InvalidArgument.
  T forward_loss(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                 std::vector<std::int64_t>* predictions = nullptr, std::span<const Index> lengths = {});
  void backward(const BackwardOptions& options, BackwardTimes* times = nullptr);

  /// Keeps a batch (same layout as forward_loss's) for forward_loss() without arguments; on
  /// Device::cuda it is uploaded to the GPU here, once, so that repeated steps on it move no
  /// input data (what benchmarks time). forward_loss(x, …) is set_batch then forward_loss().
  void set_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                 std::span<const Index> lengths = {});
  /// Forward and loss of the batch of the last set_batch (InvalidArgument when there is none).
  T forward_loss(std::vector<std::int64_t>* predictions = nullptr);

  /// Device::cuda: waits for the GPU to finish every queued operation of this model and throws
  /// what failed meanwhile (NonFiniteError); nothing on the CPU.
  void synchronize();
  /// Device::cuda: synchronize(), then downloads the parameters and gradients the GPU changed
  /// since the host copies were last current; nothing on the CPU.
  void sync_to_host();
  /// GPU memory this model holds (weights, forward record, gradients, scan workspace, resident
  /// data), in bytes; 0 on the CPU.
  std::size_t device_bytes() const;
  /// ∂ℓ/∂(top-layer outputs), H × (steps·batch), from ∂ℓ/∂logits of the last forward through
  /// the head, whose parameter gradients it sets: every step's block (head=every), or only the
  /// last step's (head=last; dlogits is C × batch). What backward() feeds the recurrent stack.
  void head_backward(const Matrix<T>& dlogits, Matrix<T>& dout);

  /// Every parameter in PyTorch's state_dict order (Device::cuda: brought up to date first;
  /// writes through the pointers are uploaded before the next device computation).
  std::vector<NamedParam<T>> parameters();
  Recurrent<T>& rnn();
  Linear<T>& head();

  /// The state_dict as F32 tensors under PyTorch's names (metadata: the model config).
  TensorFile state_dict() const;
  /// Loads every parameter (strict: a missing, unexpected or misshaped tensor is an error
  /// listing what was expected).
  void load_state_dict(const TensorFile& file);

 private:
  /// Forward and loss of the stored batch (keeping ∂loss/∂logits when grad).
  T run_forward(bool grad, std::vector<std::int64_t>* predictions);
  struct Impl;  ///< the stack, the head and the half that runs them (src/nn/classifier_half.hpp)
  ModelConfig config_;
  std::unique_ptr<Impl> impl_;
  Index stored_ = 0;  ///< the stored batch's size (0: none)
  Index batch_ = 0;   ///< of the last forward_loss (0: none yet, or evaluate ran since)
  friend struct detail::ClassifierAccess<T>;  ///< the trainer's and the optimizer's halves reach the model's half
};

/// Reads the model config from a state_dict's tensor shapes (I, H, C, num_layers) for the
/// given cell type; ShapeError/FormatError list what the file should hold.
ModelConfig config_from_state_dict(const TensorFile& file, CellType cell, HeadMode head = HeadMode::last,
                                   LossType loss = LossType::cross_entropy);

/// The tensor names and shapes a config's state_dict holds, in order.
std::vector<std::pair<std::string, std::vector<Index>>> expected_state_dict(const ModelConfig& config);

extern template class SequenceClassifier<float>;
extern template class SequenceClassifier<double>;

}  // namespace bppsa
