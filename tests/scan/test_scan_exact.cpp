// Exact operand order: on exactly representable data every algorithm equals the naive oracle exactly.
#include "oracle.hpp"

namespace {

using namespace bppsa;
using oracle::Md;
using oracle::Rng;

/// Every algorithm equals the oracle exactly, hence all algorithms equal each other: every
/// entry of every g_k compares equal (IEEE equality; with exact zeros the sign of a zero may
/// legitimately depend on the summation order, so this is not a memcmp).
template <class T>
void check_exact(const Chain<T>& chain, const Matrix<T>& g_last, int threads = 2) {
  const std::vector<Md> ref = oracle::naive_backward(chain, g_last);
  Gradients<T> got;
  for (const auto& a : oracle::all_algorithms()) {
    Scanner<T> scanner(oracle::options_for(a, threads));
    scanner.run(chain, g_last, got);
    EXPECT_TRUE(oracle::equal_to(got, ref)) << a.name << ", N = " << chain.size();
  }
}

template <class T>
class Exact : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Exact, Scalars);

TYPED_TEST(Exact, SignedPermutationChainsEveryNUpTo300) {
  using T = TypeParam;
  Rng rng(sizeof(T) * 1000 + 1);
  int order_sensitive = 0;
  for (Index n = 1; n <= 300; ++n) {
    const Index dim = 3 + n % 3, batch = 2;
    const Chain<T> chain = oracle::signed_permutation_chain<T>(n, dim, batch, rng);
    const Matrix<T> g_last = oracle::small_int_matrix<T>(dim, batch, rng);
    SCOPED_TRACE("signed permutations, N = " + std::to_string(n));
    check_exact(chain, g_last);
    if (n >= 2)
      order_sensitive += oracle::naive_backward(chain, g_last, true)[0] != oracle::naive_backward(chain, g_last)[0];
  }
  // Sanity of the data: applying the Jacobians in the wrong order changes g_0 almost always,
  // so an algorithm that swapped operands could not pass the checks above.
  EXPECT_GE(order_sensitive, 280) << "of 299 chains";
}

TYPED_TEST(Exact, SignedPermutationAffineChains) {
  using T = TypeParam;
  Rng rng(sizeof(T) * 1000 + 2);
  for (Index n = 1; n <= 100; ++n) {
    const Index dim = 4, batch = 3;
    Chain<T> chain = oracle::signed_permutation_chain<T>(n, dim, batch, rng);
    for (Index k = 0; k < n; ++k)
      if (oracle::uniform_int(rng, 0, 2) != 0) chain.set_injection(k, oracle::small_int_matrix<T>(dim, batch, rng));
    const Matrix<T> g_last = oracle::small_int_matrix<T>(dim, batch, rng);
    SCOPED_TRACE("affine signed permutations, N = " + std::to_string(n));
    check_exact(chain, g_last);
  }
}

TEST(Exact, SmallIntegerChainsDouble) {
  // Entries in {-2..2}, dims 2..4: |values| < 8^10 · 3, far below 2^53.
  Rng rng(3);
  for (Index n = 1; n <= 10; ++n)
    for (int rep = 0; rep < 25; ++rep) {
      const Index batch = 1 + rep % 3;
      const Chain<double> chain = oracle::small_int_chain<double>(n, batch, rng);
      const Matrix<double> g_last = oracle::small_int_matrix<double>(chain.dim(n), batch, rng);
      SCOPED_TRACE("small integers, N = " + std::to_string(n) + ", rep " + std::to_string(rep));
      check_exact(chain, g_last);
    }
}

TEST(Exact, SmallIntegerChainsFloat) {
  // N ≤ 6 keeps every partial sum below 2^24.
  Rng rng(4);
  for (Index n = 1; n <= 6; ++n)
    for (int rep = 0; rep < 25; ++rep) {
      const Chain<float> chain = oracle::small_int_chain<float>(n, 2, rng);
      const Matrix<float> g_last = oracle::small_int_matrix<float>(chain.dim(n), 2, rng);
      SCOPED_TRACE("small integers (float), N = " + std::to_string(n) + ", rep " + std::to_string(rep));
      check_exact(chain, g_last);
    }
}

TEST(Exact, SmallIntegerChainsAcrossThreadCounts) {
  Rng rng(5);
  for (int threads : {1, 3, 8})
    for (Index n : {4, 7, 10}) {
      const Index batch = 2;
      const Chain<double> chain = oracle::small_int_chain<double>(n, batch, rng);
      const Matrix<double> g_last = oracle::small_int_matrix<double>(chain.dim(n), batch, rng);
      SCOPED_TRACE("threads " + std::to_string(threads) + ", N = " + std::to_string(n));
      check_exact(chain, g_last, threads);
    }
}

TEST(Exact, DegenerateElements) {
  // All-identity chains (no values at all), structurally empty CSR elements (nnz 0: the
  // gradient becomes exactly zero) and 1-dimensional states, every algorithm, exact.
  Rng rng(6);
  for (Index n : {1, 2, 3, 8, 33}) {
    Chain<double> ids(2);
    for (Index k = 0; k < n; ++k) ids.push_back(Jacobian<double>::identity(3));
    const Matrix<double> g = oracle::small_int_matrix<double>(3, 2, rng);
    SCOPED_TRACE("identity chain, N = " + std::to_string(n));
    check_exact(ids, g);

    Chain<double> mixed(3);
    for (Index k = 0; k < n; ++k) {
      const Index rows = k % 3 == 0 ? 1 : 2, cols = k % 3 == 2 ? 1 : 2;  // dims cycle 1, 2, 2, 1, …
      if (k == n / 2)
        mixed.push_back(
            Jacobian<double>::csr(make_csr_pattern(rows, cols, std::vector<std::int32_t>(rows + 1, 0), {}), 3));
      else
        mixed.push_back(
            oracle::small_int_jacobian<double>(k % 2 ? Kind::dense : Kind::shared_dense_diag, rows, cols, 3, rng));
    }
    const Matrix<double> g3 = oracle::small_int_matrix<double>(mixed.dim(n), 3, rng);
    SCOPED_TRACE("empty csr and d = 1, N = " + std::to_string(n));
    check_exact(mixed, g3);
    const Gradients<double> out = backward(mixed, g3);
    EXPECT_TRUE(out.g(0).isZero(0)) << "everything before an empty element is exactly zero";
  }
}

/// J_1^T = A, J_2^T = B with A·B ≠ B·A, as dense or CSR.
Jacobian<double> two_by_two(const Matrix<double>& m, bool as_csr) {
  if (!as_csr) {
    Jacobian<double> j = Jacobian<double>::dense(2, 2, 1);
    j.dense_map(0) = m;
    return j;
  }
  Jacobian<double> j = Jacobian<double>::csr(make_csr_pattern(2, 2, {0, 2, 4}, {0, 1, 0, 1}), 1);
  auto v = j.values();
  v[0] = m(0, 0), v[1] = m(0, 1), v[2] = m(1, 0), v[3] = m(1, 1);
  return j;
}

TEST(Exact, NonCommutingPairGivesTheOrderedProductNotTheCommutedOne) {
  Matrix<double> a(2, 2), b(2, 2), g2(2, 1);
  a << 1, 1, 0, 1;  // J_1^T
  b << 1, 0, 1, 1;  // J_2^T
  g2 << 1, 0;
  // By hand: g_1 = B g_2 = (1, 1); g_0 = A g_1 = (2, 1). Commuted: B (A g_2) = B (1, 0) = (1, 1).
  Matrix<double> g1(2, 1), g0(2, 1), commuted(2, 1);
  g1 << 1, 1;
  g0 << 2, 1;
  commuted << 1, 1;
  ASSERT_NE(g0, commuted) << "the test data must be order-sensitive";
  for (bool csr_a : {false, true})
    for (bool csr_b : {false, true}) {
      Chain<double> chain(1);
      chain.push_back(two_by_two(a, csr_a));
      chain.push_back(two_by_two(b, csr_b));
      for (const auto& alg : oracle::all_algorithms()) {
        const Gradients<double> out = backward(chain, g2, oracle::options_for(alg));
        EXPECT_EQ(out.g(1), g1) << alg.name;
        EXPECT_EQ(out.g(0), g0) << alg.name << (csr_a ? " csr" : " dense") << "·" << (csr_b ? "csr" : "dense");
        EXPECT_NE(out.g(0), commuted) << alg.name;
      }
    }
}

TEST(Exact, ProductsInsideTheScanKeepOrder) {
  // N = 7 upper/lower shears: the up-sweep's matrix-matrix products (a_3·a_2, …) decide g_0;
  // compared with hand-built sequential products, not with the library.
  Matrix<double> upper(2, 2), lower(2, 2);
  upper << 1, 1, 0, 1;
  lower << 1, 0, 1, 1;
  for (int pattern = 0; pattern < 128; ++pattern) {
    Chain<double> chain(1);
    Matrix<double> expect(2, 1);
    expect << 1, -1;
    const Matrix<double> g_last = expect;
    std::vector<Matrix<double>> ms;
    for (int k = 1; k <= 7; ++k) ms.push_back((pattern >> (k - 1)) & 1 ? upper : lower);
    for (int k = 1; k <= 7; ++k) chain.push_back(two_by_two(ms[static_cast<std::size_t>(k) - 1], k % 2 == 0));
    for (int k = 7; k >= 1; --k) expect = oracle::matmul(ms[static_cast<std::size_t>(k) - 1], expect);
    for (const auto& alg : oracle::all_algorithms())
      EXPECT_EQ(backward(chain, g_last, oracle::options_for(alg, 3)).g(0), expect)
          << alg.name << " pattern " << pattern;
  }
}

}  // namespace
