// bppsa.scan from Python: the scan engine over elements given as tensors, in scan order. One
// front (scan.cpp) picks the half by g_last's device: the CPU half (cpu/scan.cpp, the Scanner) or
// the CUDA half (cuda/scan.cpp, a ResidentScanner; no_gpu/scan.cpp refuses CUDA tensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor_ref.hpp"

namespace bppsa::python {

/// One scan element a_i as Python hands it over, on the device of the scan: a dense (count,
/// rows, cols) C-order tensor (count 1: shared by the batch, or B: one per sample), or a shared
/// CSR matrix (crow, col, values of a torch.sparse_csr tensor).
struct ElementRef {
  std::string kind;  ///< "dense" or "csr"
  Index rows = 0, cols = 0, count = 1;
  TensorRef values;
  TensorRef crow, col;  ///< csr
};

/// The affine scan in scan order: s_0 = g_last (B, d_0), s_i = a_i · s_{i−1} + e_i (B, d_i)
/// for i = 1..N, where a_i is elements[i−1] (its transpose when `transpose`) and e_i is
/// injections[i−1] (an empty TensorRef: none). Writes s_i into out[i] (B, d_i), i = 0..N.
/// Runs on the scan engine (a_i = J_{N−i+1}^T, s_i = g_{N−i}) of g_last's device, every tensor
/// there: on the CPU with `threads` (0: all), on a CUDA device queued on `stream` (a
/// cudaStream_t; plans kept per layout, device and stream). algorithm: linear, blelloch, hybrid
/// or auto. check_finite: NaN/Inf in the inputs or the results raise NonFiniteError.
template <class T>
void affine_scan(const std::vector<ElementRef>& elements, const TensorRef& g_last, const std::vector<TensorRef>& out,
                 const std::vector<TensorRef>& injections, bool transpose, const std::string& algorithm, int threads,
                 bool check_finite, std::uintptr_t stream);

/// The halves, called by the front after it checked the counts and `threads`.
template <class T>
void affine_scan_cpu(const std::vector<ElementRef>& elements, const TensorRef& g_last,
                     const std::vector<TensorRef>& out, const std::vector<TensorRef>& injections, bool transpose,
                     const std::string& algorithm, int threads, bool check_finite);
template <class T>
void affine_scan_cuda(const std::vector<ElementRef>& elements, const TensorRef& g_last,
                      const std::vector<TensorRef>& out, const std::vector<TensorRef>& injections, bool transpose,
                      const std::string& algorithm, bool check_finite, std::uintptr_t stream);

/// Instantiates a half's two precisions: BPPSA_SCAN_HALF(affine_scan_cpu, (…parameter types…)).
#define BPPSA_SCAN_HALF(name, ...)        \
  template void name<float>(__VA_ARGS__); \
  template void name<double>(__VA_ARGS__);

/// A CSR index tensor (int32 or int64 in host memory, n entries) as int32, checked to fit.
std::vector<std::int32_t> csr_indices(const TensorRef& t, Index n, const char* op, const std::string& what);

}  // namespace bppsa::python
