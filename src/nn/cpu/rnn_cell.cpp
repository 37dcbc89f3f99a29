// CPU half of the plain RNN cell (PyTorch nn.RNN): h_t = act(W_ih x_t + b_ih + W_hh h_{t−1} + b_hh)
// with act = tanh (J_t^T = W_hh^T · diag(1 − h_t²), docs/method.md §4) or relu (J_t^T = W_hh^T ·
// diag(1[h_t > 0]); h_t > 0 exactly when the pre-activation is, and the derivative at 0 is 0,
// as PyTorch's). One shared matrix and a per-step diagonal either way.
#include "nn/cell.hpp"

namespace bppsa::detail {
namespace {

/// The activation and its derivative expressed through the output h = act(a).
template <Nonlinearity N>
struct Act;
template <>
struct Act<Nonlinearity::tanh> {
  template <class A>
  static auto apply(const A& a) {
    return a.tanh();
  }
  template <class A>
  static auto grad_from_output(const A& h) {
    using T = typename A::Scalar;
    return T(1) - h.square();
  }
};
template <>
struct Act<Nonlinearity::relu> {
  template <class A>
  static auto apply(const A& a) {
    using T = typename A::Scalar;
    return a.max(T(0));
  }
  template <class A>
  static auto grad_from_output(const A& h) {
    using T = typename A::Scalar;
    return (h > T(0)).template cast<T>();
  }
};

/// The recurrence as PackedWeights::recurrence runs it: h_t = W_ih x + b_ih + b_hh, then
/// += W_hh h_{t−1}, then the activation in place.
template <class T, Nonlinearity N>
class RnnSteps final : public InputDrivenSteps<T> {
 public:
  RnnSteps(const LayerWeights<T>& p, LayerRecord<T>& rec) : InputDrivenSteps<T>(p, rec, rec.h, 1) {}
  void pointwise(Index t, Index j0, Index cols) override {
    auto h = this->rec_.h.middleCols(t * this->rec_.batch + j0, cols);
    h = Act<N>::apply(h.array());
  }
};

template <class T, Nonlinearity N>
void forward(const LayerWeights<T>& p, LayerRecord<T>& rec, int threads) {
  pack_weights(p, rec);
  RnnSteps<T, N> steps(p, rec);
  rec.w_hh_packed.recurrence(threads, rec.steps, steps);
}

template <class T>
Jacobian<T> element(const LayerWeights<T>&, const LayerRecord<T>&, const std::shared_ptr<Matrix<T>>& w_hh_t,
                    Index count) {
  return Jacobian<T>::shared_dense_diag(w_hh_t, count);
}

template <class T, Nonlinearity N>
void fill(const LayerWeights<T>&, const LayerRecord<T>& rec, std::span<const JacobianSlot<T>> slots) {
  const Index B = rec.batch, H = rec.hidden;
  for (const JacobianSlot<T>& slot : slots) {
    Eigen::Map<Vector<T>> d(slot.j->sample(slot.sample).data(), H);
    d = Act<N>::grad_from_output(rec.h.col(slot.col + B).array());  // h_t: block t
  }
}

template <class T, Nonlinearity N>
void preact(const LayerWeights<T>&, const LayerRecord<T>& rec, const Matrix<T>& g, PreactGrads<T>& out, Index t0,
            Index t1, StepColumns cols) {
  const Index B = rec.batch, j0 = cols.j0;
  for (Index t = t0; t < t1; ++t) {
    const Index w = cols.count(rec.width(t));
    out.dx.middleCols((t - 1) * B + j0, w) =
        Act<N>::grad_from_output(rec.h.middleCols(t * B + j0, w).array()) * g.middleCols(t * B + j0, w).array();
  }
}

template <class T>
void direct(const LayerWeights<T>&, const LayerRecord<T>&, const Matrix<T>&, const PreactGrads<T>&, Index, Index,
            Eigen::Ref<Matrix<T>>) {}

template <class T, Nonlinearity N>
const CellOps<T>& ops_for() {
  static const CellOps<T> ops{&forward<T, N>, &element<T>, &fill<T, N>, &preact<T, N>, &direct<T>};
  return ops;
}

}  // namespace

template <class T>
const CellOps<T>& rnn_ops() {
  return ops_for<T, Nonlinearity::tanh>();
}
template <class T>
const CellOps<T>& rnn_relu_ops() {
  return ops_for<T, Nonlinearity::relu>();
}
template const CellOps<float>& rnn_ops<float>();
template const CellOps<double>& rnn_ops<double>();
template const CellOps<float>& rnn_relu_ops<float>();
template const CellOps<double>& rnn_relu_ops<double>();

}  // namespace bppsa::detail
