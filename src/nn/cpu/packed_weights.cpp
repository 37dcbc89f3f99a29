// PackedWeights: Eigen's GEMM pieces (nn/cpu/gebp.hpp) driven with W packed once, one block of
// kProductRows rows at full depth per call.
#include "nn/cpu/packed_weights.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "nn/cpu/gebp.hpp"
#include "nn/cpu/parallel.hpp"

namespace bppsa::detail {

namespace {
/// Products of fewer columns take Eigen's matrix-vector path (wide ones, parallel_step_product's columns).
constexpr Index kMinCols = 4;
/// The same within a recurrence of more than one step (W packed once for all of them).
constexpr Index kRecurrenceMinCols = 2;
/// Steps × depth from which a recurrence of 1 column copies a column-major W by rows (its fresh
/// pages and the copy against each step's strided reads; docs/performance.md, "Batch 1").
constexpr Index kTransposeMinWork = 300 * 1024;
/// Columns of a recurrence's pointwise block: whole panels of the packed h (the micro-kernel's nr
/// columns), so that blocks packing their columns apart lay h out as one packing of the step does.
constexpr Index kStepCols = 4;

template <class T>
void eigen_product(int threads, const T* w, Index rows, Index depth, Index stride, bool col_major, T* dst,
                   Index dst_stride, const T* h, Index h_stride, Index n, bool accumulate) {
  using RowMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
  using ColMap = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
  Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>> d(dst, rows, n, Eigen::OuterStride<>(dst_stride));
  const ColMap hm(h, depth, n, Eigen::OuterStride<>(h_stride));
  if (col_major)
    parallel_step_product(threads, d, ColMap(w, rows, depth, Eigen::OuterStride<>(stride)), hm, accumulate);
  else
    parallel_step_product(threads, d, RowMap(w, rows, depth, Eigen::OuterStride<>(stride)), hm, accumulate);
}

}  // namespace

template <class T>
void PackedWeights<T>::pack(const T* w, Index rows, Index depth, Index stride, bool col_major) {
  w_ = w;
  rows_ = rows;
  depth_ = depth;
  stride_ = stride;
  col_major_ = col_major;
  packed_now_ = false;
  transposed_now_ = false;
}

template <class T>
void PackedWeights<T>::pack_now() {
#ifdef BPPSA_EIGEN_GEBP
  if (packed_now_) return;
  packed_.resize(static_cast<std::size_t>(rows_ * depth_));  // W in blocks of kProductRows rows
  for (Index r0 = 0; r0 < rows_; r0 += kProductRows)
    GebpKernel<T>::pack_lhs(packed_.data() + r0 * depth_, w_, stride_, !col_major_, r0, 0, depth_,
                            std::min(kProductRows, rows_ - r0));
  packed_now_ = true;
#endif
}

template <class T>
void PackedWeights<T>::transpose_now() {
  if (!col_major_ || transposed_now_) return;
  row_major_.resize(static_cast<std::size_t>(rows_ * depth_));
  Eigen::Map<RowMatrix<T>> to(row_major_.data(), rows_, depth_);
  using ColMap = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
  const ColMap from(w_, rows_, depth_, Eigen::OuterStride<>(stride_));
  constexpr Index tile = 64;  // tiles of both layouts' cache lines
  for (Index k0 = 0; k0 < depth_; k0 += tile)
    for (Index r0 = 0; r0 < rows_; r0 += tile) {
      const Index r = std::min(tile, rows_ - r0), k = std::min(tile, depth_ - k0);
      to.block(r0, k0, r, k) = from.block(r0, k0, r, k);
    }
  transposed_now_ = true;
}

template <class T>
void PackedWeights<T>::rows_product(Index r0, Index len, T* dst, Index dst_stride, const T* h, Index h_stride,
                                    Index n) const {
  // The expression parallel_product's blocks of rows evaluate (so the same bits), on W's row-major copy
  // when there is one (a transposed W's recurrence: the bits of that copy's product, at every team size).
  using RowMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
  using ColMap = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
  Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>> d(dst, rows_, n, Eigen::OuterStride<>(dst_stride));
  const ColMap hm(h, depth_, n, Eigen::OuterStride<>(h_stride));
  if (transposed_now_)
    d.middleRows(r0, len).noalias() +=
        RowMap(row_major_.data(), rows_, depth_, Eigen::OuterStride<>(depth_)).middleRows(r0, len) * hm;
  else if (col_major_)
    d.middleRows(r0, len).noalias() +=
        ColMap(w_, rows_, depth_, Eigen::OuterStride<>(stride_)).middleRows(r0, len) * hm;
  else
    d.middleRows(r0, len).noalias() +=
        RowMap(w_, rows_, depth_, Eigen::OuterStride<>(stride_)).middleRows(r0, len) * hm;
}

template <class T>
void PackedWeights<T>::product(int threads, T* dst, Index dst_stride, const T* h, Index h_stride, Index n,
                               bool accumulate) {
#ifdef BPPSA_EIGEN_GEBP
  if (n >= kMinCols && n < kWideColumns && depth_ > 0) {
    using K = GebpKernel<T>;
    if (n >= kMinCols) pack_now();  // (so few columns: matrix-vector products on W as it is, a T 1 call's)
    rhs_.resize(static_cast<std::size_t>(depth_ * n));  // h packed once, read by every block
    K::pack_rhs(rhs_.data(), h, h_stride, /*row_major=*/false, 0, 0, depth_, n);
    const Index blocks = (rows_ + kProductRows - 1) / kProductRows;
    const double flops = 2.0 * static_cast<double>(rows_) * static_cast<double>(depth_) * static_cast<double>(n);
    claimed_blocks(team_for(flops, threads), blocks, [&](Index b) {
      const Index r0 = b * kProductRows, len = std::min(kProductRows, rows_ - r0);
      if (!accumulate)
        for (Index j = 0; j < n; ++j) std::fill_n(dst + j * dst_stride + r0, len, T(0));
      K::gebp(dst + r0, dst_stride, packed_.data() + r0 * depth_, rhs_.data(), len, depth_, n);
    });
    return;
  }
#endif
  eigen_product(threads, w_, rows_, depth_, stride_, col_major_, dst, dst_stride, h, h_stride, n, accumulate);
}

template <class T>
void PackedWeights<T>::recurrence(int threads, Index steps, RecurrenceStep<T>& step) {
  if (steps <= 0) return;
  const Index ld = step.dst_stride(), hs = step.h_stride();
#ifdef BPPSA_EIGEN_GEBP
  Index n = 0;  // the widest step
  for (Index t = 1; t <= steps; ++t) n = std::max(n, step.width(t));
  if (n < kWideColumns && depth_ > 0) {
    using K = GebpKernel<T>;
    static_assert(kStepCols % K::Traits::nr == 0, "a pointwise block must hold whole panels of packed h");
    // Steps of packed_from columns or more run on the packed W. Over many steps the packing pays for
    // itself from 2 columns (Eigen's product of 2–3 columns repacks W at each call); a step of 1 is
    // a matrix-vector product, on a column-major W's copy by rows once the steps repay the copy.
    // One step (a T 1 call's) takes Eigen's path below 4 columns.
    const Index packed_from = steps > 1 ? kRecurrenceMinCols : kMinCols;
    if (n >= packed_from)
      pack_now();
    else if (steps * depth_ >= kTransposeMinWork)
      transpose_now();
    // A step's last 2–3 columns (a partial panel of the micro-kernel's nr) go through it as a whole
    // panel padded with zero columns: one pass over W where Eigen's kernel would make one per column.
    constexpr Index nr = K::Traits::nr;
    const auto padded = [](Index w) { return w % nr >= 2; };
    rhs_.resize(static_cast<std::size_t>(depth_ * ((n + nr - 1) / nr) * nr));
    // h(t)'s columns [j0, j0 + cols) (j0 on a panel), packed where all of h(t) would go.
    const auto pack_h = [&](Index t, Index j0, Index cols) {
      const Index end = j0 + cols, w = step.width(t), full = padded(w) && end == w ? cols - w % nr : cols;
      if (full > 0) K::pack_rhs(rhs_.data() + j0 * depth_, step.h(t), hs, /*row_major=*/false, 0, j0, depth_, full);
      if (full == cols) return;
      T* panel = rhs_.data() + (j0 + full) * depth_;  // the micro-kernel's layout: nr values per depth
      const T* h = step.h(t) + (j0 + full) * hs;
      for (Index k = 0; k < depth_; ++k)
        for (Index j = 0; j < nr; ++j) panel[k * nr + j] = j < cols - full ? h[j * hs + k] : T(0);
    };
    if (step.width(1) >= packed_from) pack_h(1, 0, step.width(1));
    const Index row_blocks = (rows_ + kProductRows - 1) / kProductRows;
    std::vector<std::int64_t> units;  // per step: its product's row blocks, then its pointwise column blocks
    units.reserve(static_cast<std::size_t>(2 * steps));
    for (Index t = 1; t <= steps; ++t) {
      units.push_back(step.width(t) > 0 ? row_blocks : 0);
      units.push_back((step.pointwise_width(t) + kStepCols - 1) / kStepCols);
    }
    // Step t's packed product on rows [r0, r0 + len) of columns [c0, end) (c0 on a panel; end a panel's
    // start or the step's width): each column through the same kernel path whatever the range.
    const auto packed_product = [&](Index t, Index r0, Index len, Index c0, Index end) {
      const Index w = step.width(t), full = end == w && padded(w) ? w - w % nr - c0 : end - c0;
      T* dst = step.dst(t) + c0 * ld + r0;
      const T* lhs = packed_.data() + r0 * depth_;
      const T* rhs = rhs_.data() + c0 * depth_;
      if (full > 0) K::gebp(dst, ld, lhs, rhs, len, depth_, full);
      if (full == end - c0) return;
      alignas(64) T tail[kProductRows * nr] = {};
      K::gebp(tail, kProductRows, lhs, rhs + full * depth_, len, depth_, nr);
      for (Index j = full; j < end - c0; ++j)
        for (Index r = 0; r < len; ++r) dst[j * ld + r] += tail[(j - full) * kProductRows + r];
    };
    const auto unit = [&](std::size_t s, std::int64_t u) {
      const Index t = static_cast<Index>(s / 2) + 1, w = step.width(t);
      if (s % 2 == 0) {
        const Index r0 = u * kProductRows, len = std::min(kProductRows, rows_ - r0);
        step.init(t, r0, len, 0, w);
        if (w >= packed_from)
          packed_product(t, r0, len, 0, w);
        else
          rows_product(r0, len, step.dst(t), ld, step.h(t), hs, w);
        return;
      }
      const Index j0 = u * kStepCols, cols = std::min(kStepCols, step.pointwise_width(t) - j0);
      step.pointwise(t, j0, cols);
      if (t < steps) {
        const Index next = step.width(t + 1);
        if (next >= packed_from && j0 < next) pack_h(t + 1, j0, std::min(cols, next - j0));
      }
    };
    const double flops = 2.0 * static_cast<double>(rows_) * static_cast<double>(depth_) * static_cast<double>(n);
    const int team = team_for(flops, threads);
    // W in one block of rows: a step's product has nothing to share but its columns. The samples are
    // shared instead, each slice of columns (whole pointwise blocks) running every step on its own,
    // with no wait between steps: the calls of a team of one on the same columns, the same bits.
    Index min_width = n;
    for (Index t = 1; t <= steps; ++t) min_width = std::min(min_width, step.width(t));
    // (The team sized by the whole recurrence's work: its slices never wait for one another.)
    const Index blocks = (n + kStepCols - 1) / kStepCols,
                slices = std::min<Index>(team_for(flops * static_cast<double>(steps), threads), blocks);
    if (row_blocks == 1 && min_width >= packed_from && slices > 1) {
      claimed_blocks(static_cast<int>(slices), slices, [&](Index k) {
        const Index c0 = blocks * k / slices * kStepCols, c1 = std::min(n, blocks * (k + 1) / slices * kStepCols);
        for (Index t = 1; t <= steps; ++t) {
          const Index end = std::min(c1, step.width(t));
          if (end > c0) {
            step.init(t, 0, rows_, c0, end - c0);
            packed_product(t, 0, rows_, c0, end);
          }
          for (Index j0 = c0; j0 < std::min(c1, step.pointwise_width(t)); j0 += kStepCols)
            unit(2 * static_cast<std::size_t>(t - 1) + 1, j0 / kStepCols);
        }
      });
      return;
    }
    if (team <= 1) {  // the same units in the same order, without the team's counters
      for (std::size_t s = 0; s < units.size(); ++s)
        for (std::int64_t u = 0; u < units[s]; ++u) unit(s, u);
      return;
    }
    Stages stages(units);
    run_team(team, [&](int) {
      FlushDenormals flush;
      stages.run(unit);
    });
    return;
  }
#endif
  for (Index t = 1; t <= steps; ++t) {  // wide steps: each product on the whole team, by columns
    const Index w = step.width(t);
    if (w > 0) {
      step.init(t, 0, rows_, 0, w);
      product(threads, step.dst(t), ld, step.h(t), hs, w, /*accumulate=*/true);
    }
    const Index pw = step.pointwise_width(t);  // in the team's blocks
    for (Index j0 = 0; j0 < pw; j0 += kStepCols) step.pointwise(t, j0, std::min(kStepCols, pw - j0));
  }
}

template class PackedWeights<float>;
template class PackedWeights<double>;

}  // namespace bppsa::detail
