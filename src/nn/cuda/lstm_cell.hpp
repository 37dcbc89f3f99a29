// The LSTM cell on the GPU: its forward unit, pre-activation gradients and J_t^T values,
// __host__ __device__ over the layer's record (layer_args.hpp; the state is [h; c], S = 2H).
// Formulas and association as its CPU half, src/nn/cpu/lstm_cell.cpp.
#pragma once

#include "nn/cuda/layer_args.hpp"

namespace bppsa::detail::gpu {

struct LstmCell {
  static constexpr int kGates = 4;
  static constexpr int kStateParts = 2;  ///< S = parts·H (LSTM: h rows over c rows)
  /// h_t[j] of sample b from (W_hh h_{t−1}) of unit j's gates (wh[q]) and its record values (in,
  /// with c_{t−1}[j], left there as c_t), writing the gates i, f, g, o, c_t and tanh(c_t). CPU:
  /// v = (W_hh h + (W_ih x + b_ih)) + b_hh per gate; c = f c_{t−1} + i g; h = o tanh(c).
  template <class T>
  BPPSA_HD static T forward(const LayerArgs<T>& a, UnitInput<T>& in, const T* wh, T hp, Idx t, Idx b, Idx j) {
    (void)hp;
    const Idx H = a.H, col = (t - 1) * a.B + b;
    T v[4];
    for (int q = 0; q < 4; ++q) v[q] = (wh[q] + in.xb[q]) + in.bh[q];
    const T i = hd_sigmoid(v[0]), f = hd_sigmoid(v[1]), gg = hd_tanh(v[2]), o = hd_sigmoid(v[3]);
    const T c = f * in.cp + i * gg;
    const T tc = hd_tanh(c);
    T* g = a.gates + col * a.GH;
    g[j] = i;
    g[H + j] = f;
    g[2 * H + j] = gg;
    g[3 * H + j] = o;
    a.c[(t * a.B + b) * H + j] = c;
    a.aux[col * H + j] = tc;
    in.cp = c;
    return o * tc;
  }

  /// dx[q] of unit j from the gradients gh on h_t[j] and gc on c_t[j].
  template <class T>
  BPPSA_HD static void preact(const LayerArgs<T>& a, Idx t, Idx b, Idx j, T gh, T gc, T* dx, T* dh) {
    (void)dh;
    const Idx H = a.H, col = (t - 1) * a.B + b;
    const T* g = a.gates + col * a.GH;
    const T i = g[j], f = g[H + j], gg = g[2 * H + j], o = g[3 * H + j];
    const T tc = a.aux[col * H + j];
    const T cp = a.c[((t - 1) * a.B + b) * H + j];
    const T dc = gc + o * (T(1) - tc * tc) * gh;
    dx[0] = gg * i * (T(1) - i) * dc;
    dx[2] = i * (T(1) - gg * gg) * dc;
    dx[3] = tc * o * (T(1) - o) * gh;
    dx[1] = dc * (cp * f * (T(1) - f));
  }

  /// Value `item` of J_t^T (dense S × S column-major, (i, jc) at jc·S + i). W_hh row-major.
  template <class T>
  BPPSA_HD static T jacobian_value(const LayerArgs<T>& a, Idx t, Idx b, Idx item) {
    const Idx H = a.H, col = (t - 1) * a.B + b;
    const T* g = a.gates + col * a.GH;
    const T* w = a.w;
    const Idx S = 2 * H, i = item % S, jc = item / S, j = jc < H ? jc : jc - H;
    const T ig = g[j], f = g[H + j], gg = g[2 * H + j], o = g[3 * H + j];
    const T tc = a.aux[col * H + j], cp = a.c[((t - 1) * a.B + b) * H + j];
    const T kappa = o * (T(1) - tc * tc);
    if (i >= H) {  // bottom blocks: D(κ f) left, D(f) right
      if (i - H != j) return T(0);
      return jc < H ? kappa * f : f;
    }
    const T ai = gg * ig * (T(1) - ig), af = cp * f * (T(1) - f), ag = ig * (T(1) - gg * gg);
    T tr = w[j * H + i] * ai;
    tr += w[(H + j) * H + i] * af;
    tr += w[(2 * H + j) * H + i] * ag;
    if (jc >= H) return tr;  // (∂c'/∂h)^T
    const T ao = tc * o * (T(1) - o);
    T tl = tr * kappa;
    tl += w[(3 * H + j) * H + i] * ao;
    return tl;  // (∂h'/∂h)^T
  }

  // The fused scan's Step (scan/cuda/fused/step.hpp): y from δc = x_c + o(1 − tanh²c) x_h; the
  // c rows f ⊙ δc.
  static constexpr int kFusedCoefficients = 5;
  static constexpr int kFusedMaxTile4 = 20;  // its 32 × 4 kernels spill registers (docs/cost_model.md)
  static constexpr const char* kFusedName = "lstm";
  static constexpr unsigned kFusedRecordNeeded = 1u << kRecordC | 1u << kRecordGates | 1u << kRecordAux;
  static constexpr double kFusedRecordPerUnit = 6;  // the 4 gates, tanh c_t, c_{t−1}
  static constexpr bool kFusedInputSide = false;    ///< y is dx (preact's)
  static constexpr FusedStepCost kFusedCost{14, 5, 4, 4};
  /// The record it reads at (t, b): the gates, tanh c_t and c_{t−1}. `a`: FusedArgs.
  template <class T, class Args>
  BPPSA_HD static FusedStepRecord<T> fused_record(const Args& a, Idx t, Idx b) {
    const Idx col = (t - 1) * a.shape.B + b;  // per-step arrays; also block t − 1 of c
    FusedStepRecord<T> r;
    r.p0 = a.record[kRecordGates] + col * a.shape.GH;
    r.p1 = a.record[kRecordAux] + col * a.shape.H;
    r.p2 = a.record[kRecordC] + col * a.shape.H;
    r.n0 = a.shape.GH;
    r.n1 = r.n2 = a.shape.H;
    return r;
  }
  /// Unit k's coefficients o(1 − tanh²c), g·i(1−i), c_{t−1}·f(1−f), i(1−g²), tanh c·o(1−o).
  template <class T>
  BPPSA_HD static void fused_unit(const FusedStepRecord<T>& r, Idx H, std::int32_t variant, Idx k, T* q) {
    (void)variant;
    const T i = r.p0[k], f = r.p0[H + k], gg = r.p0[2 * H + k], o = r.p0[3 * H + k];
    const T tc = r.p1[k], cp = r.p2[k];
    q[0] = o * (T(1) - tc * tc);
    q[1] = gg * i * (T(1) - i);
    q[2] = cp * f * (T(1) - f);
    q[3] = i * (T(1) - gg * gg);
    q[4] = tc * o * (T(1) - o);
  }
  /// y (4 values) of one column from its unit-k values x_h and x_c.
  template <class T>
  BPPSA_HD static void fused_y(const T* q, T xh, T xc, T* y) {
    const T dc = xc + q[0] * xh;  // δc
    y[0] = q[1] * dc;
    y[1] = dc * q[2];
    y[2] = q[3] * dc;
    y[3] = q[4] * xh;
  }
  /// Row i's direct part: f and κ = o(1 − tanh²c) for the c row.
  template <class T>
  BPPSA_HD static FusedDirect<T> fused_direct(const FusedStepRecord<T>& r, Idx H, Idx i) {
    FusedDirect<T> d;
    d.d[0] = r.p0[H + i];
    const T o = r.p0[3 * H + i], tc = r.p1[i];
    d.d[1] = o * (T(1) - tc * tc);
    return d;
  }
  /// The c row: f ⊙ (x_c + κ x_h).
  template <class T>
  BPPSA_HD static void fused_rows(const FusedDirect<T>& d, T xh, T xc, T& vh, T& vc) {
    (void)vh;
    vc = d.d[0] * (xc + d.d[1] * xh);
  }
};

}  // namespace bppsa::detail::gpu
