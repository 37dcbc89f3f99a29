// One recurrent cell type = one set of these functions; the CPU half lives in
// src/nn/cpu/<cell>_cell.cpp (a GPU half would sit in src/nn/cuda/). recurrent.cpp runs
// the layers and the backward pass and dispatches on CellType.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "bppsa/nn/recurrent.hpp"
#include "nn/cpu/packed_weights.hpp"

namespace bppsa::detail {

/// One layer's weights as the cells, the Newton forward and the backward pass read them: maps
/// of memory the view does not own (a stack's RecurrentLayerParams, or the caller's C-order
/// tensors in forward_io / backward_io), which must stay alive and unchanged while the view is
/// used. PyTorch's shapes (RecurrentLayerParams); w_hr is 0 × 0 without a projection.
/// Copying a view rebinds nothing: it is built, never assigned (Eigen's Map assigns values).
template <class T>
struct LayerWeights {
  using MatrixView = Eigen::Map<const RowMatrix<T>>;
  using VectorView = Eigen::Map<const Vector<T>>;
  MatrixView w_ih, w_hh;
  VectorView b_ih, b_hh;
  MatrixView w_hr;

  LayerWeights(MatrixView w_ih_, MatrixView w_hh_, VectorView b_ih_, VectorView b_hh_, MatrixView w_hr_)
      : w_ih(w_ih_), w_hh(w_hh_), b_ih(b_ih_), b_hh(b_hh_), w_hr(w_hr_) {}
  /// A view of owned parameters (implicit: every function taking a view takes them).
  LayerWeights(const RecurrentLayerParams<T>& p)  // NOLINT(google-explicit-constructor)
      : LayerWeights(MatrixView(p.w_ih.data(), p.w_ih.rows(), p.w_ih.cols()),
                     MatrixView(p.w_hh.data(), p.w_hh.rows(), p.w_hh.cols()), VectorView(p.b_ih.data(), p.b_ih.size()),
                     VectorView(p.b_hh.data(), p.b_hh.size()),
                     MatrixView(p.w_hr.data(), p.w_hr.rows(), p.w_hr.cols())) {}
  LayerWeights(const RecurrentLayerParams<T>&&) = delete;  // a view of a temporary would dangle
  LayerWeights(const LayerWeights&) = default;
  LayerWeights& operator=(const LayerWeights&) = delete;
};

/// Where a backward pass writes one layer's parameter gradients: maps of a stack's grads() or of
/// the caller's buffers, shaped as LayerWeights; a null data() is a gradient not wanted (not
/// computed).
template <class T>
struct LayerGradients {
  Eigen::Map<RowMatrix<T>> w_ih, w_hh;
  Eigen::Map<Vector<T>> b_ih, b_hh;
  Eigen::Map<RowMatrix<T>> w_hr;
};

/// What forward records for one layer. Column blocks are time-major with B columns each:
/// states at block t = 0..T (block 0 is s_0), per-step quantities at block t − 1 for t = 1..T.
/// With per-sample lengths (sorted longest first), step t runs only the first width(t)
/// samples, the ones still running: the other columns of its blocks are not computed (h and
/// c hold zeros there), and no function below reads or writes them.
template <class T>
struct LayerRecord {
  Index steps = 0, batch = 0, hidden = 0;
  std::vector<Index> active;  ///< per step t (at t − 1): samples running it; empty = all
  Index width(Index t) const { return active.empty() ? batch : active[static_cast<std::size_t>(t - 1)]; }
  Matrix<T> x;  ///< I × TB: the layer's input, when the record holds a copy of it (else empty)
  /// The layer's input when it lives elsewhere (the caller's in forward_io, the layer below's h):
  /// I × TB from here, alive and unchanged until the backward has run; null: x.
  const T* x_view = nullptr;
  Index x_rows = 0;
  /// The layer's input, I × TB (x or x_view).
  Eigen::Map<const Matrix<T>> input() const {
    return x_view != nullptr ? Eigen::Map<const Matrix<T>>(x_view, x_rows, steps * batch)
                             : Eigen::Map<const Matrix<T>>(x.data(), x.rows(), x.cols());
  }
  Matrix<T> h;      ///< P × (T+1)B (P: the LSTM's proj if set, else H)
  Matrix<T> c;      ///< LSTM: H × (T+1)B
  Matrix<T> gates;  ///< G·H × TB, gates after their nonlinearity (rnn: unused, h is enough)
  Matrix<T> aux;    ///< GRU: M = W_hn h + b_hn; LSTM: tanh(c_t) (H × TB)
  Matrix<T> m;      ///< LSTM with proj: o_t ⊙ tanh(c_t), what W_hr projects (H × TB); else empty
  Matrix<T> ax;     ///< scratch: W_ih x + b_ih for all steps (G·H × TB)
  /// The forward's scratch: W_hh (and the LSTM's W_hr) packed for the per-step products.
  PackedWeights<T> w_hh_packed, w_hr_packed;
  /// Set by a caller whose next forward runs on the weights of this record's previous one, unchanged
  /// (an inference call's next chunk): the packed weights are kept.
  bool weights_unchanged = false;
};

/// Packs p's W_hh (and W_hr) into rec for the forward's per-step products, unless rec keeps them.
template <class T>
void pack_weights(const LayerWeights<T>& p, LayerRecord<T>& rec) {
  if (rec.weights_unchanged) return;
  rec.w_hh_packed.pack(p.w_hh);
  if (p.w_hr.size() != 0) rec.w_hr_packed.pack(p.w_hr);
}

/// A cell's forward as PackedWeights::recurrence runs it over rec: step t's product reads h_{t−1}
/// (rec.h's block t − 1) over the samples still running.
template <class T>
class CellSteps : public RecurrenceStep<T> {
 public:
  Index width(Index t) const final { return rec_.width(t); }
  const T* h(Index t) const final { return rec_.h.data() + (t - 1) * rec_.batch * rec_.h.rows(); }
  Index h_stride() const final { return rec_.h.rows(); }

 protected:
  CellSteps(const LayerWeights<T>& p, LayerRecord<T>& rec) : p_(p), rec_(rec) {}
  const LayerWeights<T>& p_;
  LayerRecord<T>& rec_;
};

/// Steps whose product accumulates onto W_ih x_t + b_ih + b_hh (rec.ax plus the bias) in out's
/// step block t − 1 + shift (out: G·H rows, the record's column layout).
template <class T>
class InputDrivenSteps : public CellSteps<T> {
 public:
  T* dst(Index t) final { return out_.data() + (t - 1 + shift_) * this->rec_.batch * out_.rows(); }
  Index dst_stride() const final { return out_.rows(); }
  void init(Index t, Index r0, Index rows, Index j0, Index cols) final {
    const Index B = this->rec_.batch;
    out_.block(r0, (t - 1 + shift_) * B + j0, rows, cols) =
        this->rec_.ax.block(r0, (t - 1) * B + j0, rows, cols).colwise() + this->p_.b_hh.segment(r0, rows);
  }

 protected:
  InputDrivenSteps(const LayerWeights<T>& p, LayerRecord<T>& rec, Matrix<T>& out, Index shift)
      : CellSteps<T>(p, rec), out_(out), shift_(shift) {}

 private:
  Matrix<T>& out_;
  Index shift_;
};

/// Pre-activation gradients of one layer, G·H × TB: dx multiplies the input side (W_ih,
/// b_ih), dh the recurrent side (W_hh, b_hh). They differ only for GRU's n gate.
template <class T>
struct PreactGrads {
  Matrix<T> dx, dh;
  /// LSTM, when keep_dc: δc (the whole gradient on c_t, H × B, the step's width used) of the step
  /// preact ran last, which direct() for that step reads instead of computing it again. Only BP
  /// through time sets keep_dc (one step per preact call, then direct); the scan path runs preact
  /// over several ranges at once on one PreactGrads and leaves it false.
  Matrix<T> dc;
  bool keep_dc = false;
};

/// Columns [j0, j0 + cols) of a step's running samples; cols < 0: all of them from j0.
struct StepColumns {
  Index j0 = 0, cols = -1;
  /// How many, in a step of `width` running samples.
  Index count(Index width) const { return cols < 0 ? width - j0 : cols; }
};

/// Where one J_t^T goes: record column `col` = (t − 1)·B + b (sample b at step t) into sample
/// slot `sample` of `*j`.
template <class T>
struct JacobianSlot {
  Index col = 0;
  Jacobian<T>* j = nullptr;
  Index sample = 0;
};

/// Per cell type. `g` holds state gradients, S × (T+1)B (block t = ∂ℓ/∂s_t, totals).
template <class T>
struct CellOps {
  /// Recurrence over all steps (step t on its first rec.width(t) samples); rec.x, rec.ax and
  /// block 0 of rec.h (and rec.c) are set. Each step's GEMMs run on up to `threads` threads, in
  /// blocks that do not depend on their number (nor do the results).
  void (*forward)(const LayerWeights<T>& p, LayerRecord<T>& rec, int threads);
  /// A chain element of `count` samples in the cell's natural kind (values not yet filled).
  Jacobian<T> (*element)(const LayerWeights<T>& p, const LayerRecord<T>& rec, const std::shared_ptr<Matrix<T>>& w_hh_t,
                         Index count);
  /// Fills J_t^T of each slot.
  void (*fill)(const LayerWeights<T>& p, const LayerRecord<T>& rec, std::span<const JacobianSlot<T>> slots);
  /// Pre-activation gradients for steps [t0, t1) (each on `cols` of its first rec.width(t)
  /// samples) from the state gradients in g. Calls on other columns may run at once (BP's team),
  /// so with pg.keep_dc, out.dc must already be H × B.
  void (*preact)(const LayerWeights<T>& p, const LayerRecord<T>& rec, const Matrix<T>& g, PreactGrads<T>& out, Index t0,
                 Index t1, StepColumns cols);
  /// The part of g_{t−1} that does not pass through W_hh (GRU: z ⊙ g; LSTM: c-row f ⊙ δc),
  /// added into `prev` (S × samples [j0, j0 + prev.cols()) of the step); rnn: nothing. Called
  /// after preact(…, pg, t, t + 1) on those samples with pg.keep_dc set (BP through time): the
  /// LSTM reads that step's δc from pg.dc.
  void (*direct)(const LayerWeights<T>& p, const LayerRecord<T>& rec, const Matrix<T>& g, const PreactGrads<T>& pg,
                 Index t, Index j0, Eigen::Ref<Matrix<T>> prev);
};

/// The padded chain of a layer: J_t^T for t = 1..T, every one of B samples.
template <class T>
void make_chain(const CellOps<T>& ops, const std::type_identity_t<LayerWeights<T>>& p, const LayerRecord<T>& rec,
                const std::shared_ptr<Matrix<T>>& w_hh_t, Chain<T>& chain) {
  for (Index t = 1; t <= rec.steps; ++t) chain.push_back(ops.element(p, rec, w_hh_t, rec.batch));
}

/// Fills J_t^T of the padded chain for steps t in [t0, t1) (1-based), every sample.
template <class T>
void fill_jacobians(const CellOps<T>& ops, const std::type_identity_t<LayerWeights<T>>& p, const LayerRecord<T>& rec,
                    Chain<T>& chain, Index t0, Index t1) {
  std::vector<JacobianSlot<T>> slots;
  slots.reserve(static_cast<std::size_t>(std::max<Index>(t1 - t0, 0) * rec.batch));
  for (Index t = t0; t < t1; ++t)
    for (Index s = 0; s < rec.batch; ++s) slots.push_back({(t - 1) * rec.batch + s, &chain.jacobian(t), s});
  ops.fill(p, rec, slots);
}

/// The ops of a cell type (nonlinearity: the plain RNN's activation).
template <class T>
const CellOps<T>& cell_ops(CellType c, Nonlinearity nonlinearity = Nonlinearity::tanh);

template <class T>
const CellOps<T>& rnn_ops();
template <class T>
const CellOps<T>& rnn_relu_ops();
template <class T>
const CellOps<T>& gru_ops();
template <class T>
const CellOps<T>& lstm_ops();

/// σ(x) = 1 / (1 + e^−x) elementwise, vectorised: Eigen's exp keeps it within a few ulp (relative)
/// over the whole range, where Eigen's logistic() is off by up to 1e-4 relative below −5.
template <class Derived>
auto sigmoid(const Eigen::ArrayBase<Derived>& x) {
  return (typename Derived::Scalar(1) + (-x).exp()).inverse();
}

}  // namespace bppsa::detail
