// Thread-count independence (bit-identical), statistics vs hand-derived formulas, plan reuse.
// The team runner and the executor's stages: tests/core/test_team.cpp.
#include <string>

#include "core/team.hpp"
#include "oracle.hpp"
#include "tolerance.hpp"

namespace {

using namespace bppsa;
using oracle::Md;
using oracle::Rng;
using oracle::opts;

template <class T>
constexpr double kTol = testutil::tol<T>(testutil::Op::scan);

/// ⌈log2(x)⌉ for x ≥ 1, by integer doubling.
Index ceil_log2(Index x) {
  Index l = 0;
  while ((Index{1} << l) < x) ++l;
  return l;
}
/// Critical path of the modified Blelloch scan (docs/method.md §2): 2⌈log2(N+1)⌉ − 1.
Index blelloch_levels(Index n) { return 2 * ceil_log2(n + 1) - 1; }

std::vector<Md> as_reference(const Gradients<float>& g) {
  std::vector<Md> r;
  for (Index k = 0; k < g.size(); ++k) r.push_back(g.g(k).cast<double>());
  return r;
}

// ---------------------------------------------------------------------------------------
// Thread counts.

class ThreadCounts : public ::testing::TestWithParam<ChainKind> {};
INSTANTIATE_TEST_SUITE_P(Scan, ThreadCounts,
                         ::testing::Values(ChainKind::dense, ChainKind::diagonal, ChainKind::csr,
                                           ChainKind::shared_dense_diag, ChainKind::mixed),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_P(ThreadCounts, BlellochAndFixedChunkHybridAreBitIdentical) {
  const detail::FlopsPerThread full_teams(0);  // every thread, however small the problem
  // batch 16 ≥ threads runs sample-major, batch 1 and 3 mostly phase-major.
  for (Index batch : {1, 3, 16})
    for (Index dim : {4, 12}) {  // 12: Eigen's blocked kernels (depth > 8) for shared dense products
      const RandomProblem<float> p = random_problem<float>(
          {150, dim, batch, GetParam(), batch == 3, dim == 4, static_cast<std::uint64_t>(batch + dim)});
      const std::vector<Md> ref = oracle::naive_backward(p.chain, p.g_last);
      for (const ScanOptions& base : {opts(Algorithm::blelloch, 1), opts(Algorithm::hybrid, 1, 4)}) {
        // One Scanner across the thread counts, so a plan or scratch kept from a different
        // count would show too; 1 → 8 and 8 → 3 → 1 also go down.
        Scanner<float> scanner(base);
        Gradients<float> first, got;
        scanner.run(p.chain, p.g_last, first);
        ASSERT_TRUE(oracle::close_to(first, ref, kTol<float>));
        for (int threads : {2, 3, 8, 3, 1}) {
          ScanOptions o = base;
          o.threads = threads;
          scanner.set_options(o);
          const ScanStats& st = scanner.run(p.chain, p.g_last, got);
          EXPECT_EQ(st.threads, threads);
          EXPECT_TRUE(oracle::bit_identical(first, got))
              << to_string(o.algorithm) << " chunks " << o.chunks << ", threads " << threads << " vs 1, batch " << batch
              << ", dim " << dim;
        }
      }
    }
}

TEST_P(ThreadCounts, AutoAndThreadChunkedHybridMatchLinear) {
  const detail::FlopsPerThread full_teams(0);  // every thread, however small the problem
  for (Index batch : {1, 3, 16}) {
    const RandomProblem<float> p = random_problem<float>({200, 5, batch, GetParam(), false, batch == 1, 40});
    Gradients<float> lin;
    Scanner<float>(opts(Algorithm::linear, 1)).run(p.chain, p.g_last, lin);
    const std::vector<Md> ref = oracle::naive_backward(p.chain, p.g_last);
    ASSERT_TRUE(oracle::close_to(lin, ref, kTol<float>));
    for (int threads : {1, 2, 3, 8})
      for (Algorithm a : {Algorithm::automatic, Algorithm::hybrid}) {
        Gradients<float> got;
        Scanner<float> scanner(opts(a, threads, 0));
        const ScanStats& st = scanner.run(p.chain, p.g_last, got);
        EXPECT_NE(st.algorithm, Algorithm::automatic) << "stats report the algorithm that ran";
        EXPECT_TRUE(oracle::close_to(got, as_reference(lin), kTol<float>))
            << to_string(a) << " threads " << threads << " batch " << batch << " (ran " << to_string(st.algorithm)
            << ")";
      }
  }
}

TEST(ThreadCounts, SharedDenseElementsOnColumnBlocksOfEveryWidth) {
  const detail::FlopsPerThread full_teams(0);  // every thread, however small the problem
  // A shared dense (or S of shared_dense_diag) element is applied to each thread's block of
  // batch columns at once; the block width depends on the thread count, so this is where a
  // result could start depending on it. Dims not a multiple of the SIMD width, batch 8 / 16.
  for (ChainKind kind : {ChainKind::dense, ChainKind::shared_dense_diag})
    for (Index dim : {5, 6, 12})
      for (Index batch : {8, 16}) {
        const RandomProblem<float> p = random_problem<float>({60, dim, batch, kind, true, false, 3});
        for (const ScanOptions& base :
             {opts(Algorithm::linear, 1), opts(Algorithm::blelloch, 1), opts(Algorithm::hybrid, 1, 4)}) {
          Gradients<float> first;
          Scanner<float>(base).run(p.chain, p.g_last, first);
          for (int threads : {2, 3, 8}) {
            ScanOptions o = base;
            o.threads = threads;
            Gradients<float> got;
            Scanner<float>(o).run(p.chain, p.g_last, got);
            EXPECT_TRUE(oracle::bit_identical(first, got))
                << to_string(kind) << " dim " << dim << " batch " << batch << ", " << to_string(o.algorithm)
                << ", threads " << threads << " vs 1";
          }
        }
      }
}

TEST(ThreadCounts, LittleWorkRunsOnOneThreadAndTheSameBits) {
  // A chain far below flops_per_thread per thread: the team shrinks to one thread, with the
  // same result as a full team.
  const RandomProblem<float> p = random_problem<float>({10, 4, 1, ChainKind::dense, false, false, 5});
  EXPECT_EQ(detail::team_for(1e3, 8), 1);
  EXPECT_EQ(detail::team_for(3.5 * detail::flops_per_thread, 8), 3);
  EXPECT_EQ(detail::team_for(1e30, 8), 8);
  Gradients<float> small, full;
  Scanner<float>(opts(Algorithm::blelloch, 2)).run(p.chain, p.g_last, small);
  {
    const detail::FlopsPerThread full_teams(0);
    EXPECT_EQ(detail::team_for(1e3, 8), 8);
    Scanner<float>(opts(Algorithm::blelloch, 2)).run(p.chain, p.g_last, full);
  }
  EXPECT_TRUE(oracle::bit_identical(small, full));
}

// ---------------------------------------------------------------------------------------
// Statistics.

ScanStats stats_of(const Chain<double>& chain, const Matrix<double>& g, const ScanOptions& o) {
  ScanStats st;
  backward(chain, g, o, &st);
  return st;
}

void expect_kind_counts_add_up(const ScanStats& st) {
  Index mm = 0, mv = 0;
  for (const auto& row : st.mm_by_kind)
    for (Index c : row) mm += c;
  for (Index c : st.mv_by_kind) mv += c;
  EXPECT_EQ(mm, st.mm);
  EXPECT_EQ(mv, st.mv);
  EXPECT_GT(st.flops, 0);
}

TEST(Stats, BlellochLevelsEqualFormulaForPowersOfTwoMinusOne) {
  for (int k = 1; k <= 12; ++k) {
    const Index n = (Index{1} << k) - 1;
    const auto p = random_problem<double>({n, 2, 1, ChainKind::diagonal, false, false, 1});
    const ScanStats st = stats_of(p.chain, p.g_last, opts(Algorithm::blelloch, 2));
    EXPECT_EQ(st.algorithm, Algorithm::blelloch);
    EXPECT_EQ(st.levels, blelloch_levels(n)) << "N = " << n;
    EXPECT_EQ(st.depth, blelloch_levels(n)) << "N = " << n << ": a full tree's dependency chain is as long";
    EXPECT_LE(st.mm, n);
    EXPECT_EQ(st.mv, n) << "one mv per gradient g_{N-1} … g_0";
  }
}

TEST(Stats, BlellochLevelsEqualFormulaForLargeN) {
  // Spec §2 reference counts for n = 60000: 59984 mm, 15 + 59984 mv (+ 1 for g_0), 16 + 15 levels.
  const Index n = 60000;
  const auto p = random_problem<double>({n, 2, 1, ChainKind::diagonal, true, false, 2});
  const ScanStats st = stats_of(p.chain, p.g_last, opts(Algorithm::blelloch, 2));
  EXPECT_EQ(blelloch_levels(n), 31);
  EXPECT_EQ(st.levels, blelloch_levels(n));
  EXPECT_LE(st.depth, st.levels);
  EXPECT_EQ(st.mm, 59984);
  EXPECT_EQ(st.mv, n);
}

TEST(Stats, BlellochReferenceCountsForN2000) {
  // Spec §2: n = 2000: up-sweep 1989 mm + 10 mv, down-sweep 1989 mv (+ 1 for g_0).
  const auto p = random_problem<double>({2000, 2, 1, ChainKind::diagonal, true, false, 3});
  const ScanStats st = stats_of(p.chain, p.g_last, opts(Algorithm::blelloch, 2));
  EXPECT_EQ(st.mm, 1989);
  EXPECT_EQ(st.mv, 2000);
  EXPECT_LE(st.levels, blelloch_levels(2000));
}

TEST(Stats, BlellochBoundsForEveryNUpTo300) {
  for (Index n = 1; n <= 300; ++n) {
    const auto p = random_problem<double>({n, 2, 1, n % 2 ? ChainKind::dense : ChainKind::mixed, false, false, 4});
    const ScanStats st = stats_of(p.chain, p.g_last, opts(Algorithm::blelloch, 2));
    EXPECT_LE(st.levels, blelloch_levels(n)) << "N = " << n;
    EXPECT_LE(st.depth, st.levels) << "N = " << n;
    EXPECT_GE(st.depth, ceil_log2(n + 1)) << "N = " << n << ": no scan of N+1 elements is shallower";
    EXPECT_LE(st.mm, n) << "N = " << n;
    EXPECT_EQ(st.mv, n) << "N = " << n;
    EXPECT_EQ(st.chunks, 0);
    expect_kind_counts_add_up(st);
  }
}

TEST(Stats, LinearIsNMatrixVectorProducts) {
  for (Index n : {1, 2, 17, 300}) {
    const auto p = random_problem<double>({n, 3, 2, ChainKind::mixed, false, false, 5});
    const ScanStats st = stats_of(p.chain, p.g_last, opts(Algorithm::linear, 2));
    EXPECT_EQ(st.algorithm, Algorithm::linear);
    EXPECT_EQ(st.levels, n);
    EXPECT_EQ(st.depth, n);
    EXPECT_EQ(st.mm, 0);
    EXPECT_EQ(st.mv, n);
    EXPECT_EQ(st.chunks, 1);
    expect_kind_counts_add_up(st);
  }
}

TEST(Stats, HybridDoesAtMostNMatrixProducts) {
  for (Index n : {1, 5, 64, 300})
    for (int chunks : {2, 3, 7, 64}) {
      const auto p = random_problem<double>({n, 3, 1, ChainKind::mixed, false, false, 6});
      const ScanStats st = stats_of(p.chain, p.g_last, opts(Algorithm::hybrid, 2, chunks));
      EXPECT_EQ(st.algorithm, Algorithm::hybrid);
      EXPECT_LE(st.mm, n) << "N = " << n << ", chunks " << chunks;
      EXPECT_GE(st.chunks, 1);
      EXPECT_LE(st.chunks, chunks);
      EXPECT_LE(st.depth, st.levels);
      if (n == 300 && chunks >= 3) {  // two chunks: chunk 1's push still waits for all of chunk 0
        EXPECT_LT(st.levels, n) << "chunks " << chunks << ": the chunks must shorten the critical path";
      }
      expect_kind_counts_add_up(st);
    }
}

TEST(Stats, KindCountsLandInTheRightCells) {
  const auto diag = random_problem<double>({100, 3, 2, ChainKind::diagonal, false, false, 7});
  const ScanStats sd = stats_of(diag.chain, diag.g_last, opts(Algorithm::blelloch, 2));
  const int d = static_cast<int>(Kind::diagonal), c = static_cast<int>(Kind::csr);
  EXPECT_EQ(sd.mm_by_kind[d][d], sd.mm);
  EXPECT_EQ(sd.mv_by_kind[d], sd.mv);
  const auto csr = random_problem<double>({100, 5, 2, ChainKind::csr, false, false, 8});
  const ScanStats sc = stats_of(csr.chain, csr.g_last, opts(Algorithm::hybrid, 2, 4));
  EXPECT_GT(sc.mm, 0);
  EXPECT_EQ(sc.mm_by_kind[c][c], sc.mm) << "csr · csr stays csr, so every product is csr · csr";
  EXPECT_EQ(sc.mv_by_kind[c], sc.mv);
}

TEST(Stats, FlopsOfLinearDenseChainByHand) {
  // Linear BP on a uniform d × d dense chain: N mat-vecs of 2·d² flops per sample.
  const Index n = 40, d = 5, batch = 3;
  for (bool shared : {false, true}) {
    const auto p = random_problem<double>({n, d, batch, ChainKind::dense, shared, false, 9});
    const ScanStats st = stats_of(p.chain, p.g_last, opts(Algorithm::linear, 2));
    EXPECT_DOUBLE_EQ(st.flops, 2.0 * d * d * n * batch) << (shared ? "shared" : "per-sample");
  }
}

TEST(Stats, FlopsOfBlellochDenseChainCountSharedProductsOnce) {
  // mm of two d × d dense = 2·d³ (once when shared by the batch, else per sample); mv = 2·d².
  const Index n = 50, d = 4, batch = 3;
  for (bool shared : {false, true}) {
    const auto p = random_problem<double>({n, d, batch, ChainKind::dense, shared, false, 10});
    const ScanStats st = stats_of(p.chain, p.g_last, opts(Algorithm::blelloch, 2));
    const double mm_flops = 2.0 * d * d * d * static_cast<double>(st.mm) * (shared ? 1 : batch);
    const double mv_flops = 2.0 * d * d * static_cast<double>(st.mv) * batch;
    EXPECT_DOUBLE_EQ(st.flops, mm_flops + mv_flops) << (shared ? "shared" : "per-sample");
  }
}

// ---------------------------------------------------------------------------------------
// Plan reuse.

/// New values for every element (same layouts), every set injection and g_N.
void refill(Chain<double>& chain, Matrix<double>& g_last, Rng& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  for (Index k = 1; k <= chain.size(); ++k)
    for (double& x : chain.jacobian(k).values()) x = u(rng);
  for (Index k = 0; k < chain.size(); ++k)
    if (Matrix<double>* e = chain.injection(k)) e->setRandom();
  g_last.setRandom();
}

TEST(PlanReuse, SameStructureNewValuesReusesThePlan) {
  for (const auto& alg : oracle::all_algorithms()) {
    RandomProblem<double> p = random_problem<double>({90, 4, 3, ChainKind::mixed, false, true, 11});
    std::vector<Matrix<double>> e;
    for (Index k = 0; k < 90; ++k) e.push_back(*p.chain.injection(k));
    p.chain.clear_injections();
    for (Index k = 0; k < 90; ++k)
      if (k != 40) p.chain.set_injection(k, e[static_cast<std::size_t>(k)]);  // e_40 unset
    Rng rng(12);
    Scanner<double> scanner(oracle::options_for(alg));
    Gradients<double> out;
    EXPECT_FALSE(scanner.run(p.chain, p.g_last, out).plan_reused) << alg.name;
    EXPECT_TRUE(oracle::close_to(out, oracle::naive_backward(p.chain, p.g_last), kTol<double>)) << alg.name;
    for (int round = 0; round < 3; ++round) {
      refill(p.chain, p.g_last, rng);
      const ScanStats& st = scanner.run(p.chain, p.g_last, out);
      EXPECT_TRUE(st.plan_reused) << alg.name << " round " << round;
      EXPECT_EQ(st.plan_seconds, 0.0);
      EXPECT_TRUE(oracle::close_to(out, oracle::naive_backward(p.chain, p.g_last), kTol<double>))
          << alg.name << " round " << round;
    }
  }
}

TEST(PlanReuse, StructureChangesReplanAndStayCorrect) {
  RandomProblem<double> p = random_problem<double>({60, 4, 2, ChainKind::dense, false, false, 13});
  Rng rng(14);
  Scanner<double> scanner(opts(Algorithm::blelloch, 2));
  Gradients<double> out;
  auto run_expect = [&](bool reused, const char* what) {
    const ScanStats& st = scanner.run(p.chain, p.g_last, out);
    EXPECT_EQ(st.plan_reused, reused) << what;
    EXPECT_TRUE(oracle::close_to(out, oracle::naive_backward(p.chain, p.g_last), kTol<double>)) << what;
  };
  run_expect(false, "first run");
  run_expect(true, "same chain again");

  p.chain.jacobian(17) = oracle::small_int_jacobian<double>(Kind::csr, 4, 4, 2, rng);  // dense → csr
  run_expect(false, "element 17 became csr");
  run_expect(true, "csr element unchanged");

  const CsrPattern& old = *p.chain.jacobian(17).layout().pattern;  // same arrays, new pattern object
  auto copy = Jacobian<double>::csr(
      make_csr_pattern(4, 4, std::vector<std::int32_t>(old.row_ptr().begin(), old.row_ptr().end()),
                       std::vector<std::int32_t>(old.col_idx().begin(), old.col_idx().end())),
      2);
  std::copy(p.chain.jacobian(17).values().begin(), p.chain.jacobian(17).values().end(), copy.values().begin());
  p.chain.jacobian(17) = std::move(copy);
  run_expect(false, "new pattern object");

  p.chain.jacobian(30) = oracle::small_int_jacobian<double>(Kind::dense, 4, 4, 1, rng);  // per-sample → shared
  run_expect(false, "element 30 became shared");

  p.chain.set_injection(5, oracle::small_int_matrix<double>(4, 2, rng));
  run_expect(false, "injection added");
  p.chain.clear_injections();
  run_expect(false, "injections removed");

  p.chain.jacobian(60) = oracle::small_int_jacobian<double>(Kind::dense, 4, 6, 2, rng);  // d_N: 4 → 6
  p.g_last = oracle::small_int_matrix<double>(6, 2, rng);
  run_expect(false, "last element rectangular");

  scanner.set_options(opts(Algorithm::hybrid, 2, 3));
  run_expect(false, "options changed");
  run_expect(true, "options kept");
  Scanner<double> moved = std::move(scanner);
  scanner = std::move(moved);  // the plan travels with the Scanner
  run_expect(true, "after moves");

  RandomProblem<double> q = random_problem<double>({61, 4, 2, ChainKind::dense, false, false, 15});
  std::swap(p, q);
  run_expect(false, "longer chain");
}

TEST(PlanReuse, AnotherChainWithTheSameLayoutsReusesThePlanCorrectly) {
  // A second chain object sharing the first one's patterns (same layouts), other values.
  const RandomProblem<double> a = random_problem<double>({70, 4, 2, ChainKind::csr, false, false, 16});
  Rng rng(17);
  std::uniform_real_distribution<double> u(-1, 1);
  Chain<double> c(2);
  for (Index k = 1; k <= 70; ++k) {
    auto j = Jacobian<double>::csr(a.chain.jacobian(k).layout().pattern, a.chain.jacobian(k).count());
    for (double& x : j.values()) x = u(rng);
    c.push_back(std::move(j));
  }
  Matrix<double> g_c = Matrix<double>::Random(4, 2);
  Scanner<double> scanner(opts(Algorithm::blelloch, 2));
  Gradients<double> out;
  EXPECT_FALSE(scanner.run(a.chain, a.g_last, out).plan_reused);
  EXPECT_TRUE(oracle::close_to(out, oracle::naive_backward(a.chain, a.g_last), kTol<double>));
  EXPECT_TRUE(scanner.run(c, g_c, out).plan_reused);
  EXPECT_TRUE(oracle::close_to(out, oracle::naive_backward(c, g_c), kTol<double>));
}

}  // namespace
