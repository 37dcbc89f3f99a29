// The throwing half of the check macros: one message format for CUDA, cuBLAS and cuSPARSE.
#include "core/cuda/check.hpp"

#include <cstring>
#include <string>

#include "bppsa/core/error.hpp"

namespace bppsa::detail::cuda {
namespace {

/// "src/scan/cuda/executor.cpp" rather than the build machine's absolute path.
std::string short_path(const char* file) {
  const std::string f(file);
  const auto at = f.rfind("/src/");
  return at == std::string::npos ? f : f.substr(at + 1);
}

[[noreturn]] void fail(const std::string& what, const char* call, const char* file, int line) {
  raise<DeviceError>("cuda", std::string(call) + " failed at " + short_path(file) + ":" + std::to_string(line) + ": " +
                                 what);
}

}  // namespace

void throw_cuda(cudaError_t error, const char* call, const char* file, int line) {
  // Reset the runtime's last-error state, so that a later BPPSA_CUDA_CHECK_LAUNCH() reports its
  // own launch and not this (already reported, non-sticky) failure. Sticky errors stay.
  cudaGetLastError();
  std::string what = std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver)
    what += " (no usable GPU: check nvidia-smi and that the driver supports CUDA " +
            std::to_string(CUDART_VERSION / 1000) + ")";
  fail(what, call, file, line);
}

void throw_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  fail(std::string(cublasGetStatusName(status)) + ": " + cublasGetStatusString(status), call, file, line);
}

void throw_cusparse(cusparseStatus_t status, const char* call, const char* file, int line) {
  fail(std::string(cusparseGetErrorName(status)) + ": " + cusparseGetErrorString(status), call, file, line);
}

}  // namespace bppsa::detail::cuda
