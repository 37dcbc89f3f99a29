// The launches of the fused scan's kernels: the generic ones (prepare, carry: kernels.cu) and a
// Step's column kernels (reduce and push), which kernels.cuh defines as templates and the Step's
// owner instantiates (make_fused_step<T, Step>() in a .cu file of its own). Every launch is checked
// (BPPSA_CUDA_CHECK_LAUNCH) and runs on the given stream.
#pragma once

#include <cuda_runtime_api.h>

#include "scan/cuda/fused/math.hpp"

namespace bppsa::detail::gpu {

/// A Step as the host sees it: its constants, and its column kernels' launcher, which launches
/// a.launch or, when configure_bytes > 0, only sets its kernels' dynamic shared-memory limit.
template <class T>
struct FusedStep {
  FusedStepInfo info;
  void (*columns)(const FusedArgs<T>& a, cudaStream_t stream, int configure_bytes) = nullptr;
};

/// The FusedStep of a Step; defined in kernels.cuh, instantiated by whoever owns the Step.
template <class T, class Step>
FusedStep<T> make_fused_step();

/// The padded W copy and g_T into block T of g (flat launch).
template <class T>
void launch_fused_prepare(const FusedArgs<T>& a, cudaStream_t stream);
/// The carry (a.carry): one block per sample.
template <class T>
void launch_fused_carry(const FusedArgs<T>& a, cudaStream_t stream);
/// Lets the column kernels a.launch of `step` and the carry use up to `max_bytes` of dynamic
/// shared memory (beyond 48 KiB needs an opt-in per kernel). The setting is per kernel and
/// process-wide, so it is always the device's limit: a plan never lowers what another plan's
/// launches need. Once per plan, outside any graph capture.
template <class T>
void allow_fused_smem(const FusedStep<T>& step, const FusedArgs<T>& a, int max_bytes);

}  // namespace bppsa::detail::gpu
