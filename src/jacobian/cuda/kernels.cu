// The flat kernels of the GPU scan: thin __global__ wrappers around the item loops of
// items.hpp (tested on the host by tests/scan/cuda/test_scan_host.cpp), plus their checked launches.
#include "core/cuda/check.hpp"
#include "jacobian/cuda/kernels.hpp"

namespace bppsa::detail::gpu {
namespace {

template <class T>
__global__ void __launch_bounds__(kBlock)
    mat_kernel(const MatOp* ops, Idx count, Idx batch, Idx items, T* values, const std::int32_t* indices) {
  mat_thread(ops, count, batch, items, values, indices, blockIdx.x, blockDim.x, threadIdx.x, gridDim.x);
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    vec_kernel(const VecOp* ops, Idx count, Idx batch, Idx items, T* values, const std::int32_t* indices) {
  vec_thread(ops, count, batch, items, values, indices, blockIdx.x, blockDim.x, threadIdx.x, gridDim.x);
}

template <class T>
__global__ void __launch_bounds__(kBlock) add_kernel(const VecOp* ops, Idx count, Idx batch, Idx items, T* values) {
  add_thread(ops, count, batch, items, values, blockIdx.x, blockDim.x, threadIdx.x, gridDim.x);
}

/// Launches kernel(args...) over the flat work of count ops × batch × items (nothing when there is
/// none), checked.
template <class... Params, class... Args>
void launch_flat(void (*kernel)(Params...), Idx count, Idx batch, Idx items, cudaStream_t stream, Args... args) {
  const Idx total = total_work(count, batch, items);
  if (total <= 0) return;
  kernel<<<grid_blocks(total), kBlock, 0, stream>>>(args...);
  BPPSA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void launch_mat(const MatOp* ops, Idx count, Idx batch, Idx items, T* values, const std::int32_t* indices,
                cudaStream_t stream) {
  launch_flat(mat_kernel<T>, count, batch, items, stream, ops, count, batch, items, values, indices);
}

template <class T>
void launch_vec(const VecOp* ops, Idx count, Idx batch, Idx items, T* values, const std::int32_t* indices,
                cudaStream_t stream) {
  launch_flat(vec_kernel<T>, count, batch, items, stream, ops, count, batch, items, values, indices);
}

template <class T>
void launch_add(const VecOp* ops, Idx count, Idx batch, Idx items, T* values, cudaStream_t stream) {
  launch_flat(add_kernel<T>, count, batch, items, stream, ops, count, batch, items, values);
}

#define BPPSA_INSTANTIATE(T)                                                                                \
  template void launch_mat<T>(const MatOp*, Idx, Idx, Idx, T*, const std::int32_t*, cudaStream_t);          \
  template void launch_vec<T>(const VecOp*, Idx, Idx, Idx, T*, const std::int32_t*, cudaStream_t);          \
  template void launch_add<T>(const VecOp*, Idx, Idx, Idx, T*, cudaStream_t);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
