// Kernels of the public resident scan's loads and checks (resident_scanner.cpp): values given as
// J_k instead of J_k^T, and finiteness flags. Per-item arithmetic in core/cuda/hd_math.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/cuda/grid.hpp"

namespace bppsa::detail::gpu {

/// count matrices, each row-major rows × cols at in + s·rows·cols, copied column-major to out.
template <class T>
void launch_transpose_each(const T* in, Idx count, Idx rows, Idx cols, T* out, cudaStream_t s);
/// count arrays of n values one after another: out[s·n + i] = in[s·n + source[i]] for i < n.
template <class T>
void launch_gather_each(const T* in, const std::int32_t* source, Idx count, Idx n, T* out, cudaStream_t s);
/// *flag = 1 when a value of x[0, n) is NaN or Inf (left as it is otherwise).
template <class T>
void launch_flag_nonfinite(const T* x, Idx n, std::int32_t* flag, cudaStream_t s);

}  // namespace bppsa::detail::gpu
