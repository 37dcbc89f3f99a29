// The GRU cell on the GPU: its forward unit, pre-activation gradients and J_t^T values,
// __host__ __device__ over the layer's record (layer_args.hpp). Formulas and association as its
// CPU half, src/nn/cpu/gru_cell.cpp.
#pragma once

#include "nn/cuda/layer_args.hpp"

namespace bppsa::detail::gpu {

struct GruCell {
  static constexpr int kGates = 3;
  static constexpr int kStateParts = 1;  ///< S = parts·H (LSTM: h rows over c rows)
  /// h_t[j] of sample b from (W_hh h_{t−1}) of unit j's gates (wh[q]), its record values (in)
  /// and h_{t−1}[j] (hp), writing the gates r, z, n and M = W_hn h + b_hn. CPU: ah = W_hh h +
  /// b_hh; r = σ(ax_r + ah_r) with ax = W_ih x + b_ih; …
  template <class T>
  BPPSA_HD static T forward(const LayerArgs<T>& a, UnitInput<T>& in, const T* wh, T hp, Idx t, Idx b, Idx j) {
    const Idx H = a.H, col = (t - 1) * a.B + b;
    const T ahr = wh[0] + in.bh[0], ahz = wh[1] + in.bh[1], ahn = wh[2] + in.bh[2];
    const T r = hd_sigmoid(in.xb[0] + ahr);
    const T z = hd_sigmoid(in.xb[1] + ahz);
    const T n = hd_tanh(in.xb[2] + r * ahn);
    T* g = a.gates + col * a.GH;
    g[j] = r;
    g[H + j] = z;
    g[2 * H + j] = n;
    a.aux[col * H + j] = ahn;
    return (T(1) - z) * n + z * hp;
  }

  /// dx[q] (input side) and dh[q] (recurrent side, differing in the n gate) of unit j from the
  /// gradient gh on h_t[j].
  template <class T>
  BPPSA_HD static void preact(const LayerArgs<T>& a, Idx t, Idx b, Idx j, T gh, T gc, T* dx, T* dh) {
    (void)gc;
    const Idx H = a.H, col = (t - 1) * a.B + b;
    const T* g = a.gates + col * a.GH;
    const T r = g[j], z = g[H + j], n = g[2 * H + j];
    const T m = a.aux[col * H + j];
    const T hp = a.h[((t - 1) * a.B + b) * H + j];
    const T dn = (T(1) - n * n) * (T(1) - z) * gh;
    dx[2] = dn;
    dx[0] = r * (T(1) - r) * m * dn;
    dx[1] = z * (T(1) - z) * (hp - n) * gh;
    dh[0] = dx[0];
    dh[1] = dx[1];
    dh[2] = r * dn;
  }

  /// Value `item` of J_t^T (dense H × H column-major): row i (input h_{t−1}), column j (output
  /// h_t). W_hh row-major.
  template <class T>
  BPPSA_HD static T jacobian_value(const LayerArgs<T>& a, Idx t, Idx b, Idx item) {
    const Idx H = a.H, col = (t - 1) * a.B + b;
    const T* g = a.gates + col * a.GH;
    const T* w = a.w;
    const Idx i = item % H, j = item / H;
    const T r = g[j], z = g[H + j], n = g[2 * H + j], m = a.aux[col * H + j];
    const T hp = a.h[((t - 1) * a.B + b) * H + j];
    const T beta = r * (T(1) - n * n) * (T(1) - z);
    const T alpha = (T(1) - r) * m * beta;
    const T gamma = z * (T(1) - z) * (hp - n);
    T v = w[j * H + i] * alpha;
    v += w[(H + j) * H + i] * gamma;
    v += w[(2 * H + j) * H + i] * beta;
    if (i == j) v += z;
    return v;
  }

  // The fused scan's Step (scan/cuda/fused/step.hpp): J_t^T x = W_hh^T y + z ⊙ x, y the
  // (α, γ, β)-scaled x.
  static constexpr int kFusedCoefficients = 4;
  static constexpr int kFusedMaxTile4 = 20;  // its 32 × 4 kernels spill registers (docs/cost_model.md)
  static constexpr const char* kFusedName = "gru";
  static constexpr unsigned kFusedRecordNeeded = 1u << kRecordH | 1u << kRecordGates | 1u << kRecordAux;
  static constexpr double kFusedRecordPerUnit = 5;  // the 3 gates, M, h_{t−1}
  static constexpr FusedStepCost kFusedCost{12, 4, 1, 1};
  static constexpr bool kFusedInputSide = true;  ///< y is dh (preact's); dx differs in the n gate
  /// The record it reads at (t, b): the gates, M and h_{t−1}. `a`: FusedArgs.
  template <class T, class Args>
  BPPSA_HD static FusedStepRecord<T> fused_record(const Args& a, Idx t, Idx b) {
    const Idx col = (t - 1) * a.shape.B + b;  // per-step arrays; also block t − 1 of h
    FusedStepRecord<T> r;
    r.p0 = a.record[kRecordGates] + col * a.shape.GH;
    r.p1 = a.record[kRecordAux] + col * a.shape.H;
    r.p2 = a.record[kRecordH] + col * a.shape.H;
    r.n0 = a.shape.GH;
    r.n1 = r.n2 = a.shape.H;
    return r;
  }
  /// Unit k's coefficients (1−n²)(1−z), r(1−r)·M, z(1−z)(h_{t−1} − n), r.
  template <class T>
  BPPSA_HD static void fused_unit(const FusedStepRecord<T>& r, Idx H, std::int32_t variant, Idx k, T* q) {
    (void)variant;
    const T rg = r.p0[k], z = r.p0[H + k], n = r.p0[2 * H + k];
    const T m = r.p1[k], hp = r.p2[k];
    q[0] = (T(1) - n * n) * (T(1) - z);
    q[1] = rg * (T(1) - rg) * m;
    q[2] = z * (T(1) - z) * (hp - n);
    q[3] = rg;
  }
  /// y (3 values) of one column from its unit-k value x_h.
  template <class T>
  BPPSA_HD static void fused_y(const T* q, T xh, T xc, T* y) {
    (void)xc;
    const T dn = q[0] * xh;  // ∇N
    y[0] = q[1] * dn;        // ∇R
    y[1] = q[2] * xh;        // ∇Z
    y[2] = q[3] * dn;        // ∇M = r ⊙ ∇N
  }
  /// The input side (preact's dx) of the same column: y but ∇N in place of ∇M.
  template <class T>
  BPPSA_HD static void fused_yi(const T* q, T xh, T xc, const T* y, T* yi) {
    (void)xc;
    yi[0] = y[0];
    yi[1] = y[1];
    yi[2] = q[0] * xh;
  }
  /// Row i's direct part: z_t[i].
  template <class T>
  BPPSA_HD static FusedDirect<T> fused_direct(const FusedStepRecord<T>& r, Idx H, Idx i) {
    FusedDirect<T> d;
    d.d[0] = r.p0[H + i];
    return d;
  }
  /// vh += z ⊙ x_h.
  template <class T>
  BPPSA_HD static void fused_rows(const FusedDirect<T>& d, T xh, T xc, T& vh, T& vc) {
    (void)xc, (void)vc;
    vh += d.d[0] * xh;
  }
};

}  // namespace bppsa::detail::gpu
