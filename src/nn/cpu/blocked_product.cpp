// blocked_product (nn/cpu/parallel.hpp): Eigen's micro-kernel driven so that no operand is packed twice,
// in tiles and depth chunks fixed by the shape.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "bppsa/core/aligned.hpp"
#include "nn/cpu/gebp.hpp"
#include "nn/cpu/parallel.hpp"

namespace bppsa::detail {

#ifdef BPPSA_EIGEN_GEBP
namespace {

/// The depth of a chunk: a packed panel of a few rows at this depth stays in L1.
constexpr Index kDepth = 256;

/// Rows of a tile or a packing unit: whole panels of the micro-kernel (its mr rows), so that tiles
/// packed apart lie as one packing of their rows would.
template <class T>
constexpr Index kTileRows = 2 * GebpKernel<T>::Traits::mr;

/// Columns of deep()'s tiles: its dst is a parameter gradient (a few hundred columns), cut in tiles
/// enough to share among threads.
constexpr Index kDeepTileCols = 128;

Index blocks_of(Index n, Index block) { return (n + block - 1) / block; }

template <class T>
void zero_columns(T* dst, Index stride, Index i0, Index rows, Index j0, Index cols) {
  for (Index j = j0; j < j0 + cols; ++j) std::fill_n(dst + j * stride + i0, rows, T(0));
}

/// by_columns: a (m × k, the weights) packed whole, in chunk-major order (chunk c's rows from r0 at
/// c·m·kDepth + r0·depth(c)); each column tile packs its part of b chunk by chunk on its worker's
/// buffer and multiplies every row at once.
template <class T>
void wide(int team, T* dst, Index ld, Index m, Index n, Index k, const ProductOperand<T>& a, const ProductOperand<T>& b,
          bool accumulate) {
  using K = GebpKernel<T>;
  constexpr Index R = kTileRows<T>;
  const Index chunks = blocks_of(k, kDepth), row_blocks = blocks_of(m, R);
  const auto depth = [&](Index c) { return std::min(kDepth, k - c * kDepth); };
  AlignedVector<T> packed_a(static_cast<std::size_t>(m * k));
  claimed_blocks(team, chunks * row_blocks, [&](Index u) {
    const Index c = u / row_blocks, r0 = (u % row_blocks) * R;
    K::pack_lhs(packed_a.data() + c * m * kDepth + r0 * depth(c), a.data, a.stride, a.row_major, r0, c * kDepth,
                depth(c), std::min(R, m - r0));
  });
  AlignedVector<T> packed_b(static_cast<std::size_t>(team * std::min(kDepth, k) * kProductCols));
  claimed_blocks(team, blocks_of(n, kProductCols), [&](Index tile, int worker) {
    const Index j0 = tile * kProductCols, cols = std::min(kProductCols, n - j0);
    T* rhs = packed_b.data() + worker * std::min(kDepth, k) * kProductCols;
    if (!accumulate) zero_columns(dst, ld, 0, m, j0, cols);
    for (Index c = 0; c < chunks; ++c) {
      K::pack_rhs(rhs, b.data, b.stride, b.row_major, c * kDepth, j0, depth(c), cols);
      K::gebp(dst + j0 * ld, ld, packed_a.data() + c * m * kDepth, rhs, m, depth(c), cols);
    }
  });
}

/// Otherwise (k long, m and n short): chunk after chunk, both operands' chunks packed by row and
/// column blocks, then every tile of dst accumulates that chunk's product; one team runs every
/// chunk's two stages.
template <class T>
void deep(int team, T* dst, Index ld, Index m, Index n, Index k, const ProductOperand<T>& a, const ProductOperand<T>& b,
          bool accumulate) {
  using K = GebpKernel<T>;
  constexpr Index R = kTileRows<T>;
  const Index row_blocks = blocks_of(m, R), col_blocks = blocks_of(n, kDeepTileCols);
  const Index kc = std::min(kDepth, k), chunks = blocks_of(k, kDepth);
  AlignedVector<T> packed_a(static_cast<std::size_t>(m * kc)), packed_b(static_cast<std::size_t>(kc * n));
  std::vector<std::int64_t> units;
  for (Index c = 0; c < chunks; ++c) {
    units.push_back(row_blocks + col_blocks);  // pack chunk c
    units.push_back(row_blocks * col_blocks);  // its product, tile by tile
  }
  Stages stages(units);
  const auto unit = [&](std::size_t s, std::int64_t u) {
    const Index k0 = static_cast<Index>(s / 2) * kDepth, d = std::min(kDepth, k - k0);
    if (s % 2 == 0 && u < row_blocks) {
      const Index r0 = u * R;
      K::pack_lhs(packed_a.data() + r0 * d, a.data, a.stride, a.row_major, r0, k0, d, std::min(R, m - r0));
    } else if (s % 2 == 0) {
      const Index j0 = (u - row_blocks) * kDeepTileCols;
      K::pack_rhs(packed_b.data() + j0 * d, b.data, b.stride, b.row_major, k0, j0, d, std::min(kDeepTileCols, n - j0));
    } else {
      const Index r0 = (u % row_blocks) * R, j0 = (u / row_blocks) * kDeepTileCols;
      const Index rows = std::min(R, m - r0), cols = std::min(kDeepTileCols, n - j0);
      if (k0 == 0 && !accumulate) zero_columns(dst, ld, r0, rows, j0, cols);
      K::gebp(dst + j0 * ld + r0, ld, packed_a.data() + r0 * d, packed_b.data() + j0 * d, rows, d, cols);
    }
  };
  const auto body = [&](int) {
    FlushDenormals flush;
    stages.run(unit);
  };
  if (team <= 1)
    body(0);
  else
    run_team(team, body);
}

}  // namespace
#endif

template <class T>
bool blocked_product(int threads, T* dst, Index dst_stride, Index m, Index n, Index k, ProductOperand<T> a,
                     ProductOperand<T> b, bool by_columns, bool accumulate) {
#ifdef BPPSA_EIGEN_GEBP
  if (n < 4 || m == 0) return false;
  if (k == 0) {
    if (!accumulate) zero_columns(dst, dst_stride, 0, m, 0, n);
    return true;
  }
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int team = team_for(flops, threads);
  if (by_columns)
    wide(team, dst, dst_stride, m, n, k, a, b, accumulate);
  else
    deep(team, dst, dst_stride, m, n, k, a, b, accumulate);
  return true;
#else
  (void)threads, (void)dst, (void)dst_stride, (void)m, (void)n, (void)k, (void)a, (void)b, (void)by_columns,
      (void)accumulate;
  return false;
#endif
}

template bool blocked_product<float>(int, float*, Index, Index, Index, Index, ProductOperand<float>,
                                     ProductOperand<float>, bool, bool);
template bool blocked_product<double>(int, double*, Index, Index, Index, Index, ProductOperand<double>,
                                      ProductOperand<double>, bool, bool);

}  // namespace bppsa::detail
