// CPU half of the GRU cell (PyTorch nn.GRU, gates r, z, n):
//   r = σ(W_ir x + b_ir + W_hr h + b_hr), z = σ(W_iz x + b_iz + W_hz h + b_hz),
//   M = W_hn h + b_hn, n = tanh(W_in x + b_in + r ⊙ M), h' = (1 − z) ⊙ n + z ⊙ h.
// J^T = W_hr^T D(α) + W_hz^T D(γ) + W_hn^T D(β) + D(z) with α = r(1−r)M(1−n²)(1−z),
// β = r(1−n²)(1−z), γ = z(1−z)(h − n) (docs/method.md §4, regrouped): dense, one per sample and step.
#include "nn/cell.hpp"

namespace bppsa::detail {
namespace {

/// The recurrence as PackedWeights::recurrence runs it: W_hh h_{t−1} + b_hh into a step buffer,
/// then the gates and h_t column block by column block.
template <class T>
class GruSteps final : public CellSteps<T> {
 public:
  GruSteps(const LayerWeights<T>& p, LayerRecord<T>& rec) : CellSteps<T>(p, rec), ah_(3 * rec.hidden, rec.batch) {}
  T* dst(Index) override { return ah_.data(); }
  Index dst_stride() const override { return ah_.rows(); }
  void init(Index, Index r0, Index rows, Index j0, Index cols) override {
    ah_.block(r0, j0, rows, cols) = this->p_.b_hh.segment(r0, rows).rowwise().replicate(cols);
  }
  void pointwise(Index t, Index j0, Index cols) override {
    LayerRecord<T>& rec = this->rec_;
    const Index B = rec.batch, H = rec.hidden;
    const auto ahw = ah_.middleCols(j0, cols);
    const auto hp = rec.h.middleCols((t - 1) * B + j0, cols);
    const auto ax = rec.ax.middleCols((t - 1) * B + j0, cols);
    auto gates = rec.gates.middleCols((t - 1) * B + j0, cols);
    auto r = gates.topRows(H), z = gates.middleRows(H, H), n = gates.bottomRows(H);
    r.array() = sigmoid((ax.topRows(H) + ahw.topRows(H)).array());
    z.array() = sigmoid((ax.middleRows(H, H) + ahw.middleRows(H, H)).array());
    rec.aux.middleCols((t - 1) * B + j0, cols) = ahw.bottomRows(H);
    n = (ax.bottomRows(H).array() + r.array() * ahw.bottomRows(H).array()).tanh();
    rec.h.middleCols(t * B + j0, cols) = (T(1) - z.array()) * n.array() + z.array() * hp.array();
  }

 private:
  Matrix<T> ah_;  // W_hh h_{t−1} + b_hh of the step under way
};

template <class T>
void forward(const LayerWeights<T>& p, LayerRecord<T>& rec, int threads) {
  pack_weights(p, rec);
  GruSteps<T> steps(p, rec);
  rec.w_hh_packed.recurrence(threads, rec.steps, steps);
}

template <class T>
Jacobian<T> element(const LayerWeights<T>&, const LayerRecord<T>& rec, const std::shared_ptr<Matrix<T>>&, Index count) {
  return Jacobian<T>::dense(rec.hidden, rec.hidden, count);
}

template <class T>
void fill(const LayerWeights<T>& p, const LayerRecord<T>& rec, std::span<const JacobianSlot<T>> slots) {
  const Index H = rec.hidden;
  Vector<T> alpha(H), beta(H), gamma(H);
  for (const JacobianSlot<T>& slot : slots) {
    const Index col = slot.col;
    const auto r = rec.gates.col(col).head(H).array();
    const auto z = rec.gates.col(col).segment(H, H).array();
    const auto n = rec.gates.col(col).tail(H).array();
    const auto m = rec.aux.col(col).array();
    const auto hp = rec.h.col(col).array();  // h_{t−1}: block t − 1
    beta = r * (T(1) - n.square()) * (T(1) - z);
    alpha = (T(1) - r) * m * beta.array();
    gamma = z * (T(1) - z) * (hp - n);
    auto jt = slot.j->dense_map(slot.sample);
    jt.noalias() = p.w_hh.topRows(H).transpose() * alpha.asDiagonal();
    jt.noalias() += p.w_hh.middleRows(H, H).transpose() * gamma.asDiagonal();
    jt.noalias() += p.w_hh.bottomRows(H).transpose() * beta.asDiagonal();
    jt.diagonal() += z.matrix();
  }
}

template <class T>
void preact(const LayerWeights<T>&, const LayerRecord<T>& rec, const Matrix<T>& g, PreactGrads<T>& out, Index t0,
            Index t1, StepColumns cols) {
  const Index B = rec.batch, H = rec.hidden, j0 = cols.j0;
  for (Index t = t0; t < t1; ++t) {
    const Index w = cols.count(rec.width(t)), c0 = (t - 1) * B + j0;  // c0: the step's first column here
    const auto gates = rec.gates.middleCols(c0, w);
    const auto r = gates.topRows(H).array(), z = gates.middleRows(H, H).array(), n = gates.bottomRows(H).array();
    const auto m = rec.aux.middleCols(c0, w).array();
    const auto hp = rec.h.middleCols(c0, w).array();
    const auto gt = g.middleCols(t * B + j0, w).array();
    auto dx = out.dx.middleCols(c0, w);
    auto dh = out.dh.middleCols(c0, w);
    dx.bottomRows(H) = (T(1) - n.square()) * (T(1) - z) * gt;       // ∇N
    dx.topRows(H) = r * (T(1) - r) * m * dx.bottomRows(H).array();  // ∇R
    dx.middleRows(H, H) = z * (T(1) - z) * (hp - n) * gt;           // ∇Z
    dh.topRows(2 * H) = dx.topRows(2 * H);
    dh.bottomRows(H) = r * dx.bottomRows(H).array();  // ∇M
  }
}

template <class T>
void direct(const LayerWeights<T>&, const LayerRecord<T>& rec, const Matrix<T>& g, const PreactGrads<T>&, Index t,
            Index j0, Eigen::Ref<Matrix<T>> prev) {
  const Index B = rec.batch, H = rec.hidden, w = prev.cols();
  prev.array() +=
      rec.gates.middleCols((t - 1) * B + j0, w).middleRows(H, H).array() * g.middleCols(t * B + j0, w).array();
}

}  // namespace

template <class T>
const CellOps<T>& gru_ops() {
  static const CellOps<T> ops{&forward<T>, &element<T>, &fill<T>, &preact<T>, &direct<T>};
  return ops;
}
template const CellOps<float>& gru_ops<float>();
template const CellOps<double>& gru_ops<double>();

}  // namespace bppsa::detail
