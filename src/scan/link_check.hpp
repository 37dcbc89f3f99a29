// The checks a chain element must pass, whether it holds values (Chain) or only a layout
// (ResidentChain): one rule set, one wording.
#pragma once

#include "bppsa/jacobian/jacobian.hpp"

namespace bppsa::detail {

/// "J_k^T".
std::string element_name(Index k);

/// J_k^T (element k of n, 1-based) of a chain of `batch` samples, whose layout is `l` and whose
/// lower neighbour J_{k−1}^T has layout `prev` (null for k = 1): count 1 (shared) or `batch`, a
/// valid CSR pattern, and d_{k−1} the same on both sides. ShapeError / InvalidArgument naming
/// the element; the messages are built only on failure (this runs on every scan).
template <class T>
void check_link(const Layout<T>& l, const Layout<T>* prev, Index k, Index n, Index batch, const char* op);

}  // namespace bppsa::detail
