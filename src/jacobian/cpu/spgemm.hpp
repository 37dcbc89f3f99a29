// Sparse × sparse products with a fixed pattern: symbolic once, numeric every step (CPU half).
#pragma once

#include <vector>

#include "bppsa/jacobian/csr_pattern.hpp"

namespace bppsa::detail {

struct SpGemmSymbolic {
  CsrPatternPtr pattern;  ///< structural pattern of A · B, rows sorted
  double terms = 0;       ///< multiply-adds the numeric phase performs
};

/// Pattern of A · B (Gustavson, one marker array). Depends only on the two patterns.
SpGemmSymbolic spgemm_symbolic(const CsrPattern& a, const CsrPattern& b);

/// Values of C = A · B into C's pattern (from spgemm_symbolic). `position` is scratch of at
/// least c.cols() entries.
template <class T>
void spgemm_numeric(const CsrPattern& a, const T* av, const CsrPattern& b, const T* bv, const CsrPattern& c, T* cv,
                    std::vector<std::int32_t>& position);

}  // namespace bppsa::detail
