// The scan for chains whose values live in GPU memory: the entry for callers that generate
// their Jacobians on the device (bppsa's own GPU layers, or a user's kernels). Scanner is the
// entry for chains in host memory; both plan with the same planner and run the same schedules.
//
// The plan is made once from the chain's layouts alone (kinds, shapes, CSR patterns, which
// elements share a matrix S, where affine parts sit), compiled for the current CUDA device, and
// every buffer is allocated then. The caller writes J_k^T's values, the shared matrices, the
// affine parts and g_N straight into the plan's device buffers (whose addresses stay fixed for
// its life), calls run() on its stream, and reads g_k from gradient(k) on that stream. Nothing
// crosses to the host. Operator contract and gradients as Scanner's (bppsa/scan/scanner.hpp).
#pragma once

#include <memory>
#include <vector>

#include "bppsa/jacobian/jacobian.hpp"
#include "bppsa/scan/scanner.hpp"

namespace bppsa {

/// What a resident scan is planned for: the layouts of J_1^T … J_N^T and where affine parts are.
template <class T>
struct ResidentChain {
  Index batch = 1;
  /// jacobian[k − 1]: J_k^T's layout, k = 1 … N (count 1: shared by the batch, or `batch`).
  /// Elements may point to one Layout; elements whose layouts hold the same S pointer
  /// (shared_dense_diag) share one device copy of S.
  std::vector<const Layout<T>*> jacobian;
  /// injection[k]: whether e_k (d_k × batch) is added to g_k, k = 0 … N − 1; empty = none.
  std::vector<bool> injection;
};

/// Device::cuda only. Buffers are column-major per sample, as Jacobian::values() and Matrix.
template <class T>
class ResidentScanner {
 public:
  /// Plans `chain` for options.algorithm: linear, blelloch or hybrid (options.chunks chunks;
  /// 0 = ⌈√N⌉). automatic and fused are refused (InvalidArgument), as are inconsistent layouts
  /// (ShapeError, naming the element). options.threads, device and the checks are not used:
  /// values never reach the host. UnsupportedError in a build without CUDA, DeviceError
  /// without a usable GPU, ResourceError (before allocating) for what does not fit.
  ResidentScanner(const ResidentChain<T>& chain, const ScanOptions& options);
  ~ResidentScanner();
  ResidentScanner(ResidentScanner&&) noexcept;
  ResidentScanner& operator=(ResidentScanner&&) noexcept;

  Index size() const;
  Index batch() const;
  /// d_k, the size of g_k (k = 0 … N).
  Index dim(Index k) const;

  /// J_k^T's values on the device (Layout::values_per_sample() × count), or null when its
  /// kind stores none (identity). k = 1 … N.
  T* values(Index k);
  /// J_k^T's shared matrix S (rows × rows, column-major) for a shared_dense_diag element;
  /// null for other kinds.
  T* shared_matrix(Index k);
  /// e_k (d_k × batch), k = 0 … N − 1; null where the chain has no affine part.
  T* injection(Index k);
  /// g_N (d_N × batch), the scan's input.
  T* g_last();
  /// g_k (d_k × batch), k = 0 … N, valid on run()'s stream after it (g_N is g_last()).
  const T* gradient(Index k) const;

  /// Writes J_k^T's values from the values of J_k itself (its transpose) at `src` on the device,
  /// queued on `stream`, count samples one after another as values(k) holds them: for a dense
  /// kind, each J_k (cols × rows) column-major; for csr, each J_k's CSR values in the order of
  /// J_k's pattern (J_k^T's transposed). InvalidArgument for other kinds. k = 1 … N.
  void set_values_transposed(Index k, const T* src, void* stream);

  /// Which buffers hold NaN or Inf, in one pass that waits for the work queued on `stream`:
  /// entry k − 1 for J_k^T's values (with its S), k = 1 … N; entry k for e_k, k = 0 … N − 1
  /// (false where there is none); entry k for g_k, k = 0 … N (g_N is g_last(); g_k < N are
  /// run()'s results).
  std::vector<bool> nonfinite_values(void* stream);
  std::vector<bool> nonfinite_injections(void* stream);
  std::vector<bool> nonfinite_gradients(void* stream);

  /// Runs the schedule after the work queued on `stream` (a cudaStream_t; null: the legacy
  /// default stream) so far; work queued on `stream` afterwards sees every gradient.
  void run(void* stream);
  /// The plan's statistics (algorithm, chunks, products, levels, launches, device cuda).
  const ScanStats& stats() const;
  /// Device memory the plan holds.
  std::size_t device_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

extern template class ResidentScanner<float>;
extern template class ResidentScanner<double>;

}  // namespace bppsa
