// The column kernel of the fused scan (reduce and push), a template over the Step, the row tile
// and the columns per thread: the phases of math.hpp between barriers, plus L1 prefetches of the
// record a few steps ahead (the steps' loads are what a push waits on). Included by the .cu files
// that instantiate make_fused_step<T, Step>() (for the recurrent cells nn/cuda/fused_kernels_<cell>.cu,
// one cell each, so that they compile in parallel).
#pragma once

#include "core/cuda/check.hpp"
#include "scan/cuda/fused/kernels.hpp"
#include "scan/cuda/fused/plan.hpp"

namespace bppsa::detail::gpu {

/// Steps ahead the column kernels prefetch the record (and the carry the chunk totals).
inline constexpr Idx kFusedPrefetchAhead = 2;

template <class T>
__device__ __forceinline__ void fused_prefetch_l1(const T* p) {
  asm volatile("prefetch.L1 [%0];" ::"l"(p));
}

template <class T, class Step, int TW, int NC, bool Len>
__device__ __forceinline__ void fused_column_loop(const FusedArgs<T>& a, T* sm, const T* w, Idx ldw,
                                                  const FusedGroup& gr) {
  const bool sync = a.launch.ntile > 1;
  for (Idx j = 0; j < a.launch.steps; ++j) {
    for (Idx which = gr.tile;; which += a.launch.ntile) {
      const T* line = fused_prefetch_line<T, Step>(a, gr, j + kFusedPrefetchAhead, which);
      if (line == nullptr) break;
      fused_prefetch_l1(line);
    }
    fused_step<T, Step, TW, NC, Len>(a, sm, w, ldw, gr, j);
    if (sync) __syncthreads();
  }
}

/// Len: per-sample lengths (a.len set); each column kernel is compiled with and without.
template <class T, class Step, int TW, int NC, bool Len>
__global__ void __launch_bounds__(kFusedMaxThreads) fused_columns_kernel(FusedArgs<T> a) {
  extern __shared__ __align__(32) unsigned char fused_smem[];
  T* sm = reinterpret_cast<T*>(fused_smem);
  const FusedGroup gr = fused_group(a.shape, a.launch, blockIdx.x, threadIdx.x);
  for (Idx j = 0; j < kFusedPrefetchAhead; ++j)  // the loop prefetches from step kFusedPrefetchAhead on
    for (Idx which = gr.tile;; which += a.launch.ntile) {
      const T* line = fused_prefetch_line<T, Step>(a, gr, j, which);
      if (line == nullptr) break;
      fused_prefetch_l1(line);
    }
  fused_load(a, sm, gr, threadIdx.x);
  __syncthreads();
  // Two copies of the loop, so that each reads W with its own memory's instructions.
  if (a.launch.w_shared)
    fused_column_loop<T, Step, TW, NC, Len>(a, sm, sm, launch_hpad(a.launch), gr);
  else  // large H: W does not fit in shared memory, the padded copy is read through L1/L2
    fused_column_loop<T, Step, TW, NC, Len>(a, sm, a.wp, a.shape.ldw, gr);
}

/// The column launch a.launch of Step (or, configure_bytes > 0, its kernel's shared-memory limit).
template <class T, class Step>
void fused_columns(const FusedArgs<T>& a, cudaStream_t stream, int configure_bytes) {
  const FusedLaunch& l = a.launch;
  const bool compiled = fused_with_combo<T, Step>(l.tile, l.nc, [&](auto tw, auto nc) {
    constexpr int TW = decltype(tw)::value, NC = decltype(nc)::value;
    auto plain = fused_columns_kernel<T, Step, TW, NC, false>;
    auto with_lengths = fused_columns_kernel<T, Step, TW, NC, true>;
    const std::size_t bytes = static_cast<std::size_t>(l.smem) * sizeof(T);
    if (configure_bytes > 0) {
      for (auto k : {plain, with_lengths})
        BPPSA_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, configure_bytes));
      return;
    }
    auto kernel = a.len != nullptr ? with_lengths : plain;
    kernel<<<static_cast<unsigned>(l.blocks), static_cast<unsigned>(l.threads), bytes, stream>>>(a);
    BPPSA_CUDA_CHECK_LAUNCH();
  });
  if (!compiled) BPPSA_CUDA_CHECK(cudaErrorInvalidConfiguration);  // the planner never picks such a pair
}

template <class T, class Step>
FusedStep<T> make_fused_step() {
  FusedStep<T> s;
  s.info = fused_step_info<Step>();
  s.columns = &fused_columns<T, Step>;
  return s;
}

}  // namespace bppsa::detail::gpu
