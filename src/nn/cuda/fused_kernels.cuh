// The column kernel of the fused scan (reduce and push), a template over the cell family, the row
// tile and the columns per thread: the phases of fused_math.hpp between barriers, plus L1
// prefetches of the record a few steps ahead (the steps' loads are what a push waits on).
// Included by fused_kernels_<cell>.cu, which instantiate one family each (parallel builds).
#pragma once

#include "core/cuda/check.hpp"
#include "nn/cuda/fused_kernels.hpp"
#include "nn/cuda/fused_plan.hpp"

namespace bppsa::detail::gpu {

/// Steps ahead the column kernels prefetch the record (and the carry the chunk totals).
inline constexpr Idx kFusedPrefetchAhead = 2;

template <class T>
__device__ __forceinline__ void fused_prefetch_l1(const T* p) {
  asm volatile("prefetch.L1 [%0];" ::"l"(p));
}

template <class T, std::int32_t FAM, int TW, int NC>
__device__ __forceinline__ void fused_column_loop(const FusedArgs<T>& a, T* sm, const T* w, Idx ldw,
                                                  const FusedGroup& gr) {
  const bool sync = a.launch.ntile > 1;
  for (Idx j = 0; j < a.launch.steps; ++j) {
    for (Idx which = gr.tile;; which += a.launch.ntile) {
      const T* line = fused_prefetch_line<T, FAM>(a, gr, j + kFusedPrefetchAhead, which);
      if (line == nullptr) break;
      fused_prefetch_l1(line);
    }
    fused_step<T, FAM, TW, NC>(a, sm, w, ldw, gr, j);
    if (sync) __syncthreads();
  }
}

template <class T, std::int32_t FAM, int TW, int NC>
__global__ void __launch_bounds__(kFusedMaxThreads) fused_columns_kernel(FusedArgs<T> a) {
  extern __shared__ __align__(32) unsigned char fused_smem[];
  T* sm = reinterpret_cast<T*>(fused_smem);
  const FusedGroup gr = fused_group(a.shape, a.launch, blockIdx.x, threadIdx.x);
  for (Idx j = 0; j < kFusedPrefetchAhead; ++j)  // the loop prefetches from step kFusedPrefetchAhead on
    for (Idx which = gr.tile;; which += a.launch.ntile) {
      const T* line = fused_prefetch_line<T, FAM>(a, gr, j, which);
      if (line == nullptr) break;
      fused_prefetch_l1(line);
    }
  fused_load(a, sm, gr, threadIdx.x);
  __syncthreads();
  // Two copies of the loop, so that each reads W_hh with its own memory's instructions.
  if (a.launch.w_shared)
    fused_column_loop<T, FAM, TW, NC>(a, sm, sm, launch_hpad(a.launch), gr);
  else  // large H: W_hh does not fit in shared memory, the padded copy is read through L1/L2
    fused_column_loop<T, FAM, TW, NC>(a, sm, a.wp, a.shape.ldw, gr);
}

template <class T, std::int32_t FAM>
void fused_columns_family(const FusedArgs<T>& a, cudaStream_t stream, int configure_bytes) {
  const FusedLaunch& l = a.launch;
  const bool compiled = fused_with_combo<T, FAM>(l.tile, l.nc, [&](auto tw, auto nc) {
    constexpr int TW = decltype(tw)::value, NC = decltype(nc)::value;
    auto kernel = fused_columns_kernel<T, FAM, TW, NC>;
    const std::size_t bytes = static_cast<std::size_t>(l.smem) * sizeof(T);
    if (configure_bytes > 0) {
      BPPSA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, configure_bytes));
      return;
    }
    kernel<<<static_cast<unsigned>(l.blocks), static_cast<unsigned>(l.threads), bytes, stream>>>(a);
    BPPSA_CUDA_CHECK_LAUNCH();
  });
  if (!compiled) BPPSA_CUDA_CHECK(cudaErrorInvalidConfiguration);  // the planner never picks such a pair
}

}  // namespace bppsa::detail::gpu
