// The loss kernels of the head: one thread per column (bias, loss share, ∂loss/∂logits), then
// one block that reduces the shares in a fixed order (deterministic), counts correct last-step
// predictions and updates the device status. Bodies from head_math.hpp, tested on the host.
#include "core/cuda/check.hpp"
#include "nn/cuda/kernels.hpp"

namespace bppsa::detail::gpu {
namespace {

template <class T>
__global__ void __launch_bounds__(kBlock)
    loss_columns_kernel(bool mse, Idx C, Idx N, Idx B, T* logits, const T* bias, const std::int64_t* labels, T* dlogits,
                        double* col_loss) {
  for (Idx j = work_start(blockIdx.x, blockDim.x, threadIdx.x); j < N; j += work_stride(gridDim.x, blockDim.x))
    col_loss[j] = loss_column(mse, C, N, logits + j * C, bias, column_label(labels, B, j),
                              dlogits != nullptr ? dlogits + j * C : nullptr);
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    head_columns_kernel(const T* out, const Idx* cols, Idx H, Idx N, const std::int64_t* labels, Idx B, T* head_in,
                        std::int64_t* col_labels) {
  const Idx stride = work_stride(gridDim.x, blockDim.x);
  for (Idx i = work_start(blockIdx.x, blockDim.x, threadIdx.x); i < H * N; i += stride)
    head_in[i] = out[head_column_source(H, cols, i)];
  for (Idx j = work_start(blockIdx.x, blockDim.x, threadIdx.x); j < N; j += stride)
    col_labels[j] = head_column_label(labels, cols, B, j);
}

template <class T>
__global__ void __launch_bounds__(kBlock) scatter_head_grad_kernel(const T* d, const Idx* cols, Idx H, Idx N, T* full) {
  for (Idx i = work_start(blockIdx.x, blockDim.x, threadIdx.x); i < H * N; i += work_stride(gridDim.x, blockDim.x))
    full[head_column_source(H, cols, i)] = d[i];
}

template <class T>
__global__ void __launch_bounds__(kReduceThreads)
    loss_finish_kernel(bool mse, Idx C, Idx N, Idx B, const double* col_loss, const T* logits,
                       const std::int64_t* labels, std::int64_t* predictions, DeviceStatus* st) {
  __shared__ double sum[kReduceThreads];
  __shared__ long long hits[kReduceThreads];
  const Idx th = threadIdx.x;
  loss_finish_thread(C, N, B, col_loss, logits, labels, predictions, th, kReduceThreads, sum[th], hits[th]);
  __syncthreads();
  for (Idx width = kReduceThreads; width > 1; width /= 2) {
    block_tree_step(sum, width, th);
    block_tree_step(hits, width, th);
    __syncthreads();
  }
  if (th == 0) loss_finish_status<T>(mse, C, N, B, sum[0], hits[0], st);
}

}  // namespace

template <class T>
void launch_loss_columns(bool mse, Idx C, Idx N, Idx B, T* logits, const T* bias, const std::int64_t* labels,
                         T* dlogits, double* col_loss, cudaStream_t s) {
  loss_columns_kernel<T><<<grid_blocks(N), kBlock, 0, s>>>(mse, C, N, B, logits, bias, labels, dlogits, col_loss);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_head_columns(const T* out, const Idx* cols, Idx H, Idx N, const std::int64_t* labels, Idx B, T* head_in,
                         std::int64_t* col_labels, cudaStream_t s) {
  if (H * N <= 0) return;
  head_columns_kernel<T><<<grid_blocks(H * N), kBlock, 0, s>>>(out, cols, H, N, labels, B, head_in, col_labels);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_scatter_head_grad(const T* d, const Idx* cols, Idx H, Idx N, T* full, Idx full_values, cudaStream_t s) {
  BPPSA_CUDA_CHECK(cudaMemsetAsync(full, 0, static_cast<std::size_t>(full_values) * sizeof(T), s));
  if (H * N <= 0) return;
  scatter_head_grad_kernel<T><<<grid_blocks(H * N), kBlock, 0, s>>>(d, cols, H, N, full);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_loss_finish(bool mse, Idx C, Idx N, Idx B, const double* col_loss, const T* logits,
                        const std::int64_t* labels, std::int64_t* predictions, DeviceStatus* status, cudaStream_t s) {
  loss_finish_kernel<T><<<1, kReduceThreads, 0, s>>>(mse, C, N, B, col_loss, logits, labels, predictions, status);
  BPPSA_CUDA_CHECK_LAUNCH();
}

#define BPPSA_INSTANTIATE(T)                                                                                        \
  template void launch_loss_columns<T>(bool, Idx, Idx, Idx, T*, const T*, const std::int64_t*, T*, double*,         \
                                       cudaStream_t);                                                               \
  template void launch_loss_finish<T>(bool, Idx, Idx, Idx, const double*, const T*, const std::int64_t*,            \
                                      std::int64_t*, DeviceStatus*, cudaStream_t);                                  \
  template void launch_head_columns<T>(const T*, const Idx*, Idx, Idx, const std::int64_t*, Idx, T*, std::int64_t*, \
                                       cudaStream_t);                                                               \
  template void launch_scatter_head_grad<T>(const T*, const Idx*, Idx, Idx, T*, Idx, cudaStream_t);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
