// Recurrent layer stacks, the front: checks shapes and call order, holds the host copies of
// the parameters, and dispatches to the stack's half (nn/recurrent_half.hpp): the CPU half in
// src/nn/cpu/recurrent.cpp, the CUDA half in src/nn/cuda/recurrent.cpp.
#include "bppsa/nn/recurrent.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <random>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "core/random.hpp"
#include "nn/lengths.hpp"
#include "nn/recurrent_half.hpp"

namespace bppsa {

const char* to_string(CellType c) {
  switch (c) {
    case CellType::rnn:
      return "rnn";
    case CellType::gru:
      return "gru";
    case CellType::lstm:
      return "lstm";
  }
  return "?";
}

CellType parse_cell(std::string_view name) {
  if (name == "rnn") return CellType::rnn;
  if (name == "gru") return CellType::gru;
  if (name == "lstm") return CellType::lstm;
  detail::raise<InvalidArgument>("model", "unknown recurrent cell '" + std::string(name) + "'; use rnn, gru or lstm");
}

const char* to_string(Nonlinearity n) { return n == Nonlinearity::relu ? "relu" : "tanh"; }

Nonlinearity parse_nonlinearity(std::string_view name) {
  if (name == "tanh") return Nonlinearity::tanh;
  if (name == "relu") return Nonlinearity::relu;
  detail::raise<InvalidArgument>("model", "unknown nonlinearity '" + std::string(name) + "'; use tanh or relu");
}

Index gate_count(CellType c) { return c == CellType::rnn ? 1 : c == CellType::gru ? 3 : 4; }
Index state_size(CellType c, Index hidden) { return c == CellType::lstm ? 2 * hidden : hidden; }
const char* to_string(ForwardMethod m) {
  return m == ForwardMethod::newton ? "newton" : m == ForwardMethod::automatic ? "auto" : "sequential";
}

ForwardMethod parse_forward(std::string_view name) {
  if (name == "sequential") return ForwardMethod::sequential;
  if (name == "newton") return ForwardMethod::newton;
  if (name == "auto") return ForwardMethod::automatic;
  detail::raise<InvalidArgument>(
      "parse_forward", "unknown forward method '" + std::string(name) + "'; expected sequential, newton or auto");
}

int ForwardReport::fallbacks() const { return static_cast<int>(std::count(fell_back.begin(), fell_back.end(), true)); }

Index output_size(const RecurrentConfig& c) { return c.proj > 0 ? c.proj : c.hidden; }
Index state_size(const RecurrentConfig& c) { return c.cell == CellType::lstm ? output_size(c) + c.hidden : c.hidden; }

namespace detail {
namespace {

/// What a layer stack holds for steps × batch, part by part, in bytes (doubles: absurd sizes
/// cannot overflow). Every layer keeps its own record, gradients, chain and scanner.
struct StackBytes {
  double params = 0;     ///< weights and their gradients
  double record = 0;     ///< forward: inputs, states, gates (detail::LayerRecord)
  double grads = 0;      ///< backward: state and pre-activation gradients, input gradients
  double jacobians = 0;  ///< scan: steps × batch × values per Jacobian
  double workspace = 0;  ///< scan: intermediate products (Blelloch keeps about as many again)
};

StackBytes stack_bytes(const RecurrentConfig& c, Index steps, Index batch, std::size_t scalar, BackwardMethod method) {
  const double H = static_cast<double>(c.hidden), G = static_cast<double>(gate_count(c.cell)) * H,
               P = static_cast<double>(output_size(c)), S = static_cast<double>(state_size(c)),
               T = static_cast<double>(steps), B = static_cast<double>(batch), TB = T * B, T1B = (T + 1) * B,
               size = static_cast<double>(scalar);
  const bool rnn = c.cell == CellType::rnn, lstm = c.cell == CellType::lstm, gru = c.cell == CellType::gru;
  StackBytes b;
  for (Index l = 0; l < c.layers; ++l) {
    const double I = static_cast<double>(l == 0 ? c.input : output_size(c));
    b.params += 2 * (G * (I + P) + 2 * G + (c.proj > 0 ? P * H : 0));
    // x, h, c, gates and their scratch, the GRU's or LSTM's aux, the projection's o ⊙ tanh c
    b.record += I * TB + P * T1B + (lstm ? H * T1B : 0) + G * TB * (rnn ? 1 : 2) + (rnn ? 0 : H * TB) +
                (c.proj > 0 ? H * TB : 0);
    b.grads += S * T1B + G * TB * (gru ? 2 : 1) + I * TB;
    if (method != BackwardMethod::bp) {
      b.jacobians += TB * (rnn ? H : S * S) + S * T1B;  // and the scan's g_0 … g_T
      if (method == BackwardMethod::blelloch || method == BackwardMethod::automatic)
        b.workspace += TB * (rnn ? H * H : S * S);
      else if (method == BackwardMethod::hybrid && !rnn)  // per-sample dense chunk products: about as many again
        b.workspace += TB * S * S;
    }
  }
  for (double* v : {&b.params, &b.record, &b.grads, &b.jacobians, &b.workspace}) *v *= size;
  return b;
}

/// Bytes of the records and backward buffers that every Recurrent of the process keeps between
/// calls (release_record): at most kept_budget(), so that a small step does not page-fault its
/// buffers afresh at each call while a large one frees them as soon as its backward is done.
std::atomic<std::int64_t> g_kept_bytes{0};

/// The budget: BPPSA_KEPT_RECORD_MB (MiB, ≥ 0; 0 frees every record past a decoder step's) or 16 MiB.
std::int64_t kept_budget() {
  const char* v = std::getenv("BPPSA_KEPT_RECORD_MB");
  if (v == nullptr || *v == '\0') return std::int64_t{16} << 20;
  char* end = nullptr;
  const double mb = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(mb >= 0) || mb > 1e9)
    raise<InvalidArgument>("BPPSA_KEPT_RECORD_MB",
                           std::string("must be a number of MiB ≥ 0, got '") + v + "'; unset it for the default, 16");
  return static_cast<std::int64_t>(mb * 1048576.0);
}

/// The addresses of an io call's weights (w_hr only with a projection): backward_io must get forward_io's.
template <class Io>
std::array<const void*, 5> weight_addresses(const Io& io, const RecurrentConfig& config) {
  return {io.w_ih, io.w_hh, io.b_ih, io.b_hh, config.proj > 0 ? io.w_hr : nullptr};
}

}  // namespace

std::string stack_string(const RecurrentConfig& c, Index steps, Index batch) {
  return std::to_string(steps) + " steps × batch " + std::to_string(batch) + " through " + to_string(c.cell) +
         " hidden " + std::to_string(c.hidden) + (c.proj > 0 ? " proj " + std::to_string(c.proj) : "") + " × " +
         std::to_string(c.layers) + " layer" + (c.layers == 1 ? "" : "s");
}

double forward_record_bytes(const RecurrentConfig& c, Index steps, Index batch, std::size_t scalar) {
  return stack_bytes(c, steps, batch, scalar, BackwardMethod::bp).record;
}

// Refused up front, with the numbers, instead of dying in the allocator halfway through an epoch.
void check_step_memory(const RecurrentConfig& c, Index steps, Index batch, std::size_t scalar, BackwardMethod method,
                       const char* op) {
  const StackBytes b = stack_bytes(c, steps, batch, scalar, method);
  const bool scan = method != BackwardMethod::bp;
  const bool blelloch = method == BackwardMethod::blelloch || method == BackwardMethod::automatic;
  check_memory(op,
               std::string(scan ? std::string("the ") + to_string(method) + " scan" : std::string("BP")) +
                   " backward of " + stack_string(c, steps, batch),
               {{"Jacobians (steps × batch × values per Jacobian)", b.jacobians},
                {"scan workspace", b.workspace},
                {"forward record", b.record},
                {"gradients", b.grads},
                {"weights", b.params}},
               scan ? std::string("use a smaller --batch") + (blelloch ? ", --backward hybrid" : "") +
                          ", or --backward bp (which stores no Jacobians)"
                    : "use a smaller --batch, shorter sequences or a smaller --hidden");
}

}  // namespace detail

template <class T>
struct Recurrent<T>::Impl {
  std::unique_ptr<detail::RecurrentHalf<T>> half;
  std::vector<Matrix<T>> s0;       ///< per layer: initial state, empty = zeros
  std::vector<Matrix<T>> g_final;  ///< per layer: extra gradient on s_T (set_final_state_grad), empty = none
  std::vector<Index> lengths;      ///< of the last forward; empty = every sample ran every step
  ForwardOptions forward_options;
  // Layer-by-layer backward: the layer whose backward_layer comes next (−1: none,
  // backward_begin first). The layer below needs the layer above's input gradient, hence the
  // strict top-down order.
  Index next_layer = -1;
  /// The last forward was forward_io, on these weights (w_ih, w_hh, b_ih, b_hh, w_hr): its
  /// backward is backward_io, on the same ones.
  bool io_forward = false;
  /// ... and kept a record for backward_io (LayerForwardIo::record).
  bool io_recorded = false;
  std::array<const void*, 5> io_weights{};
  /// What release_record keeps of the budget (detail::g_kept_bytes), and whether the half has
  /// run anything that holds more than a sequential forward's record and BP's buffers (a scan's
  /// Jacobians: such a half is never kept).
  std::int64_t kept = 0;
  bool scanned = false;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() { unkeep(); }
  /// Hands this stack's share of the budget back.
  void unkeep() {
    detail::g_kept_bytes -= kept;
    kept = 0;
  }
  /// A Newton forward holds its scan's buffers.
  void note_forward(const detail::RecurrentHalf<T>& h) {
    const auto& ran = h.forward_report().ran;
    if (std::find(ran.begin(), ran.end(), ForwardMethod::newton) != ran.end()) scanned = true;
  }
  /// Counts `bytes` as this stack's kept buffers if the process's budget allows (true).
  bool keep(std::int64_t bytes, std::int64_t budget) {
    std::int64_t cur = detail::g_kept_bytes.load();
    do {
      if (cur - kept + bytes > budget) return false;
    } while (!detail::g_kept_bytes.compare_exchange_weak(cur, cur - kept + bytes));
    kept = bytes;
    return true;
  }

  static detail::LayerMatrices<T> present(const std::vector<Matrix<T>>& m) {
    detail::LayerMatrices<T> out;
    for (const auto& x : m) out.push_back(x.size() != 0 ? &x : nullptr);
    return out;
  }
  void check_order(Index l, const char* op) const {
    if (next_layer < 0)
      detail::raise<InvalidArgument>(op, "layer " + std::to_string(l) +
                                             ": call backward_begin() after forward() first (layers then run "
                                             "top-down, each once)");
    if (l != next_layer)
      detail::raise<InvalidArgument>(op, "layer " + std::to_string(l) + " out of order: layer " +
                                             std::to_string(next_layer) +
                                             " is next (layers run top-down: the layer below needs the gradient "
                                             "the layer above passes down)");
  }
  /// The extra final-state gradient of layer l must be S × B for the current forward.
  void check_final_grad(Index l, Index S, Index B, const char* op) const {
    const Matrix<T>& gf = g_final[static_cast<std::size_t>(l)];
    if (gf.size() != 0 && (gf.rows() != S || gf.cols() != B))
      detail::raise<ShapeError>(op, "final-state gradient of layer " + std::to_string(l) + " is " +
                                        shape_string(gf.rows(), gf.cols()) + ", expected " + shape_string(S, B));
  }
};

template <class T>
Recurrent<T>::Recurrent(RecurrentConfig config) : config_(config), impl_(std::make_unique<Impl>()) {
  if (config.input < 1 || config.hidden < 1 || config.layers < 1)
    detail::raise<InvalidArgument>("Recurrent", "input size, hidden size and layers must be ≥ 1 (got input " +
                                                    std::to_string(config.input) + ", hidden " +
                                                    std::to_string(config.hidden) + ", layers " +
                                                    std::to_string(config.layers) + ")");
  if (config.cell != CellType::rnn && config.nonlinearity != Nonlinearity::tanh)
    detail::raise<InvalidArgument>(
        "Recurrent",
        std::string("nonlinearity 'relu' applies to the plain RNN cell only, not ") + to_string(config.cell));
  if (config.proj != 0) {
    if (config.cell != CellType::lstm)
      detail::raise<InvalidArgument>("Recurrent", std::string("a projection (proj ") + std::to_string(config.proj) +
                                                      ") applies to the LSTM cell only, not " + to_string(config.cell));
    if (config.proj < 0 || config.proj >= config.hidden)
      detail::raise<InvalidArgument>("Recurrent", "proj must be ≥ 1 and smaller than hidden (got proj " +
                                                      std::to_string(config.proj) + ", hidden " +
                                                      std::to_string(config.hidden) + "); 0 = no projection");
    if (config.device != Device::cpu)
      detail::raise<UnsupportedError>("Recurrent",
                                      "an LSTM with a projection (proj) runs on the CPU only; use Device::cpu "
                                      "(--device cpu) or proj 0");
  }
  check_memory(
      "Recurrent",
      std::string("a ") + to_string(config.cell) + " with input " + std::to_string(config.input) + ", hidden " +
          std::to_string(config.hidden) + (config.proj > 0 ? ", proj " + std::to_string(config.proj) : "") + " and " +
          std::to_string(config.layers) + " layers",
      {{"weights and their gradients", detail::stack_bytes(config, 1, 1, sizeof(T), BackwardMethod::bp).params}},
      "use a smaller --hidden or fewer --layers");
  const Index gh = gate_count(config.cell) * config.hidden, P = output_size(config);
  params_.resize(static_cast<std::size_t>(config.layers));
  for (Index l = 0; l < config.layers; ++l) {
    auto& p = params_[static_cast<std::size_t>(l)];
    p.w_ih = RowMatrix<T>::Zero(gh, l == 0 ? config.input : P);
    p.w_hh = RowMatrix<T>::Zero(gh, P);
    p.b_ih = Vector<T>::Zero(gh);
    p.b_hh = Vector<T>::Zero(gh);
    if (config.proj > 0) p.w_hr = RowMatrix<T>::Zero(P, config.hidden);
  }
  grads_ = params_;
  impl_->s0.resize(static_cast<std::size_t>(config.layers));
  impl_->g_final.resize(static_cast<std::size_t>(config.layers));
  impl_->half =
      config.device == Device::cuda ? detail::make_recurrent_cuda<T>(config) : detail::make_recurrent_cpu<T>(config);
}

template <class T>
Recurrent<T>::~Recurrent() = default;
template <class T>
Recurrent<T>::Recurrent(Recurrent&&) noexcept = default;
template <class T>
Recurrent<T>& Recurrent<T>::operator=(Recurrent&&) noexcept = default;

template <class T>
RecurrentLayerParams<T>& Recurrent<T>::params(Index layer) {
  impl_->half->pull(params_, grads_);
  impl_->half->host_written();  // the caller may change them
  return params_.at(static_cast<std::size_t>(layer));
}

template <class T>
const RecurrentLayerParams<T>& Recurrent<T>::params(Index layer) const {
  impl_->half->pull(params_, grads_);
  return params_.at(static_cast<std::size_t>(layer));
}

template <class T>
const RecurrentLayerParams<T>& Recurrent<T>::grads(Index layer) const {
  impl_->half->pull(params_, grads_);
  return grads_.at(static_cast<std::size_t>(layer));
}

template <class T>
Index Recurrent<T>::steps() const {
  return impl_->half->steps();
}

template <class T>
Index Recurrent<T>::batch() const {
  return impl_->half->batch();
}

template <class T>
void Recurrent<T>::reset_parameters(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(config_.hidden));
  auto draw = [&] { return static_cast<T>((detail::uniform01(rng) * 2 - 1) * bound); };
  for (auto& p : params_) {
    for (Index i = 0; i < p.w_ih.size(); ++i) p.w_ih.data()[i] = draw();
    for (Index i = 0; i < p.w_hh.size(); ++i) p.w_hh.data()[i] = draw();
    for (Index i = 0; i < p.b_ih.size(); ++i) p.b_ih[i] = draw();
    for (Index i = 0; i < p.b_hh.size(); ++i) p.b_hh[i] = draw();
    for (Index i = 0; i < p.w_hr.size(); ++i) p.w_hr.data()[i] = draw();
  }
  impl_->half->host_written();  // every value replaced: the host copy is the current one
}

template <class T>
void Recurrent<T>::set_initial_state(Index layer, Matrix<T> s0) {
  if (layer < 0 || layer >= config_.layers)
    detail::raise<InvalidArgument>(
        "Recurrent::set_initial_state",
        "layer " + std::to_string(layer) + " out of range (the model has " + std::to_string(config_.layers) + ")");
  impl_->s0[static_cast<std::size_t>(layer)] = std::move(s0);
}

template <class T>
void Recurrent<T>::set_final_state_grad(Index layer, Matrix<T> g) {
  const char* op = "Recurrent::set_final_state_grad";
  if (layer < 0 || layer >= config_.layers)
    detail::raise<InvalidArgument>(
        op, "layer " + std::to_string(layer) + " out of range (the model has " + std::to_string(config_.layers) + ")");
  const Index S = state_size(config_);
  // Only the rows are known here: the batch is the next forward's.
  if (g.size() != 0 && g.rows() != S)
    detail::raise<ShapeError>(op, "final-state gradient of layer " + std::to_string(layer) + " is " +
                                      shape_string(g.rows(), g.cols()) + ", expected " + std::to_string(S) +
                                      " rows (state size × batch)");
  impl_->g_final[static_cast<std::size_t>(layer)] = std::move(g);
}

template <class T>
void Recurrent<T>::forward(const Eigen::Ref<const Matrix<T>>& x, Index steps, Index batch,
                           std::span<const Index> lengths) {
  const char* op = "Recurrent::forward";
  if (steps < 1 || batch < 1)
    detail::raise<ShapeError>(op, "need at least one step and one sample (got " + std::to_string(steps) +
                                      " steps, batch " + std::to_string(batch) + ")");
  detail::check_sorted_lengths(op, lengths, batch, steps);
  if (x.rows() != config_.input || x.cols() != steps * batch)
    detail::raise<ShapeError>(op, "input is " + shape_string(x.rows(), x.cols()) + ", expected " +
                                      shape_string(config_.input, steps * batch) +
                                      " (input size × steps·batch, time-major columns)");
  const Index S = state_size(config_);
  for (Index l = 0; l < config_.layers; ++l) {
    const Matrix<T>& s0 = impl_->s0[static_cast<std::size_t>(l)];
    if (s0.size() != 0 && (s0.rows() != S || s0.cols() != batch))
      detail::raise<ShapeError>(op, "initial state of layer " + std::to_string(l) + " is " +
                                        shape_string(s0.rows(), s0.cols()) + ", expected " + shape_string(S, batch));
  }
  impl_->next_layer = -1;  // a layer-by-layer backward in progress belonged to the previous forward
  impl_->io_forward = false;
  impl_->io_recorded = false;
  impl_->lengths.clear();
  // All the same length as the batch's steps: the plain (padded) path gives the same result.
  if (!lengths.empty() && lengths.back() < steps) impl_->lengths.assign(lengths.begin(), lengths.end());
  impl_->half->forward(x, steps, batch, params_, Impl::present(impl_->s0), impl_->lengths);
  impl_->note_forward(*impl_->half);
}

template <class T>
void Recurrent<T>::forward_io(const LayerForwardIo<T>& io, Index steps, Index batch, std::span<const Index> lengths,
                              std::uintptr_t stream) {
  const char* op = "Recurrent::forward_io";
  if (config_.layers != 1)
    detail::raise<InvalidArgument>(op, "runs a one-layer stack (this one has " + std::to_string(config_.layers) +
                                           " layers): stack the layers around it");
  if (steps < 1 || batch < 1)
    detail::raise<ShapeError>(op, "need at least one step and one sample (got " + std::to_string(steps) +
                                      " steps, batch " + std::to_string(batch) + ")");
  if (io.x == nullptr || io.w_ih == nullptr || io.w_hh == nullptr || io.out == nullptr || io.h_n == nullptr ||
      (config_.cell == CellType::lstm && io.c_n == nullptr) || (config_.proj > 0 && io.w_hr == nullptr))
    detail::raise<InvalidArgument>(op,
                                   "x, weight_ih, weight_hh, out and h_n are required (and c_n for an LSTM, "
                                   "weight_hr with a projection)");
  detail::check_sorted_lengths(op, lengths, batch, steps);
  impl_->next_layer = -1;
  impl_->io_forward = false;  // until it has run
  impl_->io_recorded = false;
  impl_->lengths.clear();
  if (!lengths.empty() && lengths.back() < steps) impl_->lengths.assign(lengths.begin(), lengths.end());
  impl_->half->forward_io(io, steps, batch, impl_->lengths, stream, params_);
  impl_->note_forward(*impl_->half);
  impl_->io_forward = true;
  impl_->io_recorded = io.record;
  impl_->io_weights = detail::weight_addresses(io, config_);
}

template <class T>
std::string Recurrent<T>::backward_io(const LayerBackwardIo<T>& io, const BackwardOptions& options,
                                      std::uintptr_t stream) {
  const char* op = "Recurrent::backward_io";
  if (steps() == 0 || !impl_->io_recorded)
    detail::raise<InvalidArgument>(op, "call forward_io() (with record true) before backward_io()");
  if (impl_->io_weights != detail::weight_addresses(io, config_))
    detail::raise<InvalidArgument>(op,
                                   "the weights (w_ih, w_hh, b_ih, b_hh, w_hr) must be those forward_io read, "
                                   "at the same addresses and unchanged: the backward reads them in place");
  impl_->next_layer = -1;
  std::string method = impl_->half->backward_io(io, options, impl_->lengths, stream, params_, grads_);
  if (method != "bp") impl_->scanned = true;
  return method;
}

template <class T>
void Recurrent<T>::release_record() {
  constexpr Index kKeptColumns = 64;  // a decoder's one-step calls keep their buffers
  if (config_.device == Device::cuda || steps() * batch() <= kKeptColumns) return;
  // A small record is kept within the process's budget (its pages stay mapped for the next call).
  const detail::StackBytes b = detail::stack_bytes(config_, steps(), batch(), sizeof(T), BackwardMethod::bp);
  if (!impl_->scanned && impl_->keep(static_cast<std::int64_t>(b.record + b.grads), detail::kept_budget())) return;
  impl_->unkeep();
  impl_->scanned = false;
  impl_->half->pull(params_, grads_);
  impl_->half = detail::make_recurrent_cpu<T>(config_);
  impl_->half->set_forward_options(impl_->forward_options);
  impl_->lengths.clear();
  impl_->next_layer = -1;
  impl_->io_forward = false;
  impl_->io_recorded = false;
}

template <class T>
void Recurrent<T>::set_forward_options(const ForwardOptions& o) {
  const char* op = "Recurrent::set_forward_options";
  if (o.max_iterations < 1)
    detail::raise<InvalidArgument>(op, "max_iterations must be ≥ 1, got " + std::to_string(o.max_iterations));
  if (!(o.tolerance >= 0) || !std::isfinite(o.tolerance))
    detail::raise<InvalidArgument>(op,
                                   "tolerance must be ≥ 0 and finite (0 = 16 ε), got " + std::to_string(o.tolerance));
  if (o.threads < 0 || o.chunks < 0)
    detail::raise<InvalidArgument>(op, "threads and chunks must be ≥ 0 (0 = automatic)");
  if (o.algorithm == Algorithm::fused)
    detail::raise<InvalidArgument>(op,
                                   "the Newton forward's linear recurrences run on the scan engine: linear, "
                                   "blelloch, hybrid or auto, not fused");
  impl_->half->set_forward_options(o);
  impl_->forward_options = o;
}

template <class T>
const ForwardOptions& Recurrent<T>::forward_options() const {
  return impl_->forward_options;
}

template <class T>
const ForwardReport& Recurrent<T>::forward_report() const {
  return impl_->half->forward_report();
}

template <class T>
const std::vector<Index>& Recurrent<T>::lengths() const {
  return impl_->lengths;
}

template <class T>
Matrix<T> Recurrent<T>::final_state(Index layer) const {
  if (layer < 0 || layer >= config_.layers || steps() == 0)
    detail::raise<InvalidArgument>("Recurrent::final_state",
                                   "layer " + std::to_string(layer) + " out of range, or no forward() yet");
  return impl_->half->final_state(layer);
}

template <class T>
Eigen::Block<const Matrix<T>, Eigen::Dynamic, Eigen::Dynamic, true> Recurrent<T>::output() const {
  return impl_->half->output();
}

template <class T>
void Recurrent<T>::check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const {
  impl_->half->check_backward_memory(steps, batch, options);
}

template <class T>
Matrix<T> Recurrent<T>::state(Index layer, Index t) const {
  if (layer < 0 || layer >= config_.layers || t < 0 || t > steps())
    detail::raise<InvalidArgument>("Recurrent::state",
                                   "layer " + std::to_string(layer) + ", step " + std::to_string(t) + " out of range");
  return impl_->half->state(layer, t);
}

template <class T>
const Matrix<T>& Recurrent<T>::state0_grad(Index layer) const {
  return impl_->half->state0_grad(layer);
}

template <class T>
const Matrix<T>& Recurrent<T>::input_grad() const {
  return impl_->half->input_grad();
}

template <class T>
const Chain<T>& Recurrent<T>::chain(Index layer) const {
  return impl_->half->chain(layer);
}

template <class T>
void Recurrent<T>::backward(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step,
                            const BackwardOptions& options, BackwardTimes* times) {
  backward_begin(grad_out, every_step);
  for (Index l = config_.layers - 1; l >= 0; --l) backward_layer(l, options, times);
}

template <class T>
void Recurrent<T>::backward_begin(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step) {
  const char* op = "Recurrent::backward";
  const Index T_ = steps(), B = batch(), P = output_size(config_), S = state_size(config_);
  impl_->next_layer = -1;
  impl_->scanned = true;  // (backward_layer may scan; only backward_io tells what ran)
  if (T_ == 0) detail::raise<InvalidArgument>(op, "call forward() before backward()");
  if (impl_->io_forward)
    detail::raise<InvalidArgument>(op,
                                   "the last forward was forward_io, on the caller's weights: its backward is "
                                   "backward_io (or run forward() first)");
  if (grad_out.rows() != P || grad_out.cols() != T_ * B)
    detail::raise<ShapeError>(op, "output gradient is " + shape_string(grad_out.rows(), grad_out.cols()) +
                                      ", expected " + shape_string(P, T_ * B) +
                                      (config_.proj > 0 ? " (proj × steps·batch)" : " (hidden × steps·batch)"));
  for (Index l = 0; l < config_.layers; ++l) impl_->check_final_grad(l, S, B, op);
  impl_->half->backward_begin(grad_out, every_step, params_);
  impl_->next_layer = config_.layers - 1;
}

template <class T>
void Recurrent<T>::backward_layer(Index l, const BackwardOptions& options, BackwardTimes* times) {
  impl_->check_order(l, "Recurrent::backward_layer");
  impl_->check_final_grad(l, state_size(config_), batch(),
                          "Recurrent::backward");  // may have been set after backward_begin
  impl_->half->prepare_layer(l, options);
  // Until this layer is done, the order is broken: a throw below leaves its gradients half
  // written, so the next layer must not run on them (backward_begin starts over).
  impl_->next_layer = -1;
  const Matrix<T>& gf = impl_->g_final[static_cast<std::size_t>(l)];
  impl_->half->backward_layer(l, options, params_, grads_, gf.size() != 0 ? &gf : nullptr, times);
  impl_->next_layer = l - 1;  // −1 after layer 0: the backward is complete
}

template <class T>
std::pair<Jacobian<T>, Matrix<T>> Recurrent<T>::layer_transfer(Index l, const BackwardOptions& options) {
  impl_->check_order(l, "Recurrent::layer_transfer");  // (backward_begin refused a forward_io's record)
  return impl_->half->layer_transfer(l, options, params_);
}

namespace detail {

template <class T>
RecurrentHalf<T>& RecurrentAccess<T>::half(Recurrent<T>& r) {
  return *r.impl_->half;
}
template <class T>
const LayerParamsList<T>& RecurrentAccess<T>::params(const Recurrent<T>& r) {
  return r.params_;
}
template <class T>
void RecurrentAccess<T>::pull(const Recurrent<T>& r) {
  r.impl_->half->pull(r.params_, r.grads_);
}
template <class T>
LayerMatrices<T> RecurrentAccess<T>::initial_states(const Recurrent<T>& r) {
  return Recurrent<T>::Impl::present(r.impl_->s0);
}
template <class T>
LayerMatrices<T> RecurrentAccess<T>::final_grads(const Recurrent<T>& r) {
  return Recurrent<T>::Impl::present(r.impl_->g_final);
}
template struct RecurrentAccess<float>;
template struct RecurrentAccess<double>;

}  // namespace detail

template class Recurrent<float>;
template class Recurrent<double>;

}  // namespace bppsa
