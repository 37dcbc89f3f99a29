// A recurrent pipeline stage: time steps [first, last) of a SequenceClassifier on one rank.
// The stage starts from the states the previous stage ended with and hands on its own final
// states (every layer's, stacked); backward gradients travel on the same boundary. The
// cross-rank scan runs once per layer, top down: a layer's injections come from the layer
// above, which must be finished first.
//
// Samples of different lengths: every stage sorts a micro-batch longest first (stably, so all
// of them agree on the boundary's columns). Sample k runs ℓ_k = clamp(L_k − first, 0, n) of
// this stage's n steps: those with ℓ_k > 0 (a prefix) run through the Recurrent with lengths
// ℓ (it stops each at its length: nothing past it is computed); the others ended on an earlier
// stage and pass their state on unchanged, and their gradient back (the identity in the
// stage's transfer, Transfer::width: neither stored, sent nor multiplied). The head `last`
// reads every sample's final state on the last stage.
#include <algorithm>
#include <numeric>
#include <string>

#include "bppsa/core/error.hpp"
#include "bppsa/nn/loss.hpp"
#include "mpi/stage.hpp"
#include "nn/lengths.hpp"

namespace bppsa::mpi::detail {
namespace {

template <class T>
class RnnStage final : public Stage<T> {
 public:
  RnnStage(const ModelConfig& config, Index steps, Index first, Index last, bool is_last, int threads)
      : config_(config), steps_(steps), first_(first), last_(last), is_last_(is_last), threads_(threads) {
    ensure_slots(1);
  }

  int passes() const override { return static_cast<int>(config_.rnn.layers); }

  void ensure_slots(int count) override { slots_.ensure(count, config_); }

  void reset_parameters(std::uint64_t seed) override { slots_.reset_parameters(seed); }
  void load_state_dict(const TensorFile& file) override { slots_.load_state_dict(file); }
  TensorFile state_dict() override { return slots_.state_dict(); }

  std::vector<NamedParam<T>> params(int slot, Index, Index) override {
    Slot& s = slots_[slot];
    std::vector<NamedParam<T>> ps = s.net.parameters();
    // No sample of the slot's last forward ran a step here (each ended on an earlier stage):
    // the Recurrent did not run, and its gradients from this micro-batch are zeros.
    if (s.batch > 0 && s.active == 0) {
      Index largest = 0;
      for (const auto& p : ps) largest = std::max(largest, p.size);
      if (static_cast<Index>(s.zeros.size()) < largest) s.zeros.assign(static_cast<std::size_t>(largest), T(0));
      for (auto& p : ps)
        if (p.name.rfind("head.", 0) != 0) p.grad = s.zeros.data();
    }
    return ps;
  }
  bool shared_weights() const override { return true; }

  void check_lengths(std::span<const Index> lengths, Index batch) const override {
    bppsa::detail::check_lengths("model-parallel", lengths, batch, steps_);
  }

  Matrix<T> forward(int m, const Micro& mb, const Matrix<T>* in, bool train, double weight, double* loss_sum,
                    Index* correct) override {
    Slot& s = slot(m);
    Recurrent<T>& rnn = s.net.rnn();
    const Index I = config_.rnn.input, n = last_ - first_, B = mb.batch;
    const Index S = state_size(config_.rnn), P = output_size(config_.rnn), top = config_.rnn.layers - 1;
    // The micro-batch longest first, and each sample's steps on this stage.
    s.order.resize(static_cast<std::size_t>(B));
    std::iota(s.order.begin(), s.order.end(), Index{0});
    if (mb.lengths)
      std::stable_sort(s.order.begin(), s.order.end(), [&](Index a, Index b) { return mb.lengths[a] > mb.lengths[b]; });
    s.len.resize(static_cast<std::size_t>(B));
    s.labels.resize(static_cast<std::size_t>(B));
    s.active = 0;
    for (Index k = 0; k < B; ++k) {
      const Index b = s.order[static_cast<std::size_t>(k)], L = mb.lengths ? mb.lengths[b] : steps_;
      s.len[static_cast<std::size_t>(k)] = std::clamp<Index>(L - first_, 0, n);
      s.labels[static_cast<std::size_t>(k)] = mb.labels[b];
      s.active += s.len[static_cast<std::size_t>(k)] > 0;
    }
    const Index A = s.active;
    s.batch = B;
    if (A > 0) {
      s.x.setZero(I, n * A);  // the steps past a sample's length are never read
      for (Index k = 0; k < A; ++k) {
        const Index b = s.order[static_cast<std::size_t>(k)];
        for (Index t = 0; t < s.len[static_cast<std::size_t>(k)]; ++t)
          for (Index i = 0; i < I; ++i) s.x(i, t * A + k) = static_cast<T>(mb.x[(b * steps_ + first_ + t) * I + i]);
      }
      for (Index l = 0; l < config_.rnn.layers; ++l)
        rnn.set_initial_state(l, in ? Matrix<T>(in->block(l * S, 0, S, A)) : Matrix<T>());
      const bool ragged = s.len[static_cast<std::size_t>(A - 1)] < n;
      rnn.forward(
          s.x, n, A,
          ragged ? std::span<const Index>(s.len.data(), static_cast<std::size_t>(A)) : std::span<const Index>());
    }
    // Every layer's final state: s at ℓ_k for the samples that ran, the incoming one otherwise.
    const auto final_states = [&](Index l) {
      Matrix<T> f(S, B);
      if (A > 0) f.leftCols(A) = rnn.final_state(l);
      if (A < B) {
        if (in)
          f.rightCols(B - A) = in->block(l * S, A, S, B - A);
        else
          f.rightCols(B - A).setZero();  // not reached: on stage 0 every sample runs
      }
      return f;
    };
    Matrix<T> final_top;  // the top layer's h at each sample's last real step (last stage)
    if (is_last_) final_top = final_states(top).topRows(P);

    s.has_head = false;
    double w = weight;
    if (every()) {  // this stage's real steps; their share of the mean over the batch's real steps
      if (A > 0)
        bppsa::detail::head_columns(true, std::span<const Index>(s.len.data(), static_cast<std::size_t>(A)),
                                    std::span<const std::int64_t>(s.labels.data(), static_cast<std::size_t>(A)),
                                    s.head_cols, s.col_labels);
      else
        s.head_cols.clear();
      if (!s.head_cols.empty()) {
        s.has_head = true;
        const double mean = mb.lengths ? mb.mean_length : static_cast<double>(steps_);
        w = weight * static_cast<double>(s.head_cols.size()) / (static_cast<double>(B) * mean);
        s.head_in.resize(P, static_cast<Index>(s.head_cols.size()));
        for (std::size_t j = 0; j < s.head_cols.size(); ++j)
          s.head_in.col(static_cast<Index>(j)) = rnn.output().col(s.head_cols[j]);
      }
    } else if (is_last_) {
      s.has_head = true;
      s.head_in = final_top;
      s.col_labels = s.labels;
    }
    if (s.has_head) {
      s.net.head().forward(s.head_in, s.logits);
      const T l = loss<T>(config_.loss, s.logits, s.col_labels, train ? &s.dlogits : nullptr);
      *loss_sum += w * static_cast<double>(l);
      if (train) s.dlogits *= static_cast<T>(w);
    }
    if (is_last_) {  // each sample's prediction: the head at its last real step
      Matrix<T> predicted;
      if (every()) s.net.head().forward(final_top, predicted);
      const Matrix<T>& logits = every() ? predicted : s.logits;
      for (Index k = 0; k < B; ++k) {
        Index best = 0;
        logits.col(k).maxCoeff(&best);
        *correct += best == s.labels[static_cast<std::size_t>(k)];
      }
      return {};
    }
    Matrix<T> out(config_.rnn.layers * S, B);
    for (Index l = 0; l < config_.rnn.layers; ++l) out.middleRows(l * S, S) = final_states(l);
    return out;
  }

  Matrix<T> backward_bp(int m, const Matrix<T>* g_out) override {
    Slot& s = slot(m);
    head_backward(s);
    if (s.active > 0) {
      set_final(s, g_out);
      s.net.rnn().backward(s.dout, every(), bp_options());
    }
    if (first_ == 0) return {};
    const Index S = state_size(config_.rnn);
    Matrix<T> g(config_.rnn.layers * S, s.batch);
    for (Index l = 0; l < config_.rnn.layers; ++l) g.middleRows(l * S, S) = boundary_grad(s, l, g_out);
    return g;
  }

  Transfer<T> transfer(int m, int pass) override {
    Slot& s = slot(m);
    Recurrent<T>& rnn = s.net.rnn();
    const Index l = layer_of(pass), A = s.active, B = s.batch, S = state_size(config_.rnn);
    if (pass == 0) {
      head_backward(s);
      if (A > 0) {
        set_final(s, nullptr);  // the previous step's (maybe of another batch size) must not linger
        rnn.backward_begin(s.dout, every());
      }
    }
    if (A > 0) rnn.set_final_state_grad(l, Matrix<T>());
    if (is_last_) {  // nothing arrives after the last step: finish the layer now
      if (A > 0) rnn.backward_layer(l, bp_options());
      return Transfer<T>::vector(boundary_grad(s, l, nullptr));
    }
    if (first_ == 0 || A == 0) return {};  // no rank needs stage 0's; every sample passes: the identity
    auto [mt, v] = rnn.layer_transfer(l, bp_options());
    if (A < B) {  // the samples that ended before this stage (the last B − A) pass unchanged, nothing injected
      if (mt.layout().kind != Kind::dense || mt.count() != A) {  // Transfer::width's form: a dense block each
        Jacobian<T> blocks = Jacobian<T>::dense(S, S, A);
        for (Index k = 0; k < A; ++k) blocks.dense_map(k) = mt.to_dense(k);
        mt = std::move(blocks);
      }
      Matrix<T> fv = Matrix<T>::Zero(S, B);
      fv.leftCols(A) = v;
      v = std::move(fv);
    }
    Transfer<T> t = v.isZero(0) ? Transfer<T>::linear(std::move(mt)) : Transfer<T>::affine(std::move(mt), std::move(v));
    if (A < B) t.width = A;
    return t;
  }

  void push(int m, int pass, const Matrix<T>& g_out) override {
    Slot& s = slot(m);
    if (is_last_ || s.active == 0) return;
    Recurrent<T>& rnn = s.net.rnn();
    const Index l = layer_of(pass);
    rnn.set_final_state_grad(l, Matrix<T>(g_out.leftCols(s.active)));
    rnn.backward_layer(l, bp_options());
  }

 private:
  struct Slot {
    explicit Slot(const ModelConfig& c) : net(c) {}
    SequenceClassifier<T> net;
    Matrix<T> x, head_in, logits, dlogits, dh, dout, dpass;
    std::vector<std::int64_t> labels, col_labels;  ///< labels: per sample, in the sorted order
    std::vector<Index> order;      ///< the micro-batch's samples, longest first (its own order without lengths)
    std::vector<Index> len;        ///< each sample's steps on this stage, 0..n (sorted order)
    std::vector<Index> head_cols;  ///< head every: the output columns of this stage's real steps
    std::vector<T> zeros;          ///< the recurrent gradients of a slot where no sample ran
    Index batch = 0, active = 0;   ///< samples, and those that run a step here (a prefix)
    bool has_head = false;
  };
  bool every() const { return config_.head == HeadMode::every; }
  Index layer_of(int pass) const { return config_.rnn.layers - 1 - pass; }
  Slot& slot(int m) { return slots_[m]; }
  BackwardOptions bp_options() const { return {BackwardMethod::bp, threads_, 0}; }

  /// The gradient on the top layer's outputs from this stage's head, into s.dout (zero
  /// without one; output_size × n·active); the head's gradient on the final states of the
  /// samples that passed through (head last, last stage) into s.dpass; the head's parameter
  /// gradients (zero on stages without a head).
  void head_backward(Slot& s) {
    Linear<T>& head = s.net.head();
    const Index P = output_size(config_.rnn), n = last_ - first_, A = s.active;
    s.dout.setZero(P, n * A);
    s.dpass.setZero(P, s.batch - A);
    if (!s.has_head) {
      head.grad_weight.setZero(head.weight.rows(), head.weight.cols());
      head.grad_bias.setZero(head.bias.size());
      return;
    }
    head.backward(s.head_in, s.dlogits, s.dh);
    if (every()) {
      for (std::size_t j = 0; j < s.head_cols.size(); ++j) s.dout.col(s.head_cols[j]) = s.dh.col(static_cast<Index>(j));
    } else {
      for (Index k = 0; k < s.batch; ++k)
        if (k < A)
          s.dout.col((s.len[static_cast<std::size_t>(k)] - 1) * A + k) = s.dh.col(k);
        else
          s.dpass.col(k - A) = s.dh.col(k);
    }
  }

  /// Each layer's gradient from the next stage on the running samples' final states.
  void set_final(Slot& s, const Matrix<T>* g_out) {
    const Index S = state_size(config_.rnn);
    for (Index l = 0; l < config_.rnn.layers; ++l)
      s.net.rnn().set_final_state_grad(l, g_out ? Matrix<T>(g_out->block(l * S, 0, S, s.active)) : Matrix<T>());
  }

  /// Layer l's gradient on this stage's initial states (S × batch): the running samples'
  /// state0_grad; for the others, what came from the next stage (g_out: every layer's,
  /// stacked, or none) and the head's gradient on their final h.
  Matrix<T> boundary_grad(Slot& s, Index l, const Matrix<T>* g_out) {
    const Index S = state_size(config_.rnn), A = s.active, B = s.batch;
    Matrix<T> g(S, B);
    if (A > 0) g.leftCols(A) = s.net.rnn().state0_grad(l);
    if (A < B) {
      if (g_out)
        g.rightCols(B - A) = g_out->block(l * S, A, S, B - A);
      else
        g.rightCols(B - A).setZero();
      if (l == config_.rnn.layers - 1) g.rightCols(B - A).topRows(output_size(config_.rnn)) += s.dpass;
    }
    return g;
  }

  ModelConfig config_;
  Index steps_, first_, last_;
  bool is_last_;
  int threads_;
  Slots<Slot> slots_;
};

}  // namespace

template <class T>
std::unique_ptr<Stage<T>> make_rnn_stage(const ModelConfig& config, Index steps, Index first, Index last, bool is_last,
                                         int threads) {
  return std::make_unique<RnnStage<T>>(config, steps, first, last, is_last, threads);
}

template std::unique_ptr<Stage<float>> make_rnn_stage<float>(const ModelConfig&, Index, Index, Index, bool, int);
template std::unique_ptr<Stage<double>> make_rnn_stage<double>(const ModelConfig&, Index, Index, Index, bool, int);

}  // namespace bppsa::mpi::detail
