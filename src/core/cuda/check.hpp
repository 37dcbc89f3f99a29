// Every CUDA runtime, cuBLAS and cuSPARSE call is wrapped in one of these macros: a failure
// throws bppsa::DeviceError "[cuda] <call> failed at src/<file>:<line>: <name>: <description>".
// Kernel launches are followed by BPPSA_CUDA_CHECK_LAUNCH() (launch-configuration errors are
// only reported by cudaGetLastError; faults inside a kernel surface at the next synchronising
// call, which is checked too).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusparse.h>

namespace bppsa::detail::cuda {

[[noreturn]] void throw_cuda(cudaError_t error, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cusparse(cusparseStatus_t status, const char* call, const char* file, int line);

/// For the calls that must not throw (destructors, clean-up before a rethrow): a failure is
/// dropped from the runtime's last-error state, so that the next BPPSA_CUDA_CHECK_LAUNCH()
/// reports its own launch. A sticky error (a fault that broke the context) stays, and the next
/// checked call reports it.
inline void discard(cudaError_t error) {
  if (error != cudaSuccess) cudaGetLastError();
}

}  // namespace bppsa::detail::cuda

#define BPPSA_CUDA_CHECK(expr)                                                                  \
  do {                                                                                          \
    const cudaError_t bppsa_status_ = (expr);                                                   \
    if (bppsa_status_ != cudaSuccess)                                                           \
      ::bppsa::detail::cuda::throw_cuda(bppsa_status_, #expr, __FILE__, __LINE__);             \
  } while (0)

#define BPPSA_CUBLAS_CHECK(expr)                                                                \
  do {                                                                                          \
    const cublasStatus_t bppsa_status_ = (expr);                                                \
    if (bppsa_status_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::bppsa::detail::cuda::throw_cublas(bppsa_status_, #expr, __FILE__, __LINE__);            \
  } while (0)

#define BPPSA_CUSPARSE_CHECK(expr)                                                              \
  do {                                                                                          \
    const cusparseStatus_t bppsa_status_ = (expr);                                              \
    if (bppsa_status_ != CUSPARSE_STATUS_SUCCESS)                                               \
      ::bppsa::detail::cuda::throw_cusparse(bppsa_status_, #expr, __FILE__, __LINE__);          \
  } while (0)

/// After every <<<…>>>: reports an invalid launch configuration at the launch's line.
#define BPPSA_CUDA_CHECK_LAUNCH() BPPSA_CUDA_CHECK(cudaGetLastError())
