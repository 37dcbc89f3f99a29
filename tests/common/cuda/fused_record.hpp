// Fixtures of the fused-scan tests (tests/scan/cuda/test_fused_host.cpp, tests/scan/cuda/test_fused_gpu.cpp): one
// recurrent layer's forward record made by the CPU cells (src/nn/cpu/*_cell.cpp) and the CPU
// engine's BP through it in double, the oracle every fused result is compared with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bppsa/nn/recurrent.hpp"
#include "nn/cell.hpp"
#include "nn/cuda/recurrent_math.hpp"

namespace fused_test {

using namespace bppsa;
namespace gpu = bppsa::detail::gpu;
using gpu::Idx;

inline CellType cell_type(std::int32_t code) {
  return code == gpu::kGru ? CellType::gru : code == gpu::kLstm ? CellType::lstm : CellType::rnn;
}
inline Nonlinearity nonlinearity(std::int32_t code) {
  return code == gpu::kRnnRelu ? Nonlinearity::relu : Nonlinearity::tanh;
}
inline std::string cell_name(std::int32_t code) {
  return code == gpu::kRnnRelu ? "rnn-relu" : code == gpu::kRnnTanh ? "rnn" : to_string(cell_type(code));
}
inline const std::int32_t kCells[] = {gpu::kRnnTanh, gpu::kRnnRelu, gpu::kGru, gpu::kLstm};

/// One layer: parameters, input, initial state, forward record, and the gradients arriving from
/// above: `above` (H × TB, block t − 1 on h_t) and an extra final-state gradient.
template <class T>
struct FusedLayer {
  std::int32_t code = gpu::kRnnTanh;
  Index I = 3, H = 0, S = 0, steps = 0, B = 0;
  bool inject = false;  ///< the head/layer above gives a gradient at every step
  RecurrentLayerParams<T> p;
  Matrix<T> x, s0;
  detail::LayerRecord<T> rec;
  Matrix<T> above;    ///< H × TB; without injections only its last block is used
  Matrix<T> g_final;  ///< S × B extra gradient on s_T (zero when not wanted)
  Matrix<T> g_last;   ///< S × B: above's last block on the h rows + g_final (the scan's g_T)

  std::string describe() const {
    return cell_name(code) + " H " + std::to_string(H) + " T " + std::to_string(steps) + " B " + std::to_string(B) +
           (inject ? " injections" : "") + (g_final.cwiseAbs().maxCoeff() > 0 ? " final-grad" : "");
  }
};

/// A random layer (PyTorch's init bound 1/√H, inputs and s_0 in (−1, 1)) run forward by the CPU cell.
template <class T>
FusedLayer<T> make_layer(std::int32_t code, Index H, Index steps, Index B, bool inject, bool final_grad,
                         std::uint64_t seed) {
  FusedLayer<T> L;
  L.code = code;
  L.H = H;
  L.S = state_size(cell_type(code), H);
  L.steps = steps;
  L.B = B;
  L.inject = inject;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  const double bound = 1 / std::sqrt(static_cast<double>(H));
  auto fill = [&](auto& m, double scale) {
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(scale * u(rng));
  };
  const Index GH = gate_count(cell_type(code)) * H;
  L.p.w_ih.resize(GH, L.I);
  L.p.w_hh.resize(GH, H);
  L.p.b_ih.resize(GH);
  L.p.b_hh.resize(GH);
  fill(L.p.w_ih, bound);
  fill(L.p.w_hh, bound);
  fill(L.p.b_ih, bound);
  fill(L.p.b_hh, bound);
  L.x.resize(L.I, steps * B);
  L.s0.resize(L.S, B);
  fill(L.x, 1);
  fill(L.s0, 1);
  auto& rec = L.rec;
  rec.steps = steps;
  rec.batch = B;
  rec.hidden = H;
  rec.x = L.x;
  rec.ax = L.p.w_ih * rec.x;
  rec.ax.colwise() += L.p.b_ih;
  rec.h.resize(H, (steps + 1) * B);
  rec.h.leftCols(B) = L.s0.topRows(H);
  if (code == gpu::kLstm) {
    rec.c.resize(H, (steps + 1) * B);
    rec.c.leftCols(B) = L.s0.bottomRows(H);
  }
  if (code == gpu::kGru || code == gpu::kLstm) {
    rec.gates.resize(GH, steps * B);
    rec.aux.resize(H, steps * B);
  }
  detail::cell_ops<T>(cell_type(code), nonlinearity(code)).forward(L.p, rec, 1);
  L.above.resize(H, steps * B);
  fill(L.above, 1);
  L.g_final = Matrix<T>::Zero(L.S, B);
  if (final_grad) fill(L.g_final, 1);
  L.g_last = L.g_final;
  L.g_last.topRows(H) += L.above.rightCols(B);
  return L;
}

/// The same layer in double (exact: every float is a double).
template <class T>
FusedLayer<double> to_double(const FusedLayer<T>& L) {
  FusedLayer<double> D;
  D.code = L.code;
  D.I = L.I;
  D.H = L.H;
  D.S = L.S;
  D.steps = L.steps;
  D.B = L.B;
  D.inject = L.inject;
  D.p.w_ih = L.p.w_ih.template cast<double>();
  D.p.w_hh = L.p.w_hh.template cast<double>();
  D.p.b_ih = L.p.b_ih.template cast<double>();
  D.p.b_hh = L.p.b_hh.template cast<double>();
  D.x = L.x.template cast<double>();
  D.s0 = L.s0.template cast<double>();
  D.rec.steps = L.rec.steps;
  D.rec.batch = L.rec.batch;
  D.rec.hidden = L.rec.hidden;
  D.rec.x = L.rec.x.template cast<double>();
  D.rec.h = L.rec.h.template cast<double>();
  D.rec.c = L.rec.c.template cast<double>();
  D.rec.gates = L.rec.gates.template cast<double>();
  D.rec.aux = L.rec.aux.template cast<double>();
  D.above = L.above.template cast<double>();
  D.g_final = L.g_final.template cast<double>();
  D.g_last = L.g_last.template cast<double>();
  return D;
}

/// A layer with small-integer (rnn) or dyadic (gru, lstm) record, weights and gradients: every
/// product and sum of a short backward is exact in double (≤ 5 steps of ≤ 10 bits), so the scan
/// must equal BP bit for bit.
inline FusedLayer<double> exact_layer(std::int32_t cell, Index H, Index steps, Index B, bool inject,
                                      std::uint64_t seed) {
  FusedLayer<double> L = make_layer<double>(cell, H, steps, B, inject, true, seed);
  std::mt19937_64 rng(seed);
  auto pick = [&](std::initializer_list<double> v) {
    return *(v.begin() + std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng));
  };
  auto fill = [&](auto& m, std::initializer_list<double> v) {
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = pick(v);
  };
  fill(L.p.w_hh, {-1, 0, 1, 2});
  if (cell == gpu::kRnnTanh || cell == gpu::kRnnRelu) {
    // relu: masks 0/1 from the signs; tanh: 1 − h² with h ∈ {0, ±1, ±2}: 1, 0, −3.
    fill(L.rec.h, {-2, -1, 0, 1, 2});
  } else {
    fill(L.rec.gates, {0, 0.5, 1});
    fill(L.rec.aux, {-1, -0.5, 0, 0.5, 1});
    fill(L.rec.h, {-1, -0.5, 0, 0.5, 1});
    if (cell == gpu::kLstm) fill(L.rec.c, {-1, -0.5, 0, 0.5, 1});
  }
  fill(L.above, {-2, -1, 0, 1, 3});
  fill(L.g_final, {-1, 0, 2});
  L.g_last = L.g_final;
  L.g_last.topRows(H) += L.above.rightCols(B);
  return L;
}

/// The CPU engine's BP through the layer (src/nn/recurrent.cpp's bp_recurrence with the cell's
/// own preact and direct) in the layer's own precision: every g_t, S × (T+1)B.
template <class T>
Matrix<T> bp_through(const FusedLayer<T>& L) {
  const auto& ops = detail::cell_ops<T>(cell_type(L.code), nonlinearity(L.code));
  const Index T_ = L.steps, B = L.B, H = L.H, GH = gate_count(cell_type(L.code)) * H;
  Matrix<T> g = Matrix<T>::Zero(L.S, (T_ + 1) * B);
  g.middleCols(T_ * B, B) = L.g_last;
  detail::PreactGrads<T> pg;
  pg.keep_dc = true;  // BP through time: preact then direct, one step at a time
  pg.dx.resize(GH, T_ * B);
  if (L.code == gpu::kGru) pg.dh.resize(GH, T_ * B);
  auto& dh = L.code == gpu::kGru ? pg.dh : pg.dx;
  for (Index t = T_; t >= 1; --t) {
    ops.preact(L.p, L.rec, g, pg, t, t + 1, {});
    auto gprev = g.middleCols((t - 1) * B, B);
    if (L.inject && t >= 2) gprev.topRows(H) = L.above.middleCols((t - 2) * B, B);
    gprev.topRows(H).noalias() += L.p.w_hh.transpose() * dh.middleCols((t - 1) * B, B);
    ops.direct(L.p, L.rec, g, pg, t, 0, gprev);
  }
  return g;
}

/// The oracle: BP through the layer in double (the record converted exactly).
template <class T>
Matrix<double> oracle_bp(const FusedLayer<T>& layer) {
  return bp_through(to_double(layer));
}

/// How far `got` (S × (T+1)B, column-major values) is from the oracle: the largest over t of
/// ‖got_t − want_t‖ / max(‖want_t‖, floor · max_t ‖want_t‖) (vanishing gradients of long chains
/// are compared against the scale of the whole backward, not against their own underflowing
/// size), with the step where it is largest.
struct StepError {
  double err = 0;
  Index t = -1;
  double ref = 0, scale = 0;  ///< ‖want_t‖ there, max_t ‖want_t‖
};
template <class T>
StepError worst_step_error(const T* got, const Matrix<double>& want, Index B, double floor = 0) {
  const Index S = want.rows(), blocks = want.cols() / B;
  StepError w;
  for (Index t = 0; t < blocks; ++t) w.scale = std::max(w.scale, want.middleCols(t * B, B).norm());
  for (Index t = blocks - 1; t >= 0; --t) {
    const Eigen::Map<const Matrix<T>> g(got + t * B * S, S, B);
    const double ref = want.middleCols(t * B, B).norm();
    const double diff = (g.template cast<double>() - want.middleCols(t * B, B)).norm();
    const double den = std::max(ref, floor * w.scale);
    const double err = den > 0 ? diff / den : diff;
    if (!(err <= w.err)) {  // (NaN is the worst)
      w = {err, t, ref, w.scale};
      if (std::isnan(err)) break;
    }
  }
  return w;
}

/// Every g_t of `got` within `tol` of the oracle (worst_step_error).
template <class T>
::testing::AssertionResult close_to_oracle(const T* got, const Matrix<double>& want, Index B, double tol,
                                           double floor = 0) {
  const StepError w = worst_step_error(got, want, B, floor);
  if (!(w.err <= tol))
    return ::testing::AssertionFailure() << "g_" << w.t << ": relative error " << w.err << " > " << tol << " (|g_t| "
                                         << w.ref << ", max |g| " << w.scale << ")";
  return ::testing::AssertionSuccess();
}

/// The tolerance for a float result: `tol`, or 8× the error of the CPU's own float BP through the
/// same record where that is larger (a long chain of one or a few units can lose more than `tol`
/// to cancellation in any float evaluation order; the scan must stay within a small factor of it).
template <class T>
double float_tolerance(const FusedLayer<T>& L, const Matrix<double>& want, double tol, double floor) {
  if constexpr (std::is_same_v<T, float>) {
    const Matrix<float> bp = bp_through(L);
    return std::max(tol, 8 * worst_step_error(bp.data(), want, L.B, floor).err);
  } else {
    return tol;
  }
}

// ---------------------------------------------------------------------------------------------
// Per-sample lengths (PackedSequence): steps t > len[b] of sample b are padding

/// Sample b of a layer as a layer of its own (B = 1) that runs only its first `len` steps: the
/// record's columns of those steps (h, c: blocks 0 … len; x, ax, gates, aux, above: the blocks of
/// steps 1 … len), its initial state and final-state gradient, and g_last = g_final + above on
/// h_len, as make_layer forms it. The oracle of a scan with lengths, sample by sample.
template <class T>
FusedLayer<T> sample_layer(const FusedLayer<T>& L, Index b, Index len) {
  auto pick = [&](const Matrix<T>& m, Index first, Index blocks) {
    Matrix<T> out(m.rows(), m.size() ? blocks : 0);
    for (Index k = 0; k < out.cols(); ++k) out.col(k) = m.col((first + k) * L.B + b);
    return out;
  };
  FusedLayer<T> D;
  D.code = L.code;
  D.I = L.I;
  D.H = L.H;
  D.S = L.S;
  D.steps = len;
  D.B = 1;
  D.inject = L.inject;
  D.p = L.p;
  D.x = pick(L.x, 0, len);
  D.s0 = L.s0.col(b);
  D.rec.steps = len;
  D.rec.batch = 1;
  D.rec.hidden = L.rec.hidden;
  D.rec.x = pick(L.rec.x, 0, len);
  D.rec.ax = pick(L.rec.ax, 0, len);
  D.rec.h = pick(L.rec.h, 0, len + 1);
  D.rec.c = pick(L.rec.c, 0, len + 1);
  D.rec.gates = pick(L.rec.gates, 0, len);
  D.rec.aux = pick(L.rec.aux, 0, len);
  D.above = pick(L.above, 0, len);
  D.g_final = L.g_final.col(b);
  D.g_last = D.g_final;
  D.g_last.topRows(L.H) += D.above.rightCols(1);
  return D;
}

/// The layer as a scan with lengths `len` (B values, each 1 … T) sees it: g_last's column b is
/// the gradient on s_{len[b]} (sample_layer's g_last), and every padded step t > len[b] of sample
/// b has NaN in its record (h_t, c_t, the step's gates and aux) and in its injection (above on
/// h_t), so that any read of padding shows in the result.
template <class T>
FusedLayer<T> packed_layer(const FusedLayer<T>& L, const std::vector<Index>& len) {
  FusedLayer<T> P = L;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  auto poison = [&](Matrix<T>& m, Index col) {
    if (m.size()) m.col(col).setConstant(nan);
  };
  for (Index b = 0; b < L.B; ++b) {
    const Index lb = len[static_cast<std::size_t>(b)];
    for (Index t = lb + 1; t <= L.steps; ++t) {
      poison(P.rec.h, t * L.B + b);
      poison(P.rec.c, t * L.B + b);
      poison(P.rec.gates, (t - 1) * L.B + b);
      poison(P.rec.aux, (t - 1) * L.B + b);
      poison(P.above, (t - 1) * L.B + b);
    }
    P.g_last.col(b) = sample_layer(L, b, lb).g_last;
  }
  return P;
}

/// Every sample b of `got` (S × (T+1)B, a scan of L with lengths `len`) against the oracle of its
/// own chain (sample_layer): g_0 … g_{len[b]} within `tol` (float_tolerance), and g_t equal to
/// g_{len[b]} (== : the padding is the identity) for len[b] < t ≤ T. `exact`: every g_t equal too.
template <class T>
::testing::AssertionResult matches_per_sample(const T* got, const FusedLayer<T>& L, const std::vector<Index>& len,
                                              double tol, double floor, bool exact = false) {
  const Index S = L.S, B = L.B;
  auto at = [&](Index t, Index b, Index r) { return got[(t * B + b) * S + r]; };
  for (Index b = 0; b < B; ++b) {
    const Index lb = len[static_cast<std::size_t>(b)];
    const FusedLayer<T> one = sample_layer(L, b, lb);
    const Matrix<double> want = oracle_bp(one);
    Matrix<T> mine(S, lb + 1);
    for (Index t = 0; t <= lb; ++t)
      for (Index r = 0; r < S; ++r) mine(r, t) = at(t, b, r);
    const auto close = close_to_oracle(mine.data(), want, 1, float_tolerance(one, want, tol, floor), floor);
    if (!close) return ::testing::AssertionFailure() << "sample " << b << " (length " << lb << "): " << close.message();
    for (Index t = 0; exact && t <= lb; ++t)
      for (Index r = 0; r < S; ++r)
        if (!(static_cast<double>(mine(r, t)) == want(r, t)))
          return ::testing::AssertionFailure() << "sample " << b << " (length " << lb << "): g_" << t << " row " << r
                                               << " is " << mine(r, t) << ", BP " << want(r, t);
    for (Index t = lb + 1; t <= L.steps; ++t)
      for (Index r = 0; r < S; ++r)
        if (!(at(t, b, r) == mine(r, lb)))
          return ::testing::AssertionFailure() << "sample " << b << " (length " << lb << "): padded g_" << t << " row "
                                               << r << " is " << at(t, b, r) << ", not g_" << lb << " " << mine(r, lb);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace fused_test
