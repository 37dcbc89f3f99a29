// The input of a backward pass: the chain of transposed Jacobians J_1^T … J_N^T of a model
// x_k = f_k(x_{k-1}), k = 1..N, for a batch of B samples, plus optional per-step gradient
// injections (per-step losses, docs/method.md §1).
#pragma once

#include <vector>

#include "bppsa/jacobian/jacobian.hpp"

namespace bppsa {

/// Chains at least this long have their per-element bookkeeping (validation, plan-reuse
/// check, operand set-up) spread over the scan's threads: serial, at ~20 ns per element, it
/// would bound the parallel scan's speedup (Amdahl) far below what the schedule allows.
inline constexpr Index kParallelElements = 4096;

/// Dimensions: J_k^T is d_{k-1} × d_k, so consecutive elements chain when
/// J_k^T.cols() == J_{k+1}^T.rows(). Each element is shared by the batch (count 1) or has
/// one Jacobian per sample (count B).
///
/// Elements are kept in forward (layer) order; the scan itself runs over the reversed array
/// [g_N, J_N^T, …, J_1^T] (docs/method.md §1). Values may be rewritten in place between scans; keeping
/// every element's layout unchanged lets a Scanner reuse its plan and buffers.
template <class T>
class Chain {
 public:
  explicit Chain(Index batch = 1);

  Index batch() const { return batch_; }
  /// N, the number of Jacobians.
  Index size() const { return static_cast<Index>(jt_.size()); }
  bool empty() const { return jt_.empty(); }

  /// Appends J_{N+1}^T. Throws ShapeError if it does not chain with J_N^T or its count is
  /// neither 1 nor batch().
  Jacobian<T>& push_back(Jacobian<T> jt);

  /// J_k^T for 1 ≤ k ≤ N.
  Jacobian<T>& jacobian(Index k);
  const Jacobian<T>& jacobian(Index k) const;

  /// d_k for 0 ≤ k ≤ N.
  Index dim(Index k) const;

  /// Affine chains: g_k = J_{k+1}^T g_{k+1} + e_k with e_k = ∂ℓ_k/∂x_k (d_k × batch) for
  /// 0 ≤ k < N. Unset injections are zero.
  void set_injection(Index k, Matrix<T> e);
  /// e_k, or nullptr when unset.
  const Matrix<T>* injection(Index k) const;
  Matrix<T>* injection(Index k);
  void clear_injections();
  bool has_injections() const;

  /// Checks the whole chain (shapes, counts, CSR patterns, injection shapes) and throws
  /// ShapeError / InvalidArgument naming the element, e.g. "J_7^T (chain element 7, dense
  /// 20×30 shared) does not chain with J_6^T (…)". The scan calls this on every run, with its
  /// thread count (0 = OpenMP's default); chains of kParallelElements or more are checked in
  /// parallel, and the error reported is the first bad element's whatever the thread count.
  void validate(const char* op = "Chain", int threads = 0) const;

 private:
  void check_element(Index k, const char* op) const;

  Index batch_;
  std::vector<Jacobian<T>> jt_;
  std::vector<Matrix<T>> injection_;  // index k; an empty matrix means none
};

extern template class Chain<float>;
extern template class Chain<double>;

}  // namespace bppsa
