// Every matrix product of the GPU model spelled out once, as cuBLAS reads it (column-major,
// op(A) m × k, op(B) k × n, leading dimensions): the layers' input projections, their
// parameter and input gradients over all T·B columns, the head. recurrent.cpp and
// classifier.cpp run them with cuBLAS; the g++ tests run them with a reference GEMM, so the
// shapes, transposes and leading dimensions are tested without a GPU. PyTorch's row-major
// weights (rows × cols) are column-major cols × rows matrices: a weight is used with op = T
// where the math has W, and op = N where it has W^T.
#pragma once

#include "nn/cuda/recurrent_math.hpp"

namespace bppsa::detail::gpu {

/// C = op(A) · op(B) (C is m × n).
template <class T>
struct Gemm {
  bool ta = false, tb = false;
  Idx m = 0, n = 0, k = 0;
  const T* a = nullptr;
  Idx lda = 0;
  const T* b = nullptr;
  Idx ldb = 0;
  T* c = nullptr;
  Idx ldc = 0;
};

/// y = A · x (A is m × n with leading dimension lda): the row sums of bias gradients (x = ones).
template <class T>
struct Gemv {
  Idx m = 0, n = 0;
  const T* a = nullptr;
  Idx lda = 0;
  const T* x = nullptr;
  T* y = nullptr;
};

/// ax (GH × TB) = W_ih (GH × I, row-major) · x (I × TB).
template <class T>
Gemm<T> input_projection(Idx GH, Idx I, Idx TB, const T* w_ih, const T* x, T* ax) {
  return {true, false, GH, TB, I, w_ih, I, x, I, ax, GH};
}

/// A layer's gradients from its pre-activation gradients dx (input side) and dh (recurrent
/// side; dx for RNN and LSTM), both GH × TB: ∇W_ih = dx·x^T, ∇W_hh = dh·h_{0..T−1}^T (row-major
/// results: their column-major transposes x·dx^T, h·dh^T), ∇b = row sums, and the gradient on
/// the layer's input W_ih^T·dx (I × TB).
template <class T>
struct LayerGradProducts {
  Gemm<T> w_ih, w_hh, input;
  Gemv<T> b_ih, b_hh;
};
template <class T>
LayerGradProducts<T> layer_grad_products(Idx I, Idx H, Idx GH, Idx TB, const T* x, const T* h, const T* dx, const T* dh,
                                         const T* w_ih, const T* ones, T* grad_w_ih, T* grad_w_hh, T* grad_b_ih,
                                         T* grad_b_hh, T* input_grad) {
  LayerGradProducts<T> p;
  p.w_ih = {false, true, I, GH, TB, x, I, dx, GH, grad_w_ih, I};
  p.w_hh = {false, true, H, GH, TB, h, H, dh, GH, grad_w_hh, H};
  p.input = {false, false, I, TB, GH, w_ih, I, dx, GH, input_grad, I};
  p.b_ih = {GH, TB, dx, GH, ones, grad_b_ih};
  p.b_hh = {GH, TB, dh, GH, ones, grad_b_hh};
  return p;
}

/// The head y = W x + b (W: C × H row-major) on N columns of x (H × N): logits = W x.
template <class T>
Gemm<T> head_logits(Idx C, Idx H, Idx N, const T* w, const T* x, T* logits) {
  return {true, false, C, N, H, w, H, x, H, logits, C};
}

/// The head's backward from dlogits (C × N): ∇W = dlogits·x^T (column-major x·dlogits^T),
/// ∇b = row sums, and the gradient on its input W^T·dlogits (H × N).
template <class T>
struct HeadGradProducts {
  Gemm<T> weight, input;
  Gemv<T> bias;
};
template <class T>
HeadGradProducts<T> head_grad_products(Idx C, Idx H, Idx N, const T* w, const T* x, const T* dlogits, const T* ones,
                                       T* grad_w, T* grad_b, T* dx) {
  HeadGradProducts<T> p;
  p.weight = {false, true, H, C, N, x, H, dlogits, C, grad_w, H};
  p.input = {false, false, H, N, C, w, H, dlogits, C, dx, H};
  p.bias = {C, N, dlogits, C, ones, grad_b};
  return p;
}

}  // namespace bppsa::detail::gpu
