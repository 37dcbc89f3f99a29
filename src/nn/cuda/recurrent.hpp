// The CUDA half of Recurrent<T>: the recurrent stack on the current CUDA device. It implements
// RecurrentHalf (the front's host-memory calls) over its device API below, which the other CUDA
// halves use directly: the classifier's (classifier.hpp, which also runs a training pass's
// steps); bppsa.nn's layer reaches it through the Recurrent front (forward_io / backward_io:
// PyTorch's weights, input and parameter and input gradients read and written in place).
//
// Everything lives on the device, allocated once per shape (steps × batch) and reused; work is
// queued on the stack's stream (or the caller's: use_stream) and the host waits only where it
// reads a value. Host memory crosses in one place, to_device / to_host in recurrent.cpp;
// the host copies of parameters and gradients are caches kept coherent by `sync`.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/cuda/buffer.hpp"
#include "nn/cuda/fused_scan.hpp"
#include "nn/cuda/generic_scan.hpp"
#include "nn/cuda/head_math.hpp"
#include "nn/cuda/kernels.hpp"
#include "nn/recurrent_half.hpp"

namespace bppsa::detail::gpu {

class BlasHandle;

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

/// A layer's state in device memory: h and, for LSTM, c, each H × batch column-major with
/// leading dimension ld (0: H, PyTorch's (B, H) C order); null = zeros (inputs) or not wanted
/// (outputs).
template <class T>
struct DeviceState {
  const T* h = nullptr;
  const T* c = nullptr;
  Idx ld = 0;
};
template <class T>
struct DeviceStateOut {
  T* h = nullptr;
  T* c = nullptr;
  Idx ld = 0;
};
/// One layer's parameters (or their gradients) in device memory, PyTorch's layout; a null bias
/// is zero (inputs), a null gradient not wanted (outputs).
template <class T>
struct DeviceLayerParams {
  const T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;
};
template <class T>
struct DeviceLayerGrads {
  T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr;
};

/// How a layer's state gradients are computed on the device.
enum class StateGrads { bp, fused, generic };

/// A fused-scan plan and the shape it was made for.
template <class T>
struct FusedPlan {
  std::unique_ptr<FusedRecurrentScan<T>> scan;
  Idx steps = -1, batch = -1;
  bool inject = false;
  bool matches(Idx s, Idx b, bool i) const { return scan && steps == s && batch == b && inject == i; }
};

/// The two most recent plans of a layer: an epoch alternates between the full batch and its
/// partial last one, and neither should be planned again every epoch (keep_older: the generic
/// scan's plans hold T·B Jacobians, so it keeps one and plans again instead).
template <class P>
struct TwoPlans {
  P recent, older;
  /// The plan `match` accepts, made by `make` (replacing the older one) when neither does.
  template <class Match, class Make>
  P& get(Match&& match, Make&& make, bool keep_older) {
    if (!match(recent)) {
      std::swap(recent, older);
      if (!keep_older) older = P{};
      if (!match(recent)) {
        recent = P{};  // free the old plan's device memory before the new one is allocated
        recent = make();
      }
    }
    return recent;
  }
};

template <class T>
class RecurrentCuda final : public RecurrentHalf<T> {
 public:
  /// DeviceError when there is no usable GPU; ResourceError when the weights do not fit.
  explicit RecurrentCuda(const RecurrentConfig& config);
  ~RecurrentCuda() override;
  RecurrentCuda(const RecurrentCuda&) = delete;
  RecurrentCuda& operator=(const RecurrentCuda&) = delete;

  // --- RecurrentHalf: the front's calls, on host memory -------------------------------------
  void pull(LayerParamsList<T>& params, LayerParamsList<T>& grads) const override;
  void host_written() override;
  std::unique_ptr<ClassifierHalf<T>> make_classifier(const ModelConfig& config, Recurrent<T>& rnn,
                                                     Linear<T>& head) override;
  /// The GPU runs the sequential forward only (UnsupportedError for newton).
  void set_forward_options(const ForwardOptions& options) override;
  const ForwardReport& forward_report() const override { return report_; }
  void forward(const Eigen::Ref<const Matrix<T>>& x, Index steps, Index batch, const LayerParamsList<T>& params,
               const LayerMatrices<T>& initial_states, std::span<const Index> lengths) override;
  Index steps() const override { return steps_; }
  Index batch() const override { return batch_; }
  Matrix<T> state(Index layer, Index t) const override;
  Matrix<T> final_state(Index layer) const override;
  Eigen::Block<const Matrix<T>, Eigen::Dynamic, Eigen::Dynamic, true> output() const override;
  void check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const override;
  void backward_begin(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step,
                      const LayerParamsList<T>& params) override;
  void prepare_layer(Index, const BackwardOptions&) const override {}  // the stack checks as it runs
  void backward_layer(Index layer, const BackwardOptions& options, const LayerParamsList<T>& params,
                      LayerParamsList<T>& grads, const Matrix<T>* final_grad, BackwardTimes* times) override;
  std::pair<Jacobian<T>, Matrix<T>> layer_transfer(Index layer, const BackwardOptions& options,
                                                   const LayerParamsList<T>& params) override;
  // The caller's device memory, every call queued on its stream: no host copy, no wait.
  void forward_io(const LayerForwardIo<T>& io, Index steps, Index batch, std::span<const Index> lengths,
                  std::uintptr_t stream, LayerParamsList<T>& params) override;
  std::string backward_io(const LayerBackwardIo<T>& io, const BackwardOptions& options, std::span<const Index> lengths,
                          std::uintptr_t stream, const LayerParamsList<T>& params, LayerParamsList<T>& grads) override;
  const Matrix<T>& input_grad() const override;
  const Matrix<T>& state0_grad(Index layer) const override;
  const Chain<T>& chain(Index layer) const override;

  // --- The device API ------------------------------------------------------------------------
  mutable Coherence sync;  ///< which copy is newer (pull, a const call, settles it)
  /// Uploads the front's parameters when the host copy is newer (sync.host_newer).
  void make_current(const LayerParamsList<T>& params);

  cudaStream_t stream() const { return run_stream_; }
  /// Every later call queues its work on `stream` (null: the legacy default stream) instead of
  /// the stack's own non-blocking stream; the cuBLAS handle follows, and `stream` waits (on the
  /// device) for what was queued on the previous one.
  void use_stream(cudaStream_t stream);
  /// The device status this stack (and the model built on it) reports into.
  DeviceStatus* status() { return status_.data(); }
  /// Reads the status (waits for the stream); clear_flags() resets its flags and bad_param.
  DeviceStatus read_status();
  void clear_flags();
  void synchronize() const;

  /// Parameters and gradients: one device arena each, layer by layer w_ih, w_hh, b_ih, b_hh in
  /// PyTorch's row-major layout (the state_dict order).
  Index layers() const { return config_.layers; }
  T* param_values() { return params_.data(); }
  T* param_grads() { return grads_.data(); }
  Index param_count() const { return static_cast<Index>(params_.size()); }

  /// Sizes the forward buffers for steps × batch (allocating only when the shape grows; a
  /// ResourceError, with the numbers, before allocating what does not fit).
  void resize(Index steps, Index batch);
  /// Per-sample lengths of the next forward and its backward (after resize: one per sample,
  /// non-increasing, each 1 … steps; InvalidArgument otherwise); empty = every sample runs every
  /// step. Past its length a sample's outputs are zeros and its steps cost no gradient.
  void set_lengths(std::span<const Index> lengths);
  /// The lengths the stack runs with now (empty: every sample runs every step).
  std::vector<Index> lengths() const;
  /// The layer-0 input, I × (steps·batch) column-major (time-major columns), to fill on stream().
  T* input() { return x_.data(); }
  /// Copies the layer-0 input from the caller's device memory (I × steps·batch), queued.
  void copy_input_device(const T* x) { copy(x_.data(), x, config_.input * steps_ * batch_); }
  /// Every layer over input(); s0[l]: layer l's initial state in device memory (the vector
  /// may be shorter than the stack: zeros). x0: layer 0's input read in place instead of input(),
  /// and w0: layer 0's parameters read in place instead of the arena's (null biases: zeros); both
  /// stay in use by the backward of this forward, so they must stay unchanged until it ends.
  void forward_device(const std::vector<DeviceState<T>>& s0, const T* x0 = nullptr,
                      const DeviceLayerParams<T>* w0 = nullptr);
  /// Top layer's h_1 … h_T, H × (steps·batch), on the device.
  const T* device_output() const { return layers_.back().h.data() + config_.hidden * batch_; }
  /// The top layer's outputs h_1 … h_T (H × steps·batch) into device memory.
  void copy_output(T* out);
  /// Layer `layer`'s state s_t (0 ≤ t ≤ steps) into device memory.
  void copy_state(Index layer, Index t, const DeviceStateOut<T>& s);
  /// Layer `layer`'s final state into device memory: each sample's at its length.
  void copy_final_state(Index layer, const DeviceStateOut<T>& s);

  /// The top layer's gradient: inject = true: H × (steps·batch), every block injected; false:
  /// H × batch, the gradient on h_T only (many-to-one). Device memory that stays valid until
  /// the last backward_layer_device.
  void backward_begin_device(const T* top, bool inject);
  /// One layer, top-down: state gradients (BP, the fused scan or the generic scan), the
  /// pre-activation and parameter gradients, the gradient on the layer's input; final_grad: the
  /// extra gradient on s_T in device memory (both null: none). Timed in `slot`. grads: where the
  /// parameter gradients go, written in place (a null one: into the gradient arena); grad_x:
  /// where layer 0's input gradient goes (null: the stack's own buffer, which input_grad() reads).
  void backward_layer_device(Index layer, const BackwardOptions& options, const DeviceState<T>& final_grad, int slot,
                             const DeviceLayerGrads<T>& grads = {}, T* grad_x = nullptr);
  /// Host matrices the front holds (initial states, final-state gradients; S × batch, h rows
  /// over c rows; host[k] is layer first + k's, checked against the batch) staged on the device
  /// for forward_device / backward_layer_device. The pointers stay valid until the next
  /// stage_states: use them before staging again.
  std::vector<DeviceState<T>> stage_states(const LayerMatrices<T>& host, const char* what, const char* op,
                                           Index first = 0);
  /// Where the last backward timed in `slot` spent its time (waits for it): every layer it ran,
  /// or layer `only` alone (a layer-by-layer backward reports each layer once).
  BackwardTimes backward_times(int slot, Index only = -1);
  /// How layer `layer`'s last backward computed its state gradients: "bp", "fused", or the
  /// generic scan's method ("blelloch", "hybrid", "linear").
  const char* state_grads_method(Index layer) const;
  /// Layer `layer`'s ∂ℓ/∂s_0 of the last backward into device memory.
  void copy_state0_grad(Index layer, const DeviceStateOut<T>& g0);
  /// Sets kGradNotFinite in the status when a parameter gradient is not finite: of every layer,
  /// or of layer `only` alone (the one a layer-by-layer backward has just computed).
  void check_grads(Index only = -1);
  std::size_t device_bytes() const;

 private:
  /// The timing events of one slot: per layer begin, after the Jacobians, after the scan, end.
  struct LayerEvents {
    std::array<cuda::Event, 4> e;
  };
  struct Layer {
    Idx input = 0;                                      ///< I of this layer
    Idx w_ih = 0, w_hh = 0, b_ih = 0, b_hh = 0;         ///< offsets in the parameter arenas
    DeviceLayerParams<T> weights;                       ///< what its last forward read (and its backward reads)
    cuda::DeviceBuffer<T> h, c, gates, aux, ax, w_col;  ///< forward record (w_col: W_hh column-major)
    cuda::DeviceBuffer<T> g, dx, dh, gx, g_final;       ///< backward
    cuda::DeviceBuffer<T> g_last;                       ///< the fused scan's g_T input (apart from g)
    TwoPlans<std::unique_ptr<GenericLayerScan<T>>> generic;
    TwoPlans<FusedPlan<T>> fused;
    std::array<LayerEvents, kSlots> events;
    StateGrads how = StateGrads::bp;             ///< how its last backward computed the state gradients
    BackwardMethod method = BackwardMethod::bp;  ///< the method of its last backward
    bool warp = false;     ///< its last forward ran the warp-per-sample kernel (so does its bp backward)
    bool cluster = false;  ///< its last forward ran the cluster kernel (so does its bp backward, where it fits)
  };

  // Host memory crosses here only: a queued copy of n values, then a wait (the host buffer may
  // be a temporary, or is read right after).
  void to_device(T* dst, const T* host, Idx n) const;
  void to_host(T* host, const T* src, Idx n) const;
  /// Both parameter arenas' layout: one packed buffer (params_ or grads_) ↔ the host's layers.
  void upload_layers(const LayerParamsList<T>& host);
  void download_layers(const cuda::DeviceBuffer<T>& packed, LayerParamsList<T>& host) const;

  LayerArgs<T> args(Index l);
  /// The device lengths of the current batch, or null (every sample runs every step).
  const Idx* device_lengths() const { return has_len_ ? len_.data() : nullptr; }
  /// forward_device() with layer l's s_0 written by init(l, h, c) into the record's first block.
  template <class Init>
  void forward_from(Init&& init);
  /// backward_layer_device() once the extra gradient on s_T is in L.g_final (when final_grad).
  void backward_from(Index layer, const BackwardOptions& options, bool final_grad, int slot,
                     const DeviceLayerGrads<T>& grads, T* grad_x);
  /// Layer l's parameters in the arena.
  DeviceLayerParams<T> arena_params(Index l) const;
  /// Layer l's gradient targets: `given`'s, the arena's where `given` has none.
  DeviceLayerGrads<T> grad_targets(Index l, const DeviceLayerGrads<T>& given);
  /// Sets kGradNotFinite in the status when a value of these gradients is not finite.
  void check_grad_targets(const DeviceLayerGrads<T>& g, Idx input);
  /// Queued device-to-device copy of n values (nothing when dst is null).
  void copy(T* dst, const T* src, Idx n) const;
  /// Queued copy of an H × batch state part between leading dimensions (0: H); a null src zeroes.
  void copy_part(T* dst, Idx dst_ld, const T* src, Idx src_ld) const;
  /// The persistent kernels' launch for `rows` state rows per sample: forward H without the gate
  /// vector, backward S with it.
  PersistentLaunch launch_for(Idx rows, bool gate_vector) const;
  /// Whether the forward (backward false) or the bp backward runs the cluster kernel (out: its
  /// launch) rather than the block kernel, whose W_hh fits in one block (`w_shared`) or not: where
  /// it does not and a cluster of up to kClusterMaxBlocks holds it (BPPSA_CUDA_RECURRENCE=cluster:
  /// wherever a cluster can, else UnsupportedError; block: never).
  bool cluster_plan(bool backward, bool w_shared, ClusterLaunch& out) const;
  /// Layer l's fused-scan plan for the current shape (planned once, kept with the layer).
  FusedPlan<T>& fused_plan(Index l, bool inject);
  /// The fused chunked scan's state gradients of layer l (a.g's block T set).
  void run_fused(Index l, const LayerArgs<T>& a, cudaStream_t s);
  /// How layer l's state gradients are computed for `m` at the current shape: automatic is the
  /// fused scan when the layer's plan splits the sequence into chunks, else the BP kernel (a
  /// one-chunk plan is BP in the fused push kernel, the slower of the two).
  StateGrads state_grads(BackwardMethod m, Index l, bool inject);
  /// Every layer's backward buffers for the current shape (a backward's first layer): what
  /// must grow is freed, checked against the GPU's free memory, then allocated.
  void prepare_backward(bool fused);
  /// Device bytes the backward buffers and scan plans hold now.
  double backward_held() const;
  /// A state-sized host matrix of layer l that is copied to the device (an initial state or a
  /// final-state gradient): it must be S × B for the current batch (ShapeError otherwise).
  void check_state_shape(const Matrix<T>& m, Index l, const char* what, const char* op) const;

  RecurrentConfig config_;
  std::int32_t cell_;
  Idx H_, GH_, S_;
  cuda::Stream stream_;
  cudaStream_t run_stream_ = stream_.get();  ///< stream_, or the caller's (use_stream)
  cuda::Event switch_event_{false};          ///< orders a new stream after the old one (use_stream)
  std::unique_ptr<BlasHandle> blas_;
  int sms_, smem_optin_;
  struct ClusterPlan {
    ClusterLaunch launch;  ///< for batch `batch` (fits: it runs)
    Idx batch = -1;
  };
  mutable std::array<ClusterPlan, 2> cluster_;  ///< cluster_plan's, forward and backward
  cuda::DeviceBuffer<T> params_, grads_;
  cuda::DeviceBuffer<T> x_, ones_, grad_out_;
  cuda::DeviceBuffer<T> zeros_;   ///< GH zeros: the biases a caller's forward leaves out
  const T* x0_ = nullptr;         ///< layer 0's input in the last forward: x_, or the caller's (forward_device)
  cuda::DeviceBuffer<T> staged_;  ///< host states staged for the device (stage_states), layer by layer
  mutable cuda::DeviceBuffer<T> readback_;  ///< a state gathered for the host (state, final_state)
  cuda::DeviceBuffer<DeviceStatus> status_;
  std::vector<Layer> layers_;
  Index steps_ = 0, batch_ = 0;
  cuda::DeviceBuffer<Idx> len_;  ///< per-sample lengths (set_lengths), valid when has_len_
  std::vector<Idx> len_host_;    ///< what len_ holds
  cuda::StagedUploads uploads_;  ///< set_lengths' copies, queued without waiting
  bool has_len_ = false;
  const T* top_ = nullptr;
  bool inject_top_ = false;
  std::array<std::vector<Index>, kSlots> timed_;  ///< layers timed in each slot's last backward
  // Host copies of what the front's accessors return.
  mutable Matrix<T> out_, input_grad_;
  mutable std::vector<Matrix<T>> g0_;
  ForwardReport report_;  ///< every layer sequential
};

extern template class RecurrentCuda<float>;
extern template class RecurrentCuda<double>;

}  // namespace bppsa::detail::gpu
