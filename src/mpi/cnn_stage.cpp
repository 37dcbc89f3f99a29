// A CNN pipeline stage: layers [first, last) of a ConvNet on one rank.
#include <string>

#include "bppsa/core/error.hpp"
#include "bppsa/jacobian/product.hpp"
#include "bppsa/nn/loss.hpp"
#include "mpi/stage.hpp"

namespace bppsa::mpi::detail {
namespace {

template <class T>
class CnnStage final : public Stage<T> {
 public:
  CnnStage(const ConvNetConfig& config, Index first, Index last, bool is_last, int threads)
      : config_(config), first_(first), last_(last), is_last_(is_last), threads_(threads) {
    ensure_slots(1);
  }

  int passes() const override { return 1; }

  void ensure_slots(int count) override { slots_.ensure(count, config_); }

  void reset_parameters(std::uint64_t seed) override { slots_.reset_parameters(seed); }
  void load_state_dict(const TensorFile& file) override { slots_.load_state_dict(file); }
  TensorFile state_dict() override { return slots_.state_dict(); }

  std::vector<NamedParam<T>> params(int slot, Index first, Index last) override {
    std::vector<NamedParam<T>> out;
    ConvNet<T>& net = slots_[slot].net;
    for (Index i = first; i < last; ++i)
      for (const ParamRef<T>& p : net.layer(i).params())
        out.push_back({std::to_string(i) + "." + p.suffix, p.shape, p.value, p.grad, p.size});
    return out;
  }
  bool shared_weights() const override { return false; }

  Matrix<T> forward(int m, const Micro& mb, const Matrix<T>* in, bool train, double weight, double* loss_sum,
                    Index* correct) override {
    Slot& s = slot(m);
    s.act.resize(static_cast<std::size_t>(last_ - first_ + 1));
    if (first_ == 0) {
      const Index n = config_.input.size();
      s.act[0] = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>>(mb.x, n, mb.batch).cast<T>();
    } else {
      s.act[0] = *in;
    }
    for (Index i = first_; i < last_; ++i) s.net.layer(i).forward(s.act[u(i - first_)], s.act[u(i - first_ + 1)], threads_);
    if (!is_last_) return s.act.back();
    const std::span<const std::int64_t> labels(mb.labels, static_cast<std::size_t>(mb.batch));
    const T l = loss<T>(config_.loss, s.act.back(), labels, train ? &s.dlogits : nullptr);
    *loss_sum += weight * static_cast<double>(l);
    if (train) s.dlogits *= static_cast<T>(weight);
    for (Index b = 0; b < mb.batch; ++b) {
      Index best = 0;
      s.act.back().col(b).maxCoeff(&best);
      *correct += best == mb.labels[b];
    }
    return {};
  }

  Matrix<T> backward_bp(int m, const Matrix<T>* g_out) override { return bp(m, g_out, true); }

  Transfer<T> transfer(int m, int /*pass*/) override {
    if (is_last_) return Transfer<T>::vector(bp(m, nullptr, true));
    if (first_ == 0) return {};  // no rank needs stage 0's transfer: nothing lies before it
    Slot& s = slot(m);
    const Index batch = s.act[0].cols();
    if (s.jt_batch != batch) {
      s.jt.clear();
      for (Index i = first_; i < last_; ++i)
        if (s.net.layer(i).has_jacobian()) s.jt.push_back(s.net.layer(i).make_jacobian(batch));
      s.jt_batch = batch;
    }
    std::size_t k = 0;
    for (Index i = first_; i < last_; ++i)
      if (s.net.layer(i).has_jacobian())
        s.net.layer(i).fill_jacobian(s.act[u(i - first_)], s.act[u(i - first_ + 1)], s.jt[k++], threads_);
    if (s.jt.empty()) return {};  // only Flatten: the identity
    // M = J_first^T · J_first+1^T ⋯ J_last−1^T: the input-most Jacobian is applied last.
    Jacobian<T> acc = s.jt.front();
    for (std::size_t j = 1; j < s.jt.size(); ++j) acc = multiply(acc, s.jt[j]);
    return Transfer<T>::linear(std::move(acc));
  }

  void push(int m, int /*pass*/, const Matrix<T>& g_out) override {
    if (!is_last_) bp(m, &g_out, false);
  }

 private:
  struct Slot {
    explicit Slot(const ConvNetConfig& c) : net(c) {}
    ConvNet<T> net;
    std::vector<Matrix<T>> act;  ///< act[i − first] = input of layer i; back() = the stage's output
    Matrix<T> dlogits, g, g_prev;
    std::vector<Jacobian<T>> jt;
    Index jt_batch = -1;
  };
  static std::size_t u(Index i) { return static_cast<std::size_t>(i); }
  Slot& slot(int m) { return slots_[m]; }

  /// Sequential BP through layers last−1 … first; parameter gradients on the way.
  Matrix<T> bp(int m, const Matrix<T>* g_out, bool need_input) {
    Slot& s = slot(m);
    s.g = is_last_ ? s.dlogits : *g_out;
    for (Index i = last_ - 1; i >= first_; --i) {
      auto& layer = s.net.layer(i);
      layer.param_grads(s.act[u(i - first_)], s.g, threads_);
      if (i > first_ || (i > 0 && need_input)) {
        layer.backward_input(s.act[u(i - first_)], s.act[u(i - first_ + 1)], s.g, s.g_prev, threads_);
        std::swap(s.g, s.g_prev);
      }
    }
    return first_ > 0 && need_input ? s.g : Matrix<T>();
  }

  ConvNetConfig config_;
  Index first_, last_;
  bool is_last_;
  int threads_;
  Slots<Slot> slots_;
};

}  // namespace

template <class T>
std::unique_ptr<Stage<T>> make_cnn_stage(const ConvNetConfig& config, Index first, Index last, bool is_last,
                                         int threads) {
  return std::make_unique<CnnStage<T>>(config, first, last, is_last, threads);
}

template std::unique_ptr<Stage<float>> make_cnn_stage<float>(const ConvNetConfig&, Index, Index, bool, int);
template std::unique_ptr<Stage<double>> make_cnn_stage<double>(const ConvNetConfig&, Index, Index, bool, int);

}  // namespace bppsa::mpi::detail
