// Sequential CNN classifier: the PyTorch module nn.Sequential(*layers) on [B, C, H, W]
// input, mean cross-entropy (or MSE) on its output, whose backward pass is a BPPSA scan over
// the layers' transposed Jacobians (docs/method.md §3–§4), or sequential BP.
//
// Data path of a step: forward (each layer records what its Jacobian needs) → J^T of every
// layer after the first generated directly in compact form (conv, pooling: CSR with a
// pattern fixed per architecture; activations: diagonal; linear: dense or CSR) → the scan
// gives ∂ℓ/∂(each layer's output) → parameter gradients (GEMMs). The first layer's J^T is
// not needed: nothing upstream of it takes a gradient.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bppsa/nn/arch.hpp"
#include "bppsa/nn/layers.hpp"
#include "bppsa/nn/loss.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/nn/params.hpp"

namespace bppsa {

struct ConvNetConfig {
  Shape3 input;                   ///< C × H × W of one sample
  std::vector<LayerSpec> layers;  ///< parse_arch(SPEC)
  LossType loss = LossType::cross_entropy;
};
/// "cnn 1×32×32 [conv:8:3:1:1,relu,…] → 10 classes, loss=ce"
std::string describe(const ConvNetConfig& c);

template <class T>
class ConvNet {
 public:
  /// Builds every layer for the input shape; ShapeError names the first layer that does not
  /// fit. The output must be flat (end with linear or flatten): its size is the class count.
  explicit ConvNet(ConvNetConfig config);
  ~ConvNet();
  ConvNet(ConvNet&&) noexcept;
  ConvNet& operator=(ConvNet&&) noexcept;

  const ConvNetConfig& config() const { return config_; }
  Index size() const { return static_cast<Index>(layers_.size()); }
  Layer<T>& layer(Index i) { return *layers_.at(static_cast<std::size_t>(i)); }
  const Layer<T>& layer(Index i) const { return *layers_.at(static_cast<std::size_t>(i)); }
  Index classes() const { return layers_.back()->out_shape().size(); }

  /// PyTorch's default initialisation per layer; layer i draws from its own seeded stream.
  void reset_parameters(std::uint64_t seed);

  /// x: row-major [batch, C, H, W]; labels [batch]. predictions (optional): argmax per sample.
  T evaluate(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
             std::vector<std::int64_t>* predictions = nullptr);
  /// Forward and loss, keeping what backward needs.
  T forward_loss(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                 std::vector<std::int64_t>* predictions = nullptr);
  /// Every parameter gradient of the last forward_loss (InvalidArgument without one).
  void backward(const BackwardOptions& options, BackwardTimes* times = nullptr);
  /// forward_loss then backward, timed.
  T loss_and_grad(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                  const BackwardOptions& options, StepTimes* times = nullptr,
                  std::vector<std::int64_t>* predictions = nullptr);

  /// Every parameter under nn.Sequential's names ("0.weight", "0.bias", "3.weight", …).
  std::vector<NamedParam<T>> parameters();
  /// F32 tensors under those names; metadata bppsa.model = "cnn", bppsa.arch, bppsa.input.
  TensorFile state_dict() const;
  void load_state_dict(const TensorFile& file);

  /// Pruning masks per layer (index i; empty = unpruned). Masked weights become and stay
  /// zero, and leave the Jacobian patterns (the scan's products get sparser).
  void set_masks(const std::vector<std::vector<std::uint8_t>>& masks);
  /// Zeroes masked weights and gradients (after an optimizer step).
  void apply_masks();

  /// The Jacobian chain the scan runs for a batch: J^T of each layer after the first (Flatten
  /// has none), forward order, values of the last backward (for reports and tests).
  const Chain<T>& chain(Index batch);
  /// Layer index of chain element k (1 ≤ k ≤ N).
  Index chain_layer(Index k) const;

 private:
  struct Scan;
  void forward(std::span<const float> x, Index batch, std::span<const std::int64_t> labels);
  Scan& scan_for(Index batch);

  ConvNetConfig config_;
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  std::vector<Matrix<T>> act_;  ///< act_[0] = input, act_[i + 1] = output of layer i
  Matrix<T> dlogits_;
  std::vector<Matrix<T>> grad_;  ///< BP: ∂ℓ/∂(output of layer i)
  std::vector<Index> chain_layers_;
  std::map<Index, std::unique_ptr<Scan>> scans_;  ///< by batch size (a partial last batch keeps its own plan)
  Index batch_ = 0;
};

/// The config a checkpoint describes: the architecture and input shape from its metadata
/// (bppsa.arch, bppsa.input "C×H×W"); FormatError says what is missing.
ConvNetConfig convnet_config_from_state_dict(const TensorFile& file);

extern template class ConvNet<float>;
extern template class ConvNet<double>;

}  // namespace bppsa
