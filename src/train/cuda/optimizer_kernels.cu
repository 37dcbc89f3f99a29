// The optimizer kernels: the global gradient norm in a fixed order (kNormBlocks partial sums,
// then one block), clip_grad_norm_'s factor on the device, and the Adam/SGD update of every
// value (optimizer_math.hpp, tested on the host). No host round trip: the factor stays on the GPU.
#include "core/cuda/check.hpp"
#include "train/cuda/kernels.hpp"

namespace bppsa::detail::gpu {
namespace {

template <class T>
__global__ void __launch_bounds__(kReduceThreads) norm_partials_kernel(Segments<T> p, Idx total, double* partials) {
  __shared__ double sum[kReduceThreads];
  const Idx th = threadIdx.x;
  sum[th] =
      grad_square_sum(p, total, work_start(blockIdx.x, blockDim.x, threadIdx.x), work_stride(gridDim.x, blockDim.x));
  __syncthreads();
  for (Idx width = kReduceThreads; width > 1; width /= 2) {
    block_tree_step(sum, width, th);
    __syncthreads();
  }
  if (th == 0) partials[blockIdx.x] = sum[0];
}

template <class T>
__global__ void __launch_bounds__(kReduceThreads)
    norm_finish_kernel(const double* partials, double clip_max, T* clip, DeviceStatus* st) {
  __shared__ double sum[kReduceThreads];
  const Idx th = threadIdx.x;
  sum[th] = strided_sum(partials, kNormBlocks, th, kReduceThreads);
  __syncthreads();
  for (Idx width = kReduceThreads; width > 1; width /= 2) {
    block_tree_step(sum, width, th);
    __syncthreads();
  }
  if (th == 0) norm_finish_status(sum[0], clip_max, clip, st);
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    update_kernel(Segments<T> p, Idx total, T* m, T* v, const T* clip, StepConstants<T> k, DeviceStatus* st) {
  if ((st->flags & (kLossNotFinite | kGradNotFinite)) != 0) return;  // the CPU would have thrown before the step
  const T c = *clip;
  for (Idx i = work_start(blockIdx.x, blockDim.x, threadIdx.x); i < total; i += work_stride(gridDim.x, blockDim.x))
    if (!update_item(p, i, m, v, c, k)) {
      atomicOr(&st->flags, static_cast<int>(kParamNotFinite));
      atomicMin(reinterpret_cast<unsigned long long*>(&st->bad_param), static_cast<unsigned long long>(i));
    }
}

}  // namespace

template <class T>
void launch_norm_partials(const Segments<T>& p, double* partials, cudaStream_t s) {
  norm_partials_kernel<T><<<kNormBlocks, kReduceThreads, 0, s>>>(p, total_size(p), partials);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_norm_finish(const double* partials, double clip_max, T* clip, DeviceStatus* status, cudaStream_t s) {
  norm_finish_kernel<T><<<1, kReduceThreads, 0, s>>>(partials, clip_max, clip, status);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_update(const Segments<T>& p, T* m, T* v, const T* clip, const StepConstants<T>& k, DeviceStatus* status,
                   cudaStream_t s) {
  const Idx total = total_size(p);
  if (total <= 0) return;
  update_kernel<T><<<grid_blocks(total), kBlock, 0, s>>>(p, total, m, v, clip, k, status);
  BPPSA_CUDA_CHECK_LAUNCH();
}

#define BPPSA_INSTANTIATE(T)                                                                                   \
  template void launch_norm_partials<T>(const Segments<T>&, double*, cudaStream_t);                            \
  template void launch_norm_finish<T>(const double*, double, T*, DeviceStatus*, cudaStream_t);                 \
  template void launch_update<T>(const Segments<T>&, T*, T*, const T*, const StepConstants<T>&, DeviceStatus*, \
                                 cudaStream_t);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
