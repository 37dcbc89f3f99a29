// Sequence classifier = recurrent stack + Linear head: the PyTorch module
//   self.rnn = nn.RNN|nn.GRU|nn.LSTM(I, H, num_layers, batch_first=True); self.head = nn.Linear(H, C)
// with output head(out[:, -1]) (many-to-one) or head(out) at every step (many-to-many, the loss
// averaged over steps, each step predicting the sequence's label). Parameters carry
// PyTorch's state_dict names, so checkpoints load with model.load_state_dict.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bppsa/io/safetensors.hpp"
#include "bppsa/nn/linear.hpp"
#include "bppsa/nn/loss.hpp"
#include "bppsa/nn/params.hpp"
#include "bppsa/nn/recurrent.hpp"

namespace bppsa {

enum class HeadMode { last, every };
const char* to_string(HeadMode h);
/// "last", "every"; InvalidArgument otherwise.
HeadMode parse_head(std::string_view name);

struct ModelConfig {
  RecurrentConfig rnn;
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

template <class T>
class SequenceClassifier {
 public:
  explicit SequenceClassifier(ModelConfig config);

  const ModelConfig& config() const { return config_; }
  void reset_parameters(std::uint64_t seed);

  /// Forward and loss for a batch: x row-major [batch][steps][input] (batch_first), labels
  /// [batch]. predictions (optional) receives the argmax of the last step's logits.
  T evaluate(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
             std::vector<std::int64_t>* predictions = nullptr);
  /// Forward, loss and every parameter gradient (parameters()[i].grad): forward_loss then
  /// backward, timed.
  T loss_and_grad(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                  const BackwardOptions& options, StepTimes* times = nullptr,
                  std::vector<std::int64_t>* predictions = nullptr);

  /// The two halves of loss_and_grad, for callers that measure them apart (bench/): the
  /// forward pass and the loss, keeping what backward needs; then every parameter gradient
  /// from that loss. backward without a forward_loss before it throws InvalidArgument.
  T forward_loss(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                 std::vector<std::int64_t>* predictions = nullptr);
  void backward(const BackwardOptions& options, BackwardTimes* times = nullptr);

  /// ∂ℓ/∂(top-layer outputs), H × (steps·batch), from ∂ℓ/∂logits of the last forward through
  /// the head, whose parameter gradients it sets: every step's block (head=every), or only the
  /// last step's (head=last; dlogits is C × batch). What backward() feeds the recurrent stack.
  void head_backward(const Matrix<T>& dlogits, Matrix<T>& dout);

  /// Every parameter in PyTorch's state_dict order.
  std::vector<NamedParam<T>> parameters();
  Recurrent<T>& rnn() { return rnn_; }
  Linear<T>& head() { return head_; }

  /// The state_dict as F32 tensors under PyTorch's names (metadata: the model config).
  TensorFile state_dict() const;
  /// Loads every parameter (strict: a missing, unexpected or misshaped tensor is an error
  /// listing what was expected).
  void load_state_dict(const TensorFile& file);

 private:
  void forward(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels);
  ModelConfig config_;
  Recurrent<T> rnn_;
  Linear<T> head_;
  Matrix<T> x_, logits_, dlogits_, dout_, dh_;
  std::vector<std::int64_t> col_labels_;
  Index batch_ = 0;  ///< of the last forward_loss (0: none yet, or evaluate ran since)
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
