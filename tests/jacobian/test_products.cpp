// Jacobian products: multiply (every kind pair) and apply (every kind) vs naive dense; kinds; SpGEMM.
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "oracle.hpp"

namespace {

using namespace bppsa;
using oracle::densify;
using oracle::matmul;
using oracle::Md;
using oracle::Rng;
using oracle::small_int_jacobian;

constexpr Kind kKinds[] = {Kind::identity, Kind::diagonal, Kind::dense, Kind::csr, Kind::shared_dense_diag};
constexpr Kind I = Kind::identity, D = Kind::diagonal, F = Kind::dense, C = Kind::csr, S = Kind::shared_dense_diag;

// The result-kind table of include/bppsa/jacobian/product.hpp, copied by hand: rows A (the
// later operand), columns B.
constexpr Kind kExpectedKind[5][5] = {
    {I, D, F, C, S},  // identity · …
    {D, D, F, C, F},  // diagonal · …
    {F, F, F, F, F},  // dense · …
    {C, C, F, C, F},  // csr · …
    {S, S, F, F, F},  // shared_dense_diag · …
};

bool square_only(Kind k) { return k == Kind::identity || k == Kind::diagonal; }

/// Sorted structural pattern of A·B by brute force: (i, j) whenever some k has A(i,k) and
/// B(k,j) in the patterns.
std::vector<std::vector<std::int32_t>> structural_product(const CsrPattern& a, const CsrPattern& b) {
  std::vector<std::set<std::int32_t>> rows(static_cast<std::size_t>(a.rows()));
  for (Index i = 0; i < a.rows(); ++i)
    for (Index p = a.row_ptr()[i]; p < a.row_ptr()[i + 1]; ++p) {
      const Index k = a.col_idx()[p];
      for (Index q = b.row_ptr()[k]; q < b.row_ptr()[k + 1]; ++q)
        rows[static_cast<std::size_t>(i)].insert(b.col_idx()[q]);
    }
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& r : rows) out.emplace_back(r.begin(), r.end());
  return out;
}

std::vector<std::vector<std::int32_t>> rows_of(const CsrPattern& p) {
  std::vector<std::vector<std::int32_t>> out;
  for (Index i = 0; i < p.rows(); ++i)
    out.emplace_back(p.col_idx().begin() + p.row_ptr()[i], p.col_idx().begin() + p.row_ptr()[i + 1]);
  return out;
}

template <class T>
class Products : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Products, Scalars);

/// Checks one product A·B made by the convenience multiply(): kind, shape, count, sharing of
/// patterns / S, and every sample's values against the naive dense product (exact: integers).
template <class T>
void check_product(const Jacobian<T>& a, const Jacobian<T>& b) {
  const Jacobian<T> c = multiply(a, b);
  EXPECT_EQ(c.kind(), kExpectedKind[static_cast<int>(a.kind())][static_cast<int>(b.kind())]);
  ASSERT_EQ(c.rows(), a.rows());
  ASSERT_EQ(c.cols(), b.cols());
  EXPECT_EQ(c.count(), std::max(a.count(), b.count())) << "shared only when both operands are";
  if (c.kind() == Kind::csr) {
    if (a.kind() == Kind::csr && b.kind() == Kind::csr) {
      EXPECT_EQ(rows_of(*c.layout().pattern), structural_product(*a.layout().pattern, *b.layout().pattern));
    } else {  // scaling or identity: the csr operand's pattern itself, not a copy
      EXPECT_EQ(c.layout().pattern, a.kind() == Kind::csr ? a.layout().pattern : b.layout().pattern);
    }
  }
  if (c.kind() == Kind::shared_dense_diag) {
    EXPECT_EQ(c.layout().shared_dense,
              a.kind() == Kind::shared_dense_diag ? a.layout().shared_dense : b.layout().shared_dense);
  }
  for (Index s = 0; s < c.count(); ++s) {
    const Md ref = matmul(densify(a, s), densify(b, s));
    EXPECT_EQ(densify(c, s), ref) << "sample " << s;
  }
}

TYPED_TEST(Products, EveryKindPairSharedAndPerSampleMatchesNaive) {
  using T = TypeParam;
  Rng rng(11);
  const Index batch = 3, k = 4;
  for (Kind ka : kKinds)
    for (Kind kb : kKinds)
      for (int sharing = 0; sharing < 4; ++sharing) {
        const Index m = square_only(ka) ? k : 3, n = square_only(kb) ? k : 5;  // rectangular where allowed
        const Index count_a = (sharing & 1) ? batch : 1, count_b = (sharing & 2) ? batch : 1;
        const auto a = small_int_jacobian<T>(ka, m, k, count_a, rng, -3, 3);
        const auto b = small_int_jacobian<T>(kb, k, n, count_b, rng, -3, 3);
        SCOPED_TRACE(std::string(to_string(ka)) + " · " + to_string(kb) + ", A " + a.layout().describe() + ", B " +
                     b.layout().describe());
        check_product(a, b);
      }
}

TYPED_TEST(Products, LargeDenseProductsUseBlockedPathsAndStayExact) {
  // Above the 48³ cut-over to Eigen's blocked GEMM; integer values keep it exact.
  using T = TypeParam;
  Rng rng(12);
  for (Kind ka : {Kind::dense, Kind::shared_dense_diag, Kind::csr})
    for (Kind kb : {Kind::dense, Kind::shared_dense_diag, Kind::csr}) {
      const auto a = small_int_jacobian<T>(ka, 50, 60, 2, rng);
      const auto b = small_int_jacobian<T>(kb, 60, 55, 1, rng);
      SCOPED_TRACE(std::string(to_string(ka)) + " · " + to_string(kb));
      check_product(a, b);
    }
}

TYPED_TEST(Products, PlannedMultiplyWritesEachSampleWithReusedScratch) {
  using T = TypeParam;
  Rng rng(13);
  const Index batch = 2;
  Scratch<T> scratch;  // one scratch for every product, as the scan uses it
  for (Kind ka : kKinds)
    for (Kind kb : kKinds) {
      const Index m = square_only(ka) ? 6 : 2, n = square_only(kb) ? 6 : 9;
      const auto a = small_int_jacobian<T>(ka, m, 6, batch, rng);
      const auto b = small_int_jacobian<T>(kb, 6, n, 1, rng);
      const ProductPlan<T> plan = plan_product(a.layout(), b.layout(), batch);
      EXPECT_EQ(plan.out.kind, kExpectedKind[static_cast<int>(ka)][static_cast<int>(kb)]);
      const Index per = plan.out.values_per_sample();
      std::vector<T> out(static_cast<std::size_t>(per * plan.out.count));
      for (Index s = 0; s < plan.out.count; ++s) multiply(plan, view(a), view(b), s, out.data() + s * per, scratch);
      for (Index s = 0; s < plan.out.count; ++s)
        EXPECT_EQ(densify(plan.out, out.data() + s * per), matmul(densify(a, s), densify(b, s)))
            << to_string(ka) << " · " << to_string(kb) << " sample " << s;
    }
}

TYPED_TEST(Products, CsrTimesCsrPlanIsReusedForNewValues) {
  using T = TypeParam;
  Rng rng(14);
  const Index batch = 3;
  const auto pa = oracle::random_pattern(5, 7, rng), pb = oracle::random_pattern(7, 4, rng);
  auto a = Jacobian<T>::csr(pa, batch);
  auto b = Jacobian<T>::csr(pb, 1);
  const ProductPlan<T> plan = plan_product(a.layout(), b.layout(), batch);  // symbolic phase once
  ASSERT_EQ(plan.out.kind, Kind::csr);
  EXPECT_EQ(rows_of(*plan.out.pattern), structural_product(*pa, *pb));
  const Index per = plan.out.values_per_sample();
  std::vector<T> out(static_cast<std::size_t>(per * batch));
  Scratch<T> scratch;
  for (int round = 0; round < 4; ++round) {  // numeric phase with fresh values each round
    for (T& x : a.values()) x = T(oracle::uniform_int(rng, -3, 3));
    for (T& x : b.values()) x = T(oracle::uniform_int(rng, -3, 3));
    for (Index s = 0; s < batch; ++s) multiply(plan, view(a), view(b), s, out.data() + s * per, scratch);
    for (Index s = 0; s < batch; ++s)
      EXPECT_EQ(densify(plan.out, out.data() + s * per), matmul(densify(a, s), densify(b, s))) << "round " << round;
  }
}

TYPED_TEST(Products, SpgemmRectangularEmptyRowsAndEmptyResult) {
  using T = TypeParam;
  Rng rng(15);
  // A with an empty row and B with empty rows, rectangular both ways.
  const auto pa = make_csr_pattern(4, 3, {0, 2, 2, 3, 5}, {0, 2, 1, 0, 1});
  const auto pb = make_csr_pattern(3, 6, {0, 0, 3, 3}, {1, 4, 5});  // rows 0 and 2 empty
  auto a = Jacobian<T>::csr(pa, 2), b = Jacobian<T>::csr(pb, 2);
  for (T& x : a.values()) x = T(oracle::uniform_int(rng, 1, 3));
  for (T& x : b.values()) x = T(oracle::uniform_int(rng, -3, -1));
  const Jacobian<T> c = multiply(a, b);
  ASSERT_EQ(c.kind(), Kind::csr);
  EXPECT_EQ(rows_of(*c.layout().pattern), (std::vector<std::vector<std::int32_t>>{{}, {}, {1, 4, 5}, {1, 4, 5}}));
  for (Index s = 0; s < 2; ++s) EXPECT_EQ(densify(c, s), matmul(densify(a, s), densify(b, s)));

  // Structurally zero product: nothing of A reaches a non-empty row of B.
  const auto pz = make_csr_pattern(2, 3, {0, 1, 2}, {0, 2});
  auto z = Jacobian<T>::csr(pz, 1);
  for (T& x : z.values()) x = T(2);
  const Jacobian<T> zc = multiply(z, b);
  ASSERT_EQ(zc.kind(), Kind::csr);
  EXPECT_EQ(zc.layout().pattern->nnz(), 0);
  EXPECT_EQ(densify(zc, 1), Md::Zero(2, 6));

  // Thin shapes: (2×9)(9×1)(1×7), the middle product being 2×1.
  check_product(small_int_jacobian<T>(Kind::csr, 2, 9, 1, rng), small_int_jacobian<T>(Kind::csr, 9, 1, 2, rng));
  const auto ab =
      multiply(small_int_jacobian<T>(Kind::csr, 2, 9, 1, rng), small_int_jacobian<T>(Kind::csr, 9, 1, 1, rng));
  check_product(ab, small_int_jacobian<T>(Kind::csr, 1, 7, 2, rng));
}

TEST(CsrTranspose, IsTheTransposeOfEveryPatternWithEachEntrysSource) {
  // Oracle: the dense matrix of entry numbers, transposed by Eigen; every entry of the transpose
  // names the original entry it came from, rows in ascending column order.
  Rng rng(17);
  const std::vector<CsrPatternPtr> patterns = {
      make_csr_pattern(4, 3, {0, 2, 2, 3, 5}, {0, 2, 1, 0, 1}),  // an empty row, rectangular
      make_csr_pattern(3, 6, {0, 0, 3, 3}, {1, 4, 5}),           // empty rows and columns
      make_csr_pattern(2, 2, {0, 0, 0}, {}),                     // no entries
      small_int_jacobian<double>(Kind::csr, 9, 7, 1, rng).layout().pattern,
      small_int_jacobian<double>(Kind::csr, 1, 12, 1, rng).layout().pattern};
  for (const CsrPatternPtr& p : patterns) {
    Md entry = Md::Constant(p->rows(), p->cols(), -1);
    for (Index r = 0; r < p->rows(); ++r)
      for (std::int32_t k = p->row_ptr()[static_cast<std::size_t>(r)];
           k < p->row_ptr()[static_cast<std::size_t>(r + 1)]; ++k)
        entry(r, p->col_idx()[static_cast<std::size_t>(k)]) = k;
    const Md want = entry.transpose();
    const CsrTranspose t = transpose(*p);
    ASSERT_TRUE(t.pattern->valid()) << t.pattern->error();
    ASSERT_EQ(t.pattern->rows(), p->cols());
    ASSERT_EQ(t.pattern->cols(), p->rows());
    ASSERT_EQ(t.source.size(), static_cast<std::size_t>(p->nnz()));
    Md got = Md::Constant(p->cols(), p->rows(), -1);
    for (Index r = 0; r < t.pattern->rows(); ++r)
      for (std::int32_t k = t.pattern->row_ptr()[static_cast<std::size_t>(r)];
           k < t.pattern->row_ptr()[static_cast<std::size_t>(r + 1)]; ++k)
        got(r, t.pattern->col_idx()[static_cast<std::size_t>(k)]) = t.source[static_cast<std::size_t>(k)];
    EXPECT_EQ(got, want) << p->rows() << "x" << p->cols();
  }
  // An invalid pattern is refused by name.
  const CsrPattern bad(2, 2, {0, 1, 3}, {0, 1});
  EXPECT_THROW(transpose(bad), InvalidArgument);
}

TEST(Products, PlanFlopsFollowTheDocumentedCounts) {
  // "multiply-adds ×2, scalings ×1, copies 0" (product.hpp).
  Rng rng(16);
  const auto dense_a = small_int_jacobian<double>(Kind::dense, 3, 4, 1, rng);
  const auto dense_b = small_int_jacobian<double>(Kind::dense, 4, 5, 1, rng);
  EXPECT_EQ(plan_product(dense_a.layout(), dense_b.layout(), 1).flops_per_sample, 2.0 * 3 * 4 * 5);
  const auto diag_a = Jacobian<double>::diagonal(4, 1), diag_b = Jacobian<double>::diagonal(4, 1);
  EXPECT_EQ(plan_product(diag_a.layout(), diag_b.layout(), 1).flops_per_sample, 4.0);
  const auto id = Jacobian<double>::identity(4);
  EXPECT_EQ(plan_product(id.layout(), dense_b.layout(), 1).flops_per_sample, 0.0);
  // csr·csr: every (i,k) of A meets every entry of B's row k once.
  const auto pa = make_csr_pattern(2, 3, {0, 2, 3}, {0, 2, 1}), pb = make_csr_pattern(3, 2, {0, 2, 3, 4}, {0, 1, 1, 0});
  const auto ca = Jacobian<double>::csr(pa, 1), cb = Jacobian<double>::csr(pb, 1);
  EXPECT_EQ(plan_product(ca.layout(), cb.layout(), 1).flops_per_sample, 2.0 * (2 + 1 + 1));
}

/// Checks apply() on columns [b0, b1) of a padded batch, with and without accumulate.
template <class T>
void check_apply(const Jacobian<T>& a, Index batch, Index b0, Index b1, bool accumulate, Rng& rng,
                 Scratch<T>& scratch) {
  const Index m = a.rows(), k = a.cols(), ldx = k + 2, ldy = m + 1;
  const Matrix<T> x = oracle::small_int_matrix<T>(ldx, batch, rng);
  const Matrix<T> y0 = oracle::small_int_matrix<T>(ldy, batch, rng);
  Matrix<T> y = y0;
  apply(view(a), b0, b1, x.data(), ldx, y.data(), ldy, accumulate, scratch);
  for (Index b = 0; b < batch; ++b) {
    if (b < b0 || b >= b1) {
      EXPECT_EQ(y.col(b), y0.col(b)) << "column " << b << " is outside [" << b0 << ", " << b1 << ")";
      continue;
    }
    const Md ax = matmul(densify(a, b), x.col(b).head(k).template cast<double>());
    const Md expect = accumulate ? Md(ax + y0.col(b).head(m).template cast<double>()) : ax;
    EXPECT_EQ(y.col(b).head(m).template cast<double>(), expect)
        << "column " << b << (accumulate ? " (accumulate)" : "");
    EXPECT_EQ(y.col(b).tail(ldy - m), y0.col(b).tail(ldy - m)) << "padding rows of column " << b << " were written";
  }
}

TYPED_TEST(Products, ApplyEveryKindWithColumnRangesAndAccumulate) {
  using T = TypeParam;
  Rng rng(17);
  Scratch<T> scratch;
  const Index batch = 5;
  for (Kind kind : kKinds)
    for (Index count : {Index{1}, batch})
      for (auto [rows, cols] : {std::pair<Index, Index>{4, 6}, {30, 20}}) {  // small and GEMM-sized
        if (kind == Kind::identity && count != 1) continue;
        const Index r = square_only(kind) ? cols : rows;
        const auto a = small_int_jacobian<T>(kind, r, cols, count, rng);
        SCOPED_TRACE(a.layout().describe());
        for (bool acc : {false, true}) {
          check_apply(a, batch, 1, 4, acc, rng, scratch);
          check_apply(a, batch, 0, batch, acc, rng, scratch);
          check_apply(a, batch, 2, 2, acc, rng, scratch);  // empty range: nothing written
          check_apply(a, batch, 4, 5, acc, rng, scratch);
        }
      }
}

TYPED_TEST(Products, ApplyFlopsFollowTheDocumentedCounts) {
  using T = TypeParam;
  Rng rng(18);
  EXPECT_EQ(apply_flops(Jacobian<T>::dense(3, 7, 1).layout()), 2.0 * 3 * 7);
  EXPECT_EQ(apply_flops(Jacobian<T>::diagonal(5, 1).layout()), 5.0);
  EXPECT_EQ(apply_flops(Jacobian<T>::identity(5).layout()), 0.0);
  const auto c = small_int_jacobian<T>(Kind::csr, 6, 4, 1, rng);
  EXPECT_EQ(apply_flops(c.layout()), 2.0 * static_cast<double>(c.layout().pattern->nnz()));
}

TYPED_TEST(Products, ToDenseAgreesWithTheRawLayoutContract) {
  // The library's to_dense (used by callers for printing and checks) against our densify.
  using T = TypeParam;
  Rng rng(19);
  for (Kind kind : kKinds) {
    const Index r = square_only(kind) ? 5 : 3;
    const auto j = small_int_jacobian<T>(kind, r, 5, kind == Kind::identity ? 1 : 2, rng);
    for (Index s = 0; s < j.count(); ++s)
      EXPECT_EQ(j.to_dense(s).template cast<double>(), densify(j, s)) << to_string(kind);
  }
}

TEST(Products, MismatchedOperandsThrowShapeError) {
  const auto a = Jacobian<double>::dense(3, 4, 1), b = Jacobian<double>::dense(5, 2, 1);
  EXPECT_THROW(plan_product(a.layout(), b.layout(), 1), ShapeError);
  EXPECT_THROW(multiply(a, b), ShapeError);
  const auto p2 = Jacobian<double>::dense(3, 4, 2), p3 = Jacobian<double>::dense(4, 2, 3);
  EXPECT_THROW(multiply(p2, p3), ShapeError);  // counts 2 and 3: no batch fits both
  EXPECT_THROW(plan_product(p2.layout(), Jacobian<double>::dense(4, 2, 1).layout(), 4), ShapeError);
}

// Every Jacobian's values start on a cache line (bppsa/core/aligned.hpp), whatever the kind, shape and
// count, so a product's bits do not depend on where its operands and result were allocated: with AVX2 or
// AVX-512, Eigen peels scalar iterations up to the first aligned element, and a result landing at
// another address mod 64 was rounded otherwise (the default build is -march=native).
template <class T>
void products_are_the_same_bits_in_every_allocation() {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const Index n : {1, 3, 7, 8, 13, 33}) {
    for (const Jacobian<T>& j :
         {Jacobian<T>::dense(n, n + 2, 3), Jacobian<T>::diagonal(n, 2), Jacobian<T>::dense(n, 1)})
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(j.values().data()) % kBufferAlignment, 0u) << j.layout().describe();
    Jacobian<T> a = Jacobian<T>::dense(n, n + 5, 2), b = Jacobian<T>::dense(n + 5, n + 1, 2);
    for (Jacobian<T>* j : {&a, &b})
      for (T& v : j->values()) v = static_cast<T>(u(rng));
    const Jacobian<T> first = multiply(a, b);
    std::vector<std::vector<char>> decoys;  // allocations of every size between the copies
    for (int k = 1; k <= 24; ++k) {
      decoys.emplace_back(static_cast<std::size_t>(k * 8 + 4));
      const Jacobian<T> a2 = a;
      decoys.emplace_back(static_cast<std::size_t>(k * 4 + 1));
      const Jacobian<T> b2 = b;
      const Jacobian<T> c = multiply(a2, b2);
      ASSERT_EQ(0, std::memcmp(first.values().data(), c.values().data(), first.values().size_bytes()))
          << "n = " << n << ", copy " << k;
    }
  }
}

TEST(Products, ValuesStartOnCacheLinesAndProductsAreTheSameBitsInEveryAllocation) {
  products_are_the_same_bits_in_every_allocation<float>();
  products_are_the_same_bits_in_every_allocation<double>();
}

}  // namespace
