// bppsa.scan from Python: the scan engine over elements given as tensors, in scan order.
#pragma once

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

}  // namespace bppsa::python
