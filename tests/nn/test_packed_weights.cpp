// The CPU half's product drivers against a plain triple loop in long double: PackedWeights
// (src/nn/cpu/packed_weights.hpp: the recurrences' per-step W · h and BP's W^T · δ, a column-major W)
// on every path (matrix-vector, packed, wide) and in a whole recurrence, and parallel_product (src/nn/cpu/parallel.hpp:
// blocked_product's two tilings, either storage order of each operand and of dst), with strides that
// are not the shapes, tile and depth-chunk remainders, and 1 or 3 threads giving the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "core/team.hpp"
#include "nn/cpu/packed_weights.hpp"
#include "nn/cpu/parallel.hpp"

namespace {

using bppsa::Index;
using bppsa::detail::PackedWeights;

template <class T>
void expect_products(Index rows, Index depth, Index n, bool col_major) {
  std::mt19937_64 rng(static_cast<unsigned>(rows * 1000 + depth * 10 + n));
  std::uniform_real_distribution<double> u(-1, 1);
  // W(i, k) at w[i·w_stride + k] (row-major) or w[k·w_stride + i] (column-major); no stride the shape.
  const Index w_stride = (col_major ? rows : depth) + 3, h_stride = depth + 5, d_stride = rows + 7;
  const auto at = [&](Index i, Index k) {
    return static_cast<std::size_t>(col_major ? k * w_stride + i : i * w_stride + k);
  };
  std::vector<T> w(static_cast<std::size_t>((col_major ? depth : rows) * w_stride)),
      h(static_cast<std::size_t>(n * h_stride));
  for (T& v : w) v = static_cast<T>(u(rng));
  for (T& v : h) v = static_cast<T>(u(rng));
  PackedWeights<T> packed;
  packed.pack(w.data(), rows, depth, w_stride, col_major);
  const bppsa::detail::FlopsPerThread full_teams(0);
  std::vector<T> first;
  // One destination for both thread counts: Eigen's matrix-vector path peels by the destination's
  // alignment, which a second allocation could change (as the record's columns never do between calls).
  std::vector<T> d(static_cast<std::size_t>(n * d_stride));
  for (int threads : {1, 3}) {
    std::fill(d.begin(), d.end(), T(7));  // the padding rows must stay 7
    packed.product(threads, d.data(), d_stride, h.data(), h_stride, n);
    for (Index j = 0; j < n; ++j)
      for (Index i = 0; i < d_stride; ++i) {
        const T got = d[static_cast<std::size_t>(j * d_stride + i)];
        if (i >= rows) {
          ASSERT_EQ(got, T(7)) << "row " << i << " past the product was written";
          continue;
        }
        long double want = 0, size = 0;
        for (Index k = 0; k < depth; ++k) {
          const long double a = w[at(i, k)], b = h[static_cast<std::size_t>(j * h_stride + k)];
          want += a * b;
          size += std::abs(a * b);
        }
        const double tol =
            4.0 * static_cast<double>(depth) * std::numeric_limits<T>::epsilon() * static_cast<double>(size);
        ASSERT_NEAR(static_cast<double>(got), static_cast<double>(want), tol)
            << rows << "×" << depth << " · " << depth << "×" << n << ", element (" << i << ", " << j << ")";
      }
    if (threads == 1)
      first = d;
    else
      EXPECT_EQ(std::memcmp(d.data(), first.data(), sizeof(T) * d.size()), 0)
          << rows << "×" << depth << " · n " << n << ": 3 threads changed the bits";
  }
}

TEST(PackedWeights, ProductsMatchALoopOnEveryPath) {
  for (Index n : {1, 3, 4, 16, 33, 600})  // below 4: matrix-vector; 600: blocks of columns
    for (auto [rows, depth] : {std::pair<Index, Index>{150, 37}, {64, 256}, {7, 5}, {200, 1}}) {
      for (bool col_major : {false, true}) {
        expect_products<float>(rows, depth, n, col_major);
        expect_products<double>(rows, depth, n, col_major);
      }
    }
}

// A second pack() of another weight into the same object replaces the first.
TEST(PackedWeights, RepackingTakesTheNewWeight) {
  std::vector<double> a(20 * 8, 1.0), b(20 * 8, 2.0), h(8 * 5, 1.0), d(20 * 5);
  PackedWeights<double> packed;
  packed.pack(a.data(), 20, 8, 8);
  packed.pack(b.data(), 20, 8, 8);
  packed.product(1, d.data(), 20, h.data(), 8, 5);
  for (double v : d) EXPECT_EQ(v, 16.0);
}

/// dst = a · b through parallel_product: a m × k and b k × n of either storage order, dst of
/// either, each a block of a larger matrix (strides not the shapes), against a long-double loop.
template <class T, int DstOrder, int AOrder, int BOrder>
void expect_parallel_product(Index m, Index n, Index k, bool by_columns) {
  using Eigen::Dynamic;
  std::mt19937_64 rng(static_cast<unsigned>(m * 7919 + n * 31 + k));
  std::uniform_real_distribution<double> u(-1, 1);
  Eigen::Matrix<T, Dynamic, Dynamic, AOrder> a_all(m + 3, k + 2);
  Eigen::Matrix<T, Dynamic, Dynamic, BOrder> b_all(k + 5, n + 1);
  for (Index i = 0; i < a_all.size(); ++i) a_all.data()[i] = static_cast<T>(u(rng));
  for (Index i = 0; i < b_all.size(); ++i) b_all.data()[i] = static_cast<T>(u(rng));
  const auto a = a_all.block(1, 2, m, k);
  const auto b = b_all.block(3, 0, k, n);
  Eigen::Matrix<T, Dynamic, Dynamic, DstOrder> d_all(m + 4, n + 2), first;
  const bppsa::detail::FlopsPerThread full_teams(0);
  for (int threads : {1, 3}) {
    d_all.setConstant(T(7));  // outside the block: must stay 7
    bppsa::detail::parallel_product(threads, d_all.block(2, 1, m, n), a, b, by_columns);
    for (Index i = 0; i < d_all.rows(); ++i)
      for (Index j = 0; j < d_all.cols(); ++j) {
        const T got = d_all(i, j);
        if (i < 2 || i >= m + 2 || j < 1 || j >= n + 1) {
          ASSERT_EQ(got, T(7)) << "(" << i << ", " << j << ") outside the product was written";
          continue;
        }
        long double want = 0, size = 0;
        for (Index q = 0; q < k; ++q) {
          const long double p = static_cast<long double>(a(i - 2, q)) * b(q, j - 1);
          want += p;
          size += std::abs(p);
        }
        const double tol = 4.0 * static_cast<double>(k) * std::numeric_limits<T>::epsilon() * static_cast<double>(size);
        ASSERT_NEAR(static_cast<double>(got), static_cast<double>(want), tol)
            << m << "×" << k << " · " << k << "×" << n << (by_columns ? " by columns" : " by rows") << ", orders "
            << DstOrder << AOrder << BOrder << ", element (" << i - 2 << ", " << j - 1 << ")";
      }
    if (threads == 1)
      first = d_all;
    else
      EXPECT_TRUE((d_all.array() == first.array()).all())
          << m << "×" << k << " · n " << n << (by_columns ? " by columns" : " by rows")
          << ": 3 threads changed the bits";
  }
}

template <class T>
void expect_parallel_products(Index m, Index n, Index k, bool by_columns) {
  constexpr int C = Eigen::ColMajor, R = Eigen::RowMajor;
  expect_parallel_product<T, C, C, C>(m, n, k, by_columns);
  expect_parallel_product<T, C, R, C>(m, n, k, by_columns);
  expect_parallel_product<T, C, C, R>(m, n, k, by_columns);
  expect_parallel_product<T, R, R, R>(m, n, k, by_columns);
  expect_parallel_product<T, R, C, R>(m, n, k, by_columns);
}

// Shapes with remainders in every tiling: rows not whole micro-kernel panels, columns not whole
// 256-column tiles, the depth in several 256-deep chunks with a partial last one, depth 0, and
// fewer than 4 columns (Eigen's matrix-vector path).
TEST(ParallelProduct, MatchesALoopOnEveryTilingAndStorageOrder) {
  for (bool by_columns : {true, false})
    for (auto [m, n, k] : {std::tuple<Index, Index, Index>{130, 600, 37},
                           {70, 300, 600},
                           {200, 5, 513},
                           {9, 260, 1},
                           {33, 3, 40},
                           {1, 17, 300},
                           {50, 40, 0}}) {
      expect_parallel_products<float>(m, n, k, by_columns);
      expect_parallel_products<double>(m, n, k, by_columns);
    }
}

/// A recurrence of `rows` = 2 · depth pre-activations a = c + t/100 + W · h_{t−1} and state
/// h_t(i) = tanh(a(i) + a(depth + i) / 2), steps of the given widths, in one step buffer (as the GRU's),
/// h with padding rows (strides not the shapes).
template <class T>
class ToySteps final : public bppsa::detail::RecurrenceStep<T> {
 public:
  ToySteps(Index depth, std::vector<Index> widths, const std::vector<T>& c, const std::vector<T>& h0)
      : depth_(depth),
        widths_(std::move(widths)),
        c_(c),
        a_(static_cast<std::size_t>(a_stride() * widths_[0])),
        h_(static_cast<std::size_t>(h_stride() * widths_[0]) * (widths_.size() + 1)) {
    std::copy(h0.begin(), h0.end(), h_.begin());
  }
  Index width(Index t) const override { return widths_[static_cast<std::size_t>(t - 1)]; }
  T* dst(Index) override { return a_.data(); }
  Index dst_stride() const override { return a_stride(); }
  const T* h(Index t) const override { return h_.data() + (t - 1) * widths_[0] * h_stride(); }
  Index h_stride() const override { return depth_ + 3; }
  void init(Index t, Index r0, Index rows, Index j0, Index cols) override {
    for (Index j = j0; j < j0 + cols; ++j)
      for (Index r = r0; r < r0 + rows; ++r)
        a_[static_cast<std::size_t>(j * a_stride() + r)] =
            c_[static_cast<std::size_t>(r)] + static_cast<T>(t % 100) / T(100);
  }
  void pointwise(Index t, Index j0, Index cols) override {
    for (Index j = j0; j < j0 + cols; ++j)
      for (Index i = 0; i < depth_; ++i) {
        const T* a = a_.data() + j * a_stride();
        h_[static_cast<std::size_t>((t * widths_[0] + j) * h_stride() + i)] = std::tanh(a[i] + a[depth_ + i] / T(2));
      }
  }
  /// h_t's column j.
  const T* state(Index t, Index j) const { return h_.data() + (t * widths_[0] + j) * h_stride(); }

 private:
  Index a_stride() const { return 2 * depth_ + 5; }
  Index depth_;
  std::vector<Index> widths_;
  std::vector<T> c_, a_, h_;
};

/// col_major: W stored by columns (BP's W_hh^T, packed transposed), else by rows (the forward's W_hh).
template <class T>
void expect_recurrence(Index depth, const std::vector<Index>& widths, bool col_major = false) {
  const Index rows = 2 * depth, n = widths[0], steps = static_cast<Index>(widths.size());
  std::mt19937_64 rng(static_cast<unsigned>(depth * 100 + n));
  std::uniform_real_distribution<double> u(-1, 1);
  const Index w_stride = (col_major ? rows : depth) + 2;  // W(r, k) at w[at(r, k)]
  const auto at = [&](Index r, Index k) {
    return static_cast<std::size_t>(col_major ? k * w_stride + r : r * w_stride + k);
  };
  std::vector<T> w(static_cast<std::size_t>((col_major ? depth : rows) * w_stride)), c(static_cast<std::size_t>(rows)),
      h0(static_cast<std::size_t>(n * (depth + 3)));
  const double scale = 0.5 / std::sqrt(static_cast<double>(depth));  // contracting: errors do not grow
  for (T& v : w) v = static_cast<T>(scale * u(rng));
  for (T& v : c) v = static_cast<T>(u(rng));
  for (T& v : h0) v = static_cast<T>(u(rng));
  // The oracle: the same recurrence in long double, step by step, column by column.
  std::vector<std::vector<long double>> want(static_cast<std::size_t>(n));
  for (Index j = 0; j < n; ++j) {
    std::vector<long double> h(h0.begin() + j * (depth + 3), h0.begin() + j * (depth + 3) + depth), a(rows);
    for (Index t = 1; t <= steps && j < widths[static_cast<std::size_t>(t - 1)]; ++t) {
      for (Index r = 0; r < rows; ++r) {
        a[r] = static_cast<long double>(c[r]) + static_cast<long double>(static_cast<T>(t % 100) / T(100));
        for (Index k = 0; k < depth; ++k) a[r] += static_cast<long double>(w[at(r, k)]) * h[k];
      }
      for (Index i = 0; i < depth; ++i) h[i] = std::tanh(a[i] + a[depth + i] / 2);
    }
    want[j] = h;
  }
  const bppsa::detail::FlopsPerThread full_teams(0);
  std::vector<std::vector<T>> first;
  for (int threads : {1, 2, 3}) {
    PackedWeights<T> packed;
    packed.pack(w.data(), rows, depth, w_stride, col_major);
    ToySteps<T> toy(depth, widths, c, h0);
    packed.recurrence(threads, steps, toy);
    std::vector<std::vector<T>> got;
    for (Index j = 0; j < n; ++j) {
      Index last = 0;  // the last step sample j ran
      while (last < steps && j < widths[static_cast<std::size_t>(last)]) ++last;
      got.emplace_back(toy.state(last, j), toy.state(last, j) + depth);
      for (Index i = 0; i < depth; ++i)
        ASSERT_NEAR(static_cast<double>(got.back()[i]), static_cast<double>(want[j][i]),
                    64.0 * static_cast<double>(depth) * std::numeric_limits<T>::epsilon())
            << "depth " << depth << (col_major ? " (W by columns)" : "") << ", widths from " << n << ", sample " << j
            << " after step " << last << ", row " << i << ", " << threads << " threads";
    }
    if (threads == 1)
      first = got;
    else
      EXPECT_EQ(got, first) << "depth " << depth << (col_major ? " (W by columns)" : "") << ", widths from " << n
                            << ": " << threads << " threads changed the bits";
  }
}

// PackedWeights::recurrence (the cells' forward; BP's, W by columns) against a long-double loop:
// steps on every product path (packed columns from 2, not whole panels; 1 column, on W or, over
// many steps, its row-major copy; wide steps by columns), widths that shrink, and 1, 2 or 3 threads
// giving the same bits, W in blocks of rows shared per step (depth 37, 64) and in one block (depth 5:
// slices of columns, each running every step; their last one with a padded panel at widths 23, 22, 18).
TEST(PackedWeights, RecurrenceMatchesALoopAndTheThreadCount) {
  const std::vector<std::vector<Index>> schedules = {
      {13, 13, 9, 9, 6, 5, 5, 3, 1, 1}, {16, 16, 16, 16, 12, 12}, {4, 4, 3, 2, 2}, {1, 1, 1, 1}, {3, 3},
      {23, 23, 22, 18, 18, 7, 6}};
  for (Index depth : {37, 64, 5}) {
    for (const auto& widths : schedules) {
      for (bool col_major : {false, true}) {
        expect_recurrence<float>(depth, widths, col_major);
        expect_recurrence<double>(depth, widths, col_major);
      }
    }
  }
  expect_recurrence<float>(20, std::vector<Index>(3, 600));  // wide steps: step by step, by columns
  expect_recurrence<double>(20, {600, 600, 7, 1});
  expect_recurrence<float>(20, std::vector<Index>(3, 600), /*col_major=*/true);
  // Enough steps × depth that 1 column reads W's row-major copy (kTransposeMinWork), and 2 packed.
  for (Index n : {1, 2}) {
    expect_recurrence<float>(64, std::vector<Index>(5000, n), /*col_major=*/true);
    expect_recurrence<double>(64, std::vector<Index>(5000, n), /*col_major=*/true);
  }
}

}  // namespace
