// The CPU half of Recurrent<T>: forward over all layers, the backward pass by sequential BP or
// by the scan engine (Jacobians generated per cell type, see nn/cell.hpp), followed by the
// parameter gradients as GEMMs over every step at once, all on OpenMP teams.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <numeric>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/jacobian/product.hpp"
#include "bppsa/nn/cost_model.hpp"
#include "core/denormals.hpp"
#include "core/finite.hpp"
#include "core/huge_pages.hpp"
#include "core/team.hpp"
#include "nn/cell.hpp"
#include "nn/classifier_half.hpp"
#include "nn/cpu/newton.hpp"
#include "nn/cpu/parallel.hpp"
#include "nn/recurrent_half.hpp"

namespace bppsa {
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

namespace {

/// ax = W_ih x + b_ih: the input projection of every column at once, in parallel_product's blocks of
/// columns (fixed by the shape: the same bits whatever the threads or where a chunk starts on a block).
template <class T, class D, class X>
void project_input(int threads, D&& ax, const LayerWeights<T>& p, const X& x) {
  parallel_product(threads, ax, p.w_ih, x, /*by_columns=*/true);
  ax.colwise() += p.b_ih;
}

/// BP through time as PackedWeights::recurrence runs it: its step s is the layer's step t = T + 1 − s,
/// g_{t−1} (its h rows) += W_hh^T · dh_t, then per block of samples the part of g_{t−1} that
/// bypasses W_hh (direct) and the pre-activation gradients of step t − 1 (preact: dh_{t−1}, the next
/// product's input). Samples join as the steps go back (with lengths), hence pointwise_width.
template <class T>
class BpSteps final : public RecurrenceStep<T> {
 public:
  BpSteps(const CellOps<T>& ops, const LayerWeights<T>& p, const LayerRecord<T>& rec, const Matrix<T>& above,
          bool inject, Matrix<T>& g, PreactGrads<T>& pg, const Matrix<T>& dh)
      : ops_(ops), p_(p), rec_(rec), above_(above), inject_(inject), g_(g), pg_(pg), dh_(dh) {}
  Index width(Index s) const override { return rec_.width(time(s)); }
  Index pointwise_width(Index s) const override {
    const Index t = time(s);
    return t >= 2 ? std::max(rec_.width(t), rec_.width(t - 1)) : rec_.width(t);
  }
  T* dst(Index s) override { return g_.data() + (time(s) - 1) * rec_.batch * g_.rows(); }
  Index dst_stride() const override { return g_.rows(); }
  const T* h(Index s) const override { return dh_.data() + (time(s) - 1) * rec_.batch * dh_.rows(); }
  Index h_stride() const override { return dh_.rows(); }
  void init(Index s, Index r0, Index rows, Index j0, Index cols) override {
    const Index t = time(s), B = rec_.batch;
    if (inject_ && t >= 2) g_.block(r0, (t - 1) * B + j0, rows, cols) = above_.block(r0, (t - 2) * B + j0, rows, cols);
  }
  void pointwise(Index s, Index j0, Index cols) override {
    const Index t = time(s), B = rec_.batch, w = rec_.width(t);
    if (j0 < w) ops_.direct(p_, rec_, g_, pg_, t, j0, g_.block(0, (t - 1) * B + j0, g_.rows(), std::min(cols, w - j0)));
    if (t >= 2 && j0 < rec_.width(t - 1))
      ops_.preact(p_, rec_, g_, pg_, t - 1, t, {j0, std::min(cols, rec_.width(t - 1) - j0)});
  }

 private:
  Index time(Index s) const { return rec_.steps + 1 - s; }
  const CellOps<T>& ops_;
  const LayerWeights<T>& p_;
  const LayerRecord<T>& rec_;
  const Matrix<T>& above_;
  bool inject_;
  Matrix<T>& g_;
  PreactGrads<T>& pg_;
  const Matrix<T>& dh_;
};

/// Sequential BP through one layer (back-propagation through time with vector-Jacobian
/// products, no Jacobians formed): g (S × (T+1)B, zero but for each sample's last block)
/// receives every g_t for t = T−1..0, step t on its rec.width(t) running samples; pg receives the pre-activation
/// gradients. `above` (P × TB, P the rows of h, the gradient on the layer's outputs) is injected into the h rows of
/// g_{t−1} when `inject`. One team runs every step (PackedWeights::recurrence).
template <class T>
void bp_recurrence(const CellOps<T>& ops, CellType cell, const LayerWeights<T>& p, const LayerRecord<T>& rec,
                   const Matrix<T>& above, bool inject, Matrix<T>& g, PreactGrads<T>& pg, int threads) {
  if (rec.steps == 0) return;
  const auto& dh = cell == CellType::gru ? pg.dh : pg.dx;
  // preact leaves each step's δc for direct (LSTM); reset on the way out, exceptions included,
  // since the scan path shares pg and runs preact concurrently.
  struct KeepDc {
    PreactGrads<T>& pg;
    explicit KeepDc(PreactGrads<T>& g) : pg(g) { pg.keep_dc = true; }
    ~KeepDc() { pg.keep_dc = false; }
  } keep(pg);
  if (cell == CellType::lstm) pg.dc.resize(rec.hidden, rec.batch);  // before blocks of samples share it
  ops.preact(p, rec, g, pg, rec.steps, rec.steps + 1, {});
  PackedWeights<T> w_hh_t;  // W_hh^T, packed once for every step
  w_hh_t.pack_transposed(p.w_hh);
  BpSteps<T> steps(ops, p, rec, above, inject, g, pg, dh);
  w_hh_t.recurrence(threads, rec.steps, steps);
}

/// With lengths: the columns of the steps that run (step t's first rec.width(t) columns of its
/// block t − 1, contiguous per step) gathered in order from src (rows × T·B), Σ L_b of them, so
/// that a GEMM over them skips the padding.
template <class T, class M>
Matrix<T> gather_running(const LayerRecord<T>& rec, const M& src) {
  Index n = 0;
  for (Index t = 1; t <= rec.steps; ++t) n += rec.width(t);
  Matrix<T> out(src.rows(), n);
  for (Index t = 1, j = 0; t <= rec.steps; j += rec.width(t), ++t)
    out.middleCols(j, rec.width(t)) = src.middleCols((t - 1) * rec.batch, rec.width(t));
  return out;
}
/// The inverse: src's columns back to their places in dst (rows × T·B); the others untouched.
template <class T, class D>
void scatter_running(const LayerRecord<T>& rec, const Matrix<T>& src, D&& dst) {
  for (Index t = 1, j = 0; t <= rec.steps; j += rec.width(t), ++t)
    dst.middleCols((t - 1) * rec.batch, rec.width(t)) = src.middleCols(j, rec.width(t));
}

/// e_k of the chain, kept across backward passes: made (zeros) when absent or of another shape
/// (the chain's state rows × its batch), to be overwritten by the caller.
template <class T>
Matrix<T>& injection_of(Chain<T>& chain, Index k) {
  Matrix<T>* e = chain.injection(k);
  if (!e || e->rows() != chain.dim(k) || e->cols() != chain.batch()) {
    chain.set_injection(k, Matrix<T>::Zero(chain.dim(k), chain.batch()));
    e = chain.injection(k);
  }
  return *e;
}

/// The message of a non-finite state gradient, the same for BP and every scan.
[[noreturn]] void raise_state_grads_not_finite(const char* op, Index l) {
  raise<NonFiniteError>(op, "state gradients of layer " + std::to_string(l) +
                                " are not finite (NaN/Inf): the loss or the weights diverged; lower the learning rate");
}

/// ∂ℓ/∂W_ih = dx·x^T, ∂ℓ/∂W_hh = dh·h_prev^T, the biases' sums and, with a projection,
/// ∂ℓ/∂W_hr = g_h·m^T: GEMMs over the same columns of every argument, each into its place in gp
/// (skipped where gp has none).
template <class T, class X, class Hp, class Gh>
void param_gradients(int threads, const LayerWeights<T>& p, const Matrix<T>& dx, const Matrix<T>& dh, const X& x,
                     const Hp& h_prev, const Gh& g_h, const Matrix<T>& m, LayerGradients<T>& gp) {
  if (gp.w_ih.data() != nullptr) parallel_product(threads, gp.w_ih, dx, x.transpose());
  if (gp.b_ih.data() != nullptr) gp.b_ih = dx.rowwise().sum();
  if (gp.w_hh.data() != nullptr) parallel_product(threads, gp.w_hh, dh, h_prev.transpose());
  if (gp.b_hh.data() != nullptr) gp.b_hh = dh.rowwise().sum();
  if (p.w_hr.size() != 0 && gp.w_hr.data() != nullptr) parallel_product(threads, gp.w_hr, g_h, m.transpose());
}

/// A stack's own gradients of a layer, sized as its weights, as the backward pass writes them.
template <class T>
LayerGradients<T> gradients_of(RecurrentLayerParams<T>& g, const LayerWeights<T>& w) {
  g.w_ih.resize(w.w_ih.rows(), w.w_ih.cols());
  g.w_hh.resize(w.w_hh.rows(), w.w_hh.cols());
  g.b_ih.resize(w.w_ih.rows());
  g.b_hh.resize(w.w_hh.rows());
  g.w_hr.resize(w.w_hr.rows(), w.w_hr.cols());
  return {{g.w_ih.data(), g.w_ih.rows(), g.w_ih.cols()},
          {g.w_hh.data(), g.w_hh.rows(), g.w_hh.cols()},
          {g.b_ih.data(), g.b_ih.size()},
          {g.b_hh.data(), g.b_hh.size()},
          {g.w_hr.data(), g.w_hr.rows(), g.w_hr.cols()}};
}

template <class T>
class RecurrentCpu final : public RecurrentHalf<T> {
 public:
  explicit RecurrentCpu(const RecurrentConfig& config)
      : config_(config), layer_(static_cast<std::size_t>(config.layers)) {}

  void pull(LayerParamsList<T>&, LayerParamsList<T>&) const override {}
  void host_written() override {}
  std::unique_ptr<ClassifierHalf<T>> make_classifier(const ModelConfig& config, Recurrent<T>& rnn,
                                                     Linear<T>& head) override {
    return make_classifier_cpu<T>(config, rnn, head);
  }
  void set_forward_options(const ForwardOptions& options) override { forward_options_ = options; }
  const ForwardReport& forward_report() const override { return report_; }

  void forward(const Eigen::Ref<const Matrix<T>>& x, Index steps, Index batch, const LayerParamsList<T>& params,
               const LayerMatrices<T>& initial_states, std::span<const Index> lengths) override {
    const std::vector<LayerWeights<T>> w(params.begin(), params.end());
    run_forward(w, x, /*copy_x=*/true, steps, batch, lengths, [&](Index l, LayerRecord<T>& rec) {
      const Matrix<T>* s0 = initial_states[static_cast<std::size_t>(l)];
      if (s0) {
        rec.h.leftCols(batch) = s0->topRows(output_size(config_));
        if (config_.cell == CellType::lstm) rec.c.leftCols(batch) = s0->bottomRows(config_.hidden);
      } else {
        rec.h.leftCols(batch).setZero();
        if (config_.cell == CellType::lstm) rec.c.leftCols(batch).setZero();
      }
    });
  }
  Index steps() const override { return steps_; }
  Index batch() const override { return batch_; }
  Matrix<T> state(Index layer, Index t) const override;
  Matrix<T> final_state(Index layer) const override;
  Eigen::Block<const Matrix<T>, Eigen::Dynamic, Eigen::Dynamic, true> output() const override {
    const auto& h = layer_.back().rec.h;
    return h.rightCols(steps_ * batch_);
  }

  void check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const override;
  /// Before the gradients (and a scan's Jacobians) are sized.
  void prepare_layer(Index, const BackwardOptions& options) const override {
    check_backward_memory(steps_, batch_, options);
  }
  /// Layer l at this shape, as the cost model sees it, on `threads` (0: OpenMP's default).
  StepShape layer_shape(Index l, Index steps, Index batch, int threads) const {
    return {.cell = config_.cell,
            .input = l == 0 ? config_.input : output_size(config_),
            .hidden = config_.hidden,
            .proj = config_.proj,
            .steps = steps,
            .batch = batch,
            .threads = threads};
  }
  /// options with `automatic` resolved by the step cost model for layer l at this shape
  /// (bppsa/nn/cost_model.hpp): bp, blelloch or hybrid, or `automatic` (the scan's own choice).
  BackwardOptions resolved(Index l, Index steps, Index batch, const BackwardOptions& options) const {
    BackwardOptions o = options;
    o.method = resolve_backward(options, layer_shape(l, steps, batch, options.threads));
    return o;
  }
  void backward_begin(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step,
                      const LayerParamsList<T>&) override {
    grad_out_ = grad_out;
    every_step_ = every_step;
  }
  void backward_layer(Index l, const BackwardOptions& options, const LayerParamsList<T>& params,
                      LayerParamsList<T>& grads, const Matrix<T>* final_grad, BackwardTimes* times) override {
    const LayerWeights<T> w(params[static_cast<std::size_t>(l)]);
    LayerGradients<T> gp = gradients_of(grads[static_cast<std::size_t>(l)], w);
    backward_on(l, options, w, gp, final_grad, times, InputGrad{});
  }
  std::pair<Jacobian<T>, Matrix<T>> layer_transfer(Index l, const BackwardOptions& options,
                                                   const LayerParamsList<T>& params) override;
  void forward_io(const LayerForwardIo<T>& io, Index steps, Index batch, std::span<const Index> lengths, std::uintptr_t,
                  LayerParamsList<T>& params) override;
  std::string backward_io(const LayerBackwardIo<T>& io, const BackwardOptions& options, std::span<const Index> lengths,
                          std::uintptr_t, const LayerParamsList<T>& params, LayerParamsList<T>& grads) override;
  const Matrix<T>& input_grad() const override { return input_grad_; }
  const Matrix<T>& state0_grad(Index l) const override { return layer_.at(static_cast<std::size_t>(l)).g0; }
  const Chain<T>& chain(Index l) const override { return layer_.at(static_cast<std::size_t>(l)).chain; }

 private:
  /// Where layer 0's input gradient goes: input_grad_ (dst null), the caller's buffer, or nowhere.
  struct InputGrad {
    bool wanted = true;
    T* dst = nullptr;
  };
  /// Every layer's forward on weights w (one per layer). x: layer 0's input, copied into the record
  /// when copy_x, else read in place until the backward (contiguous columns). init(l, rec) sets
  /// block 0 of rec.h (and rec.c): the initial state.
  template <class Init>
  void run_forward(std::span<const LayerWeights<T>> w, const Eigen::Ref<const Matrix<T>>& x, bool copy_x, Index steps,
                   Index batch, std::span<const Index> lengths, Init&& init);
  /// Sizes rec's buffers (ax, h and, by cell, c, gates, aux) for `steps` steps of rec.batch samples.
  void size_record(LayerRecord<T>& rec, Index steps) const {
    const Index B = rec.batch, H = config_.hidden, G = gate_count(config_.cell) * H;
    rec.ax.resize(G, steps * B);
    rec.h.resize(output_size(config_), (steps + 1) * B);
    if (config_.cell == CellType::lstm) rec.c.resize(H, (steps + 1) * B);
    if (config_.cell != CellType::rnn) {
      rec.gates.resize(G, steps * B);
      rec.aux.resize(H, steps * B);
    }
    for (const Matrix<T>* m : {&rec.ax, &rec.h, &rec.c, &rec.gates, &rec.aux}) advise_huge_pages(*m);
  }
  /// forward_io with io.record false, sequential, every sample running every step: the steps in
  /// chunks whose buffers stay in cache, the output written straight to io.out. Nothing stays after
  /// it (the half then holds no record).
  void forward_unrecorded(const LayerWeights<T>& p, const LayerForwardIo<T>& io, Index steps, Index batch);
  /// One layer's backward on its weights p: parameter gradients into gp, the input gradient
  /// passed below (layer 0: as gx says) and the layer's g0.
  void backward_on(Index l, const BackwardOptions& options, const LayerWeights<T>& p, LayerGradients<T>& gp,
                   const Matrix<T>* final_grad, BackwardTimes* times, InputGrad gx);
  /// The weights of forward_io / backward_io: views of the caller's tensors (absent biases:
  /// zeros of the half's own).
  LayerWeights<T> io_weights(const T* w_ih, const T* w_hh, const T* b_ih, const T* b_hh, const T* w_hr);

  struct Layer {
    LayerRecord<T> rec;
    Matrix<T> g;   ///< state gradients S × (T+1)B
    Matrix<T> g0;  ///< g_0 = ∂ℓ/∂s_0, S × B
    PreactGrads<T> pg;
    std::shared_ptr<Matrix<T>> w_hh_t = std::make_shared<Matrix<T>>();  ///< W_hh^T (RNN's shared S)
    Chain<T> chain;
    Index chain_steps = -1, chain_batch = -1;
    std::vector<Index> chain_lengths;  ///< the lengths the chain was built for (empty: padded)
    Scanner<T> scanner;
    Gradients<T> out;
  };
  /// The layer's chain generated for the current forward (rebuilt when the shape changed),
  /// values filled for every step.
  void fill_chain(Layer& L, const LayerWeights<T>& p, int threads, const char* op);
  /// With lengths: the layer's samples' chains, each at its own length, joined into one chain
  /// of batch 1 (docs/method.md §4.6; rebuilt when the lengths changed), values filled for
  /// every running step. Returns each sample's base: its J_t^T is element base_b + t.
  std::vector<Index> fill_chain_by_length(Layer& L, const LayerWeights<T>& p, int threads, const char* op);
  /// With lengths: the scan of one layer over that chain; L.g holds each sample's top (its
  /// last state's gradient) and receives every running step's.
  void scan_by_length(Layer& L, const LayerWeights<T>& p, const Matrix<T>& above, bool inject,
                      const BackwardOptions& options, int threads, BackwardTimes& local, const char* op);
  /// Record column of sample b's last step's state (block lengths[b]).
  Index last_col(Index b) const {
    return (lengths_.empty() ? steps_ : lengths_[static_cast<std::size_t>(b)]) * batch_ + b;
  }

  RecurrentConfig config_;
  std::vector<Layer> layer_;
  Index steps_ = 0, batch_ = 0;
  std::vector<Index> lengths_;  ///< per sample, non-increasing; empty = every sample runs every step
  ForwardOptions forward_options_;
  ForwardReport report_;
  Matrix<T> gx_;  ///< gradient on the current layer's input (passes to the layer below)
  Matrix<T> input_grad_;
  Matrix<T> g_last_;
  Matrix<T> grad_out_;  ///< backward_begin's copy of the head gradient
  bool every_step_ = false;
  Vector<T> zero_bias_;   ///< G·H zeros: an absent bias of forward_io / backward_io
  Matrix<T> final_grad_;  ///< backward_io's gradient on the final state
};

template <class T>
template <class Init>
void RecurrentCpu<T>::run_forward(std::span<const LayerWeights<T>> w, const Eigen::Ref<const Matrix<T>>& x, bool copy_x,
                                  Index steps, Index batch, std::span<const Index> lengths, Init&& init) {
  FlushDenormals flush;
  check_memory("Recurrent::forward", "a forward pass of " + stack_string(config_, steps, batch),
               {{"forward record", forward_record_bytes(config_, steps, batch, sizeof(T))}},
               "use a smaller --batch, shorter sequences or a smaller --hidden");
  steps_ = steps;
  batch_ = batch;
  lengths_.assign(lengths.begin(), lengths.end());
  std::vector<Index> active;  // per step: the samples running it (lengths sorted longest first)
  if (!lengths_.empty()) {
    active.resize(static_cast<std::size_t>(steps));
    Index w = batch;
    for (Index t = 1; t <= steps; ++t) {
      while (w > 0 && lengths_[static_cast<std::size_t>(w - 1)] < t) --w;
      active[static_cast<std::size_t>(t - 1)] = w;
    }
  }
  const Index H = config_.hidden, G = gate_count(config_.cell);
  const auto& ops = cell_ops<T>(config_.cell, config_.nonlinearity);
  report_.method = forward_options_.method;  // (cleared, not replaced: a T 1 call allocates nothing here)
  const int threads = resolve_threads(forward_options_.threads);  // each GEMM's team
  report_.ran.clear();
  report_.max_iterations.clear();
  report_.iterations.clear();
  report_.residual.clear();
  report_.fell_back.clear();
  report_.fallback_step.clear();
  for (Index l = 0; l < config_.layers; ++l) {
    auto& rec = layer_[static_cast<std::size_t>(l)].rec;
    const LayerWeights<T>& p = w[static_cast<std::size_t>(l)];
    rec.steps = steps;
    rec.batch = batch;
    rec.hidden = H;
    rec.active = active;
    if (l == 0 && copy_x) {
      rec.x = x;
      rec.x_view = nullptr;
    } else {  // the caller's, or the layer below's outputs: read in place
      rec.x.resize(0, 0);
      rec.x_view = l == 0 ? x.data() : layer_[static_cast<std::size_t>(l - 1)].rec.h.rightCols(steps * batch).data();
      rec.x_rows = l == 0 ? x.rows() : output_size(config_);
    }
    size_record(rec, steps);
    if (active.empty()) {
      project_input(threads, rec.ax, p, rec.input());
    } else {  // the input projection of the running steps only (the padding is never read)
      const Matrix<T> running = gather_running(rec, rec.input());
      Matrix<T> ax(G * H, running.cols());
      project_input(threads, ax, p, running);
      scatter_running(rec, ax, rec.ax);
    }
    init(l, rec);
    const ForwardPlan plan = resolve_forward(forward_options_, layer_shape(l, steps, batch, forward_options_.threads));
    NewtonOutcome newton;
    if (plan.method == ForwardMethod::newton) {
      ForwardOptions o = forward_options_;
      o.max_iterations = plan.max_iterations;
      newton = newton_forward(ops, config_, p, rec, o);  // its fallback included
    } else {
      ops.forward(p, rec, threads);
    }
    report_.ran.push_back(plan.method);
    report_.max_iterations.push_back(plan.max_iterations);
    report_.iterations.push_back(newton.iterations);
    report_.residual.push_back(newton.residual);
    report_.fell_back.push_back(newton.fallback_step > 0);
    report_.fallback_step.push_back(newton.fallback_step);
    for (Index t = 1; t <= steps && !active.empty(); ++t) {  // outputs and states past the length: zeros
      const Index w = rec.width(t);
      rec.h.middleCols(t * batch + w, batch - w).setZero();
      if (config_.cell == CellType::lstm) rec.c.middleCols(t * batch + w, batch - w).setZero();
    }
  }
}

template <class T>
Matrix<T> RecurrentCpu<T>::final_state(Index layer) const {
  const auto& rec = layer_[static_cast<std::size_t>(layer)].rec;
  const Index H = config_.hidden, P = output_size(config_);
  Matrix<T> s(state_size(config_), batch_);
  for (Index b = 0; b < batch_; ++b) {
    s.col(b).head(P) = rec.h.col(last_col(b));
    if (config_.cell == CellType::lstm) s.col(b).tail(H) = rec.c.col(last_col(b));
  }
  return s;
}

template <class T>
Matrix<T> RecurrentCpu<T>::state(Index layer, Index t) const {
  const auto& rec = layer_[static_cast<std::size_t>(layer)].rec;
  const Index H = config_.hidden, P = output_size(config_);
  Matrix<T> s(state_size(config_), batch_);
  s.topRows(P) = rec.h.middleCols(t * batch_, batch_);
  if (config_.cell == CellType::lstm) s.bottomRows(H) = rec.c.middleCols(t * batch_, batch_);
  return s;
}

template <class T>
void RecurrentCpu<T>::check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const {
  require_cpu_method(options.method, "Recurrent::backward");
  check_step_memory(config_, steps, batch, sizeof(T), resolved(0, steps, batch, options).method, "Recurrent::backward");
}

template <class T>
void RecurrentCpu<T>::fill_chain(Layer& L, const LayerWeights<T>& p, int threads, const char* op) {
  const Index T_ = steps_, B = batch_, S = state_size(config_);
  const auto& ops = cell_ops<T>(config_.cell, config_.nonlinearity);
  // S = W_hh^T first: make_chain reads the RNN's shared matrix's shape from it.
  *L.w_hh_t = p.w_hh.transpose();  // in place: the chain's shared S keeps its identity
  if (L.chain_steps != T_ || L.chain_batch != B || !L.chain_lengths.empty()) {
    L.chain = Chain<T>(B);
    L.chain_steps = L.chain_batch = -1;  // rebuilt below; not a valid chain if that throws
    L.chain_lengths.clear();
    check_step_memory(config_, T_, B, sizeof(T), BackwardMethod::linear, op);
    make_chain(ops, p, L.rec, L.w_hh_t, L.chain);
    L.chain_steps = T_;
    L.chain_batch = B;
  }
  // Jacobian generation: at most one S × S block per sample and step.
  const double fill_flops = static_cast<double>(B) * static_cast<double>(S) * static_cast<double>(S);
  parallel_over_steps(threads, T_, fill_flops,
                      [&](Index t0r, Index t1r) { fill_jacobians(ops, p, L.rec, L.chain, t0r, t1r); });
}

// Sample b's chain [g at its length L_b, J_{L_b}^T, …, J_1^T] occupies chain elements base_b + 1 …
// base_b + L_b (J_t^T at base_b + t, so g_k = sample b's g_t at k = base_b + t); between two
// samples a zero diagonal element (base_{b+1} = base_b + L_b + 1) cuts the products, and the
// upper sample's top gradient enters as its injection. Work and memory follow Σ L_b, not T·B.
template <class T>
std::vector<Index> RecurrentCpu<T>::fill_chain_by_length(Layer& L, const LayerWeights<T>& p, int threads,
                                                         const char* op) {
  const Index B = batch_, S = state_size(config_);
  const auto& ops = cell_ops<T>(config_.cell, config_.nonlinearity);
  const auto len = [&](Index b) { return lengths_[static_cast<std::size_t>(b)]; };
  std::vector<Index> base(static_cast<std::size_t>(B));
  for (Index b = 1; b < B; ++b)
    base[static_cast<std::size_t>(b)] = base[static_cast<std::size_t>(b - 1)] + len(b - 1) + 1;
  const auto at = [&](Index b) { return base[static_cast<std::size_t>(b)]; };
  const Index total = at(B - 1) + len(B - 1);  // chain elements

  *L.w_hh_t = p.w_hh.transpose();  // in place: the chain's shared S keeps its identity
  if (L.chain_lengths != lengths_ || L.chain_steps != steps_) {
    L.chain = Chain<T>(1);
    L.chain_steps = L.chain_batch = -1;  // rebuilt below; not a valid chain if that throws
    L.chain_lengths.clear();
    check_step_memory(config_, steps_, B, sizeof(T), BackwardMethod::linear, op);  // Σ L_b ≤ T·B elements
    for (Index b = 0; b < B; ++b) {
      for (Index t = 1; t <= len(b); ++t) L.chain.push_back(ops.element(p, L.rec, L.w_hh_t, 1));
      if (b + 1 < B) {
        Jacobian<T>& cut = L.chain.push_back(Jacobian<T>::diagonal(S, 1));
        std::fill(cut.values().begin(), cut.values().end(), T(0));
      }
    }
    L.chain_steps = steps_;
    L.chain_batch = B;
    L.chain_lengths = lengths_;
  }
  std::vector<JacobianSlot<T>> slots;
  slots.reserve(static_cast<std::size_t>(total));
  for (Index b = 0; b < B; ++b)
    for (Index t = 1; t <= len(b); ++t) slots.push_back({(t - 1) * B + b, &L.chain.jacobian(at(b) + t), 0});
  const double fill_flops = static_cast<double>(S) * static_cast<double>(S);
  parallel_over_steps(threads, static_cast<Index>(slots.size()), fill_flops, [&](Index i0, Index i1) {
    ops.fill(p, L.rec,
             std::span<const JacobianSlot<T>>(slots).subspan(static_cast<std::size_t>(i0 - 1),
                                                             static_cast<std::size_t>(i1 - i0)));
  });
  return base;
}

template <class T>
void RecurrentCpu<T>::scan_by_length(Layer& L, const LayerWeights<T>& p, const Matrix<T>& above, bool inject,
                                     const BackwardOptions& options, int threads, BackwardTimes& local,
                                     const char* op) {
  const Index B = batch_, P = output_size(config_);
  const auto len = [&](Index b) { return lengths_[static_cast<std::size_t>(b)]; };
  double t0 = omp_get_wtime();
  const std::vector<Index> base = fill_chain_by_length(L, p, threads, op);
  const auto at = [&](Index b) { return base[static_cast<std::size_t>(b)]; };
  // Injections: the outputs' gradients inside each chain (every_step or a layer above), and
  // each lower sample's top, which the zero element above it cuts off from the products.
  for (Index b = 0; b < B; ++b) {
    for (Index t = 1; t < len(b); ++t) {
      if (inject)
        injection_of(L.chain, at(b) + t).topRows(P) = above.col((t - 1) * B + b);
      else if (Matrix<T>* e = L.chain.injection(at(b) + t))
        e->setZero();
    }
    if (b + 1 < B) injection_of(L.chain, at(b) + len(b)) = L.g.col(last_col(b));
  }
  double t1 = omp_get_wtime();
  local.jacobians += t1 - t0;
  ScanOptions so = scan_options(options);
  so.threads = threads;
  L.scanner.set_options(so);
  g_last_ = L.g.col(last_col(B - 1));
  try {
    local.last_scan = L.scanner.run(L.chain, g_last_, L.out);
  } catch (const NonFiniteError&) {  // the scan's own advice is for library users; a trainer's is BP's
    raise_state_grads_not_finite(op, static_cast<Index>(&L - layer_.data()));
  }
  for (Index b = 0; b < B; ++b)
    for (Index t = 0; t <= len(b); ++t) L.g.col(t * B + b) = L.out.g(at(b) + t);
  local.scan += omp_get_wtime() - t1;
}

template <class T>
void RecurrentCpu<T>::backward_on(Index l, const BackwardOptions& asked, const LayerWeights<T>& p,
                                  LayerGradients<T>& gp, const Matrix<T>* final_grad, BackwardTimes* times,
                                  InputGrad gx_to) {
  const char* op = "Recurrent::backward";
  FlushDenormals flush;
  const Index T_ = steps_, B = batch_, H = config_.hidden, P = output_size(config_), S = state_size(config_);
  const auto& ops = cell_ops<T>(config_.cell, config_.nonlinearity);
  const BackwardOptions options = resolved(l, T_, B, asked);
  const int threads = resolve_threads(options.threads);
  const bool scan = options.method != BackwardMethod::bp;
  BackwardTimes local;

  auto& L = layer_[static_cast<std::size_t>(l)];
  auto& rec = L.rec;
  // Gradient on this layer's outputs h_1..h_T (P × TB): from the head or the layer above.
  const Matrix<T>& above = (l == config_.layers - 1) ? grad_out_ : gx_;
  const bool inject = every_step_ || l < config_.layers - 1;
  const Index G = gate_count(config_.cell) * H;
  L.g.resize(S, (T_ + 1) * B);
  L.pg.dx.resize(G, T_ * B);  // written for the running steps only
  if (config_.cell == CellType::gru) L.pg.dh.resize(G, T_ * B);
  for (const Matrix<T>* m : {&L.g, &L.pg.dx, &L.pg.dh}) advise_huge_pages(*m);
  L.g.setZero();
  // Each sample's last state (s_T, or s at its length): the gradient on its output there and
  // the next stage's gradient on it, for BP and for the scan (its g_last) alike.
  for (Index b = 0; b < B; ++b) {
    L.g.col(last_col(b)).head(P) = above.col(last_col(b) - B);
    if (final_grad) L.g.col(last_col(b)) += final_grad->col(b);
  }
  auto& dh = config_.cell == CellType::gru ? L.pg.dh : L.pg.dx;

  if (!scan) {
    double t0 = omp_get_wtime();
    bp_recurrence(ops, config_.cell, p, rec, above, inject, L.g, L.pg, threads);
    local.scan += omp_get_wtime() - t0;
    if (options.check_finite && !all_finite(L.g.data(), L.g.size())) raise_state_grads_not_finite(op, l);
  } else if (!lengths_.empty()) {
    scan_by_length(L, p, above, inject, options, threads, local, op);  // the final gradients are in L.g
  } else {
    double t0 = omp_get_wtime();
    fill_chain(L, p, threads, op);
    if (inject) {
      for (Index k = 1; k < T_; ++k) injection_of(L.chain, k).topRows(P) = above.middleCols((k - 1) * B, B);
    } else if (L.chain.has_injections()) {
      L.chain.clear_injections();
    }
    double t1 = omp_get_wtime();
    local.jacobians += t1 - t0;
    ScanOptions so = scan_options(options);
    so.threads = threads;
    L.scanner.set_options(so);
    g_last_ = L.g.middleCols(T_ * B, B);
    try {
      local.last_scan = L.scanner.run(L.chain, g_last_, L.out);
    } catch (const NonFiniteError&) {  // the scan's own advice is for library users; a trainer's is BP's
      raise_state_grads_not_finite(op, l);
    }
    for (Index k = 0; k < T_; ++k) L.g.middleCols(k * B, B) = L.out.g(k);
    local.scan += omp_get_wtime() - t1;
  }

  double t2 = omp_get_wtime();
  if (scan)
    parallel_over_steps(threads, T_, 4.0 * static_cast<double>(G * B),
                        [&](Index t0r, Index t1r) { ops.preact(p, rec, L.g, L.pg, t0r, t1r, {}); });
  // The parameter-gradient GEMMs (T·B deep; with lengths, over the Σ L_b running steps
  // gathered, the padding skipped), shared among the threads.
  // The input gradient W_ih^T · dx: into the layer below's gx_, input_grad_ or the caller's buffer.
  Matrix<T>& gx = l == 0 ? input_grad_ : gx_;
  const Index I = p.w_ih.cols();
  const bool want_gx = l > 0 || gx_to.wanted;
  if (lengths_.empty()) {
    param_gradients(threads, p, L.pg.dx, dh, rec.input(), rec.h.leftCols(T_ * B), L.g.topRows(P).rightCols(T_ * B),
                    rec.m, gp);
    if (l == 0 && gx_to.dst != nullptr) {
      parallel_product(threads, Eigen::Map<Matrix<T>>(gx_to.dst, I, T_ * B), p.w_ih.transpose(), L.pg.dx,
                       /*by_columns=*/true);
    } else if (want_gx) {
      gx.resize(I, T_ * B);  // (the same size at every call of a shape: no allocation)
      advise_huge_pages(gx);
      parallel_product(threads, gx, p.w_ih.transpose(), L.pg.dx, /*by_columns=*/true);
    }
  } else {
    const Matrix<T> dx = gather_running(rec, L.pg.dx);
    const Matrix<T> dhr = config_.cell == CellType::gru ? gather_running(rec, L.pg.dh) : Matrix<T>();
    param_gradients(threads, p, dx, config_.cell == CellType::gru ? dhr : dx, gather_running(rec, rec.input()),
                    gather_running(rec, rec.h.leftCols(T_ * B)), gather_running(rec, L.g.topRows(P).rightCols(T_ * B)),
                    config_.proj > 0 ? gather_running(rec, rec.m) : Matrix<T>(), gp);
    if (want_gx) {
      Matrix<T> next(I, dx.cols());
      parallel_product(threads, next, p.w_ih.transpose(), dx, /*by_columns=*/true);
      if (l == 0 && gx_to.dst != nullptr) {
        Eigen::Map<Matrix<T>> dst(gx_to.dst, I, T_ * B);
        dst.setZero();  // nothing flows into the padding
        scatter_running(rec, next, dst);
      } else {
        gx.resize(I, T_ * B);
        advise_huge_pages(gx);
        gx.setZero();
        scatter_running(rec, next, gx);
      }
    }
  }
  L.g0 = L.g.leftCols(B);
  local.params += omp_get_wtime() - t2;

  if (times) {
    times->jacobians += local.jacobians;
    times->scan += local.scan;
    times->params += local.params;
    times->last_scan = local.last_scan;
  }
}

template <class T>
std::pair<Jacobian<T>, Matrix<T>> RecurrentCpu<T>::layer_transfer(Index l, const BackwardOptions& options,
                                                                  const LayerParamsList<T>& params) {
  const char* op = "Recurrent::layer_transfer";
  FlushDenormals flush;  // as backward_on: the same bits on one thread as on a team's
  const Index T_ = steps_, B = batch_, H = config_.hidden, P = output_size(config_), S = state_size(config_);
  const auto& ops = cell_ops<T>(config_.cell, config_.nonlinearity);
  auto& L = layer_[static_cast<std::size_t>(l)];
  const LayerWeights<T> p(params[static_cast<std::size_t>(l)]);

  // M: the layer's Jacobian chain, generated as the scan path does (same chain, so a scan
  // backward_layer after this reuses it), folded from J_1^T: acc = J_1^T · … · J_t^T. The
  // fold is sequential (T − 1 products of S × S per sample); a stage is short. With lengths,
  // sample b's own chain (its L_b running steps only) folds into its block of a dense M.
  const int threads = resolve_threads(options.threads);
  Jacobian<T> m;
  if (lengths_.empty()) {
    fill_chain(L, p, threads, op);
    m = L.chain.jacobian(1);
    for (Index t = 2; t <= T_; ++t) m = multiply(m, L.chain.jacobian(t));
  } else {
    const std::vector<Index> base = fill_chain_by_length(L, p, threads, op);
    m = Jacobian<T>::dense(S, S, B);
    for (Index b = 0; b < B; ++b) {
      const Index at = base[static_cast<std::size_t>(b)];
      Jacobian<T> mb = L.chain.jacobian(at + 1);
      for (Index t = 2; t <= lengths_[static_cast<std::size_t>(b)]; ++t) mb = multiply(mb, L.chain.jacobian(at + t));
      m.dense_map(b) = mb.to_dense(0);
    }
  }

  // v: g_0 by sequential BP with g_T from the head or the layer above only (no final-state
  // gradient), into locals so that grads(), state0_grad() and the next backward_layer are
  // untouched.
  const Matrix<T>& above = (l == config_.layers - 1) ? grad_out_ : gx_;
  const bool inject = every_step_ || l < config_.layers - 1;
  const Index G = gate_count(config_.cell) * H;
  Matrix<T> g = Matrix<T>::Zero(S, (T_ + 1) * B);
  for (Index b = 0; b < B; ++b) g.col(last_col(b)).head(P) = above.col(last_col(b) - B);  // as backward_layer's
  PreactGrads<T> pg;
  pg.dx.resize(G, T_ * B);
  if (config_.cell == CellType::gru) pg.dh.resize(G, T_ * B);
  bp_recurrence(ops, config_.cell, p, L.rec, above, inject, g, pg, threads);
  Matrix<T> v = g.leftCols(B);
  if (!all_finite(v.data(), v.size()))
    raise<NonFiniteError>(op, "initial-state gradient of layer " + std::to_string(l) +
                                  " is not finite (NaN/Inf): the loss or the weights diverged; "
                                  "lower the learning rate");
  return {std::move(m), std::move(v)};
}

template <class T>
LayerWeights<T> RecurrentCpu<T>::io_weights(const T* w_ih, const T* w_hh, const T* b_ih, const T* b_hh, const T* w_hr) {
  using MV = typename LayerWeights<T>::MatrixView;
  using VV = typename LayerWeights<T>::VectorView;
  const Index I = config_.input, H = config_.hidden, P = output_size(config_), G = gate_count(config_.cell) * H;
  if ((b_ih == nullptr || b_hh == nullptr) && zero_bias_.size() != G) zero_bias_.setZero(G);
  const bool proj = config_.proj > 0;
  return {MV(w_ih, G, I), MV(w_hh, G, P), VV(b_ih != nullptr ? b_ih : zero_bias_.data(), G),
          VV(b_hh != nullptr ? b_hh : zero_bias_.data(), G), MV(proj ? w_hr : nullptr, proj ? P : 0, proj ? H : 0)};
}

/// Block 0 of rec.h (and rec.c): forward_io's h0 (c0), zeros where absent.
template <class T>
void load_initial_state(const LayerForwardIo<T>& io, bool lstm, LayerRecord<T>& rec) {
  using MapCM = Eigen::Map<const Matrix<T>>;
  const Index B = rec.batch;
  if (io.h0 != nullptr)
    rec.h.leftCols(B) = MapCM(io.h0, rec.h.rows(), B);
  else
    rec.h.leftCols(B).setZero();
  if (lstm && io.c0 != nullptr)
    rec.c.leftCols(B) = MapCM(io.c0, rec.c.rows(), B);
  else if (lstm)
    rec.c.leftCols(B).setZero();
}

// bppsa.nn's layer on host tensors: the caller's buffers are read and written in place
// (the weights and x through maps, which the record keeps until backward_io; C order (T, B, ·)
// is features × T·B column-major, a (G·H, I) weight is a G·H × I row-major matrix).
template <class T>
void RecurrentCpu<T>::forward_io(const LayerForwardIo<T>& io, Index steps, Index batch, std::span<const Index> lengths,
                                 std::uintptr_t, LayerParamsList<T>&) {
  using MapCM = Eigen::Map<const Matrix<T>>;
  using MapM = Eigen::Map<Matrix<T>>;
  const Index I = config_.input, H = config_.hidden, P = output_size(config_);
  const bool lstm = config_.cell == CellType::lstm;
  const LayerWeights<T> w = io_weights(io.w_ih, io.w_hh, io.b_ih, io.b_hh, io.w_hr);
  if (!io.record && lengths.empty() &&
      resolve_forward(forward_options_, layer_shape(0, steps, batch, forward_options_.threads)).method ==
          ForwardMethod::sequential) {
    forward_unrecorded(w, io, steps, batch);
    return;
  }
  run_forward(std::span<const LayerWeights<T>>(&w, 1), MapCM(io.x, I, steps * batch), /*copy_x=*/false, steps, batch,
              lengths, [&](Index, LayerRecord<T>& rec) { load_initial_state(io, lstm, rec); });
  MapM(io.out, P, steps * batch) = output();
  const LayerRecord<T>& rec = layer_.front().rec;
  MapM h_n(io.h_n, P, batch);
  for (Index b = 0; b < batch; ++b) h_n.col(b) = rec.h.col(last_col(b));
  if (io.c_n != nullptr) {
    MapM c_n(io.c_n, H, batch);
    for (Index b = 0; b < batch; ++b) c_n.col(b) = rec.c.col(last_col(b));
  }
}

// Chunks of whole column blocks of the input projection: the recorded forward's blocks, so the same
// bits; about kChunkColumns columns (a chunk's gates stay in cache between its steps).
template <class T>
void RecurrentCpu<T>::forward_unrecorded(const LayerWeights<T>& p, const LayerForwardIo<T>& io, Index steps,
                                         Index batch) {
  using MapCM = Eigen::Map<const Matrix<T>>;
  using MapM = Eigen::Map<Matrix<T>>;
  constexpr Index kChunkColumns = 1024;
  FlushDenormals flush;
  const Index I = config_.input, H = config_.hidden, P = output_size(config_);
  const bool lstm = config_.cell == CellType::lstm;
  const auto& ops = cell_ops<T>(config_.cell, config_.nonlinearity);
  const int threads = resolve_threads(forward_options_.threads);
  const Index unit = kProductCols / std::gcd(kProductCols, batch);  // steps whose columns are whole blocks
  const Index chunk = std::min(steps, unit * std::max<Index>(1, kChunkColumns / (unit * batch)));
  // A last chunk of fewer than 4 columns joins the one before: its projection would take Eigen's
  // matrix-vector path (parallel_product), where the recorded forward's last tile takes the GEMM's.
  const Index tail = steps % chunk, longest = std::min(steps, chunk + (tail * batch < 4 ? tail : 0));
  check_memory("Recurrent::forward_io", "an inference call of " + stack_string(config_, chunk, batch) + " at a time",
               {{"chunk buffers", forward_record_bytes(config_, longest, batch, sizeof(T))}}, "use a smaller batch");
  for (auto& layer : layer_) layer.rec = LayerRecord<T>{};  // an earlier record is no longer this half's
  steps_ = 0;
  batch_ = 0;
  lengths_.clear();
  report_.method = forward_options_.method;
  report_.ran.assign(1, ForwardMethod::sequential);
  report_.max_iterations.assign(1, 0);
  report_.iterations.assign(1, 0);
  report_.residual.assign(1, 0.0);
  report_.fell_back.assign(1, false);
  report_.fallback_step.assign(1, 0);
  LayerRecord<T> rec;  // one chunk's
  rec.batch = batch;
  rec.hidden = H;
  rec.x_rows = I;
  size_record(rec, longest);
  load_initial_state(io, lstm, rec);
  const MapCM x(io.x, I, steps * batch);
  MapM out(io.out, P, steps * batch);
  for (Index t0 = 0, k = 0; t0 < steps; t0 += k) {
    k = steps - t0 <= longest ? steps - t0 : chunk;
    rec.steps = k;
    rec.x_view = io.x + t0 * batch * I;
    project_input(threads, rec.ax.leftCols(k * batch), p, x.middleCols(t0 * batch, k * batch));
    ops.forward(p, rec, threads);
    rec.weights_unchanged = true;  // the next chunk's forward keeps W_hh packed
    out.middleCols(t0 * batch, k * batch) = rec.h.middleCols(batch, k * batch);
    rec.h.leftCols(batch) = rec.h.middleCols(k * batch, batch);  // the next chunk's initial state
    if (lstm) rec.c.leftCols(batch) = rec.c.middleCols(k * batch, batch);
  }
  MapM(io.h_n, P, batch) = rec.h.leftCols(batch);
  if (io.c_n != nullptr) MapM(io.c_n, H, batch) = rec.c.leftCols(batch);
}

template <class T>
std::string RecurrentCpu<T>::backward_io(const LayerBackwardIo<T>& io, const BackwardOptions& options,
                                         std::span<const Index> lengths, std::uintptr_t, const LayerParamsList<T>&,
                                         LayerParamsList<T>&) {
  using MapCM = Eigen::Map<const Matrix<T>>;
  using MapM = Eigen::Map<Matrix<T>>;
  const Index H = config_.hidden, I = config_.input, P = output_size(config_), S = state_size(config_),
              G = gate_count(config_.cell) * H;
  const Index steps = steps_, batch = batch_;
  // The gradient on the final state: what reaches h_n / c_n from outside the layer.
  const Matrix<T>* gf = nullptr;
  if (io.grad_hn != nullptr || io.grad_cn != nullptr) {
    final_grad_.setZero(S, batch);
    if (io.grad_hn != nullptr) final_grad_.topRows(P) = MapCM(io.grad_hn, P, batch);
    if (io.grad_cn != nullptr) final_grad_.bottomRows(H) = MapCM(io.grad_cn, H, batch);
    gf = &final_grad_;
  }
  Matrix<T> zeros;
  const T* go = io.grad_out;
  if (go == nullptr) {
    zeros.setZero(P, steps * batch);
    go = zeros.data();
  }
  // When only each sample's last step has a gradient (a many-to-one head) the scan needs no
  // injections: the cheaper linear chain gives the same gradients. (Past a length none is used.)
  bool every_step = false;
  for (Index b = 0; b < batch && !every_step; ++b) {
    const Index len = lengths.empty() ? steps : lengths[static_cast<std::size_t>(b)];
    for (Index t = 0; t + 1 < len && !every_step; ++t) {
      const T* col = go + (t * batch + b) * P;
      every_step = std::any_of(col, col + P, [](T v) { return v != T(0); });
    }
  }
  const LayerWeights<T> w = io_weights(io.w_ih, io.w_hh, io.b_ih, io.b_hh, io.w_hr);
  const bool proj = config_.proj > 0;
  LayerGradients<T> gp{{io.grad_w_ih, G, I},
                       {io.grad_w_hh, G, P},
                       {io.grad_b_ih, G},
                       {io.grad_b_hh, G},
                       {proj ? io.grad_w_hr : nullptr, proj ? P : 0, proj ? H : 0}};
  backward_begin(MapCM(go, P, steps * batch), every_step, {});
  prepare_layer(0, options);
  backward_on(0, options, w, gp, gf, nullptr, InputGrad{io.grad_x != nullptr, io.grad_x});

  const Matrix<T>& g0 = layer_.front().g0;
  if (io.grad_h0 != nullptr) MapM(io.grad_h0, P, batch) = g0.topRows(P);
  if (io.grad_c0 != nullptr) MapM(io.grad_c0, H, batch) = g0.bottomRows(H);
  return to_string(resolved(0, steps, batch, options).method);
}

}  // namespace

template <class T>
std::unique_ptr<RecurrentHalf<T>> make_recurrent_cpu(const RecurrentConfig& config) {
  return std::make_unique<RecurrentCpu<T>>(config);
}
template std::unique_ptr<RecurrentHalf<float>> make_recurrent_cpu<float>(const RecurrentConfig&);
template std::unique_ptr<RecurrentHalf<double>> make_recurrent_cpu<double>(const RecurrentConfig&);

}  // namespace detail
}  // namespace bppsa
