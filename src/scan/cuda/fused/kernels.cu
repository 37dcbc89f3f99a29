// The fused scan's kernels that do not depend on the Step: prepare (padded W and g_T) and the
// carry across chunk totals.
#include <cuda_pipeline_primitives.h>

#include "core/cuda/check.hpp"
#include "scan/cuda/fused/kernels.hpp"
#include "scan/cuda/fused/plan.hpp"

namespace bppsa::detail::gpu {
namespace {

template <class T>
__global__ void __launch_bounds__(kBlock) fused_prepare_kernel(FusedArgs<T> a) {
  const Idx total = prepare_items(a.shape);
  for (Idx i = work_start(blockIdx.x, blockDim.x, threadIdx.x); i < total; i += work_stride(gridDim.x, blockDim.x))
    prepare_item(a, i);
}

/// Ring: the totals through shared memory (a.carry.stages == kFusedCarryStages), copied
/// asynchronously (cp.async) stages − 1 steps ahead; else read from global memory, prefetched to L1.
template <class T, bool Ring>
__global__ void __launch_bounds__(kFusedCarryThreads) fused_carry_kernel(FusedArgs<T> a) {
  extern __shared__ __align__(32) unsigned char fused_carry_smem[];
  T* sm = reinterpret_cast<T*>(fused_carry_smem);
  const Idx block = blockIdx.x, thread = threadIdx.x;
  auto copy = [](T* dst, const T* src) { __pipeline_memcpy_async(dst, src, sizeof(T)); };
  carry_load(a, sm, block, thread);
  if constexpr (Ring) {
    for (Idx n = 0; n < kFusedCarryStages - 1; ++n) {
      carry_stage_copies(a, sm, block, thread, n, copy);
      __pipeline_commit();  // one group a stage, empty past the last: the wait below counts groups
    }
  }
  __syncthreads();
  for (Idx n = 0; n < a.shape.C - 1; ++n) {
    if constexpr (Ring) {
      __pipeline_wait_prior(kFusedCarryStages - 2);  // this thread's copies of stage n have landed
      __syncthreads();                               // … and every thread's; step n − 1 is done
      carry_step(a, sm, block, thread, n);
      carry_stage_copies(a, sm, block, thread, n + kFusedCarryStages - 1, copy);  // into step n − 1's slot
      __pipeline_commit();
    } else {
      for (Idx which = thread;; which += a.carry.threads) {
        const T* line = carry_prefetch_line(a, block, n + 2, which);
        if (line == nullptr) break;
        asm volatile("prefetch.L1 [%0];" ::"l"(line));
      }
      carry_step(a, sm, block, thread, n);
      __syncthreads();
    }
  }
}

}  // namespace

template <class T>
void launch_fused_prepare(const FusedArgs<T>& a, cudaStream_t stream) {
  fused_prepare_kernel<T><<<grid_blocks(prepare_items(a.shape)), kBlock, 0, stream>>>(a);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_fused_carry(const FusedArgs<T>& a, cudaStream_t stream) {
  const std::size_t bytes = static_cast<std::size_t>(a.carry.smem) * sizeof(T);
  auto kernel = a.carry.stages > 0 ? fused_carry_kernel<T, true> : fused_carry_kernel<T, false>;
  kernel<<<static_cast<unsigned>(a.carry.blocks), static_cast<unsigned>(a.carry.threads), bytes, stream>>>(a);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void allow_fused_smem(const FusedStep<T>& step, const FusedArgs<T>& a, int max_bytes) {
  step.columns(a, nullptr, max_bytes);
  for (auto k : {fused_carry_kernel<T, true>, fused_carry_kernel<T, false>})
    BPPSA_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_bytes));
}

#define BPPSA_INSTANTIATE(T)                                                \
  template void launch_fused_prepare<T>(const FusedArgs<T>&, cudaStream_t); \
  template void launch_fused_carry<T>(const FusedArgs<T>&, cudaStream_t);   \
  template void allow_fused_smem<T>(const FusedStep<T>&, const FusedArgs<T>&, int);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
