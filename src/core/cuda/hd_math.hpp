// Per-item arithmetic shared by the kernels of several concepts and their host replays
// (tests/<concept>/cuda/): finiteness without <cmath>'s host-only overloads, and the index map of
// a transposing copy.
#pragma once

#include <cstdint>

#include "core/cuda/grid.hpp"
#include "core/cuda/hd.hpp"

namespace bppsa::detail::gpu {

/// False for NaN and ±Inf (v − v is NaN for both), without <cmath>'s host-only overloads.
template <class T>
BPPSA_HD inline bool hd_finite(T v) {
  return v - v == T(0);
}

/// The column-major copy of a row-major rows × cols matrix: value `item` of the output.
BPPSA_HD inline Idx transpose_source(Idx rows, Idx cols, Idx item) {
  const Idx k = item / rows, r = item - k * rows;  // output (r, k) at k·rows + r
  (void)cols;
  return r * cols + k;
}

/// transpose_source over `count` such matrices stored one after another: value `item` of the
/// outputs, stored the same way.
BPPSA_HD inline Idx transpose_each_source(Idx rows, Idx cols, Idx item) {
  const Idx size = rows * cols, s = item / size;
  return s * size + transpose_source(rows, cols, item - s * size);
}

/// A gather applied to `count` arrays of n values stored one after another: value `item` of the
/// outputs comes from in[gather_each_source(from, n, item)], where from[0, n) names each
/// output's source within its array.
BPPSA_HD inline Idx gather_each_source(const std::int32_t* from, Idx n, Idx item) {
  const Idx s = item / n;
  return s * n + from[item - s * n];
}

}  // namespace bppsa::detail::gpu
