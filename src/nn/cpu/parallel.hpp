// The CPU engine's shared loops: blocks claimed by whichever thread is free, on teams sized by the
// work (core/team.hpp), cut so that results never depend on the thread count.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <type_traits>
#include <utility>

#include "bppsa/core/types.hpp"
#include "core/denormals.hpp"
#include "core/team.hpp"

namespace bppsa::detail {

/// The products' blocks, fixed whatever the thread count: rows of dst, columns of dst, and the
/// width from which a step's product counts as wide (many steps at once) and is cut by columns.
inline constexpr Index kProductRows = 64, kProductCols = 256, kWideColumns = 512;

/// Runs f(k) (or f(k, worker), worker < team the thread's index in the team) for k = 0 … blocks − 1
/// on a team of up to `team` threads, each block claimed by whichever thread is free (subnormals
/// flushed on every thread).
template <class F>
void claimed_blocks(int team, Index blocks, F&& f) {
  std::atomic<Index> next{0};
  auto body = [&](int worker) {
    FlushDenormals flush;
    for (Index k; (k = next.fetch_add(1, std::memory_order_relaxed)) < blocks;) {
      if constexpr (std::is_invocable_v<F&, Index, int>)
        f(k, worker);
      else
        f(k);
    }
  };
  if (std::min<Index>(team, blocks) <= 1)
    body(0);
  else
    run_team(static_cast<int>(std::min<Index>(team, blocks)), body);
}

/// Runs f(t0, t1) over contiguous ranges covering steps 1..steps, on up to `threads` threads
/// (fewer for little work: `flops_per_step` sizes the team), each range claimed by whichever
/// thread is free: steps are independent in Jacobian generation and in the pre-activation gradients.
template <class F>
void parallel_over_steps(int threads, Index steps, double flops_per_step, F&& f) {
  const int team = team_for(flops_per_step * static_cast<double>(steps), threads);
  if (team <= 1) {
    f(1, 1 + steps);
    return;
  }
  const Index chunks = std::min<Index>(steps, 4 * team);
  claimed_blocks(team, chunks, [&](Index c) { f(1 + steps * c / chunks, 1 + steps * (c + 1) / chunks); });
}

/// One operand of blocked_product: element (i, k) at data[i·stride + k] (row_major) or data[i + k·stride].
template <class T>
struct ProductOperand {
  const T* data;
  Index stride;
  bool row_major;
};

/// dst (m × n, column-major, columns dst_stride apart) = a · b (a m × k, b k × n) on up to `threads`
/// threads, the depth in chunks fixed by k and every operand packed once per chunk: with
/// `by_columns` (n the long side: steps × batch) a packed whole and tiles of kProductCols columns
/// each packing its own part of b; otherwise (k the long side: a parameter gradient's sum over
/// steps) both operands' chunks packed and shared by smaller tiles of rows and columns. Tiles are
/// claimed by whichever thread is free; nothing depends on the thread count, so neither do the bits.
/// With `accumulate`, dst += a · b. Returns false, having done nothing, without Eigen 3.4's GEMM
/// pieces or for n < 4 (a matrix-vector product).
template <class T>
bool blocked_product(int threads, T* dst, Index dst_stride, Index m, Index n, Index k, ProductOperand<T> a,
                     ProductOperand<T> b, bool by_columns, bool accumulate = false);

/// dst = a · b on up to `threads` threads (fewer for little work), in blocks of a fixed number of
/// rows of dst (kRows) or, with `by_columns`, of columns (kCols) claimed by whichever thread is
/// free (blocked_product's, where it applies). The blocks do not depend on the thread count, so
/// neither do the results, to the bit. dst must be sized and must not alias a or b. With
/// `accumulate`, dst += a · b.
template <class D, class A, class B>
void parallel_product(int threads, D&& dst, const A& a, const B& b, bool by_columns = false, bool accumulate = false) {
  using Dst = std::decay_t<D>;
  using T = typename Dst::Scalar;
  constexpr bool direct = ((int(Dst::Flags) & int(A::Flags) & int(B::Flags)) & Eigen::DirectAccessBit) != 0;
  if constexpr (direct) {
    const auto operand = [](const auto& x, bool transpose) {
      return ProductOperand<T>{x.data(), x.outerStride(), bool(std::decay_t<decltype(x)>::IsRowMajor) != transpose};
    };
    if (dst.innerStride() == 1 && a.innerStride() == 1 && b.innerStride() == 1 && dst.outerStride() > 0) {
      if (!Dst::IsRowMajor &&
          blocked_product<T>(threads, dst.data(), dst.outerStride(), dst.rows(), dst.cols(), a.cols(),
                             operand(a, false), operand(b, false), by_columns, accumulate))
        return;
      // A row-major dst as its column-major transpose, b^T · a^T (row blocks of dst become column blocks).
      if (Dst::IsRowMajor && !by_columns &&
          blocked_product<T>(threads, dst.data(), dst.outerStride(), dst.cols(), dst.rows(), a.cols(), operand(b, true),
                             operand(a, true), false, accumulate))
        return;
    }
  }
  const Index n = by_columns ? dst.cols() : dst.rows(), block = by_columns ? kProductCols : kProductRows;
  const Index blocks = (n + block - 1) / block;
  const double flops =
      2.0 * static_cast<double>(dst.rows()) * static_cast<double>(dst.cols()) * static_cast<double>(a.cols());
  claimed_blocks(team_for(flops, threads), blocks, [&](Index k) {
    const Index i0 = k * block, len = std::min(block, n - i0);
    if (by_columns && accumulate)
      dst.middleCols(i0, len).noalias() += a * b.middleCols(i0, len);
    else if (by_columns)
      dst.middleCols(i0, len).noalias() = a * b.middleCols(i0, len);
    else if (accumulate)
      dst.middleRows(i0, len).noalias() += a.middleRows(i0, len) * b;
    else
      dst.middleRows(i0, len).noalias() = a.middleRows(i0, len) * b;
  });
}

/// parallel_product split by columns when dst is wide (many steps at once, Newton's wide step) and by
/// rows otherwise (a step's batch): the split follows dst's shape only, never the thread count.
template <class D, class A, class B>
void parallel_step_product(int threads, D&& dst, const A& a, const B& b, bool accumulate = false) {
  const bool wide = dst.cols() >= kWideColumns;
  parallel_product(threads, std::forward<D>(dst), a, b, /*by_columns=*/wide, accumulate);
}

}  // namespace bppsa::detail
