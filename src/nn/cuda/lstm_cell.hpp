// The LSTM cell on the GPU: its forward unit, pre-activation gradients and J_t^T values,
// __host__ __device__ over the layer's record (layer_args.hpp; the state is [h; c], S = 2H).
// Formulas and association as its CPU half, src/nn/cpu/lstm_cell.cpp.
#pragma once

#include "nn/cuda/layer_args.hpp"

namespace bppsa::detail::gpu {

struct LstmCell {
  /// h_t[j] of sample b from W_hh h_{t−1} (wh: this sample's 4H values), writing the gates
  /// i, f, g, o, c_t and tanh c_t. CPU: a = W_hh h; a += ax; a += b_hh.
  template <class T>
  BPPSA_HD static T forward(const LayerArgs<T>& a, const T* wh, Idx t, Idx b, Idx j) {
    const Idx H = a.H, col = (t - 1) * a.B + b;
    const T* ax = a.ax + col * a.GH;
    T v[4];
    for (Idx q = 0; q < 4; ++q) v[q] = (wh[q * H + j] + (ax[q * H + j] + a.b_ih[q * H + j])) + a.b_hh[q * H + j];
    const T i = hd_sigmoid(v[0]), f = hd_sigmoid(v[1]), gg = hd_tanh(v[2]), o = hd_sigmoid(v[3]);
    const T cp = a.c[((t - 1) * a.B + b) * H + j];
    const T c = f * cp + i * gg;
    const T tc = hd_tanh(c);
    T* g = a.gates + col * a.GH;
    g[j] = i;
    g[H + j] = f;
    g[2 * H + j] = gg;
    g[3 * H + j] = o;
    a.c[(t * a.B + b) * H + j] = c;
    a.aux[col * H + j] = tc;
    return o * tc;
  }

  /// dx[q] of unit j from the gradients gh on h_t[j] and gc on c_t[j].
  template <class T>
  BPPSA_HD static void preact(const LayerArgs<T>& a, Idx t, Idx b, Idx j, T gh, T gc, T* dx) {
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
};

}  // namespace bppsa::detail::gpu
