// The column kernel of the fused scan (reduce and push), a template over the Step, the row tile
// and the columns per thread: the phases of math.hpp between barriers, with the record staged
// into shared memory steps ahead by asynchronous copies (the ring, where it fits) or prefetched
// to L1 (the steps' loads are what the columns wait on). Included by the .cu files
// that instantiate make_fused_step<T, Step>() (for the recurrent cells nn/cuda/fused_kernels_<cell>.cu,
// one cell each, so that they compile in parallel).
#pragma once

#include <cuda_pipeline_primitives.h>

#include <type_traits>

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

/// The asynchronous copy (cp.async) of N values into shared memory, for fused_stage_copies.
template <class T>
struct FusedAsyncCopy {
  template <int N>
  __device__ __forceinline__ void operator()(T* dst, const T* src, std::integral_constant<int, N>) const {
    __pipeline_memcpy_async(dst, src, N * sizeof(T));
  }
};

/// With the record's ring (a.launch.stages > 0), step j waits for its own copies of slot j, meets
/// the group's barrier (ntile > 1: every thread's copies have landed, step j − 1 is done), runs,
/// then issues the copies of step j + stages − 1 into the slot step j − 1 read. Without it, the
/// record is prefetched to L1 and the barrier follows the step.
template <class T, class Step, int TW, int NC, bool Len>
__device__ __forceinline__ void fused_column_loop(const FusedArgs<T>& a, T* sm, const T* w, Idx ldw,
                                                  const FusedGroup& gr) {
  const bool sync = a.launch.ntile > 1, ring = a.launch.stages > 0;
  for (Idx j = 0; j < a.launch.steps; ++j) {
    if (ring) {
      __pipeline_wait_prior(kFusedRecordStages - 2);
      if (sync) __syncthreads();
    } else {
      for (Idx which = gr.tile;; which += a.launch.ntile) {
        const T* line = fused_prefetch_line<T, Step>(a, gr, j + kFusedPrefetchAhead, which);
        if (line == nullptr) break;
        fused_prefetch_l1(line);
      }
    }
    fused_step<T, Step, TW, NC, Len>(a, sm, w, ldw, gr, j);
    if (ring) {
      fused_stage_copies<T, Step>(a, sm, gr, j + kFusedRecordStages - 1, FusedAsyncCopy<T>{});
      __pipeline_commit();
    } else if (sync) {
      __syncthreads();
    }
  }
  if constexpr (NC == 1) {                                    // a push runs one column a thread
    if (a.launch.mode == kFusedPush && a.y_out != nullptr) {  // the outputs of a chunk's first step
      if (ring && sync) __syncthreads();
      fused_push_tail<T, Step>(a, sm, gr);
    }
  }
}

/// Len: per-sample lengths (a.len set); each column kernel is compiled with and without.
template <class T, class Step, int TW, int NC, bool Len>
__global__ void __launch_bounds__(kFusedMaxThreads) fused_columns_kernel(FusedArgs<T> a) {
  extern __shared__ __align__(32) unsigned char fused_smem[];
  T* sm = reinterpret_cast<T*>(fused_smem);
  const FusedGroup gr = fused_group(a.shape, a.launch, blockIdx.x, threadIdx.x);
  if (a.launch.stages > 0) {
    for (Idx j = 0; j < kFusedRecordStages - 1; ++j) {  // the loop issues from step stages − 1 on
      fused_stage_copies<T, Step>(a, sm, gr, j, FusedAsyncCopy<T>{});
      __pipeline_commit();  // one group a step, empty where it copies nothing: the wait counts groups
    }
  } else {
    for (Idx j = 0; j < kFusedPrefetchAhead; ++j)  // the loop prefetches from step kFusedPrefetchAhead on
      for (Idx which = gr.tile;; which += a.launch.ntile) {
        const T* line = fused_prefetch_line<T, Step>(a, gr, j, which);
        if (line == nullptr) break;
        fused_prefetch_l1(line);
      }
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
