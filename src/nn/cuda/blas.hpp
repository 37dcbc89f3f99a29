// cuBLAS calls of the recurrent model for float and double: C = op(A)·op(B) and y = A·1 (the
// bias gradients, a deterministic row sum), column-major as cuBLAS is, every call checked.
// The handle's math mode is CUBLAS_DEFAULT_MATH (gpu::BlasHandle): no TF32, fp32 stays fp32,
// and cuBLAS gives bit-identical results run to run on one GPU model (no atomics mode).
#pragma once

#include <cublas_v2.h>

#include <climits>

#include "bppsa/core/error.hpp"
#include "core/cuda/check.hpp"
#include "core/cuda/grid.hpp"
#include "nn/cuda/layer_gemms.hpp"

namespace bppsa::detail::gpu {

inline cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                const float* alpha, const float* a, int lda, const float* b, int ldb, const float* beta,
                                float* c, int ldc) {
  return cublasSgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                const double* alpha, const double* a, int lda, const double* b, int ldb,
                                const double* beta, double* c, int ldc) {
  return cublasDgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline cublasStatus_t gemv_call(cublasHandle_t h, int m, int n, const float* alpha, const float* a, int lda,
                                const float* x, const float* beta, float* y) {
  return cublasSgemv(h, CUBLAS_OP_N, m, n, alpha, a, lda, x, 1, beta, y, 1);
}
inline cublasStatus_t gemv_call(cublasHandle_t h, int m, int n, const double* alpha, const double* a, int lda,
                                const double* x, const double* beta, double* y) {
  return cublasDgemv(h, CUBLAS_OP_N, m, n, alpha, a, lda, x, 1, beta, y, 1);
}

/// cuBLAS takes int sizes; the model refuses shapes beyond them up front (resize()).
inline int blas_int(Idx v) {
  if (v < 0 || v > INT_MAX)
    raise<InvalidArgument>("cuda", "a matrix dimension of " + std::to_string(v) +
                                       " exceeds cuBLAS's int range; use a smaller batch or shorter sequences");
  return static_cast<int>(v);
}

/// C = op(A) · op(B) as described (layer_gemms.hpp).
template <class T>
void run(cublasHandle_t h, const Gemm<T>& g) {
  const T one = T(1), zero = T(0);
  BPPSA_CUBLAS_CHECK(gemm_call(h, g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, g.tb ? CUBLAS_OP_T : CUBLAS_OP_N, blas_int(g.m),
                               blas_int(g.n), blas_int(g.k), &one, g.a, blas_int(g.lda), g.b, blas_int(g.ldb), &zero,
                               g.c, blas_int(g.ldc)));
}

/// y = A · x.
template <class T>
void run(cublasHandle_t h, const Gemv<T>& g) {
  const T one = T(1), zero = T(0);
  BPPSA_CUBLAS_CHECK(gemv_call(h, blas_int(g.m), blas_int(g.n), &one, g.a, blas_int(g.lda), g.x, &zero, g.y));
}

}  // namespace bppsa::detail::gpu
