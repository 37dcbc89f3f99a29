// The fused scan's small kernels (prepare: padded W_hh and g_T; the carry across chunk totals)
// and the dispatch of the column launches to the per-cell instantiations.
#include "core/cuda/check.hpp"
#include "nn/cuda/fused_kernels.hpp"
#include "nn/cuda/fused_plan.hpp"

namespace bppsa::detail::gpu {
namespace {

template <class T>
__global__ void __launch_bounds__(kBlock) fused_prepare_kernel(FusedArgs<T> a) {
  const Idx total = prepare_items(a.shape);
  for (Idx i = work_start(blockIdx.x, blockDim.x, threadIdx.x); i < total; i += work_stride(gridDim.x, blockDim.x))
    prepare_item(a, i);
}

template <class T>
__global__ void __launch_bounds__(kFusedCarryThreads) fused_carry_kernel(FusedArgs<T> a) {
  extern __shared__ __align__(32) unsigned char fused_carry_smem[];
  T* sm = reinterpret_cast<T*>(fused_carry_smem);
  const Idx block = blockIdx.x, thread = threadIdx.x;
  carry_load(a, sm, block, thread);
  __syncthreads();
  for (Idx n = 0; n < a.shape.C - 1; ++n) {
    for (Idx which = thread;; which += a.carry.threads) {
      const T* line = carry_prefetch_line(a, block, n + 2, which);
      if (line == nullptr) break;
      asm volatile("prefetch.L1 [%0];" ::"l"(line));
    }
    carry_step(a, sm, block, thread, n);
    __syncthreads();
  }
}

}  // namespace

template <class T>
void launch_fused_prepare(const FusedArgs<T>& a, cudaStream_t stream) {
  fused_prepare_kernel<T><<<grid_blocks(prepare_items(a.shape)), kBlock, 0, stream>>>(a);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_fused_columns(const FusedArgs<T>& a, cudaStream_t stream) {
  switch (fused_family(a.shape.cell)) {
    case kFamGru:
      fused_columns_family<T, kFamGru>(a, stream, 0);
      break;
    case kFamLstm:
      fused_columns_family<T, kFamLstm>(a, stream, 0);
      break;
    default:
      fused_columns_family<T, kFamRnn>(a, stream, 0);
      break;
  }
}

template <class T>
void launch_fused_carry(const FusedArgs<T>& a, cudaStream_t stream) {
  const std::size_t bytes = static_cast<std::size_t>(a.carry.smem) * sizeof(T);
  fused_carry_kernel<T>
      <<<static_cast<unsigned>(a.carry.blocks), static_cast<unsigned>(a.carry.threads), bytes, stream>>>(a);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void allow_fused_smem(const FusedArgs<T>& a, int max_bytes) {
  switch (fused_family(a.shape.cell)) {
    case kFamGru:
      fused_columns_family<T, kFamGru>(a, nullptr, max_bytes);
      break;
    case kFamLstm:
      fused_columns_family<T, kFamLstm>(a, nullptr, max_bytes);
      break;
    default:
      fused_columns_family<T, kFamRnn>(a, nullptr, max_bytes);
      break;
  }
  BPPSA_CUDA_CHECK(cudaFuncSetAttribute(fused_carry_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_bytes));
}

#define BPPSA_INSTANTIATE(T)                                                \
  template void launch_fused_prepare<T>(const FusedArgs<T>&, cudaStream_t); \
  template void launch_fused_columns<T>(const FusedArgs<T>&, cudaStream_t); \
  template void launch_fused_carry<T>(const FusedArgs<T>&, cudaStream_t);   \
  template void allow_fused_smem<T>(const FusedArgs<T>&, int);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
