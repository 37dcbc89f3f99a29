// The GPU machinery behind the CUDA halves of Recurrent<T>, SequenceClassifier<T> and
// Optimizer<T> (src/nn/cuda/recurrent_half.cpp, classifier_half.cpp, src/train/cuda/): abstract
// interfaces without CUDA types, implemented in src/nn/cuda/ (CUDA build) and made by factories
// that throw UnsupportedError "built without CUDA" in a build without it
// (src/nn/no_gpu/gpu_model.cpp).
//
// Everything a GPU half holds lives on the current CUDA device and is allocated once per shape
// (steps × batch) and reused every step; work is queued on the half's stream, and the host
// waits only where it must read a value (a loss it returns, a status snapshot, a download).
// Host copies of parameters and gradients are caches kept coherent by the CUDA halves with the
// flags below.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bppsa/nn/backward.hpp"
#include "bppsa/nn/linear.hpp"
#include "bppsa/nn/loss.hpp"
#include "bppsa/nn/recurrent.hpp"
#include "nn/cuda/head_math.hpp"
#include "nn/cuda/optimizer_math.hpp"

struct CUstream_st;

namespace bppsa {
struct SequenceDataset;
struct StepTimes;
struct ModelConfig;
}  // namespace bppsa

namespace bppsa::detail::gpu {

/// Which host copy is current. host_newer: the host copy changed (or was never uploaded) and
/// must go up before the next device computation; device_newer: the device changed it (an
/// optimizer step) and the host copy is stale until downloaded; grads_newer: the same for
/// gradients (a backward).
struct Coherence {
  bool host_newer = true;
  bool device_newer = false;
  bool grads_newer = false;
};

/// Timing slots: a training step uses slot step % 2, so the host can read step k − 1's events
/// while step k runs. Timing points of a slot, recorded on the stream.
inline constexpr int kSlots = 2;
enum TimePoint : int { kStepBegin = 0, kForwardEnd = 1, kBackwardEnd = 2, kOptimizerEnd = 3, kTimePoints = 4 };

/// A layer's state in device memory as PyTorch holds it: h (batch × H, C order, i.e. H × batch
/// column-major) and, for LSTM, c; null = zeros (inputs) or not wanted (outputs).
template <class T>
struct DeviceState {
  const T* h = nullptr;
  const T* c = nullptr;
};
template <class T>
struct DeviceStateOut {
  T* h = nullptr;
  T* c = nullptr;
};
/// One layer's parameters (or their gradients) in device memory, PyTorch's layout; a null bias
/// is zero (inputs) or not wanted (outputs).
template <class T>
struct DeviceLayerParams {
  const T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;
};
template <class T>
struct DeviceLayerGrads {
  T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;
};

/// The GPU half of Recurrent<T>: parameters, the forward record, every backward method.
///
/// Device I/O (the PyTorch integration, python/src/cuda/): use_stream() puts every later call
/// on the caller's stream, and the *_device / copy_* calls below read and write the caller's
/// device memory with copies queued on that stream: nothing waits for the host.
template <class T>
class RecurrentGpu {
 public:
  virtual ~RecurrentGpu() = default;
  Coherence sync;

  virtual CUstream_st* stream() const = 0;
  /// Every later call queues its work on `stream` (null: the legacy default stream) instead of
  /// the stack's own non-blocking stream; the cuBLAS handle follows, and `stream` waits (on the
  /// device) for what was queued on the previous one.
  virtual void use_stream(CUstream_st* stream) = 0;
  /// The device status this stack (and the model built on it) reports into.
  virtual DeviceStatus* status() = 0;
  /// Reads the status (waits for the stream); clear_flags() resets its flags and bad_param.
  virtual DeviceStatus read_status() = 0;
  virtual void clear_flags() = 0;
  virtual void synchronize() = 0;

  /// Parameters and gradients: one device arena each, layer by layer w_ih, w_hh, b_ih, b_hh in
  /// PyTorch's row-major layout (the state_dict order).
  virtual Index layers() const = 0;
  virtual T* param_values() = 0;
  virtual T* param_grads() = 0;
  virtual Index param_count() const = 0;
  virtual void upload_params(const std::vector<RecurrentLayerParams<T>>& host) = 0;
  virtual void download_params(std::vector<RecurrentLayerParams<T>>& host) = 0;
  virtual void download_grads(std::vector<RecurrentLayerParams<T>>& host) = 0;
  /// Layer `layer`'s parameters from device memory (queued copies; null biases: zeros).
  virtual void upload_layer_device(Index layer, const DeviceLayerParams<T>& p) = 0;
  /// Layer `layer`'s parameter gradients of the last backward into device memory (null: skipped).
  virtual void copy_layer_grads(Index layer, const DeviceLayerGrads<T>& g) = 0;

  /// Sizes the forward buffers for steps × batch (allocating only when the shape grows; a
  /// ResourceError, with the numbers, before allocating what does not fit).
  virtual void resize(Index steps, Index batch) = 0;
  virtual Index steps() const = 0;
  virtual Index batch() const = 0;
  /// Per-sample lengths of the next forward and its backward (after resize: one per sample,
  /// non-increasing, each 1 … steps; InvalidArgument otherwise); empty = every sample runs every
  /// step. Past its length a sample's outputs are zeros and its steps cost no gradient.
  virtual void set_lengths(std::span<const Index> lengths) = 0;
  /// The lengths the stack runs with now (empty: every sample runs every step).
  virtual std::vector<Index> lengths() const = 0;
  /// The layer-0 input, I × (steps·batch) column-major (time-major columns), to fill on stream().
  virtual T* input() = 0;
  virtual void upload_input(const T* host) = 0;
  /// Copies the layer-0 input from the caller's device memory (I × steps·batch), queued.
  virtual void copy_input_device(const T* x) = 0;
  /// Every layer over input(); s0[l]: layer l's initial state (S × batch, host) or null = zeros.
  virtual void forward(const std::vector<const Matrix<T>*>& s0) = 0;
  /// Top layer's h_1 … h_T, H × (steps·batch), on the device.
  virtual const T* output() const = 0;
  virtual void download_output(Matrix<T>& out) = 0;
  virtual void download_state(Index layer, Index t, Matrix<T>& s) = 0;
  /// Layer `layer`'s final state (S × batch): each sample's at its length.
  virtual void download_final_state(Index layer, Matrix<T>& s) = 0;
  /// Every layer over its input; s0[l]: layer l's initial state in device memory (the vector
  /// may be shorter than the stack: zeros).
  virtual void forward_device(const std::vector<DeviceState<T>>& s0) = 0;
  /// The top layer's outputs h_1 … h_T (H × steps·batch) into device memory.
  virtual void copy_output(T* out) = 0;
  /// Layer `layer`'s state s_t (0 ≤ t ≤ steps) into device memory.
  virtual void copy_state(Index layer, Index t, const DeviceStateOut<T>& s) = 0;
  /// Layer `layer`'s final state into device memory: each sample's at its length.
  virtual void copy_final_state(Index layer, const DeviceStateOut<T>& s) = 0;

  /// ResourceError when a backward with these options cannot fit in the GPU's memory.
  virtual void check_backward_memory(Index steps, Index batch, const BackwardOptions& options) = 0;
  /// Uploads a host output gradient (`values` values: H × steps·batch or H × batch) into a
  /// device buffer of the stack and returns it (for backward_begin).
  virtual const T* upload_grad_out(const T* host, Index values) = 0;
  /// The top layer's gradient: inject = true: H × (steps·batch), every block injected; false:
  /// H × batch, the gradient on h_T only (many-to-one). Device memory that stays valid until
  /// the last backward_layer.
  virtual void backward_begin(const T* top, bool inject) = 0;
  /// One layer, top-down: state gradients (BP, the fused scan or the generic scan), the
  /// pre-activation and parameter gradients, the gradient on the layer's input. final_grad:
  /// the extra gradient on s_T (S × batch, host) or null. Timed in `slot`.
  virtual void backward_layer(Index layer, const BackwardOptions& options, const Matrix<T>* final_grad, int slot) = 0;
  /// Where the last backward timed in `slot` spent its time (waits for it): every layer it ran,
  /// or layer `only` alone (a layer-by-layer backward reports each layer once).
  virtual BackwardTimes backward_times(int slot, Index only = -1) = 0;
  /// backward_layer with the extra gradient on s_T in device memory (both null: none).
  virtual void backward_layer_device(Index layer, const BackwardOptions& options, const DeviceState<T>& final_grad,
                                     int slot) = 0;
  /// How layer `layer`'s last backward computed its state gradients: "bp", "fused", or the
  /// generic scan's method ("blelloch", "hybrid", "linear").
  virtual const char* state_grads_method(Index layer) const = 0;
  /// ∂ℓ/∂x of the last backward (I × steps·batch) and layer `layer`'s ∂ℓ/∂s_0 into device memory.
  virtual void copy_input_grad(T* gx) = 0;
  virtual void copy_state0_grad(Index layer, const DeviceStateOut<T>& g0) = 0;
  virtual void download_input_grad(Matrix<T>& gx) = 0;
  virtual void download_state0_grad(Index layer, Matrix<T>& g0) = 0;
  /// Sets kGradNotFinite in the status when a parameter gradient is not finite: of every layer,
  /// or of layer `only` alone (the one a layer-by-layer backward has just computed).
  virtual void check_grads(Index only = -1) = 0;
  virtual std::size_t device_bytes() const = 0;
};

/// The GPU half of SequenceClassifier<T>: the Linear head, the loss, batches (uploaded or
/// gathered from data sets resident on the GPU), timing, and the status snapshots.
template <class T>
class ModelGpu {
 public:
  virtual ~ModelGpu() = default;
  Coherence head_sync;
  /// Per layer, what Recurrent<T>::set_initial_state / set_final_state_grad hold (host S × B
  /// matrices) or null; the owning model refreshes these before handing the half out.
  std::vector<const Matrix<T>*> initial_states, final_grads;

  virtual RecurrentGpu<T>& stack() = 0;
  /// An optimizer step changed every parameter on the device: the host copies are stale.
  void parameters_stepped() {
    head_sync.device_newer = true;
    stack().sync.device_newer = true;
  }
  virtual void upload_head(const Linear<T>& head) = 0;
  virtual void download_head(Linear<T>& head, bool values, bool grads) = 0;
  /// The parameters in parameters() order: the recurrent arena, then the head's weight and bias.
  virtual Segments<T> segments() = 0;

  /// A host batch (x: [batch][steps][I] floats, labels checked by the caller) → the device.
  virtual void set_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels) = 0;
  /// Data resident on the GPU: slot 0 (training) or 1 (evaluation) holds `data`, uploaded at
  /// its first use and kept while the same data set (same object, same sizes) is passed again;
  /// ResourceError, with the numbers, when it does not fit.
  virtual void use_data(int slot, const SequenceDataset& data) = 0;
  /// The order batches are gathered in (an epoch's shuffle); empty = 0, 1, 2, …
  virtual void set_order(int slot, std::span<const Index> order) = 0;
  /// The batch of samples order[first … first + n) of the slot's data; times point kStepBegin.
  virtual void gather(int slot, Index first, Index n, int time_slot) = 0;
  /// The batch of samples ids (host indices into the slot's data, in this order); kStepBegin.
  virtual void gather_ids(int slot, std::span<const std::int64_t> ids, int time_slot) = 0;
  /// Per-sample lengths of the batch just stored (set_batch, gather, gather_ids clear them),
  /// sorted longest first as RecurrentGpu::set_lengths takes them: the stack runs each sample
  /// at its length and the head reads what the CPU's reads (nn/lengths.hpp's head_columns:
  /// each sample's last real step, and with a per-step head every real step).
  virtual void set_lengths(std::span<const Index> lengths) = 0;
  /// Forward and loss of the current batch (∂loss/∂logits kept when grad), the last-step
  /// predictions and the status (loss, totals, flags); times kForwardEnd.
  virtual void forward_loss(bool grad, int time_slot) = 0;
  /// Head backward, every recurrent layer's backward, the gradients' finiteness; kBackwardEnd.
  /// The host copies of the gradients are stale from here on.
  virtual void backward(const BackwardOptions& options, int time_slot) = 0;
  virtual void mark(int time_slot, int point) = 0;
  /// forward, backward (with its detail) and optimizer seconds of a slot (waits for it).
  virtual void step_times(int time_slot, StepTimes& times, double& optimizer_seconds) = 0;
  virtual void download_predictions(std::vector<std::int64_t>& predictions) = 0;
  /// Zeroes the status totals (loss_sum, correct, samples).
  virtual void reset_totals() = 0;
  /// Queues a copy of the status into pinned host slot `slot`; snapshot_wait returns it.
  virtual void snapshot(int slot) = 0;
  virtual DeviceStatus snapshot_wait(int slot) = 0;
  virtual std::size_t device_bytes() const = 0;
};

/// The device state of an Optimizer<T> (momentum buffers or Adam's moments, in the flat order
/// of the model's segments) and its step.
template <class T>
class OptimizerGpu {
 public:
  virtual ~OptimizerGpu() = default;
  /// Global norm, clip factor and the update, all queued on the model's stream.
  virtual void step(ModelGpu<T>& model, const StepConstants<T>& k) = 0;
  /// Host state per parameter (sizes as the model's parameters) ↔ the device.
  virtual void upload(const std::vector<std::vector<T>>& m, const std::vector<std::vector<T>>& v) = 0;
  virtual void download(std::vector<std::vector<T>>& m, std::vector<std::vector<T>>& v) = 0;
};

/// Throws the NonFiniteError the CPU engine would have thrown for these status flags (the loss,
/// the gradients, or a parameter after an optimizer step, named); nothing when none is set.
/// (Defined in src/nn/model.cpp: every build.)
void raise_status(const ModelConfig& config, const DeviceStatus& status);
/// What a step's status reports, raised as raise_status does after clearing the stack's flags
/// (the next step starts clean); nothing when no flag is set.
template <class T>
void raise_flagged(RecurrentGpu<T>& stack, const ModelConfig& config, const DeviceStatus& status) {
  if (status.flags == 0) return;
  stack.clear_flags();
  raise_status(config, status);
}

/// Factories (src/nn/cuda/*.cpp; src/nn/no_gpu/gpu_model.cpp throws UnsupportedError). They
/// throw DeviceError when there is no usable GPU.
template <class T>
std::unique_ptr<RecurrentGpu<T>> make_recurrent_gpu(const RecurrentConfig& config);
template <class T>
std::unique_ptr<ModelGpu<T>> make_model_gpu(RecurrentGpu<T>& stack, const RecurrentConfig& rnn, Index classes,
                                            bool every_step, LossType loss);
/// The optimizer state for `model`'s parameters (zeros), on its stream.
template <class T>
std::unique_ptr<OptimizerGpu<T>> make_optimizer_gpu(ModelGpu<T>& model);

}  // namespace bppsa::detail::gpu
