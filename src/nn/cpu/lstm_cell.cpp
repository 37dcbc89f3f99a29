// CPU half of the LSTM cell (PyTorch nn.LSTM, gates i, f, g, o): c' = f ⊙ c + i ⊙ g,
// h' = o ⊙ tanh(c'). The scanned state is s = (h, c), 2H. With κ = o(1 − tanh²c'),
// α_i = g·i(1−i), α_f = c·f(1−f), α_g = i(1−g²), α_o = tanh(c')·o(1−o):
//   (∂c'/∂h)^T = W_hi^T D(α_i) + W_hf^T D(α_f) + W_hg^T D(α_g)        (top-right block)
//   (∂h'/∂h)^T = (∂c'/∂h)^T D(κ) + W_ho^T D(α_o)                     (top-left)
//   (∂h'/∂c)^T = D(κ f),  (∂c'/∂c)^T = D(f)                           (bottom blocks)
// Dense 2H × 2H per sample and step; checked against finite differences in the tests.
// With a projection (PyTorch's proj_size P): m' = o ⊙ tanh(c'), h' = W_hr m' (P rows), s = (h, c)
// of P + H, and with (∂m'/∂h)^T the top-left block above (P × H):
//   (∂h'/∂h)^T = (∂m'/∂h)^T W_hr^T,  (∂h'/∂c)^T = D(κ f) W_hr^T                  (dense now)
// and the gradient reaching m' is W_hr^T ∂ℓ/∂h' wherever ∂ℓ/∂h' was used (docs/method.md §4.5).
#include "nn/cell.hpp"

namespace bppsa::detail {
namespace {

/// Rows of h: the projection's when there is one.
template <class T>
Index out_rows(const LayerWeights<T>& p, Index hidden) {
  return p.w_hr.size() != 0 ? p.w_hr.rows() : hidden;
}

/// Step t's gates i, f, g, o (pre-activations in a) through their nonlinearities, then c_t and
/// tanh(c_t) into rec; returns o ⊙ tanh(c_t) for columns [j0, j0 + cols) of the step.
template <class T>
auto gates_and_cell(LayerRecord<T>& rec, Index t, Index j0, Index cols) {
  const Index B = rec.batch, H = rec.hidden;
  auto a = rec.gates.middleCols((t - 1) * B + j0, cols);
  auto i = a.topRows(H), f = a.middleRows(H, H), g = a.middleRows(2 * H, H), o = a.bottomRows(H);
  i.array() = sigmoid(i.array());
  f.array() = sigmoid(f.array());
  g = g.array().tanh();
  o.array() = sigmoid(o.array());
  auto c = rec.c.middleCols(t * B + j0, cols);
  c = f.array() * rec.c.middleCols((t - 1) * B + j0, cols).array() + i.array() * g.array();
  auto tc = rec.aux.middleCols((t - 1) * B + j0, cols);
  tc = c.array().tanh();
  return o.array() * tc.array();
}

/// The recurrence without a projection, as PackedWeights::recurrence runs it: the gates'
/// pre-activations a = W_ih x + b_ih + b_hh + W_hh h_{t−1} in rec.gates.
template <class T>
class LstmSteps final : public InputDrivenSteps<T> {
 public:
  LstmSteps(const LayerWeights<T>& p, LayerRecord<T>& rec) : InputDrivenSteps<T>(p, rec, rec.gates, 0) {}
  void pointwise(Index t, Index j0, Index cols) override {
    this->rec_.h.middleCols(t * this->rec_.batch + j0, cols) = gates_and_cell(this->rec_, t, j0, cols);
  }
};

template <class T>
void forward(const LayerWeights<T>& p, LayerRecord<T>& rec, int threads) {
  const Index B = rec.batch, H = rec.hidden;
  const bool proj = p.w_hr.size() != 0;
  pack_weights(p, rec);
  if (!proj) {
    rec.m.resize(0, 0);
    LstmSteps<T> steps(p, rec);
    rec.w_hh_packed.recurrence(threads, rec.steps, steps);
    return;
  }
  rec.m.resize(H, rec.steps * B);
  for (Index t = 1; t <= rec.steps; ++t) {
    const Index w = rec.width(t);
    auto a = rec.gates.middleCols((t - 1) * B, w);
    a = rec.ax.middleCols((t - 1) * B, w).colwise() + p.b_hh;
    rec.w_hh_packed.product(threads, a, rec.h.middleCols((t - 1) * B, w), /*accumulate=*/true);
    auto m = rec.m.middleCols((t - 1) * B, w);
    m = gates_and_cell(rec, t, 0, w);
    rec.w_hr_packed.product(threads, rec.h.middleCols(t * B, w), m);
  }
}

template <class T>
Jacobian<T> element(const LayerWeights<T>& p, const LayerRecord<T>& rec, const std::shared_ptr<Matrix<T>>&,
                    Index count) {
  const Index S = out_rows(p, rec.hidden) + rec.hidden;
  return Jacobian<T>::dense(S, S, count);
}

template <class T>
void fill(const LayerWeights<T>& p, const LayerRecord<T>& rec, std::span<const JacobianSlot<T>> slots) {
  const Index H = rec.hidden, P = out_rows(p, H);
  const bool proj = p.w_hr.size() != 0;
  Vector<T> ai(H), af(H), ag(H), ao(H), kappa(H);
  Matrix<T> dm(P, H);  // with a projection: (∂m'/∂h)^T
  for (const JacobianSlot<T>& slot : slots) {
    const Index col = slot.col;
    const auto i = rec.gates.col(col).head(H).array();
    const auto f = rec.gates.col(col).segment(H, H).array();
    const auto g = rec.gates.col(col).segment(2 * H, H).array();
    const auto o = rec.gates.col(col).tail(H).array();
    const auto tc = rec.aux.col(col).array();
    const auto cp = rec.c.col(col).array();  // c_{t−1}
    ai = g * i * (T(1) - i);
    af = cp * f * (T(1) - f);
    ag = i * (T(1) - g.square());
    ao = tc * o * (T(1) - o);
    kappa = o * (T(1) - tc.square());
    auto jt = slot.j->dense_map(slot.sample);
    auto tr = jt.topRightCorner(P, H);
    tr.noalias() = p.w_hh.topRows(H).transpose() * ai.asDiagonal();
    tr.noalias() += p.w_hh.middleRows(H, H).transpose() * af.asDiagonal();
    tr.noalias() += p.w_hh.middleRows(2 * H, H).transpose() * ag.asDiagonal();
    if (!proj) {
      auto tl = jt.topLeftCorner(H, H);
      tl.noalias() = tr * kappa.asDiagonal();
      tl.noalias() += p.w_hh.bottomRows(H).transpose() * ao.asDiagonal();
      jt.bottomRows(H).setZero();
      jt.bottomLeftCorner(H, H).diagonal() = (kappa.array() * f).matrix();
    } else {
      dm.noalias() = tr * kappa.asDiagonal();
      dm.noalias() += p.w_hh.bottomRows(H).transpose() * ao.asDiagonal();
      jt.topLeftCorner(P, P).noalias() = dm * p.w_hr.transpose();
      jt.bottomLeftCorner(H, P).noalias() = (kappa.array() * f).matrix().asDiagonal() * p.w_hr.transpose();
      jt.bottomRightCorner(H, H).setZero();
    }
    jt.bottomRightCorner(H, H).diagonal() = f.matrix();
  }
}

template <class T>
void preact(const LayerWeights<T>& p, const LayerRecord<T>& rec, const Matrix<T>& g, PreactGrads<T>& out, Index t0,
            Index t1, StepColumns cols) {
  const Index B = rec.batch, H = rec.hidden, P = out_rows(p, H), j0 = cols.j0;
  const bool proj = p.w_hr.size() != 0;
  Matrix<T> gm_proj;  // W_hr^T ∂ℓ/∂h_t, the gradient on m_t, with a projection
  // δc (the total gradient on c_t): in out.dc when BP asks for it (keep_dc: direct() reads it; BP
  // sizes it before calls on several column blocks run at once); otherwise (the scan path, which
  // runs several ranges at once on one `out`) in a buffer of its own.
  Matrix<T> own;
  Matrix<T>& dcm = out.keep_dc ? out.dc : own;
  if (dcm.rows() != H || dcm.cols() != B) dcm.resize(H, B);
  for (Index t = t0; t < t1; ++t) {
    const Index w = cols.count(rec.width(t)), c0 = (t - 1) * B + j0;  // c0: the step's first column here
    const auto gates = rec.gates.middleCols(c0, w);
    const auto i = gates.topRows(H).array(), f = gates.middleRows(H, H).array();
    const auto gg = gates.middleRows(2 * H, H).array(), o = gates.bottomRows(H).array();
    const auto tc = rec.aux.middleCols(c0, w).array();
    const auto cp = rec.c.middleCols(c0, w).array();
    if (proj) gm_proj.noalias() = p.w_hr.transpose() * g.middleCols(t * B + j0, w).topRows(P);
    const Eigen::Ref<const Matrix<T>> gm = proj ? Eigen::Ref<const Matrix<T>>(gm_proj)
                                                : Eigen::Ref<const Matrix<T>>(g.middleCols(t * B + j0, w).topRows(H));
    const auto gh = gm.array();
    const auto gc = g.middleCols(t * B + j0, w).bottomRows(H).array();
    auto dx = out.dx.middleCols(c0, w);
    auto dc = dcm.middleCols(j0, w).array();
    dc = gc + o * (T(1) - tc.square()) * gh;
    dx.topRows(H) = gg * i * (T(1) - i) * dc;
    dx.middleRows(H, H) = cp * f * (T(1) - f) * dc;
    dx.middleRows(2 * H, H) = i * (T(1) - gg.square()) * dc;
    dx.bottomRows(H) = tc * o * (T(1) - o) * gh;
  }
}

template <class T>
void direct(const LayerWeights<T>&, const LayerRecord<T>& rec, const Matrix<T>&, const PreactGrads<T>& pg, Index t,
            Index j0, Eigen::Ref<Matrix<T>> prev) {
  const Index B = rec.batch, H = rec.hidden, w = prev.cols();
  const auto f = rec.gates.middleCols((t - 1) * B + j0, w).middleRows(H, H).array();
  prev.bottomRows(H).array() += f * pg.dc.middleCols(j0, w).array();  // δc of step t, left by preact
}

}  // namespace

template <class T>
const CellOps<T>& lstm_ops() {
  static const CellOps<T> ops{&forward<T>, &element<T>, &fill<T>, &preact<T>, &direct<T>};
  return ops;
}
template const CellOps<float>& lstm_ops<float>();
template const CellOps<double>& lstm_ops<double>();

}  // namespace bppsa::detail
