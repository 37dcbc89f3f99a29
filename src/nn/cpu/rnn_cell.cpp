// CPU half of the tanh RNN cell (PyTorch nn.RNN): h_t = tanh(W_ih x_t + b_ih + W_hh h_{t−1} + b_hh).
// J_t^T = W_hh^T · diag(1 − h_t²) (spec §4): one shared matrix and a per-step diagonal.
#include "nn/cell.hpp"

namespace bppsa::detail {
namespace {

template <class T>
void forward(const RecurrentLayerParams<T>& p, LayerRecord<T>& rec) {
  const Index B = rec.batch;
  for (Index t = 1; t <= rec.steps; ++t) {
    auto h = rec.h.middleCols(t * B, B);
    h.noalias() = p.w_hh * rec.h.middleCols((t - 1) * B, B);
    h += rec.ax.middleCols((t - 1) * B, B);
    h.colwise() += p.b_hh;
    h = h.array().tanh();
  }
}

template <class T>
void make_chain(const RecurrentLayerParams<T>&, const LayerRecord<T>& rec, const std::shared_ptr<Matrix<T>>& w_hh_t,
                Chain<T>& chain) {
  for (Index t = 1; t <= rec.steps; ++t) chain.push_back(Jacobian<T>::shared_dense_diag(w_hh_t, rec.batch));
}

template <class T>
void fill_jacobians(const RecurrentLayerParams<T>&, const LayerRecord<T>& rec, Chain<T>& chain, Index t0, Index t1) {
  const Index B = rec.batch, H = rec.hidden;
  for (Index t = t0; t < t1; ++t) {
    Jacobian<T>& j = chain.jacobian(t);
    for (Index s = 0; s < B; ++s) {
      Eigen::Map<Vector<T>> d(j.sample(s).data(), H);
      d = T(1) - rec.h.col(t * B + s).array().square();
    }
  }
}

template <class T>
void preact(const LayerRecord<T>& rec, const Matrix<T>& g, PreactGrads<T>& out, Index t0, Index t1) {
  const Index B = rec.batch;
  for (Index t = t0; t < t1; ++t)
    out.dx.middleCols((t - 1) * B, B) =
        (T(1) - rec.h.middleCols(t * B, B).array().square()) * g.middleCols(t * B, B).array();
}

template <class T>
void direct(const LayerRecord<T>&, const Matrix<T>&, Index, Eigen::Ref<Matrix<T>>) {}

}  // namespace

template <class T>
const CellOps<T>& rnn_ops() {
  static const CellOps<T> ops{&forward<T>, &make_chain<T>, &fill_jacobians<T>, &preact<T>, &direct<T>};
  return ops;
}
template const CellOps<float>& rnn_ops<float>();
template const CellOps<double>& rnn_ops<double>();

}  // namespace bppsa::detail
