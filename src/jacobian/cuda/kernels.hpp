// CUDA half of the Jacobian products, the launches: flat kernels over (op, sample, item) whose
// bodies are the __host__ __device__ functions of items.hpp. Every launch is checked; `values`
// and `indices` are the device arenas the op tables point into.
#pragma once

#include <cuda_runtime_api.h>

#include "jacobian/cuda/items.hpp"

namespace bppsa::detail::gpu {

/// out = A · B for `count` ops (device table), `batch` samples each, `items` items per sample.
template <class T>
void launch_mat(const MatOp* ops, Idx count, Idx batch, Idx items, T* values, const std::int32_t* indices,
                cudaStream_t stream);

/// y = A · x (+ z) for `count` ops (device table).
template <class T>
void launch_vec(const VecOp* ops, Idx count, Idx batch, Idx items, T* values, const std::int32_t* indices,
                cudaStream_t stream);

/// y += z for the ops that have a z (device table).
template <class T>
void launch_add(const VecOp* ops, Idx count, Idx batch, Idx items, T* values, cudaStream_t stream);

}  // namespace bppsa::detail::gpu
