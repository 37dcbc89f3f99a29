// One recurrent layer in one direction for bppsa.nn.RNN/GRU/LSTM: forward records what the
// backward pass needs, and the backward pass (a BPPSA scan or BP, bppsa::Recurrent's) gives
// the gradients of the input, the initial state and every parameter. Python stacks layers,
// directions and dropout around it; tensors cross as TensorRef, time-major (T, B, ·).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bppsa/nn/recurrent.hpp"
#include "tensor_ref.hpp"

namespace bppsa::python {

using OptRef = std::optional<TensorRef>;

template <class T>
class LayerEngine {
 public:
  /// proj: the LSTM's proj_size (0 = none).
  LayerEngine(const std::string& cell, Index input, Index hidden, const std::string& nonlinearity, Index proj = 0);

  /// With P = proj or H: x (T, B, I); h0 (B, P), c0 (B, H) or None (zeros); weights (G·H, I),
  /// (G·H, P), biases (G·H) or None (no bias), w_hr (P, H) with a projection, else None.
  /// lengths: per sample, sorted longest first (PyTorch's packed order), or empty (every
  /// sample runs all T steps). Writes out (T, B, P; zeros past a sample's length), h_n (B, P)
  /// and, for LSTM, c_n (B, H): each sample's state at its length.
  void forward(const TensorRef& x, const OptRef& h0, const OptRef& c0, const TensorRef& w_ih, const TensorRef& w_hh,
               const OptRef& b_ih, const OptRef& b_hh, const OptRef& w_hr, const std::vector<Index>& lengths,
               const TensorRef& out, const TensorRef& h_n, const OptRef& c_n);

  /// From the gradients on out (those past a sample's length are not used), h_n and c_n
  /// (None = zero) of the last forward(): writes the
  /// gradients whose buffers are given (None = not needed). method: bp, blelloch, hybrid,
  /// auto, linear. check_finite: raise on NaN/Inf state gradients (else they propagate, as in
  /// torch). Returns the method that ran (auto resolved).
  std::string backward(const OptRef& grad_out, const OptRef& grad_hn, const OptRef& grad_cn, const std::string& method,
                       int threads, int chunks, const OptRef& grad_x, const OptRef& grad_h0, const OptRef& grad_c0,
                       const OptRef& grad_w_ih, const OptRef& grad_w_hh, const OptRef& grad_b_ih,
                       const OptRef& grad_b_hh, const OptRef& grad_w_hr, bool check_finite);

  Index steps() const { return rnn_.steps(); }
  Index batch() const { return rnn_.batch(); }

 private:
  Recurrent<T> rnn_;
  Index gates_;  ///< G·H
  Matrix<T> grad_out_zero_;
};

extern template class LayerEngine<float>;
extern template class LayerEngine<double>;

}  // namespace bppsa::python
