// The launches of the optimizer's kernels (optimizer_kernels.cu): thin __global__ loops over the
// __host__ __device__ functions of optimizer_math.hpp. Every launch is checked and runs on the
// given stream; pointers are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include "train/cuda/optimizer_math.hpp"

namespace bppsa::detail::gpu {

/// partials[blk] (kNormBlocks doubles) = Σ grad² over the values block blk's threads own.
template <class T>
void launch_norm_partials(const Segments<T>& p, double* partials, cudaStream_t s);
/// One block: status.grad_norm = √Σ partials, *clip = clip_factor(norm, clip_max).
template <class T>
void launch_norm_finish(const double* partials, double clip_max, T* clip, DeviceStatus* status, cudaStream_t s);
/// The update of every value (m, v: the optimizer's state, same order as the segments);
/// nothing when the status has kLossNotFinite or kGradNotFinite; kParamNotFinite and
/// bad_param for a value that is not finite afterwards.
template <class T>
void launch_update(const Segments<T>& p, T* m, T* v, const T* clip, const StepConstants<T>& k, DeviceStatus* status,
                   cudaStream_t s);

}  // namespace bppsa::detail::gpu
