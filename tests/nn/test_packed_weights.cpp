// PackedWeights (src/nn/cpu/packed_weights.hpp): the recurrences' per-step W · h (and BP's W^T · δ,
// a column-major W) against a plain triple loop in long double, for every path (matrix-vector,
// packed, wide), strides that are not the shapes, block remainders, and 1 or 3 threads giving the
// same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "core/team.hpp"
#include "nn/cpu/packed_weights.hpp"

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

}  // namespace
