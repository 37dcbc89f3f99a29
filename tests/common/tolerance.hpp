// Shared by the tests: the error metrics results are compared with, and one tolerance per
// operation and scalar type (after ggml's test-backend-ops, where each op names its max_nmse_err).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "bppsa/bppsa.hpp"

namespace testutil {

/// ‖got − ref‖ / ‖ref‖ (Frobenius; absolute when ref is zero): the square root of ggml's NMSE,
/// Σ(got − ref)² / Σref².
template <class T>
double norm_rel_error(const bppsa::Matrix<T>& got, const bppsa::Matrix<double>& ref) {
  const double diff = (got.template cast<double>() - ref).norm();
  const double scale = ref.norm();
  return scale > 0 ? diff / scale : diff;
}

/// max |a − b| / max |b| over n values (absolute when b is all zero); ∞ when a or b holds a
/// non-finite value.
template <class A, class B, class I>
double max_rel_error(const A* a, const B* b, I n) {
  double num = 0, den = 0;
  for (I i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<double>::infinity();
    num = std::max(num, std::abs(x - y));
    den = std::max(den, std::abs(y));
  }
  return den > 0 ? num / den : num;
}

/// The operations compared against a reference, and the metric each is compared with.
enum class Op {
  /// A scan's g_k against sequential BP in double or the CPU engine: norm_rel_error per g_k.
  scan,
  /// The CUDA backend's products and programs replayed on the CPU, against the CPU engine:
  /// max |got − ref| ≤ tol · max(1, max |ref|) per product, norm_rel_error per program.
  cuda_items,
  /// The GPU recurrent model's kernels replayed on the CPU, against the CPU engine: max_rel_error per tensor.
  cuda_recurrent,
  /// The fused chunked scan replayed on the CPU, against BP in double: fused_record.hpp's worst_step_error.
  fused_scan,
};

/// The bound on `op`'s error for results in T (float or double): summation order and FMA only.
template <class T>
constexpr double tol(Op op) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  constexpr bool f = std::is_same_v<T, float>;
  switch (op) {
    case Op::scan:
      return f ? 1e-4 : 1e-10;
    case Op::cuda_items:
      return f ? 2e-5 : 1e-12;
    case Op::cuda_recurrent:
      return f ? 3e-5 : 1e-11;
    case Op::fused_scan:
      return f ? 1e-4 : 1e-11;
  }
  return 0;
}

}  // namespace testutil
