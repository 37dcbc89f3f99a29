// One recurrent layer in one direction for bppsa.nn.RNN/GRU/LSTM: forward records what the
// backward pass needs, and the backward pass (a BPPSA scan or BP, bppsa::Recurrent's) gives
// the gradients of the input, the initial state and every parameter. Python stacks layers,
// directions and dropout around it; tensors cross as TensorRef, time-major (T, B, ·). The engine
// is a one-layer bppsa::Recurrent on the tensors' device, run on their memory
// (Recurrent::forward_io / backward_io): the CPU, or a CUDA device on the caller's stream.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bppsa/nn/recurrent.hpp"
#include "tensor_ref.hpp"

namespace bppsa::python {

using OptRef = std::optional<TensorRef>;

template <class T>
class LayerEngine {
 public:
  /// proj: the LSTM's proj_size (0 = none). device: "cpu", or "cuda" with device_index: every
  /// tensor of a call must be there.
  LayerEngine(const std::string& cell, Index input, Index hidden, const std::string& nonlinearity, Index proj = 0,
              const std::string& device = "cpu", int device_index = -1);
  ~LayerEngine();
  LayerEngine(const LayerEngine&) = delete;
  LayerEngine& operator=(const LayerEngine&) = delete;

  /// With P = proj or H: x (T, B, I); h0 (B, P), c0 (B, H) or None (zeros); weights (G·H, I),
  /// (G·H, P), biases (G·H) or None (no bias), w_hr (P, H) with a projection, else None.
  /// lengths: per sample, sorted longest first (PyTorch's packed order), or empty (every
  /// sample runs all T steps). Writes out (T, B, P; zeros past a sample's length), h_n (B, P)
  /// and, for LSTM, c_n (B, H): each sample's state at its length. stream: on CUDA, the
  /// cudaStream_t to queue the work on (PyTorch's current stream); ignored on the CPU. record
  /// false: no backward() follows (an inference call, LayerForwardIo::record).
  void forward(const TensorRef& x, const OptRef& h0, const OptRef& c0, const TensorRef& w_ih, const TensorRef& w_hh,
               const OptRef& b_ih, const OptRef& b_hh, const OptRef& w_hr, const std::vector<Index>& lengths,
               const TensorRef& out, const TensorRef& h_n, const OptRef& c_n, std::uintptr_t stream = 0,
               bool record = true);

  /// From the weights the last forward() read (the same tensors, unchanged: the CPU reads them in
  /// place, as it read them and x in the forward, which must both still be alive) and the
  /// gradients on out (those past a sample's length are not used), h_n and c_n (None = zero): writes the
  /// gradients whose buffers are given (None = not needed). method: bp, blelloch, hybrid,
  /// auto, linear. check_finite: raise on NaN/Inf state gradients (else they propagate, as in
  /// torch; on CUDA the parameter gradients are checked, which waits for the stream). Returns
  /// the method that ran (auto resolved; on CUDA "fused" for the fused chunked scan). On CUDA,
  /// grad_out is required (zeros when none flows back).
  std::string backward(const TensorRef& w_ih, const TensorRef& w_hh, const OptRef& b_ih, const OptRef& b_hh,
                       const OptRef& w_hr, const OptRef& grad_out, const OptRef& grad_hn, const OptRef& grad_cn,
                       const std::string& method, int threads, int chunks, const OptRef& grad_x, const OptRef& grad_h0,
                       const OptRef& grad_c0, const OptRef& grad_w_ih, const OptRef& grad_w_hh, const OptRef& grad_b_ih,
                       const OptRef& grad_b_hh, const OptRef& grad_w_hr, bool check_finite, std::uintptr_t stream = 0);

  /// How the next forwards run: "sequential", "newton" or "auto" (Recurrent's ForwardMethod; newton
  /// is CPU only: NotImplementedError on CUDA), on up to `threads` threads (0: every core).
  void set_forward(const std::string& method, int threads = 0);
  /// The last forward's (method it ran, iterations allowed, iterations, certificate residual, fell
  /// back, the step it fell back from); ("sequential", 0, 0, 0, false, 0) for a sequential one.
  std::tuple<std::string, int, int, double, bool, Index> forward_report() const;
  /// Frees the last forward's record if larger than a small bound (Recurrent::release_record).
  void release_record() { rnn_->release_record(); }
  Index steps() const { return rnn_->steps(); }
  Index batch() const { return rnn_->batch(); }
  const Place& place() const { return place_; }

 private:
  /// t's data after checking it against `shape` and this engine's dtype and place.
  const T* in(const TensorRef& t, const std::vector<Index>& shape, const std::string& what) const;
  const T* in(const OptRef& t, const std::vector<Index>& shape, const std::string& what) const;
  T* out(const OptRef& t, const std::vector<Index>& shape, const std::string& what) const;

  Place place_;
  RecurrentConfig config_;
  Index gates_;  ///< G·H
  /// The CUDA device of the tensors (−1 on the CPU): current during every call on the stack.
  int cuda_index() const { return place_.device == "cuda" ? place_.index : -1; }
  std::unique_ptr<Recurrent<T>> rnn_;
};

extern template class LayerEngine<float>;
extern template class LayerEngine<double>;

}  // namespace bppsa::python
