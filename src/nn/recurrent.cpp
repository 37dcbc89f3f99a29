// Recurrent layer stacks: forward over all layers, and the backward pass by sequential BP or
// by the scan engine (Jacobians generated per cell type, see nn/cell.hpp), followed by the
// parameter gradients as GEMMs over every step at once.
#include "bppsa/nn/recurrent.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <random>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/jacobian/product.hpp"
#include "core/random.hpp"
#include "core/denormals.hpp"
#include "core/finite.hpp"
#include "core/team.hpp"
#include "nn/cell.hpp"
#include "nn/cuda/gpu_model.hpp"

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

namespace detail {
template <class T>
const CellOps<T>& cell_ops(CellType c, Nonlinearity nonlinearity) {
  switch (c) {
    case CellType::rnn:
      return nonlinearity == Nonlinearity::relu ? rnn_relu_ops<T>() : rnn_ops<T>();
    case CellType::gru:
      return gru_ops<T>();
    case CellType::lstm:
      return lstm_ops<T>();
  }
  return rnn_ops<T>();
}
template const CellOps<float>& cell_ops<float>(CellType, Nonlinearity);
template const CellOps<double>& cell_ops<double>(CellType, Nonlinearity);
}  // namespace detail

namespace {


/// Runs f(k) for k = 0 … blocks − 1 on a team of up to `team` threads, each block claimed by
/// whichever thread is free (subnormals flushed on every thread).
template <class F>
void claimed_blocks(int team, Index blocks, F&& f) {
  std::atomic<Index> next{0};
  auto body = [&](int) {
    detail::FlushDenormals flush;
    for (Index k; (k = next.fetch_add(1, std::memory_order_relaxed)) < blocks;) f(k);
  };
  if (std::min<Index>(team, blocks) <= 1)
    body(0);
  else
    detail::run_team(static_cast<int>(std::min<Index>(team, blocks)), body);
}

/// Runs f(t0, t1) over contiguous ranges covering steps 1..steps, on up to `threads` threads
/// (fewer for little work: `flops_per_step` sizes the team), each range claimed by whichever
/// thread is free: steps are independent in Jacobian generation and in the pre-activation gradients.
template <class F>
void parallel_over_steps(int threads, Index steps, double flops_per_step, F&& f) {
  const int team = detail::team_for(flops_per_step * static_cast<double>(steps), threads);
  if (team <= 1) {
    f(1, 1 + steps);
    return;
  }
  const Index chunks = std::min<Index>(steps, 4 * team);
  claimed_blocks(team, chunks, [&](Index c) { f(1 + steps * c / chunks, 1 + steps * (c + 1) / chunks); });
}

/// dst = a · b on up to `threads` threads (fewer for little work), in blocks of a fixed number of
/// rows of dst (kRows) or, with `by_columns`, of columns (kCols) claimed by whichever thread is
/// free. The blocks do not depend on the thread count, so neither do the results, to the bit.
/// dst must be sized and must not alias a or b.
template <class D, class A, class B>
void parallel_product(int threads, D&& dst, const A& a, const B& b, bool by_columns = false) {
  constexpr Index kRows = 64, kCols = 256;
  const Index n = by_columns ? dst.cols() : dst.rows(), block = by_columns ? kCols : kRows;
  const Index blocks = (n + block - 1) / block;
  const double flops = 2.0 * static_cast<double>(dst.rows()) * static_cast<double>(dst.cols()) *
                       static_cast<double>(a.cols());
  claimed_blocks(detail::team_for(flops, threads), blocks, [&](Index k) {
    const Index i0 = k * block, len = std::min(block, n - i0);
    if (by_columns)
      dst.middleCols(i0, len).noalias() = a * b.middleCols(i0, len);
    else
      dst.middleRows(i0, len).noalias() = a.middleRows(i0, len) * b;
  });
}

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
               S = static_cast<double>(state_size(c.cell, c.hidden)), T = static_cast<double>(steps),
               B = static_cast<double>(batch), TB = T * B, T1B = (T + 1) * B, size = static_cast<double>(scalar);
  const bool rnn = c.cell == CellType::rnn, lstm = c.cell == CellType::lstm, gru = c.cell == CellType::gru;
  StackBytes b;
  for (Index l = 0; l < c.layers; ++l) {
    const double I = static_cast<double>(l == 0 ? c.input : c.hidden);
    b.params += 2 * (G * (I + H) + 2 * G);
    b.record += I * TB + H * T1B * (lstm ? 2 : 1) + G * TB * (rnn ? 1 : 2) + (rnn ? 0 : H * TB);
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

std::string stack_string(const RecurrentConfig& c, Index steps, Index batch) {
  return std::to_string(steps) + " steps × batch " + std::to_string(batch) + " through " + to_string(c.cell) +
         " hidden " + std::to_string(c.hidden) + " × " + std::to_string(c.layers) + " layer" +
         (c.layers == 1 ? "" : "s");
}

/// The whole footprint of a training step (forward, backward and, for a scan, every layer's
/// Jacobians and workspace): refused up front, with the numbers, instead of dying in the
/// allocator halfway through an epoch.
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

/// Sequential BP through one layer (back-propagation through time with vector-Jacobian
/// products, no Jacobians formed): g (S × (T+1)B) comes with block T set and receives every
/// g_t for t = T−1..0; pg receives the pre-activation gradients. `above` (H × TB, the
/// gradient on the layer's outputs) is injected into the h rows of g_{t−1} when `inject`.
template <class T>
void bp_recurrence(const detail::CellOps<T>& ops, CellType cell, const RecurrentLayerParams<T>& p,
                   const detail::LayerRecord<T>& rec, const Matrix<T>& above, bool inject, Matrix<T>& g,
                   detail::PreactGrads<T>& pg, int threads) {
  const Index T_ = rec.steps, B = rec.batch, H = rec.hidden;
  auto& dh = cell == CellType::gru ? pg.dh : pg.dx;
  Matrix<T> carried(H, B);
  for (Index t = T_; t >= 1; --t) {
    ops.preact(rec, g, pg, t, t + 1);
    auto gprev = g.middleCols((t - 1) * B, B);
    if (inject && t >= 2) gprev.topRows(H) = above.middleCols((t - 2) * B, B);
    // W_hh^T · dh_t: a GEMM per step, shared among the threads for large states (gated cells).
    parallel_product(threads, carried, p.w_hh.transpose(), dh.middleCols((t - 1) * B, B));
    gprev.topRows(H) += carried;
    ops.direct(rec, g, t, gprev);
  }
}

}  // namespace


template <class T>
struct Recurrent<T>::Impl {
  struct Layer {
    detail::LayerRecord<T> rec;
    Matrix<T> s0;  ///< initial state, empty = zeros
    Matrix<T> g;   ///< state gradients S × (T+1)B
    Matrix<T> g0;  ///< g_0 = ∂ℓ/∂s_0, S × B
    detail::PreactGrads<T> pg;
    std::shared_ptr<Matrix<T>> w_hh_t = std::make_shared<Matrix<T>>();  ///< W_hh^T (RNN's shared S)
    Chain<T> chain;
    Index chain_steps = -1, chain_batch = -1;
    Scanner<T> scanner;
    Gradients<T> out;
    Matrix<T> g_final;  ///< extra gradient on s_T (set_final_state_grad), empty = none
  };
  std::vector<Layer> layer;
  Matrix<T> gx;  ///< gradient on the current layer's input (passes to the layer below)
  Matrix<T> g_last;
  // Layer-by-layer backward: backward_begin's copy of the head gradient, and the layer whose
  // backward_layer comes next (−1: none, backward_begin first). The layer below needs the
  // layer above's gx, hence the strict top-down order.
  Matrix<T> grad_out;
  bool every_step = false;
  Index next_layer = -1;
  std::unique_ptr<detail::gpu::RecurrentGpu<T>> gpu;  ///< Device::cuda: the GPU half
  Matrix<T> host_out;                                  ///< Device::cuda: output()'s download

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
    const Matrix<T>& gf = layer[static_cast<std::size_t>(l)].g_final;
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
    detail::raise<InvalidArgument>("Recurrent", std::string("nonlinearity 'relu' applies to the plain RNN cell only, not ") +
                                                    to_string(config.cell));
  check_memory("Recurrent",
               std::string("a ") + to_string(config.cell) + " with input " + std::to_string(config.input) +
                   ", hidden " + std::to_string(config.hidden) + " and " + std::to_string(config.layers) + " layers",
               {{"weights and their gradients", stack_bytes(config, 1, 1, sizeof(T), BackwardMethod::bp).params}},
               "use a smaller --hidden or fewer --layers");
  const Index gh = gate_count(config.cell) * config.hidden;
  params_.resize(static_cast<std::size_t>(config.layers));
  for (Index l = 0; l < config.layers; ++l) {
    auto& p = params_[static_cast<std::size_t>(l)];
    p.w_ih = RowMatrix<T>::Zero(gh, l == 0 ? config.input : config.hidden);
    p.w_hh = RowMatrix<T>::Zero(gh, config.hidden);
    p.b_ih = Vector<T>::Zero(gh);
    p.b_hh = Vector<T>::Zero(gh);
  }
  grads_ = params_;
  impl_->layer.resize(static_cast<std::size_t>(config.layers));
  if (config.device == Device::cuda) impl_->gpu = detail::gpu::make_recurrent_gpu<T>(config);
}

template <class T>
Recurrent<T>::~Recurrent() = default;
template <class T>
Recurrent<T>::Recurrent(Recurrent&&) noexcept = default;
template <class T>
Recurrent<T>& Recurrent<T>::operator=(Recurrent&&) noexcept = default;

template <class T>
void Recurrent<T>::pull() const {
  detail::gpu::RecurrentGpu<T>* g = impl_->gpu.get();
  if (!g) return;
  if (g->sync.device_newer) {
    g->download_params(params_);
    g->sync.device_newer = false;
  }
  if (g->sync.grads_newer) {
    g->download_grads(grads_);
    g->sync.grads_newer = false;
  }
}

template <class T>
detail::gpu::RecurrentGpu<T>* Recurrent<T>::gpu() {
  detail::gpu::RecurrentGpu<T>* g = impl_->gpu.get();
  if (g && g->sync.host_newer) {
    g->upload_params(params_);
    g->sync.host_newer = false;
  }
  return g;
}

template <class T>
RecurrentLayerParams<T>& Recurrent<T>::params(Index layer) {
  pull();
  if (impl_->gpu) impl_->gpu->sync.host_newer = true;  // the caller may change them
  return params_.at(static_cast<std::size_t>(layer));
}

template <class T>
const RecurrentLayerParams<T>& Recurrent<T>::params(Index layer) const {
  pull();
  return params_.at(static_cast<std::size_t>(layer));
}

template <class T>
const RecurrentLayerParams<T>& Recurrent<T>::grads(Index layer) const {
  pull();
  return grads_.at(static_cast<std::size_t>(layer));
}

template <class T>
Index Recurrent<T>::steps() const {
  return impl_->gpu ? impl_->gpu->steps() : steps_;
}

template <class T>
Index Recurrent<T>::batch() const {
  return impl_->gpu ? impl_->gpu->batch() : batch_;
}

template <class T>
std::vector<const Matrix<T>*> Recurrent<T>::initial_states() const {
  std::vector<const Matrix<T>*> out;
  for (const auto& L : impl_->layer) out.push_back(L.s0.size() != 0 ? &L.s0 : nullptr);
  return out;
}

template <class T>
std::vector<const Matrix<T>*> Recurrent<T>::final_grads() const {
  std::vector<const Matrix<T>*> out;
  for (const auto& L : impl_->layer) out.push_back(L.g_final.size() != 0 ? &L.g_final : nullptr);
  return out;
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
  }
  if (impl_->gpu) {  // every value replaced: the host copy is the current one
    impl_->gpu->sync.host_newer = true;
    impl_->gpu->sync.device_newer = false;
  }
}

template <class T>
void Recurrent<T>::set_initial_state(Index layer, Matrix<T> s0) {
  if (layer < 0 || layer >= config_.layers)
    detail::raise<InvalidArgument>(
        "Recurrent::set_initial_state",
        "layer " + std::to_string(layer) + " out of range (the model has " + std::to_string(config_.layers) + ")");
  impl_->layer[static_cast<std::size_t>(layer)].s0 = std::move(s0);
}

template <class T>
void Recurrent<T>::set_final_state_grad(Index layer, Matrix<T> g) {
  const char* op = "Recurrent::set_final_state_grad";
  if (layer < 0 || layer >= config_.layers)
    detail::raise<InvalidArgument>(
        op, "layer " + std::to_string(layer) + " out of range (the model has " + std::to_string(config_.layers) + ")");
  const Index S = state_size(config_.cell, config_.hidden);
  // Only the rows are known here: the batch is the next forward's.
  if (g.size() != 0 && g.rows() != S)
    detail::raise<ShapeError>(op, "final-state gradient of layer " + std::to_string(layer) + " is " +
                                      shape_string(g.rows(), g.cols()) + ", expected " + std::to_string(S) +
                                      " rows (state size × batch)");
  impl_->layer[static_cast<std::size_t>(layer)].g_final = std::move(g);
}

template <class T>
void Recurrent<T>::forward(const Eigen::Ref<const Matrix<T>>& x, Index steps, Index batch) {
  const char* op = "Recurrent::forward";
  detail::FlushDenormals flush;
  if (steps < 1 || batch < 1)
    detail::raise<ShapeError>(op, "need at least one step and one sample (got " + std::to_string(steps) +
                                      " steps, batch " + std::to_string(batch) + ")");
  if (x.rows() != config_.input || x.cols() != steps * batch)
    detail::raise<ShapeError>(op, "input is " + shape_string(x.rows(), x.cols()) + ", expected " +
                                      shape_string(config_.input, steps * batch) +
                                      " (input size × steps·batch, time-major columns)");
  if (impl_->gpu) {  // (the GPU half checks the initial states' shapes)
    impl_->next_layer = -1;
    detail::gpu::RecurrentGpu<T>* g = gpu();
    g->resize(steps, batch);
    if (x.outerStride() == x.rows()) {
      g->upload_input(x.data());
    } else {
      const Matrix<T> packed = x;
      g->upload_input(packed.data());
    }
    g->forward(initial_states());
    steps_ = steps;
    batch_ = batch;
    return;
  }
  check_memory(op, "a forward pass of " + stack_string(config_, steps, batch),
               {{"forward record", stack_bytes(config_, steps, batch, sizeof(T), BackwardMethod::bp).record}},
               "use a smaller --batch, shorter sequences or a smaller --hidden");
  steps_ = steps;
  batch_ = batch;
  impl_->next_layer = -1;  // a layer-by-layer backward in progress belonged to the previous forward
  const Index H = config_.hidden, S = state_size(config_.cell, H), G = gate_count(config_.cell);
  const auto& ops = detail::cell_ops<T>(config_.cell, config_.nonlinearity);
  for (Index l = 0; l < config_.layers; ++l) {
    auto& L = impl_->layer[static_cast<std::size_t>(l)];
    auto& rec = L.rec;
    const auto& p = params_[static_cast<std::size_t>(l)];
    rec.steps = steps;
    rec.batch = batch;
    rec.hidden = H;
    if (l == 0)
      rec.x = x;
    else
      rec.x = impl_->layer[static_cast<std::size_t>(l - 1)].rec.h.rightCols(steps * batch);
    rec.ax.noalias() = p.w_ih * rec.x;
    rec.ax.colwise() += p.b_ih;
    rec.h.resize(H, (steps + 1) * batch);
    if (config_.cell == CellType::lstm) rec.c.resize(H, (steps + 1) * batch);
    if (config_.cell != CellType::rnn) rec.gates.resize(G * H, steps * batch);
    if (config_.cell != CellType::rnn) rec.aux.resize(H, steps * batch);
    if (L.s0.size() != 0) {
      if (L.s0.rows() != S || L.s0.cols() != batch)
        detail::raise<ShapeError>(op, "initial state of layer " + std::to_string(l) + " is " +
                                          shape_string(L.s0.rows(), L.s0.cols()) + ", expected " +
                                          shape_string(S, batch));
      rec.h.leftCols(batch) = L.s0.topRows(H);
      if (config_.cell == CellType::lstm) rec.c.leftCols(batch) = L.s0.bottomRows(H);
    } else {
      rec.h.leftCols(batch).setZero();
      if (config_.cell == CellType::lstm) rec.c.leftCols(batch).setZero();
    }
    ops.forward(p, rec);
  }
}

template <class T>
Eigen::Block<const Matrix<T>, Eigen::Dynamic, Eigen::Dynamic, true> Recurrent<T>::output() const {
  if (impl_->gpu) {
    impl_->gpu->download_output(impl_->host_out);
    const Matrix<T>& out = impl_->host_out;
    return out.rightCols(out.cols());
  }
  const auto& h = impl_->layer.back().rec.h;
  return h.rightCols(steps_ * batch_);
}

template <class T>
void Recurrent<T>::check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const {
  if (impl_->gpu) {
    impl_->gpu->check_backward_memory(steps, batch, options);
    return;
  }
  require_cpu_method(options.method, "Recurrent::backward");
  const BackwardMethod m = resolve_backward(options, batch);
  check_step_memory(config_, steps, batch, sizeof(T), m == BackwardMethod::bp ? m : options.method,
                    "Recurrent::backward");
}

template <class T>
Matrix<T> Recurrent<T>::state(Index layer, Index t) const {
  if (layer < 0 || layer >= config_.layers || t < 0 || t > steps_)
    detail::raise<InvalidArgument>("Recurrent::state",
                                   "layer " + std::to_string(layer) + ", step " + std::to_string(t) + " out of range");
  if (impl_->gpu) {
    Matrix<T> s;
    impl_->gpu->download_state(layer, t, s);
    return s;
  }
  const auto& rec = impl_->layer[static_cast<std::size_t>(layer)].rec;
  const Index H = config_.hidden;
  Matrix<T> s(state_size(config_.cell, H), batch_);
  s.topRows(H) = rec.h.middleCols(t * batch_, batch_);
  if (config_.cell == CellType::lstm) s.bottomRows(H) = rec.c.middleCols(t * batch_, batch_);
  return s;
}

template <class T>
const Matrix<T>& Recurrent<T>::state0_grad(Index layer) const {
  auto& L = impl_->layer.at(static_cast<std::size_t>(layer));
  if (impl_->gpu && steps() > 0) impl_->gpu->download_state0_grad(layer, L.g0);
  return L.g0;
}

template <class T>
const Matrix<T>& Recurrent<T>::input_grad() const {
  if (impl_->gpu && steps() > 0) impl_->gpu->download_input_grad(input_grad_);
  return input_grad_;
}

template <class T>
const Chain<T>& Recurrent<T>::chain(Index layer) const {
  if (impl_->gpu)
    detail::raise<UnsupportedError>("Recurrent::chain", "a Device::cuda layer generates its Jacobians on the GPU and "
                                                        "keeps no host chain; inspect chains with Device::cpu");
  return impl_->layer.at(static_cast<std::size_t>(layer)).chain;
}

template <class T>
void Recurrent<T>::backward(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step, const BackwardOptions& options,
                            BackwardTimes* times) {
  backward_begin(grad_out, every_step);
  for (Index l = config_.layers - 1; l >= 0; --l) backward_layer(l, options, times);
}

template <class T>
void Recurrent<T>::backward_begin(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step) {
  const char* op = "Recurrent::backward";
  const Index T_ = steps_, B = batch_, H = config_.hidden, S = state_size(config_.cell, H);
  impl_->next_layer = -1;
  if (T_ == 0) detail::raise<InvalidArgument>(op, "call forward() before backward()");
  if (grad_out.rows() != H || grad_out.cols() != T_ * B)
    detail::raise<ShapeError>(op, "output gradient is " + shape_string(grad_out.rows(), grad_out.cols()) +
                                      ", expected " + shape_string(H, T_ * B) + " (hidden × steps·batch)");
  for (Index l = 0; l < config_.layers; ++l) impl_->check_final_grad(l, S, B, op);
  if (detail::gpu::RecurrentGpu<T>* g = gpu()) {
    const Matrix<T> packed = grad_out;  // contiguous, whatever the caller's strides
    // Only the last step's block when every_step is false (many-to-one), as the CPU reads it.
    const T* top = every_step ? g->upload_grad_out(packed.data(), packed.size())
                              : g->upload_grad_out(packed.data() + (T_ - 1) * B * H, H * B);
    g->backward_begin(top, every_step);
  } else {
    impl_->grad_out = grad_out;
  }
  impl_->every_step = every_step;
  impl_->next_layer = config_.layers - 1;
}

template <class T>
void Recurrent<T>::backward_layer(Index l, const BackwardOptions& options, BackwardTimes* times) {
  const char* op = "Recurrent::backward";
  detail::FlushDenormals flush;
  impl_->check_order(l, "Recurrent::backward_layer");
  const Index T_ = steps_, B = batch_, H = config_.hidden, S = state_size(config_.cell, H);
  impl_->check_final_grad(l, S, B, op);  // may have been set after backward_begin
  if (impl_->gpu) {
    backward_layer_gpu(l, options, times);
    return;
  }
  check_backward_memory(T_, B, options);  // before the gradients (and a scan's Jacobians) are sized
  // Until this layer is done, the order is broken: a throw below leaves its gradients half
  // written, so the next layer must not run on them (backward_begin starts over).
  impl_->next_layer = -1;
  const auto& ops = detail::cell_ops<T>(config_.cell, config_.nonlinearity);
  const int threads = resolve_threads(options.threads);
  // Jacobian generation: at most one S × S block per sample and step.
  const double fill_flops = static_cast<double>(B) * static_cast<double>(S) * static_cast<double>(S);
  const bool scan = resolve_backward(options, B) != BackwardMethod::bp;
  BackwardTimes local;

  auto& L = impl_->layer[static_cast<std::size_t>(l)];
  auto& rec = L.rec;
  const auto& p = params_[static_cast<std::size_t>(l)];
  auto& gp = grads_[static_cast<std::size_t>(l)];
  // Gradient on this layer's outputs h_1..h_T (H × TB): from the head or the layer above.
  const Matrix<T>& above = (l == config_.layers - 1) ? impl_->grad_out : impl_->gx;
  const bool inject = impl_->every_step || l < config_.layers - 1;
  const Index G = gate_count(config_.cell) * H;
  L.g.setZero(S, (T_ + 1) * B);
  L.g.middleCols(T_ * B, B).topRows(H) = above.middleCols((T_ - 1) * B, B);
  // The next stage's gradient on s_T: part of g_T for BP and for the scan (its g_last) alike.
  if (L.g_final.size() != 0) L.g.middleCols(T_ * B, B) += L.g_final;
  L.pg.dx.resize(G, T_ * B);
  if (config_.cell == CellType::gru) L.pg.dh.resize(G, T_ * B);
  auto& dh = config_.cell == CellType::gru ? L.pg.dh : L.pg.dx;

  if (!scan) {
    double t0 = omp_get_wtime();
    bp_recurrence(ops, config_.cell, p, rec, above, inject, L.g, L.pg, threads);
    local.scan += omp_get_wtime() - t0;
    if (options.check_finite && !detail::all_finite(L.g.data(), L.g.size()))
      detail::raise<NonFiniteError>(op, "state gradients of layer " + std::to_string(l) +
                                            " are not finite (NaN/Inf): the loss or the weights diverged; "
                                            "lower the learning rate");
  } else {
    double t0 = omp_get_wtime();
    // S = W_hh^T first: make_chain reads the RNN's shared matrix's shape from it.
    *L.w_hh_t = p.w_hh.transpose();  // in place: the chain's shared S keeps its identity
    if (L.chain_steps != T_ || L.chain_batch != B) {
      L.chain = Chain<T>(B);
      L.chain_steps = L.chain_batch = -1;  // rebuilt below; not a valid chain if that throws
      ops.make_chain(p, rec, L.w_hh_t, L.chain);
      L.chain_steps = T_;
      L.chain_batch = B;
    }
    parallel_over_steps(threads, T_, fill_flops, [&](Index t0r, Index t1r) { ops.fill_jacobians(p, rec, L.chain, t0r, t1r); });
    if (inject) {
      for (Index k = 1; k < T_; ++k) {
        Matrix<T>* e = L.chain.injection(k);
        if (!e || e->rows() != S || e->cols() != B) {
          L.chain.set_injection(k, Matrix<T>::Zero(S, B));
          e = L.chain.injection(k);
        }
        e->topRows(H) = above.middleCols((k - 1) * B, B);
      }
    } else if (L.chain.has_injections()) {
      L.chain.clear_injections();
    }
    double t1 = omp_get_wtime();
    local.jacobians += t1 - t0;
    ScanOptions so = scan_options(options);
    so.threads = threads;
    L.scanner.set_options(so);
    impl_->g_last = L.g.middleCols(T_ * B, B);
    try {
      local.last_scan = L.scanner.run(L.chain, impl_->g_last, L.out);
    } catch (const NonFiniteError&) {  // the scan's own advice is for library users; a trainer's is BP's
      detail::raise<NonFiniteError>(op, "state gradients of layer " + std::to_string(l) +
                                            " are not finite (NaN/Inf): the loss or the weights diverged; "
                                            "lower the learning rate");
    }
    for (Index k = 0; k < T_; ++k) L.g.middleCols(k * B, B) = L.out.g(k);
    local.scan += omp_get_wtime() - t1;
  }

  double t2 = omp_get_wtime();
  if (scan) parallel_over_steps(threads, T_, 4.0 * static_cast<double>(G * B), [&](Index t0r, Index t1r) { ops.preact(rec, L.g, L.pg, t0r, t1r); });
  // The parameter-gradient GEMMs (T·B deep), shared among the threads.
  gp.w_ih.resize(L.pg.dx.rows(), rec.x.rows());
  parallel_product(threads, gp.w_ih, L.pg.dx, rec.x.transpose());
  gp.b_ih = L.pg.dx.rowwise().sum();
  gp.w_hh.resize(dh.rows(), H);
  parallel_product(threads, gp.w_hh, dh, rec.h.leftCols(T_ * B).transpose());
  gp.b_hh = dh.rowwise().sum();
  Matrix<T>& gx = l == 0 ? input_grad_ : impl_->gx;
  Matrix<T> next(p.w_ih.cols(), L.pg.dx.cols());
  parallel_product(threads, next, p.w_ih.transpose(), L.pg.dx, /*by_columns=*/true);
  gx = std::move(next);
  L.g0 = L.g.leftCols(B);
  local.params += omp_get_wtime() - t2;
  impl_->next_layer = l - 1;  // −1 after layer 0: the backward is complete

  if (times) {
    times->jacobians += local.jacobians;
    times->scan += local.scan;
    times->params += local.params;
    times->last_scan = local.last_scan;
  }
}

template <class T>
void Recurrent<T>::backward_layer_gpu(Index l, const BackwardOptions& options, BackwardTimes* times) {
  impl_->next_layer = -1;  // as the CPU path: a throw leaves the order broken
  detail::gpu::RecurrentGpu<T>* g = gpu();
  const Matrix<T>& gf = impl_->layer[static_cast<std::size_t>(l)].g_final;
  g->backward_layer(l, options, gf.size() != 0 ? &gf : nullptr, 0);
  g->check_grads(l);
  g->sync.grads_newer = true;
  const detail::gpu::DeviceStatus st = g->read_status();  // waits: the layer is done when this returns
  if ((st.flags & detail::gpu::kGradNotFinite) != 0) {
    g->clear_flags();
    detail::raise<NonFiniteError>("Recurrent::backward", "gradients of layer " + std::to_string(l) +
                                                             " are not finite (NaN/Inf): the loss or the weights "
                                                             "diverged; lower the learning rate");
  }
  if (times) {
    const BackwardTimes t = g->backward_times(0, l);
    times->jacobians += t.jacobians;
    times->scan += t.scan;
    times->params += t.params;
    times->last_scan = t.last_scan;
  }
  impl_->next_layer = l - 1;
}

template <class T>
std::pair<Jacobian<T>, Matrix<T>> Recurrent<T>::layer_transfer(Index l, const BackwardOptions& options) {
  const char* op = "Recurrent::layer_transfer";
  if (impl_->gpu)
    detail::raise<UnsupportedError>(op, "layer_transfer (model-parallel stages) runs on the CPU; use Device::cpu");
  impl_->check_order(l, op);
  const Index T_ = steps_, B = batch_, H = config_.hidden, S = state_size(config_.cell, H);
  const auto& ops = detail::cell_ops<T>(config_.cell, config_.nonlinearity);
  auto& L = impl_->layer[static_cast<std::size_t>(l)];
  const auto& rec = L.rec;
  const auto& p = params_[static_cast<std::size_t>(l)];

  // M: the layer's Jacobian chain, generated as the scan path does (same chain, so a scan
  // backward_layer after this reuses it), folded from J_1^T: acc = J_1^T · … · J_t^T. The
  // fold is sequential (T − 1 products of S × S per sample); a stage is short.
  *L.w_hh_t = p.w_hh.transpose();
  if (L.chain_steps != T_ || L.chain_batch != B) {
    L.chain = Chain<T>(B);
    L.chain_steps = L.chain_batch = -1;  // rebuilt below; not a valid chain if that throws
    check_step_memory(config_, T_, B, sizeof(T), BackwardMethod::linear, op);
    ops.make_chain(p, rec, L.w_hh_t, L.chain);
    L.chain_steps = T_;
    L.chain_batch = B;
  }
  const int threads = resolve_threads(options.threads);
  // Jacobian generation: at most one S × S block per sample and step.
  const double fill_flops = static_cast<double>(B) * static_cast<double>(S) * static_cast<double>(S);
  parallel_over_steps(threads, T_, fill_flops, [&](Index t0r, Index t1r) { ops.fill_jacobians(p, rec, L.chain, t0r, t1r); });
  Jacobian<T> m = L.chain.jacobian(1);
  for (Index t = 2; t <= T_; ++t) m = multiply(m, L.chain.jacobian(t));

  // v: g_0 by sequential BP with g_T from the head or the layer above only (no final-state
  // gradient), into locals so that grads(), state0_grad() and the next backward_layer are
  // untouched.
  const Matrix<T>& above = (l == config_.layers - 1) ? impl_->grad_out : impl_->gx;
  const bool inject = impl_->every_step || l < config_.layers - 1;
  const Index G = gate_count(config_.cell) * H;
  Matrix<T> g = Matrix<T>::Zero(S, (T_ + 1) * B);
  g.middleCols(T_ * B, B).topRows(H) = above.middleCols((T_ - 1) * B, B);
  detail::PreactGrads<T> pg;
  pg.dx.resize(G, T_ * B);
  if (config_.cell == CellType::gru) pg.dh.resize(G, T_ * B);
  bp_recurrence(ops, config_.cell, p, rec, above, inject, g, pg, threads);
  Matrix<T> v = g.leftCols(B);
  if (!detail::all_finite(v.data(), v.size()))
    detail::raise<NonFiniteError>(op, "initial-state gradient of layer " + std::to_string(l) +
                                          " is not finite (NaN/Inf): the loss or the weights diverged; "
                                          "lower the learning rate");
  return {std::move(m), std::move(v)};
}

template class Recurrent<float>;
template class Recurrent<double>;

}  // namespace bppsa
