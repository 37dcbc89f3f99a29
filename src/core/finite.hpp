// Fast NaN/Inf detection for the scan's input and output checks.
#pragma once

#include "bppsa/core/types.hpp"

namespace bppsa::detail {

/// True when none of v[0..n) is NaN or ±Inf. x·0 is 0 for finite x and NaN otherwise, and
/// the simd reduction lets the compiler vectorise the sum (the order does not matter here).
template <class T>
bool all_finite(const T* v, Index n) {
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (Index i = 0; i < n; ++i) acc += v[i] * T(0);
  return acc == T(0);
}

}  // namespace bppsa::detail
