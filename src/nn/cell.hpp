// One recurrent cell type = one set of these functions; the CPU half lives in
// src/nn/cpu/<cell>_cell.cpp (a GPU half would sit in src/nn/cuda/). recurrent.cpp runs
// the layers and the backward pass and dispatches on CellType.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "bppsa/nn/recurrent.hpp"

namespace bppsa::detail {

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
  Matrix<T> x;      ///< I × TB: the layer's input
  Matrix<T> h;      ///< P × (T+1)B (P: the LSTM's proj if set, else H)
  Matrix<T> c;      ///< LSTM: H × (T+1)B
  Matrix<T> gates;  ///< G·H × TB, gates after their nonlinearity (rnn: unused, h is enough)
  Matrix<T> aux;    ///< GRU: M = W_hn h + b_hn; LSTM: tanh(c_t) (H × TB)
  Matrix<T> m;      ///< LSTM with proj: o_t ⊙ tanh(c_t), what W_hr projects (H × TB); else empty
  Matrix<T> ax;     ///< scratch: W_ih x + b_ih for all steps (G·H × TB)
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
  /// block 0 of rec.h (and rec.c) are set.
  void (*forward)(const RecurrentLayerParams<T>& p, LayerRecord<T>& rec);
  /// A chain element of `count` samples in the cell's natural kind (values not yet filled).
  Jacobian<T> (*element)(const RecurrentLayerParams<T>& p, const LayerRecord<T>& rec,
                         const std::shared_ptr<Matrix<T>>& w_hh_t, Index count);
  /// Fills J_t^T of each slot.
  void (*fill)(const RecurrentLayerParams<T>& p, const LayerRecord<T>& rec, std::span<const JacobianSlot<T>> slots);
  /// Pre-activation gradients for steps [t0, t1) (each on its first rec.width(t) samples)
  /// from the state gradients in g.
  void (*preact)(const RecurrentLayerParams<T>& p, const LayerRecord<T>& rec, const Matrix<T>& g, PreactGrads<T>& out,
                 Index t0, Index t1);
  /// The part of g_{t−1} that does not pass through W_hh (GRU: z ⊙ g; LSTM: c-row f ⊙ δc),
  /// added into `prev` (S × the first prev.cols() samples); rnn: nothing. Called right after
  /// preact(…, pg, t, t + 1) with pg.keep_dc set (BP through time): the LSTM reads that step's δc
  /// from pg.dc.
  void (*direct)(const RecurrentLayerParams<T>& p, const LayerRecord<T>& rec, const Matrix<T>& g,
                 const PreactGrads<T>& pg, Index t, Eigen::Ref<Matrix<T>> prev);
};

/// The padded chain of a layer: J_t^T for t = 1..T, every one of B samples.
template <class T>
void make_chain(const CellOps<T>& ops, const RecurrentLayerParams<T>& p, const LayerRecord<T>& rec,
                const std::shared_ptr<Matrix<T>>& w_hh_t, Chain<T>& chain) {
  for (Index t = 1; t <= rec.steps; ++t) chain.push_back(ops.element(p, rec, w_hh_t, rec.batch));
}

/// Fills J_t^T of the padded chain for steps t in [t0, t1) (1-based), every sample.
template <class T>
void fill_jacobians(const CellOps<T>& ops, const RecurrentLayerParams<T>& p, const LayerRecord<T>& rec, Chain<T>& chain,
                    Index t0, Index t1) {
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

template <class T>
inline T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

}  // namespace bppsa::detail
