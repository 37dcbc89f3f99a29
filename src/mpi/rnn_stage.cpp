// A recurrent pipeline stage: time steps [first, last) of a SequenceClassifier on one rank.
// The stage starts from the states the previous stage ended with and hands on its own final
// states (every layer's, stacked); backward gradients travel on the same boundary. The
// cross-rank scan runs once per layer, top down: a layer's injections come from the layer
// above, which must be finished first.
#include <string>

#include "bppsa/core/error.hpp"
#include "bppsa/nn/loss.hpp"
#include "mpi/stage.hpp"

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

  std::vector<NamedParam<T>> params(int slot, Index, Index) override { return slots_[slot].net.parameters(); }
  bool shared_weights() const override { return true; }

  Matrix<T> forward(int m, const Micro& mb, const Matrix<T>* in, bool train, double weight, double* loss_sum,
                    Index* correct) override {
    Slot& s = slot(m);
    Recurrent<T>& rnn = s.net.rnn();
    const Index I = config_.rnn.input, n = last_ - first_, B = mb.batch;
    const Index S = state_size(config_.rnn);
    s.x.resize(I, n * B);
    for (Index b = 0; b < B; ++b)
      for (Index t = 0; t < n; ++t)
        for (Index i = 0; i < I; ++i) s.x(i, t * B + b) = static_cast<T>(mb.x[(b * steps_ + first_ + t) * I + i]);
    for (Index l = 0; l < config_.rnn.layers; ++l)
      rnn.set_initial_state(l, in ? Matrix<T>(in->middleRows(l * S, S)) : Matrix<T>());
    rnn.forward(s.x, n, B);
    s.batch = B;
    s.has_head = is_last_ || every();
    if (s.has_head) {
      // head=every: this stage's steps' terms of the mean over all steps (its share n / steps).
      const double w = every() ? weight * static_cast<double>(n) / static_cast<double>(steps_) : weight;
      s.labels.clear();
      if (every()) {
        s.net.head().forward(rnn.output(), s.logits);
        for (Index t = 0; t < n; ++t) s.labels.insert(s.labels.end(), mb.labels, mb.labels + B);
      } else {
        s.net.head().forward(rnn.output().rightCols(B), s.logits);
        s.labels.assign(mb.labels, mb.labels + B);
      }
      const T l = loss<T>(config_.loss, s.logits, s.labels, train ? &s.dlogits : nullptr);
      *loss_sum += w * static_cast<double>(l);
      if (train) s.dlogits *= static_cast<T>(w);
      if (is_last_)
        for (Index b = 0; b < B; ++b) {
          Index best = 0;
          s.logits.col(s.logits.cols() - B + b).maxCoeff(&best);
          *correct += best == mb.labels[b];
        }
    }
    if (is_last_) return {};
    Matrix<T> out(config_.rnn.layers * S, B);
    for (Index l = 0; l < config_.rnn.layers; ++l) out.middleRows(l * S, S) = rnn.state(l, n);
    return out;
  }

  Matrix<T> backward_bp(int m, const Matrix<T>* g_out) override {
    Slot& s = slot(m);
    head_backward(s);
    set_final(s, g_out);
    s.net.rnn().backward(s.dout, every(), bp_options());
    return first_ > 0 ? initial_grads(s) : Matrix<T>();
  }

  Transfer<T> transfer(int m, int pass) override {
    Slot& s = slot(m);
    Recurrent<T>& rnn = s.net.rnn();
    const Index l = layer_of(pass);
    if (pass == 0) {
      head_backward(s);
      set_final(s, nullptr);  // the previous step's (maybe of another batch size) must not linger
      rnn.backward_begin(s.dout, every());
    }
    rnn.set_final_state_grad(l, Matrix<T>());
    if (is_last_) {  // nothing arrives after the last step: finish the layer now
      rnn.backward_layer(l, bp_options());
      return Transfer<T>::vector(rnn.state0_grad(l));
    }
    if (first_ == 0) return {};  // no rank needs stage 0's transfer
    auto [mt, v] = rnn.layer_transfer(l, bp_options());
    if (v.isZero(0)) return Transfer<T>::linear(std::move(mt));
    return Transfer<T>::affine(std::move(mt), std::move(v));
  }

  void push(int m, int pass, const Matrix<T>& g_out) override {
    if (is_last_) return;
    Recurrent<T>& rnn = slot(m).net.rnn();
    const Index l = layer_of(pass);
    rnn.set_final_state_grad(l, g_out);
    rnn.backward_layer(l, bp_options());
  }

 private:
  struct Slot {
    explicit Slot(const ModelConfig& c) : net(c) {}
    SequenceClassifier<T> net;
    Matrix<T> x, logits, dlogits, dout;
    std::vector<std::int64_t> labels;
    Index batch = 0;
    bool has_head = false;
  };
  bool every() const { return config_.head == HeadMode::every; }
  Index layer_of(int pass) const { return config_.rnn.layers - 1 - pass; }
  Slot& slot(int m) { return slots_[m]; }
  BackwardOptions bp_options() const { return {BackwardMethod::bp, threads_, 0}; }

  /// The gradient on the top layer's outputs from this stage's head (zero without one); the
  /// head's parameter gradients (zero on stages without a head).
  void head_backward(Slot& s) {
    Recurrent<T>& rnn = s.net.rnn();
    Linear<T>& head = s.net.head();
    if (!s.has_head) {
      s.dout.setZero(output_size(config_.rnn), rnn.output().cols());
      head.grad_weight.setZero(head.weight.rows(), head.weight.cols());
      head.grad_bias.setZero(head.bias.size());
    } else {
      s.net.head_backward(s.dlogits, s.dout);
    }
  }

  void set_final(Slot& s, const Matrix<T>* g_out) {
    const Index S = state_size(config_.rnn);
    for (Index l = 0; l < config_.rnn.layers; ++l)
      s.net.rnn().set_final_state_grad(l, g_out ? Matrix<T>(g_out->middleRows(l * S, S)) : Matrix<T>());
  }

  Matrix<T> initial_grads(Slot& s) {
    const Index S = state_size(config_.rnn);
    Matrix<T> g(config_.rnn.layers * S, s.batch);
    for (Index l = 0; l < config_.rnn.layers; ++l) g.middleRows(l * S, S) = s.net.rnn().state0_grad(l);
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
