// Recurrent layers with PyTorch semantics (nn.RNN with tanh, nn.GRU, nn.LSTM; batch_first
// data, any input size, hidden size and num_layers) whose backward pass is a BPPSA scan.
//
// Data path of one layer: forward records what the Jacobians need → the transposed state
// Jacobians J_t^T = (∂s_t/∂s_{t−1})^T are generated directly in their natural kind (RNN:
// shared W_hh^T × per-step diagonal; GRU, LSTM: dense per sample) → the scan (or sequential
// BP) gives every state gradient → parameter gradients as batched outer-product sums (GEMMs
// over all steps at once) and the gradient on the layer's input. Stacked layers run the
// affine scan: the layer above injects its input gradients into the layer below (docs/method.md §1).
//
// RecurrentConfig::device = Device::cuda runs the same layers on the current CUDA GPU
// (src/nn/cuda/), with this same API: see "On the GPU" at the class.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bppsa/core/device.hpp"
#include "bppsa/nn/backward.hpp"
#include "bppsa/scan/scanner.hpp"

namespace bppsa {

namespace detail {
template <class T>
struct RecurrentAccess;
}  // namespace detail

enum class CellType { rnn, gru, lstm };
const char* to_string(CellType c);
/// "rnn", "gru", "lstm"; InvalidArgument otherwise.
CellType parse_cell(std::string_view name);
/// Gates per cell: rnn 1, gru 3 (r, z, n), lstm 4 (i, f, g, o) — PyTorch's order.
Index gate_count(CellType c);
/// Size of the scanned state: H (rnn, gru) or 2H (lstm: h then c), without projection.
Index state_size(CellType c, Index hidden);

/// The activation of the plain RNN cell (PyTorch's nn.RNN `nonlinearity`): tanh (the
/// default, J_t^T = W_hh^T diag(1 − h_t²)) or relu (J_t^T = W_hh^T diag(1[h_t > 0])).
/// GRU and LSTM have fixed activations and accept only tanh here.
enum class Nonlinearity { tanh, relu };
const char* to_string(Nonlinearity n);
/// "tanh", "relu"; InvalidArgument otherwise.
Nonlinearity parse_nonlinearity(std::string_view name);

struct RecurrentConfig {
  CellType cell = CellType::rnn;
  Index input = 1;
  Index hidden = 20;
  Index layers = 1;
  Nonlinearity nonlinearity = Nonlinearity::tanh;  ///< rnn only
  /// Where the layers run: the CPU (OpenMP) or the current CUDA GPU. Device::cuda throws
  /// UnsupportedError in a build without CUDA and DeviceError without a usable GPU.
  Device device = Device::cpu;
  /// LSTM only, PyTorch's proj_size: 0 = none; else 1 ≤ proj < hidden and the output is the
  /// projection h_t = W_hr (o_t ⊙ tanh c_t), proj rows (docs/method.md §4.5). CPU only for now.
  Index proj = 0;
};

/// Rows of h_t, the layer's output and the next layer's input: proj when set, else hidden.
Index output_size(const RecurrentConfig& c);
/// Size of the scanned state: H (rnn, gru), or output_size + H (lstm: h then c).
Index state_size(const RecurrentConfig& c);

/// One layer's parameters under PyTorch's layout: weight_ih [G·H, I_l], weight_hh [G·H, P],
/// bias_ih, bias_hh [G·H], and with a projection weight_hr [P, H] (P = output_size; I_l = P
/// above layer 0); gate blocks stacked in PyTorch's order.
template <class T>
struct RecurrentLayerParams {
  RowMatrix<T> w_ih, w_hh;
  Vector<T> b_ih, b_hh;
  RowMatrix<T> w_hr;  ///< LSTM with proj: [proj, H]; empty otherwise
};

/// How forward() computes the states (docs/method.md §9). sequential: one step after another.
/// newton: Newton's method on the whole trajectory (DEER): every step's cell and Jacobian at
/// the current iterate in parallel, then the linear recurrence s_t = A_t s_{t−1} + c_t solved
/// by the scan engine, until a certificate holds at every step (certified steps are frozen: each
/// iteration certifies at least one more); else the sequential forward from the first uncertified
/// step (a result never depends on convergence). CPU only for now. automatic: per layer, newton
/// where the cost model predicts it faster, with the iterations it may take from the model, else
/// sequential (resolve_forward in bppsa/nn/cost_model.hpp).
enum class ForwardMethod { sequential, newton, automatic };
const char* to_string(ForwardMethod m);
/// "sequential", "newton", "auto"; InvalidArgument otherwise.
ForwardMethod parse_forward(std::string_view name);

struct ForwardOptions {
  ForwardMethod method = ForwardMethod::automatic;
  /// newton: iterations before falling back to the sequential forward (≥ 1); automatic: at most
  /// this many, fewer where the cost model says the sequential forward would be done sooner.
  int max_iterations = 30;
  /// newton: the certificate, max over steps and samples of ‖s_t − f(s_{t−1}, x_t)‖∞ /
  /// max(1, ‖f‖∞); 0 = 16 ε of the scalar type (the per-step rounding of a sequential forward).
  double tolerance = 0;
  /// newton: the scan that solves each iteration's linear recurrence.
  Algorithm algorithm = Algorithm::automatic;
  int threads = 0;  ///< 0 = OpenMP's default
  int chunks = 0;   ///< hybrid chunks (0 = automatic)
};

/// What the last forward() did, per layer: the method it ran (`automatic` resolved), the
/// iterations it allowed Newton (0 for a sequential layer), Newton's iterations (0 for a
/// sequential layer), its final certificate residual, and whether the layer fell back to the
/// sequential forward (iterations exhausted, or a residual that is not finite) and from which step
/// (1-based: the steps before it are Newton's, certified; 0 = none). `method`: the one asked for.
struct ForwardReport {
  ForwardMethod method = ForwardMethod::automatic;
  std::vector<ForwardMethod> ran;
  std::vector<int> max_iterations;
  std::vector<int> iterations;
  std::vector<double> residual;
  std::vector<bool> fell_back;
  std::vector<Index> fallback_step;
  int fallbacks() const;
};

/// A one-layer stack's tensors in the caller's memory (PyTorch's: C order, time-major), on the
/// stack's device: host memory for Device::cpu, the current CUDA device's for Device::cuda. With
/// P = output_size and G·H gate rows: x (T, B, I); h0, h_n (B, P); c0, c_n (B, H); w_ih (G·H, I);
/// w_hh (G·H, P); b_ih, b_hh (G·H); w_hr (P, H). Null: absent (zeros for h0, c0 and the biases).
/// The weights and x are read in place (on either device), by the forward and again by
/// backward_io: they must stay alive and unchanged until backward_io's work has run (on
/// Device::cuda: until what it queued on its stream has run), or, when no backward follows,
/// until the forward's has.
template <class T>
struct LayerForwardIo {
  const T *x = nullptr, *h0 = nullptr, *c0 = nullptr;
  const T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr, *w_hr = nullptr;
  T *out = nullptr, *h_n = nullptr, *c_n = nullptr;
  /// false: an inference call, no backward_io follows. The CPU half then keeps no record (a
  /// sequential forward without lengths runs in cache-sized chunks, to the same bits).
  bool record = true;
};
/// A backward's tensors, shaped as their forward counterparts: the weights forward_io read (the
/// same addresses, unchanged since), the incoming gradients (null: zero) and the gradients to
/// write (null: not wanted, and on Device::cpu not computed).
template <class T>
struct LayerBackwardIo {
  const T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr, *w_hr = nullptr;
  const T *grad_out = nullptr, *grad_hn = nullptr, *grad_cn = nullptr;
  T *grad_x = nullptr, *grad_h0 = nullptr, *grad_c0 = nullptr;
  T *grad_w_ih = nullptr, *grad_w_hh = nullptr, *grad_b_ih = nullptr, *grad_b_hh = nullptr, *grad_w_hr = nullptr;
};

/// On the GPU (config.device = Device::cuda). Parameters, the forward record and every gradient
/// live in device memory, allocated once per (steps, batch) and reused. The forward runs the
/// input projections of all steps as one cuBLAS GEMM and the recurrence as one persistent kernel
/// per layer; the backward computes the state gradients by BP through time (a persistent kernel,
/// `bp`), the fused chunked scan (`blelloch`; `auto` when its plan has several chunks, else
/// `bp`) or Jacobians generated on the GPU and the generic GPU scan engine (`linear`, `hybrid`),
/// then every parameter gradient as GEMMs over all T·B columns. Results equal the CPU engine's
/// to float rounding (1e-4 relative per tensor in fp32) and are bit-identical run to run.
/// Host-visible state is synchronised on demand:
/// params()/grads() (and state(), output(), input_grad(), state0_grad()) download what the GPU
/// changed since; a change made through the non-const params() is uploaded before the next
/// forward. backward() returns when the GPU has finished (it checks the gradients' finiteness,
/// as the CPU does). BackwardOptions::threads is ignored; chunks is hybrid's chunk count (0 =
/// √T). The persistent kernels give each block a group of samples for all T steps (no grid-wide
/// barrier) and keep W_hh in shared memory when it fits (fp32: RNN H ≤ 239, GRU ≤ 138, LSTM ≤
/// 119 on an H100), else read it from L2. layer_transfer() and chain() are CPU-only
/// (UnsupportedError).
template <class T>
class Recurrent {
 public:
  explicit Recurrent(RecurrentConfig config);
  ~Recurrent();
  Recurrent(Recurrent&&) noexcept;
  Recurrent& operator=(Recurrent&&) noexcept;

  const RecurrentConfig& config() const { return config_; }
  Index layers() const { return config_.layers; }
  Device device() const { return config_.device; }
  RecurrentLayerParams<T>& params(Index layer);
  const RecurrentLayerParams<T>& params(Index layer) const;
  /// Gradients of the last backward(), same shapes as params().
  const RecurrentLayerParams<T>& grads(Index layer) const;

  /// How the next forward() runs (ForwardOptions); InvalidArgument for bad values,
  /// UnsupportedError for newton on Device::cuda.
  void set_forward_options(const ForwardOptions& options);
  const ForwardOptions& forward_options() const;
  /// What the last forward() did (ForwardReport).
  const ForwardReport& forward_report() const;

  /// PyTorch's default initialisation: every weight and bias U(−1/√H, 1/√H), from `seed`.
  void reset_parameters(std::uint64_t seed);

  /// Optional initial states s_0 (state_size × batch) per layer for the next forward();
  /// empty = zeros (PyTorch's default). LSTM: the first output_size rows are h_0, the last H c_0.
  void set_initial_state(Index layer, Matrix<T> s0);

  /// Runs all layers over x: features × (steps·batch), time-major columns (column t·B + b
  /// holds step t of sample b). Records what backward() needs. x may be a map of the
  /// caller's buffer (a (steps, batch, features) C-order array has exactly this layout).
  ///
  /// Variable lengths: `lengths` gives each sample's length, 1..steps, sorted longest
  /// first (non-increasing; PyTorch's packed order), ShapeError/InvalidArgument otherwise;
  /// empty = every sample runs every step. Sample b runs steps 1..lengths[b] only: its later
  /// steps are not computed (Device::cpu: no forward, no Jacobians, no products in the scan,
  /// which runs each sample's chain at its own length; Device::cuda: the kernels skip them, a
  /// scan passes its gradient through them unchanged), its outputs and states there are zeros
  /// (as PyTorch's padded output), and gradients given there are not used. final_state() gives
  /// each sample's s at its length; set_final_state_grad applies there.
  void forward(const Eigen::Ref<const Matrix<T>>& x, Index steps, Index batch, std::span<const Index> lengths = {});
  Index steps() const;
  Index batch() const;
  /// The lengths of the last forward() (empty: every sample ran every step).
  const std::vector<Index>& lengths() const;
  /// State s_t (state_size × batch; LSTM: h over c) of a layer after forward(), 0 ≤ t ≤ steps.
  Matrix<T> state(Index layer, Index t) const;
  /// Each sample's last state (state_size × batch): s at its length; state(layer, steps)
  /// without lengths.
  Matrix<T> final_state(Index layer) const;
  /// Top layer's outputs h_1 … h_T: output_size × (steps·batch), time-major columns.
  Eigen::Block<const Matrix<T>, Eigen::Dynamic, Eigen::Dynamic, true> output() const;

  /// Optional extra gradient on a layer's FINAL state s_T (state_size × batch; LSTM: h_T's
  /// rows over c_T's), added to g_T by every later backward (every method):
  /// when a sequence is split over time, what the stage after this one sends back as its
  /// state0_grad(). Empty = none (the default). It lives until replaced or cleared (set an
  /// empty matrix): it is NOT consumed by a backward. The rows are checked here (ShapeError);
  /// the columns, which depend on the batch of the forward it is used with, by
  /// backward_begin() and backward_layer().
  void set_final_state_grad(Index layer, Matrix<T> g);

  /// Backward from ∂ℓ/∂(top-layer outputs), output_size × (steps·batch) time-major. every_step = false
  /// means only the last step's block is non-zero (many-to-one): the top layer's scan is
  /// then linear (no injections). Fills grads(), input_grad() and state0_grad().
  /// Same as backward_begin() then backward_layer(l) for l = layers − 1 … 0.
  void backward(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step, const BackwardOptions& options,
                BackwardTimes* times = nullptr);

  /// Layer-by-layer backward (for pipelines that exchange state gradients between stages):
  /// checks the shapes as backward() does and keeps a copy of grad_out for the layers.
  void backward_begin(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step);
  /// One layer of backward(): its state gradients, parameter gradients, the gradient on its
  /// input (passed to the layer below; input_grad() for layer 0) and its state0_grad().
  /// Layers run top-down: layers − 1 first, then each one below, after backward_begin();
  /// InvalidArgument otherwise. `times` accumulates this layer's times.
  void backward_layer(Index layer, const BackwardOptions& options, BackwardTimes* times = nullptr);
  /// The layer's map from the extra gradient on its final state (set_final_state_grad) to its
  /// initial-state gradient, which is affine: g_0 = M · g_in + v per sample, where
  /// M = J_1^T · J_2^T ⋯ J_T^T (state_size × state_size per sample; M^T = ∂s_T/∂s_0) and v
  /// is the g_0 of this backward without an extra final gradient (the gradients from the
  /// head or the layer above at every step, the last one included). Same ordering rule as
  /// backward_layer(layer) — the layer above must have had its backward_layer() — but it does
  /// not advance it: backward_layer(layer) comes next and gives exactly what it gives
  /// without this call. Fills chain(layer) (so checks memory like a scan backward). With
  /// lengths, sample b's M is that of its own steps 1..lengths[b] (a dense M, one block per
  /// sample; no Jacobian past a length) and g_in applies at its length, as
  /// set_final_state_grad does.
  std::pair<Jacobian<T>, Matrix<T>> layer_transfer(Index layer, const BackwardOptions& options);

  /// forward() of a one-layer stack on the caller's tensors (LayerForwardIo; what bppsa.nn
  /// runs): the weights are read from io, the initial state from h0 / c0, and out, h_n (each
  /// sample's at its length) and c_n are written. lengths as forward(). Both devices compute on
  /// io's weights and x in place (no copy; params(0) are left as they were), and keep reading
  /// them until backward_io (Device::cuda copies x when lengths are given, to zero its padding). Its backward
  /// is backward_io (backward() and layer_transfer() refuse it: InvalidArgument). On
  /// Device::cuda every copy and kernel is queued on `stream` (a cudaStream_t; 0: the legacy
  /// default stream) and nothing waits for it; `stream` is unused on the CPU. The caller has
  /// checked the tensors' shapes (InvalidArgument for a stack of more than one layer).
  void forward_io(const LayerForwardIo<T>& io, Index steps, Index batch, std::span<const Index> lengths = {},
                  std::uintptr_t stream = 0);
  /// backward() of the last forward_io from the gradients on out, h_n and c_n (those on out past
  /// a sample's length are not used), writing the gradients asked for in place (into io only:
  /// grads() and input_grad() are not updated). io's weights must be the forward's
  /// (InvalidArgument for other addresses; values changed in between are not detected and give
  /// wrong gradients), as must the x it read. Returns how the state
  /// gradients were computed: the method that ran (automatic resolved), "fused" for the GPU's
  /// fused chunked scan. On Device::cuda grad_out is required (zeros when none flows back) and,
  /// with options.check_finite, the parameter gradients' finiteness is checked (waiting for the
  /// stream; NonFiniteError; UnsupportedError while `stream` is being captured into a CUDA
  /// graph, where nothing may wait).
  std::string backward_io(const LayerBackwardIo<T>& io, const BackwardOptions& options, std::uintptr_t stream = 0);
  /// Frees the last forward's record and the backward's buffers, unless they are small: those of
  /// at most 64 columns (a decoder's one-step calls), and on the CPU a sequential forward's and
  /// BP's while all the records kept in the process stay within BPPSA_KEPT_RECORD_MB (default 16
  /// MiB; 0: none but a decoder's), since a fresh allocation page-faults at every call. A kept
  /// record still serves a second backward; a freed one needs a new forward. The parameters stay.
  /// Device::cuda keeps its buffers (they are reused per shape).
  void release_record();

  /// Throws ResourceError (bppsa/core/memory.hpp), with the numbers, when a training step of
  /// this many steps and samples cannot fit in this machine's memory: the forward record, the
  /// gradients and, for a scan, every layer's Jacobians (steps × batch × values per Jacobian;
  /// twice that for Blelloch's intermediate products; bp stores none). forward() and
  /// backward() check their parts themselves; call it before training to fail fast.
  void check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const;
  /// ∂ℓ/∂x, same shape as forward()'s x.
  const Matrix<T>& input_grad() const;
  /// ∂ℓ/∂s_0 of a layer (state_size × batch): g_0 of its scan.
  const Matrix<T>& state0_grad(Index layer) const;
  /// The Jacobian chain of a layer as generated by the last scan backward (J_t^T for
  /// t = 1..steps; with lengths, one sample's chain after another, batch 1, joined by zero
  /// diagonal elements, see docs/method.md §4.6): for inspection and tests.
  const Chain<T>& chain(Index layer) const;

 private:
  friend struct detail::RecurrentAccess<T>;
  struct Impl;
  RecurrentConfig config_;
  // Host copies; on Device::cuda a cache of the device's, brought up to date by the half's pull().
  mutable std::vector<RecurrentLayerParams<T>> params_, grads_;
  std::unique_ptr<Impl> impl_;
};

extern template class Recurrent<float>;
extern template class Recurrent<double>;

}  // namespace bppsa
