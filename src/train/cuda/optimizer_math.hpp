// Per-element arithmetic of the GPU optimizer (torch.optim.Adam / SGD with momentum and weight
// decay, after clip_grad_norm_'s scaling), step for step as src/train/optimizer.cpp: the same
// operations in the same order on T values, the constants computed once on the host.
// Used by optimizer_kernels.cu and replayed by tests/nn/cuda/test_recurrent_host.cpp (the optimizer's part).
#pragma once

#include "nn/cuda/head_math.hpp"
#include "nn/cuda/recurrent_math.hpp"

namespace bppsa::detail::gpu {

/// The constants of one optimizer step (T values, as the CPU computes them).
template <class T>
struct StepConstants {
  bool adam = true;
  T lr = 0, wd = 0, mu = 0;                                ///< SGD: learning rate, weight decay, momentum
  T b1 = 0, b2 = 0, step_size = 0, bc2_sqrt = 1, eps = 0;  ///< Adam (step_size = lr / bc1)
  bool first_step = false;                                 ///< SGD momentum: the buffer starts as the gradient
  double clip_max = 0;                                     ///< clip_grad_norm (0 = off)
};

/// clip_grad_norm_'s factor from the global norm: max / (norm + 1e-6) when the norm exceeds
/// max > 0, else 1.
template <class T>
BPPSA_HD inline T clip_factor(double norm, double clip_max) {
  return (clip_max > 0 && norm > clip_max) ? static_cast<T>(clip_max / (norm + 1e-6)) : T(1);
}

/// After the norm's reductions (thread 0): the norm into the status, the clip factor.
template <class T>
BPPSA_HD inline void norm_finish_status(double sum, double clip_max, T* clip, DeviceStatus* st) {
  const double norm = sqrt(sum);
  st->grad_norm = norm;
  *clip = clip_factor<T>(norm, clip_max);
}

/// One value's update: value, momentum (SGD) or first moment m and second moment v (Adam).
template <class T>
BPPSA_HD inline void update_value(const StepConstants<T>& k, T clip, T grad, T& value, T& m, T& v) {
  const T g = clip * grad + k.wd * value;
  if (k.adam) {
    m = k.b1 * m + (T(1) - k.b1) * g;
    v = k.b2 * v + (T(1) - k.b2) * g * g;
    value -= k.step_size * m / (hd_sqrt(v) / k.bc2_sqrt + k.eps);
  } else if (k.mu != T(0)) {
    m = k.first_step ? g : k.mu * m + g;
    value -= k.lr * m;
  } else {
    value -= k.lr * g;
  }
}

/// Blocks of the gradient norm's first pass (fixed, so that the sum's order does not depend on
/// the GPU); each has kReduceThreads threads.
inline constexpr int kNormBlocks = 128;

/// The optimizer's parameters: up to kMaxSegments device arrays (values and their gradients),
/// one flat index space over them in order (the model's parameters() order).
inline constexpr int kMaxSegments = 4;
template <class T>
struct Segments {
  T* values[kMaxSegments] = {};
  const T* grads[kMaxSegments] = {};
  Idx size[kMaxSegments] = {};
  int count = 0;
};

template <class T>
BPPSA_HD inline Idx total_size(const Segments<T>& p) {
  Idx n = 0;
  for (int k = 0; k < p.count; ++k) n += p.size[k];
  return n;
}

/// The segment and the offset in it of flat index i (< total_size).
template <class T>
BPPSA_HD inline void locate(const Segments<T>& p, Idx i, int& seg, Idx& off) {
  seg = 0;
  off = i;
  while (seg + 1 < p.count && off >= p.size[seg]) off -= p.size[seg++];
}

/// A thread's share of Σ grad² (in double): flat indices first, first + stride, … in order.
template <class T>
BPPSA_HD inline double grad_square_sum(const Segments<T>& p, Idx total, Idx first, Idx stride) {
  double s = 0;
  for (Idx i = first; i < total; i += stride) {
    int seg = 0;
    Idx off = 0;
    locate(p, i, seg, off);
    const double g = static_cast<double>(p.grads[seg][off]);
    s += g * g;
  }
  return s;
}

/// The update of flat index i (m, v: the optimizer's state arrays over the same index space;
/// v unused by SGD). Returns whether the new value is finite.
template <class T>
BPPSA_HD inline bool update_item(const Segments<T>& p, Idx i, T* m, T* v, T clip, const StepConstants<T>& k) {
  int seg = 0;
  Idx off = 0;
  locate(p, i, seg, off);
  T value = p.values[seg][off];
  T mv = m[i], vv = k.adam ? v[i] : T(0);
  update_value(k, clip, p.grads[seg][off], value, mv, vv);
  p.values[seg][off] = value;
  m[i] = mv;
  if (k.adam) v[i] = vv;
  return hd_finite(value);
}

}  // namespace bppsa::detail::gpu
