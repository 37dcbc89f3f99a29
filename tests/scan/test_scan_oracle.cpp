// Every scan algorithm vs the naive dense BP oracle: N up to 10^5, all kinds, rectangular, affine.
#include "oracle.hpp"
#include "tolerance.hpp"

namespace {

using namespace bppsa;
using oracle::Md;
using oracle::Rng;

template <class T>
constexpr double kTol = testutil::tol<T>(testutil::Op::scan);

/// Runs each algorithm of `algos` on the chain and compares every g_k with the oracle.
template <class T>
void check_algorithms(const Chain<T>& chain, const Matrix<T>& g_last, const std::vector<oracle::AlgoCase>& algos,
                      int threads = 2) {
  const std::vector<Md> ref = oracle::naive_backward(chain, g_last);
  Gradients<T> got;
  for (const auto& a : algos) {
    Scanner<T> scanner(oracle::options_for(a, threads));
    const ScanStats& st = scanner.run(chain, g_last, got);
    EXPECT_TRUE(oracle::close_to(got, ref, kTol<T>))
        << a.name << " (ran " << to_string(st.algorithm) << ", " << st.chunks << " chunks), N = " << chain.size()
        << ", batch " << chain.batch();
  }
}

template <class T>
void check_random(RandomChainSpec spec, int threads = 2) {
  const RandomProblem<T> p = random_problem<T>(spec);
  SCOPED_TRACE(std::string("kind ") + to_string(spec.kind) + ", N " + std::to_string(spec.n) + ", dim " +
               std::to_string(spec.dim) + (spec.shared ? ", shared" : "") + (spec.affine ? ", affine" : ""));
  check_algorithms(p.chain, p.g_last, oracle::all_algorithms(), threads);
}

class EveryKind : public ::testing::TestWithParam<ChainKind> {};
INSTANTIATE_TEST_SUITE_P(Scan, EveryKind,
                         ::testing::Values(ChainKind::dense, ChainKind::diagonal, ChainKind::csr,
                                           ChainKind::shared_dense_diag, ChainKind::mixed),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_P(EveryKind, EveryNFrom1To300MatchesOracle) {
  for (Index n = 1; n <= 300; ++n)
    check_random<double>({n, 3 + n % 3, 2, GetParam(), n % 2 == 1, false, static_cast<std::uint64_t>(n)});
}

TEST_P(EveryKind, FloatEveryThirdNUpTo300MatchesOracle) {
  for (Index n = 1; n <= 300; n += 3)
    check_random<float>({n, 4, 2, GetParam(), n % 2 == 0, false, static_cast<std::uint64_t>(1000 + n)});
}

TEST_P(EveryKind, PowersOfTwoPlusMinusOne) {
  for (int k = 1; k <= 12; ++k)
    for (Index n : {(Index{1} << k) - 1, Index{1} << k, (Index{1} << k) + 1})
      check_random<double>({n, 3, 2, GetParam(), k % 2 == 0, false, static_cast<std::uint64_t>(n)});
}

TEST_P(EveryKind, AffineWithSomeInjectionsUnset) {
  for (Index n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17, 31, 32, 33, 64, 100, 255, 513}) {
    RandomProblem<double> p =
        random_problem<double>({n, 4, 2, GetParam(), n % 2 == 0, true, static_cast<std::uint64_t>(n)});
    // Keep e_k only for k ≢ 1 (mod 3): unset injections are zero.
    std::vector<Matrix<double>> e;
    for (Index k = 0; k < n; ++k) e.push_back(*p.chain.injection(k));
    p.chain.clear_injections();
    for (Index k = 0; k < n; ++k)
      if (k % 3 != 1) p.chain.set_injection(k, e[static_cast<std::size_t>(k)]);
    SCOPED_TRACE("affine, N = " + std::to_string(n));
    check_algorithms(p.chain, p.g_last, oracle::all_algorithms());
  }
}

TEST_P(EveryKind, AffineEveryInjectionFloat) {
  for (Index n : {1, 2, 5, 10, 33, 128, 300}) check_random<float>({n, 4, 3, GetParam(), false, true, 77});
}

TEST(ScanOracle, AffineSingleInjectionAtEitherEnd) {
  for (Index n : {1, 2, 7, 40}) {
    RandomProblem<double> p = random_problem<double>({n, 3, 2, ChainKind::mixed, false, false, 5});
    Rng rng(static_cast<std::uint64_t>(n));
    for (Index only : {Index{0}, n - 1}) {
      p.chain.clear_injections();
      p.chain.set_injection(only, oracle::small_int_matrix<double>(p.chain.dim(only), 2, rng));
      SCOPED_TRACE("N = " + std::to_string(n) + ", only e_" + std::to_string(only));
      check_algorithms(p.chain, p.g_last, oracle::all_algorithms());
    }
  }
}

/// A chain of rectangular dense and CSR elements with dimensions in [1, 7] (d = 1 included),
/// values U(−1, 1) scaled by 1/√cols.
template <class T>
Chain<T> rectangular_chain(Index n, Index batch, Rng& rng) {
  Chain<T> chain(batch);
  std::uniform_real_distribution<double> u(-1, 1);
  Index rows = oracle::uniform_int(rng, 1, 7);
  for (Index k = 1; k <= n; ++k) {
    const Index cols = oracle::uniform_int(rng, 1, 7);
    const Index count = oracle::uniform_int(rng, 0, 1) ? 1 : batch;
    Jacobian<T> j = oracle::uniform_int(rng, 0, 1)
                        ? Jacobian<T>::dense(rows, cols, count)
                        : Jacobian<T>::csr(oracle::random_pattern(rows, cols, rng, 60), count);
    for (T& x : j.values()) x = T(1.6 * u(rng) / std::sqrt(double(cols)));
    chain.push_back(std::move(j));
    rows = cols;
  }
  return chain;
}

TEST(ScanOracle, RectangularDenseAndCsrChains) {
  Rng rng(21);
  for (Index n : {1, 2, 3, 5, 8, 15, 16, 17, 40, 99, 160}) {
    for (Index batch : {1, 3}) {
      const Chain<double> chain = rectangular_chain<double>(n, batch, rng);
      std::normal_distribution<double> g(0, 1);
      Matrix<double> g_last(chain.dim(n), batch);
      for (Index i = 0; i < g_last.size(); ++i) g_last.data()[i] = g(rng);
      SCOPED_TRACE("rectangular, N = " + std::to_string(n) + ", batch " + std::to_string(batch));
      check_algorithms(chain, g_last, oracle::all_algorithms());
    }
  }
}

TEST(ScanOracle, MixedChainsBatchSizesAndThreads) {
  for (Index batch : {1, 2, 5})
    for (int threads : {1, 3})
      for (Index n : {10, 77, 250})
        check_random<double>({n, 6, batch, ChainKind::mixed, false, n == 77, static_cast<std::uint64_t>(n * batch)},
                             threads);
}

/// Large N: few algorithms (each a different schedule shape) on cheap elements.
std::vector<oracle::AlgoCase> large_n_algorithms() {
  return {{Algorithm::linear, 0, "linear"},
          {Algorithm::blelloch, 0, "blelloch"},
          {Algorithm::hybrid, 3, "hybrid/3"},
          {Algorithm::hybrid, 64, "hybrid/64"},
          {Algorithm::automatic, 0, "auto"}};
}

TEST(ScanOracle, LargeNDiagonal) {
  for (Index n : {40961, 99991}) {
    const RandomProblem<double> p = random_problem<double>({n, 4, 1, ChainKind::diagonal, false, false, 31});
    SCOPED_TRACE("diagonal, N = " + std::to_string(n));
    check_algorithms(p.chain, p.g_last, large_n_algorithms(), 4);
  }
}

TEST(ScanOracle, LargeNDense) {
  const RandomProblem<double> p = random_problem<double>({77777, 3, 2, ChainKind::dense, true, false, 32});
  check_algorithms(p.chain, p.g_last, large_n_algorithms());
}

TEST(ScanOracle, LargeNMixedAffine) {
  // Mixed chains are not normal (gain 1 only along the reference gradient), so rounding errors
  // grow along the chain for any evaluation order; 7919 keeps them well below 1e-10.
  const RandomProblem<double> p = random_problem<double>({7919, 3, 2, ChainKind::mixed, false, true, 33});
  check_algorithms(p.chain, p.g_last, large_n_algorithms());
}

TEST(ScanOracle, LongFloatChainStaysWithinTolerance) {
  const RandomProblem<float> p = random_problem<float>({99989, 3, 2, ChainKind::dense, false, false, 34});
  check_algorithms(p.chain, p.g_last, large_n_algorithms());
}

}  // namespace
