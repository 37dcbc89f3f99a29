// The plain RNN cell on the GPU (tanh or relu): its forward unit, pre-activation gradients and
// J_t^T values, __host__ __device__ over the layer's record (layer_args.hpp). Formulas and
// association as its CPU half, src/nn/cpu/rnn_cell.cpp.
#pragma once

#include "nn/cuda/layer_args.hpp"

namespace bppsa::detail::gpu {

struct RnnCell {
  static constexpr int kGates = 1;
  static constexpr int kStateParts = 1;  ///< S = parts·H (LSTM: h rows over c rows)
  /// h_t[j] of sample b from (W_hh h_{t−1})[j] (wh[0]) and its record values (in). CPU:
  /// h = W_hh h_{t−1}; h += ax (with b_ih); h += b_hh; act.
  template <class T>
  BPPSA_HD static T forward(const LayerArgs<T>& a, UnitInput<T>& in, const T* wh, T hp, Idx t, Idx b, Idx j) {
    (void)hp, (void)t, (void)b, (void)j;
    const T pre = (wh[0] + in.xb[0]) + in.bh[0];
    return a.cell == kRnnRelu ? (pre > T(0) ? pre : T(0)) : hd_tanh(pre);
  }

  /// dx[0] of unit j from the gradient gh on h_t[j].
  template <class T>
  BPPSA_HD static void preact(const LayerArgs<T>& a, Idx t, Idx b, Idx j, T gh, T gc, T* dx, T* dh) {
    (void)gc, (void)dh;
    const T h = a.h[(t * a.B + b) * a.H + j];
    dx[0] = a.cell == kRnnRelu ? (h > T(0) ? T(1) : T(0)) * gh : (T(1) - h * h) * gh;
  }

  /// Value `item` (unit) of J_t^T's per-sample diagonal d: W_hh^T·diag(d) with d = act'(pre).
  template <class T>
  BPPSA_HD static T jacobian_value(const LayerArgs<T>& a, Idx t, Idx b, Idx item) {
    const T h = a.h[(t * a.B + b) * a.H + item];
    return a.cell == kRnnRelu ? (h > T(0) ? T(1) : T(0)) : T(1) - h * h;
  }

  // The fused scan's Step (scan/cuda/fused/step.hpp): J_t^T x = W_hh^T y with y = d ⊙ x.
  static constexpr int kFusedCoefficients = 1;
  static constexpr int kFusedMaxTile4 = 32;
  static constexpr const char* kFusedName = "rnn";
  static constexpr unsigned kFusedRecordNeeded = 1u << kRecordH;
  static constexpr double kFusedRecordPerUnit = 1;  // h_t
  static constexpr FusedStepCost kFusedCost{3, 1, 0, 0};
  static constexpr bool kFusedInputSide = false;  ///< y is dx (preact's)
  /// The record it reads at (t, b): h_t. `a`: the fused scan's arguments (FusedArgs).
  template <class T, class Args>
  BPPSA_HD static FusedStepRecord<T> fused_record(const Args& a, Idx t, Idx b) {
    FusedStepRecord<T> r;
    r.p0 = a.record[kRecordH] + (t * a.shape.B + b) * a.shape.H;
    r.n0 = a.shape.H;
    return r;
  }
  /// Unit k's coefficient d = 1 − h² (variant kRnnRelu: 1[h > 0]).
  template <class T>
  BPPSA_HD static void fused_unit(const FusedStepRecord<T>& r, Idx H, std::int32_t variant, Idx k, T* q) {
    (void)H;
    const T h = r.p0[k];
    q[0] = variant == kRnnRelu ? (h > T(0) ? T(1) : T(0)) : T(1) - h * h;
  }
  /// y of one column from its unit-k value x_h.
  template <class T>
  BPPSA_HD static void fused_y(const T* q, T xh, T xc, T* y) {
    (void)xc;
    y[0] = q[0] * xh;
  }
  /// No direct part.
  template <class T>
  BPPSA_HD static FusedDirect<T> fused_direct(const FusedStepRecord<T>& r, Idx H, Idx i) {
    (void)r, (void)H, (void)i;
    return {};
  }
  template <class T>
  BPPSA_HD static void fused_rows(const FusedDirect<T>& d, T xh, T xc, T& vh, T& vc) {
    (void)d, (void)xh, (void)xc, (void)vh, (void)vc;
  }
};

}  // namespace bppsa::detail::gpu
