// The launches of the fused scan's kernels (fused_kernels.cu, fused_kernels_<cell>.cu): thin
// __global__ loops over the __host__ __device__ phases of fused_math.hpp. Every launch is
// checked (BPPSA_CUDA_CHECK_LAUNCH) and runs on the given stream.
#pragma once

#include <cuda_runtime_api.h>

#include "nn/cuda/fused_math.hpp"

namespace bppsa::detail::gpu {

/// The padded W_hh copy and g_T into block T of g (flat launch).
template <class T>
void launch_fused_prepare(const FusedArgs<T>& a, cudaStream_t stream);
/// The column launch a.launch (reduce or push) for a.shape's cell.
template <class T>
void launch_fused_columns(const FusedArgs<T>& a, cudaStream_t stream);
/// The carry (a.carry): one block per sample.
template <class T>
void launch_fused_carry(const FusedArgs<T>& a, cudaStream_t stream);
/// Lets the kernels a.launch and the carry use up to `max_bytes` of dynamic shared memory (beyond
/// 48 KiB needs an opt-in per kernel). The setting is per kernel and process-wide, so it is
/// always the device's limit: a plan never lowers what another plan's launches need. Once per
/// plan, outside any graph capture.
template <class T>
void allow_fused_smem(const FusedArgs<T>& a, int max_bytes);

/// One cell family's column kernels (fused_kernels_<cell>.cu): launches a.launch, or, when
/// configure_bytes > 0, only sets its kernel's dynamic shared-memory limit to that.
template <class T, std::int32_t FAM>
void fused_columns_family(const FusedArgs<T>& a, cudaStream_t stream, int configure_bytes);

}  // namespace bppsa::detail::gpu
