// A model's parameters as its CUDA half holds them, for an optimizer step queued on the same
// stream (src/train/cuda/optimizer.cpp): what ClassifierHalf::device_parameters hands out.
#pragma once

#include <cuda_runtime_api.h>

#include "nn/cuda/head_math.hpp"

namespace bppsa::detail::gpu {

/// Values and gradients in the model's parameters() order: the recurrent stack's arena, then the
/// head's weight (C × H, row-major) and bias (C). Device pointers.
template <class T>
struct DeviceParameters {
  T* stack = nullptr;
  const T* stack_grads = nullptr;
  Idx stack_size = 0;
  T* head = nullptr;
  const T* head_grads = nullptr;
  Idx head_size = 0;
  cudaStream_t stream = nullptr;   ///< the model's stream: a step queued there follows its backward
  DeviceStatus* status = nullptr;  ///< the flags a step reads and sets, and its grad_norm
};

}  // namespace bppsa::detail::gpu
