// The two halves of bppsa.nn's layer engine (recurrent_layer.hpp): the CPU half runs
// bppsa::Recurrent on host memory (cpu/), the CUDA half the GPU stack on the caller's device
// memory and stream (cuda/; no_gpu/ without CUDA). The front checks every tensor (dtype, shape,
// layout, device) before a half sees its raw pointers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bppsa/nn/backward.hpp"
#include "bppsa/nn/recurrent.hpp"

namespace bppsa::python {

/// A forward's tensors, C order, time-major; null: absent (zeros for h0, c0 and biases).
/// x (T, B, I); h0, h_n (B, P); c0, c_n (B, H); w_ih (G·H, I); w_hh (G·H, P); b (G·H); w_hr (P, H).
template <class T>
struct LayerForwardIo {
  const T *x = nullptr, *h0 = nullptr, *c0 = nullptr;
  const T *w_ih = nullptr, *w_hh = nullptr, *b_ih = nullptr, *b_hh = nullptr, *w_hr = nullptr;
  T *out = nullptr, *h_n = nullptr, *c_n = nullptr;
};

/// A backward's tensors: the incoming gradients (null: zero) and the gradients to write (null:
/// not wanted), shaped as their forward counterparts.
template <class T>
struct LayerBackwardIo {
  const T *grad_out = nullptr, *grad_hn = nullptr, *grad_cn = nullptr;
  T *grad_x = nullptr, *grad_h0 = nullptr, *grad_c0 = nullptr;
  T *grad_w_ih = nullptr, *grad_w_hh = nullptr, *grad_b_ih = nullptr, *grad_b_hh = nullptr, *grad_w_hr = nullptr;
};

template <class T>
class LayerHalf {
 public:
  virtual ~LayerHalf() = default;
  /// lengths: per sample, longest first, or empty. stream: the caller's CUDA stream (cudaStream_t;
  /// 0 = the legacy default stream), unused on the CPU.
  virtual void forward(const LayerForwardIo<T>& io, Index steps, Index batch, const std::vector<Index>& lengths,
                       std::uintptr_t stream) = 0;
  /// Returns the method that ran (auto resolved).
  virtual std::string backward(const LayerBackwardIo<T>& io, const BackwardOptions& options, std::uintptr_t stream) = 0;
  virtual Index steps() const = 0;
  virtual Index batch() const = 0;
  /// Frees the last forward's record (and the backward's buffers sized by steps and batch) when it
  /// is larger than a small bound; the weights stay. The next backward needs a new forward.
  virtual void release_record() {}
};

/// cpu/recurrent_layer_cpu.cpp.
template <class T>
std::unique_ptr<LayerHalf<T>> make_layer_cpu(const RecurrentConfig& config);
/// cuda/recurrent_layer_gpu.cpp on CUDA device `index`; no_gpu/ throws UnsupportedError.
template <class T>
std::unique_ptr<LayerHalf<T>> make_layer_gpu(const RecurrentConfig& config, int index);

}  // namespace bppsa::python
