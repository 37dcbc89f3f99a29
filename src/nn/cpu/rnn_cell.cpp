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

template <class T, Nonlinearity N>
void forward(const RecurrentLayerParams<T>& p, LayerRecord<T>& rec) {
  const Index B = rec.batch;
  for (Index t = 1; t <= rec.steps; ++t) {
    auto h = rec.h.middleCols(t * B, B);
    h.noalias() = p.w_hh * rec.h.middleCols((t - 1) * B, B);
    h += rec.ax.middleCols((t - 1) * B, B);
    h.colwise() += p.b_hh;
    h = Act<N>::apply(h.array());
  }
}

template <class T>
void make_chain(const RecurrentLayerParams<T>&, const LayerRecord<T>& rec, const std::shared_ptr<Matrix<T>>& w_hh_t,
                Chain<T>& chain) {
  for (Index t = 1; t <= rec.steps; ++t) chain.push_back(Jacobian<T>::shared_dense_diag(w_hh_t, rec.batch));
}

template <class T, Nonlinearity N>
void fill_jacobians(const RecurrentLayerParams<T>&, const LayerRecord<T>& rec, Chain<T>& chain, Index t0, Index t1) {
  const Index B = rec.batch, H = rec.hidden;
  for (Index t = t0; t < t1; ++t) {
    Jacobian<T>& j = chain.jacobian(t);
    for (Index s = 0; s < B; ++s) {
      Eigen::Map<Vector<T>> d(j.sample(s).data(), H);
      d = Act<N>::grad_from_output(rec.h.col(t * B + s).array());
    }
  }
}

template <class T, Nonlinearity N>
void preact(const RecurrentLayerParams<T>&, const LayerRecord<T>& rec, const Matrix<T>& g, PreactGrads<T>& out,
            Index t0, Index t1) {
  const Index B = rec.batch;
  for (Index t = t0; t < t1; ++t)
    out.dx.middleCols((t - 1) * B, B) =
        Act<N>::grad_from_output(rec.h.middleCols(t * B, B).array()) * g.middleCols(t * B, B).array();
}

template <class T>
void direct(const RecurrentLayerParams<T>&, const LayerRecord<T>&, const Matrix<T>&, Index, Eigen::Ref<Matrix<T>>) {}

template <class T, Nonlinearity N>
const CellOps<T>& ops_for() {
  static const CellOps<T> ops{&forward<T, N>, &make_chain<T>, &fill_jacobians<T, N>, &preact<T, N>, &direct<T>};
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
