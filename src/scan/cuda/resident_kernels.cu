// The resident scan's load and check kernels (resident_kernels.hpp): grid-stride loops over the
// item functions of core/cuda/hd_math.hpp.
#include "core/cuda/check.hpp"
#include "core/cuda/hd_math.hpp"
#include "scan/cuda/resident_kernels.hpp"

namespace bppsa::detail::gpu {
namespace {

template <class T>
__global__ void __launch_bounds__(kBlock) transpose_each_kernel(const T* in, Idx count, Idx rows, Idx cols, T* out) {
  BPPSA_FLAT_LOOP(count * rows * cols, i) out[i] = in[transpose_each_source(rows, cols, i)];
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    gather_each_kernel(const T* in, const std::int32_t* source, Idx count, Idx n, T* out) {
  BPPSA_FLAT_LOOP(count * n, i) out[i] = in[gather_each_source(source, n, i)];
}

template <class T>
__global__ void __launch_bounds__(kBlock) flag_nonfinite_kernel(const T* x, Idx n, std::int32_t* flag) {
  BPPSA_FLAT_LOOP(n, i) {
    if (!hd_finite(x[i])) *flag = 1;  // every writer stores the same value
  }
}

}  // namespace

template <class T>
void launch_transpose_each(const T* in, Idx count, Idx rows, Idx cols, T* out, cudaStream_t s) {
  if (count * rows * cols <= 0) return;
  transpose_each_kernel<T><<<grid_blocks(count * rows * cols), kBlock, 0, s>>>(in, count, rows, cols, out);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gather_each(const T* in, const std::int32_t* source, Idx count, Idx n, T* out, cudaStream_t s) {
  if (count * n <= 0) return;
  gather_each_kernel<T><<<grid_blocks(count * n), kBlock, 0, s>>>(in, source, count, n, out);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_flag_nonfinite(const T* x, Idx n, std::int32_t* flag, cudaStream_t s) {
  if (n <= 0) return;
  flag_nonfinite_kernel<T><<<grid_blocks(n), kBlock, 0, s>>>(x, n, flag);
  BPPSA_CUDA_CHECK_LAUNCH();
}

#define BPPSA_INSTANTIATE(T)                                                                      \
  template void launch_transpose_each<T>(const T*, Idx, Idx, Idx, T*, cudaStream_t);              \
  template void launch_gather_each<T>(const T*, const std::int32_t*, Idx, Idx, T*, cudaStream_t); \
  template void launch_flag_nonfinite<T>(const T*, Idx, std::int32_t*, cudaStream_t);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
