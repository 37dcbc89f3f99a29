// The CPU half of bppsa.nn's layer engine: bppsa::Recurrent (one layer, one direction) on host
// memory, with the tensors' buffers read and written in place.
#include <algorithm>

#include "bppsa/core/error.hpp"
#include "layer_half.hpp"

namespace bppsa::python {
namespace {

template <class T>
using MapM = Eigen::Map<Matrix<T>>;
template <class T>
using MapCM = Eigen::Map<const Matrix<T>>;

/// dst ← src (C order, as PyTorch's), zeros for a null src.
template <class T, class Dst>
void load(Dst& dst, const T* src) {
  if (src == nullptr)
    dst.setZero();
  else
    std::copy(src, src + dst.size(), dst.data());
}

template <class T, class Src>
void store(T* dst, const Src& src) {
  if (dst != nullptr) std::copy(src.data(), src.data() + src.size(), dst);
}

template <class T>
class LayerCpu final : public LayerHalf<T> {
 public:
  explicit LayerCpu(const RecurrentConfig& config) : rnn_(config) {}

  void forward(const LayerForwardIo<T>& io, Index steps, Index batch, const std::vector<Index>& lengths,
               std::uintptr_t) override {
    const RecurrentConfig& cfg = rnn_.config();
    const Index I = cfg.input, H = cfg.hidden, P = output_size(cfg);
    auto& p = rnn_.params(0);
    load(p.w_ih, io.w_ih);
    load(p.w_hh, io.w_hh);
    load(p.b_ih, io.b_ih);
    load(p.b_hh, io.b_hh);
    if (cfg.proj > 0) load(p.w_hr, io.w_hr);
    if (io.h0 != nullptr || io.c0 != nullptr) {
      Matrix<T> s0 = Matrix<T>::Zero(state_size(cfg), batch);
      if (io.h0 != nullptr) s0.topRows(P) = MapCM<T>(io.h0, P, batch);
      if (io.c0 != nullptr) s0.bottomRows(H) = MapCM<T>(io.c0, H, batch);
      rnn_.set_initial_state(0, std::move(s0));
    } else {
      rnn_.set_initial_state(0, Matrix<T>());
    }
    rnn_.forward(MapCM<T>(io.x, I, steps * batch), steps, batch, lengths);
    MapM<T>(io.out, P, steps * batch) = rnn_.output();
    const Matrix<T> last = rnn_.final_state(0);
    MapM<T>(io.h_n, P, batch) = last.topRows(P);
    if (io.c_n != nullptr) MapM<T>(io.c_n, H, batch) = last.bottomRows(H);
  }

  std::string backward(const LayerBackwardIo<T>& io, const BackwardOptions& options, std::uintptr_t) override {
    const RecurrentConfig& cfg = rnn_.config();
    const Index H = cfg.hidden, I = cfg.input, P = output_size(cfg), S = state_size(cfg);
    const Index steps = rnn_.steps(), batch = rnn_.batch();
    // The gradient on the final state: what reaches h_n / c_n from outside the layer.
    if (io.grad_hn != nullptr || io.grad_cn != nullptr) {
      Matrix<T> gf = Matrix<T>::Zero(S, batch);
      if (io.grad_hn != nullptr) gf.topRows(P) = MapCM<T>(io.grad_hn, P, batch);
      if (io.grad_cn != nullptr) gf.bottomRows(H) = MapCM<T>(io.grad_cn, H, batch);
      rnn_.set_final_state_grad(0, std::move(gf));
    } else {
      rnn_.set_final_state_grad(0, Matrix<T>());
    }
    // Every step's output gradient; when only the last step's is non-zero (a many-to-one head)
    // the scan needs no injections: the cheaper linear chain gives the same gradients.
    const T* go = io.grad_out;
    if (go == nullptr) {
      grad_out_zero_.setZero(P, steps * batch);
      go = grad_out_zero_.data();
    }
    // Is any gradient given before a sample's last step? (Past its length it is not used.)
    const std::vector<Index>& lengths = rnn_.lengths();
    bool every_step = false;
    for (Index b = 0; b < batch && !every_step; ++b) {
      const Index len = lengths.empty() ? steps : lengths[static_cast<std::size_t>(b)];
      for (Index t = 0; t + 1 < len && !every_step; ++t) {
        const T* col = go + (t * batch + b) * P;
        every_step = std::any_of(col, col + P, [](T v) { return v != T(0); });
      }
    }
    rnn_.backward(MapCM<T>(go, P, steps * batch), every_step, options);

    const auto& gp = rnn_.grads(0);
    store(io.grad_w_ih, gp.w_ih);
    store(io.grad_w_hh, gp.w_hh);
    store(io.grad_b_ih, gp.b_ih);
    store(io.grad_b_hh, gp.b_hh);
    if (cfg.proj > 0) store(io.grad_w_hr, gp.w_hr);
    if (io.grad_x != nullptr) MapM<T>(io.grad_x, I, steps * batch) = rnn_.input_grad();
    const Matrix<T>& g0 = rnn_.state0_grad(0);
    if (io.grad_h0 != nullptr) MapM<T>(io.grad_h0, P, batch) = g0.topRows(P);
    if (io.grad_c0 != nullptr) MapM<T>(io.grad_c0, H, batch) = g0.bottomRows(H);
    return to_string(resolve_backward(options, batch));
  }

  Index steps() const override { return rnn_.steps(); }
  Index batch() const override { return rnn_.batch(); }

  /// A record of up to kKeptColumns steps × samples stays (a decoder's next T 1 call reuses its
  /// buffers; it is bounded by the layer's sizes), a larger one is freed: a new Recurrent takes
  /// the loaded weights over (moved, not copied). Rebuilding costs about two weight-sized fills,
  /// small beside a forward of more than kKeptColumns columns.
  void release_record() override {
    grad_out_zero_ = Matrix<T>();
    if (rnn_.steps() * rnn_.batch() <= kKeptColumns) return;
    RecurrentLayerParams<T> loaded = std::move(rnn_.params(0));
    rnn_ = Recurrent<T>(rnn_.config());
    rnn_.params(0) = std::move(loaded);
  }

 private:
  static constexpr Index kKeptColumns = 64;
  Recurrent<T> rnn_;
  Matrix<T> grad_out_zero_;
};

}  // namespace

template <class T>
std::unique_ptr<LayerHalf<T>> make_layer_cpu(const RecurrentConfig& config) {
  return std::make_unique<LayerCpu<T>>(config);
}
template std::unique_ptr<LayerHalf<float>> make_layer_cpu(const RecurrentConfig&);
template std::unique_ptr<LayerHalf<double>> make_layer_cpu(const RecurrentConfig&);

}  // namespace bppsa::python
