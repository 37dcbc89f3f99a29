// The two halves of Recurrent<T>. The front (src/nn/recurrent.cpp) validates shapes and call
// order, holds the host copies of the parameters and what set_initial_state /
// set_final_state_grad were given, and dispatches to one RecurrentHalf: the CPU half
// (src/nn/cpu/recurrent.cpp) or the CUDA half (src/nn/cuda/recurrent.hpp, the GPU stack
// itself). The front picks the half by device (make_recurrent_cpu or make_recurrent_cuda);
// cuda/ defines the CUDA factory, no_gpu/ its stub. A SequenceClassifier's half is made by the
// stack's (make_classifier): the same device, and the CUDA one typed over the CUDA stack.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/nn/recurrent.hpp"

namespace bppsa {
struct ModelConfig;
template <class T>
class Linear;
}  // namespace bppsa

namespace bppsa::detail {

template <class T>
class ClassifierHalf;  // nn/classifier_half.hpp

template <class T>
using LayerParamsList = std::vector<RecurrentLayerParams<T>>;
/// Per layer, a host matrix the front holds (an initial state, a final-state gradient) or null.
template <class T>
using LayerMatrices = std::vector<const Matrix<T>*>;

/// One backend of a recurrent stack. Calls come from the front after its checks: shapes of
/// x, grad_out, initial states and final-state gradients are right, and backward layers come
/// top-down after backward_begin.
template <class T>
class RecurrentHalf {
 public:
  virtual ~RecurrentHalf() = default;

  /// Brings the host copies up to date with what the backend changed (CPU: they are the values).
  virtual void pull(LayerParamsList<T>& params, LayerParamsList<T>& grads) const = 0;
  /// The host copies of the parameters are the newest (written, or about to be, by the caller).
  virtual void host_written() = 0;

  /// The half of a SequenceClassifier built on this stack, on the same device (rnn: the front
  /// this half belongs to; rnn and head outlive it). The classifier's front makes its half here:
  /// the device is chosen once, by the Recurrent front.
  virtual std::unique_ptr<ClassifierHalf<T>> make_classifier(const ModelConfig& config, Recurrent<T>& rnn,
                                                             Linear<T>& head) = 0;

  /// How the next forward runs (values checked by the front); what the last one did.
  virtual void set_forward_options(const ForwardOptions& options) = 0;
  virtual const ForwardReport& forward_report() const = 0;
  /// lengths: per sample, non-increasing, 1..steps (checked by the front); empty = every step.
  virtual void forward(const Eigen::Ref<const Matrix<T>>& x, Index steps, Index batch, const LayerParamsList<T>& params,
                       const LayerMatrices<T>& initial_states, std::span<const Index> lengths) = 0;
  virtual Index steps() const = 0;
  virtual Index batch() const = 0;
  virtual Matrix<T> state(Index layer, Index t) const = 0;
  /// Each sample's last state: s at its length (state(layer, steps) without lengths).
  virtual Matrix<T> final_state(Index layer) const = 0;
  virtual Eigen::Block<const Matrix<T>, Eigen::Dynamic, Eigen::Dynamic, true> output() const = 0;

  virtual void check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const = 0;
  virtual void backward_begin(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step,
                              const LayerParamsList<T>& params) = 0;
  /// What must hold before layer `layer`'s backward changes anything (the CPU: the method and
  /// the memory of the step); an error here leaves the layer-by-layer order as it was.
  virtual void prepare_layer(Index layer, const BackwardOptions& options) const = 0;
  /// One layer: fills grads[layer], the gradient passed below (input_grad() for layer 0) and
  /// state0_grad(layer). final_grad: the extra gradient on s_T, or null.
  virtual void backward_layer(Index layer, const BackwardOptions& options, const LayerParamsList<T>& params,
                              LayerParamsList<T>& grads, const Matrix<T>* final_grad, BackwardTimes* times) = 0;
  virtual std::pair<Jacobian<T>, Matrix<T>> layer_transfer(Index layer, const BackwardOptions& options,
                                                           const LayerParamsList<T>& params) = 0;
  /// Recurrent::forward_io / backward_io on the caller's memory (the front checked it holds one
  /// layer). params, grads: the front's host copies (the CPU half's values, the CUDA half's caches,
  /// left stale: the tensors are the caller's). lengths: backward_io's, those of the forward.
  virtual void forward_io(const LayerForwardIo<T>& io, Index steps, Index batch, std::span<const Index> lengths,
                          std::uintptr_t stream, LayerParamsList<T>& params) = 0;
  virtual std::string backward_io(const LayerBackwardIo<T>& io, const BackwardOptions& options,
                                  std::span<const Index> lengths, std::uintptr_t stream,
                                  const LayerParamsList<T>& params, LayerParamsList<T>& grads) = 0;
  virtual const Matrix<T>& input_grad() const = 0;
  virtual const Matrix<T>& state0_grad(Index layer) const = 0;
  virtual const Chain<T>& chain(Index layer) const = 0;
};

/// The CPU half (src/nn/cpu/recurrent.cpp).
template <class T>
std::unique_ptr<RecurrentHalf<T>> make_recurrent_cpu(const RecurrentConfig& config);
/// The CUDA half (src/nn/cuda/recurrent.cpp; without CUDA, src/nn/no_gpu/halves.cpp
/// throws UnsupportedError).
template <class T>
std::unique_ptr<RecurrentHalf<T>> make_recurrent_cuda(const RecurrentConfig& config);

/// The whole footprint of a training step of steps × batch (forward, backward and, for a scan,
/// every layer's Jacobians and workspace), refused up front with the numbers (ResourceError).
void check_step_memory(const RecurrentConfig& c, Index steps, Index batch, std::size_t scalar, BackwardMethod method,
                       const char* op);
/// Bytes of a forward record of steps × batch (all layers).
double forward_record_bytes(const RecurrentConfig& c, Index steps, Index batch, std::size_t scalar);
/// "T steps × batch B through <cell> hidden H × L layers", for messages.
std::string stack_string(const RecurrentConfig& c, Index steps, Index batch);

/// What the model built on a stack reaches of it: its half (of the model's device), the host
/// copies of the parameters (and brought up to date), and the per-layer matrices the front holds.
template <class T>
struct RecurrentAccess {
  static RecurrentHalf<T>& half(Recurrent<T>& r);
  static const LayerParamsList<T>& params(const Recurrent<T>& r);
  static void pull(const Recurrent<T>& r);
  static LayerMatrices<T> initial_states(const Recurrent<T>& r);
  static LayerMatrices<T> final_grads(const Recurrent<T>& r);
};

}  // namespace bppsa::detail
