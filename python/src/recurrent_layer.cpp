// LayerEngine: bppsa::Recurrent (one layer) driven by tensors from Python (recurrent_layer.hpp).
#include "recurrent_layer.hpp"

#include <algorithm>
#include <cstring>

#include "bppsa/core/error.hpp"

namespace bppsa::python {

namespace {
constexpr const char* kOp = "bppsa.nn";

template <class T>
using MapM = Eigen::Map<Matrix<T>>;
template <class T>
using MapCM = Eigen::Map<const Matrix<T>>;

RecurrentConfig make_config(const std::string& cell, Index input, Index hidden, const std::string& nonlinearity,
                            Index proj) {
  RecurrentConfig c;
  c.cell = parse_cell(cell);
  c.input = input;
  c.hidden = hidden;
  c.layers = 1;
  c.nonlinearity = parse_nonlinearity(nonlinearity);
  c.proj = proj;
  return c;
}

/// Copies a parameter tensor into the engine's (same C-order layout as PyTorch's).
template <class T, class Dst>
void load(Dst& dst, const OptRef& src, const std::string& what) {
  if (!src) {
    dst.setZero();
    return;
  }
  std::vector<Index> shape = {dst.rows()};
  if (Dst::ColsAtCompileTime != 1) shape.push_back(dst.cols());
  const T* p = checked_data<T>(*src, shape, kOp, what);
  std::copy(p, p + dst.size(), dst.data());
}

template <class T, class Src>
void store(const OptRef& dst, const Src& src, const std::string& what) {
  if (!dst) return;
  std::vector<Index> shape = {src.rows()};
  if (Src::ColsAtCompileTime != 1) shape.push_back(src.cols());
  T* p = checked_data<T>(*dst, shape, kOp, what);
  std::copy(src.data(), src.data() + src.size(), p);
}
}  // namespace

template <class T>
LayerEngine<T>::LayerEngine(const std::string& cell, Index input, Index hidden, const std::string& nonlinearity,
                            Index proj)
    : rnn_(make_config(cell, input, hidden, nonlinearity, proj)), gates_(gate_count(parse_cell(cell)) * hidden) {}

template <class T>
void LayerEngine<T>::forward(const TensorRef& x, const OptRef& h0, const OptRef& c0, const TensorRef& w_ih,
                             const TensorRef& w_hh, const OptRef& b_ih, const OptRef& b_hh, const OptRef& w_hr,
                             const std::vector<Index>& lengths, const TensorRef& out, const TensorRef& h_n,
                             const OptRef& c_n) {
  const RecurrentConfig& cfg = rnn_.config();
  const Index I = cfg.input, H = cfg.hidden, P = output_size(cfg);
  const bool lstm = cfg.cell == CellType::lstm;
  if (x.shape.size() != 3)
    detail::raise<ShapeError>(
        kOp, "input has shape " + shape_text(x.shape) + ", expected (steps, batch, " + std::to_string(I) + ")");
  const Index steps = x.shape[0], batch = x.shape[1];
  const T* xp = checked_data<T>(x, {steps, batch, I}, kOp, "input");
  auto& p = rnn_.params(0);
  load<T>(p.w_ih, w_ih, "weight_ih");
  load<T>(p.w_hh, w_hh, "weight_hh");
  load<T>(p.b_ih, b_ih, "bias_ih");
  load<T>(p.b_hh, b_hh, "bias_hh");
  if (cfg.proj > 0) {
    if (!w_hr) detail::raise<InvalidArgument>(kOp, "an LSTM with proj_size needs weight_hr");
    load<T>(p.w_hr, w_hr, "weight_hr");
  } else if (w_hr) {
    detail::raise<InvalidArgument>(kOp, "weight_hr given to a layer without a projection (proj_size 0)");
  }
  if (h0 || c0) {
    Matrix<T> s0 = Matrix<T>::Zero(state_size(cfg), batch);
    if (h0) s0.topRows(P) = MapCM<T>(checked_data<T>(*h0, {batch, P}, kOp, "h_0"), P, batch);
    if (c0) {
      if (!lstm) detail::raise<InvalidArgument>(kOp, "c_0 given to a cell without a cell state");
      s0.bottomRows(H) = MapCM<T>(checked_data<T>(*c0, {batch, H}, kOp, "c_0"), H, batch);
    }
    rnn_.set_initial_state(0, std::move(s0));
  } else {
    rnn_.set_initial_state(0, Matrix<T>());
  }
  T* op = checked_data<T>(out, {steps, batch, P}, kOp, "output");
  T* hp = checked_data<T>(h_n, {batch, P}, kOp, "h_n");
  T* cp = lstm ? checked_data<T>(c_n.value(), {batch, H}, kOp, "c_n") : nullptr;

  rnn_.forward(MapCM<T>(xp, I, steps * batch), steps, batch, lengths);

  MapM<T>(op, P, steps * batch) = rnn_.output();
  const Matrix<T> last = rnn_.final_state(0);
  MapM<T>(hp, P, batch) = last.topRows(P);
  if (lstm) MapM<T>(cp, H, batch) = last.bottomRows(H);
}

template <class T>
std::string LayerEngine<T>::backward(const OptRef& grad_out, const OptRef& grad_hn, const OptRef& grad_cn,
                                     const std::string& method, int threads, int chunks, const OptRef& grad_x,
                                     const OptRef& grad_h0, const OptRef& grad_c0, const OptRef& grad_w_ih,
                                     const OptRef& grad_w_hh, const OptRef& grad_b_ih, const OptRef& grad_b_hh,
                                     const OptRef& grad_w_hr, bool check_finite) {
  const RecurrentConfig& cfg = rnn_.config();
  const Index H = cfg.hidden, I = cfg.input, P = output_size(cfg), S = state_size(cfg);
  const Index steps = rnn_.steps(), batch = rnn_.batch();
  const bool lstm = cfg.cell == CellType::lstm;
  if (steps == 0) detail::raise<InvalidArgument>(kOp, "backward without a forward");
  BackwardOptions options;
  options.method = parse_backward(method);
  if (chunks < 0)
    detail::raise<InvalidArgument>(kOp, "chunks must be ≥ 0 (0 = automatic), got " + std::to_string(chunks));
  options.threads = checked_threads(threads, kOp);
  options.chunks = chunks;
  options.check_finite = check_finite;

  // The gradient on the final state: what reaches h_n / c_n from outside the layer.
  if (grad_hn || grad_cn) {
    Matrix<T> gf = Matrix<T>::Zero(S, batch);
    if (grad_hn) gf.topRows(P) = MapCM<T>(checked_data<T>(*grad_hn, {batch, P}, kOp, "grad of h_n"), P, batch);
    if (grad_cn) {
      if (!lstm) detail::raise<InvalidArgument>(kOp, "grad of c_n given to a cell without a cell state");
      gf.bottomRows(H) = MapCM<T>(checked_data<T>(*grad_cn, {batch, H}, kOp, "grad of c_n"), H, batch);
    }
    rnn_.set_final_state_grad(0, std::move(gf));
  } else {
    rnn_.set_final_state_grad(0, Matrix<T>());
  }

  // Every step's output gradient; when only the last step's is non-zero (a many-to-one head)
  // the scan needs no injections: the cheaper linear chain gives the same gradients.
  const T* go = nullptr;
  if (grad_out) go = checked_data<T>(*grad_out, {steps, batch, P}, kOp, "grad of output");
  if (!go) {
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
  {
    const MapCM<T> g(go, P, steps * batch);
    rnn_.backward(g, every_step, options);
  }

  const auto& gp = rnn_.grads(0);
  store<T>(grad_w_ih, gp.w_ih, "grad of weight_ih");
  store<T>(grad_w_hh, gp.w_hh, "grad of weight_hh");
  store<T>(grad_b_ih, gp.b_ih, "grad of bias_ih");
  store<T>(grad_b_hh, gp.b_hh, "grad of bias_hh");
  if (cfg.proj > 0) store<T>(grad_w_hr, gp.w_hr, "grad of weight_hr");
  if (grad_x)
    MapM<T>(checked_data<T>(*grad_x, {steps, batch, I}, kOp, "grad of input"), I, steps * batch) = rnn_.input_grad();
  const Matrix<T>& g0 = rnn_.state0_grad(0);
  if (grad_h0) MapM<T>(checked_data<T>(*grad_h0, {batch, P}, kOp, "grad of h_0"), P, batch) = g0.topRows(P);
  if (grad_c0) {
    if (!lstm) detail::raise<InvalidArgument>(kOp, "grad of c_0 requested from a cell without a cell state");
    MapM<T>(checked_data<T>(*grad_c0, {batch, H}, kOp, "grad of c_0"), H, batch) = g0.bottomRows(H);
  }
  return to_string(resolve_backward(options, batch));
}

template class LayerEngine<float>;
template class LayerEngine<double>;

}  // namespace bppsa::python
