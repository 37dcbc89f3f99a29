// bppsa.scan from Python: the scan engine over elements given as tensors, in scan order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor_ref.hpp"

namespace bppsa::python {

/// One scan element a_i as Python hands it over: a dense (count, rows, cols) C-order tensor
/// (count 1: shared by the batch, or B: one per sample), or a shared CSR matrix (crow, col,
/// values of a torch.sparse_csr tensor).
struct ElementRef {
  std::string kind;  ///< "dense" or "csr"
  Index rows = 0, cols = 0, count = 1;
  TensorRef values;
  TensorRef crow, col;  ///< csr
};

/// The affine scan in scan order: s_0 = g_last (B, d_0), s_i = a_i · s_{i−1} + e_i (B, d_i)
/// for i = 1..N, where a_i is elements[i−1] (its transpose when `transpose`) and e_i is
/// injections[i−1] (an empty TensorRef: none). Writes s_i into out[i] (B, d_i), i = 0..N.
/// Runs on the scan engine: a_i = J_{N−i+1}^T, s_i = g_{N−i}.
template <class T>
void affine_scan(const std::vector<ElementRef>& elements, const TensorRef& g_last, const std::vector<TensorRef>& out,
                 const std::vector<TensorRef>& injections, bool transpose, const std::string& algorithm, int threads,
                 bool check_finite);

/// The same scan on a CUDA device, every tensor there except CSR indices (on the CPU: the plan is
/// made from the pattern), queued on `stream` (a cudaStream_t). Here each element is given as
/// the matrix M that the scan multiplies by (A, or A^T when the caller transposed): a dense
/// element's values are M column-major, i.e. a C-order (count, M.cols, M.rows) tensor; a CSR
/// element is M's CSR. rows and cols are M's. algorithm: linear, blelloch, hybrid (auto:
/// blelloch). Plans are kept per layout, device and stream, and reused.
template <class T>
void affine_scan_gpu(const std::vector<ElementRef>& elements, const TensorRef& g_last,
                     const std::vector<TensorRef>& out, const std::vector<TensorRef>& injections,
                     const std::string& algorithm, std::uintptr_t stream);

/// A CSR index tensor (int32 or int64 on the CPU, n entries) as int32, checked to fit.
std::vector<std::int32_t> csr_indices(const TensorRef& t, Index n, const char* op, const std::string& what);

}  // namespace bppsa::python
