// The simulator (bppsa/analysis/simulate.hpp): the virtual-worker model against closed forms worked
// out here from docs/method.md §2's indexing (not from the simulator), the shared planner against the
// Scanner, calibration sanity and one loose prediction-vs-measurement smoke check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bppsa/bppsa.hpp"
#include "bppsa/analysis/simulate.hpp"
#include "expect_error.hpp"

namespace {

using namespace bppsa;

constexpr double kUs = 1e-6;
constexpr double kMm = 3 * kUs, kMv = 1 * kUs, kBarrier = 0.5 * kUs;

/// A dense (or diagonal) d×d class, as the simulator keys them.
ProductClass mv_class(Kind k, Index d) {
  return {ProductClass::Type::mv, k,     Kind::identity,
          Kind::identity,         false, k == Kind::dense ? 2.0 * static_cast<double>(d * d) : static_cast<double>(d)};
}
ProductClass mm_class(ProductClass::Type t, Kind k, Index d) {
  const double flops = k == Kind::dense ? 2.0 * static_cast<double>(d * d * d) : static_cast<double>(d);
  return {t, k, k, k, false, t == ProductClass::Type::shared_rest ? 0.0 : flops};
}

/// Exact synthetic costs: mm 3 µs, mv 1 µs, barrier 0.5 µs at 2 threads (so barrier(P) =
/// 0.5 µs · log2 P), no dispatch, region, Scanner overhead or cache effects.
CostTable synthetic(Index d) {
  CostTable t;
  for (Kind k : {Kind::diagonal, Kind::dense}) {
    t.entries.push_back({mv_class(k, d), kMv, kMv, 1});
    t.entries.push_back({mm_class(ProductClass::Type::mm, k, d), kMm, kMm, 1});
    t.entries.push_back({mm_class(ProductClass::Type::shared_mm, k, d), kMm, kMm, 1});
    t.entries.push_back({mm_class(ProductClass::Type::shared_rest, k, d), 0, 0, 1});
  }
  std::sort(t.entries.begin(), t.entries.end(),
            [](const CostEntry& a, const CostEntry& b) { return a.product < b.product; });
  t.barrier_seconds = kBarrier;
  t.barrier_threads = 2;
  t.flop_seconds = 1e-9;
  t.precision = "float";
  return t;
}

/// The Scanner's statistics for a problem.
ScanStats backward_stats(const RandomProblem<float>& p, ScanOptions o) {
  ScanStats st;
  backward(p.chain, p.g_last, o, &st);
  return st;
}

double barrier(int workers) { return workers <= 1 ? 0.0 : kBarrier * std::log2(static_cast<double>(workers)); }

RandomChainSpec chain(Index n, Index d, Index batch, ChainKind kind = ChainKind::dense) {
  RandomChainSpec s;
  s.n = n;
  s.dim = d;
  s.batch = batch;
  s.kind = kind;
  return s;
}

/// Spec §2's reference indexing, counted per phase: L = ⌈log2(n+1)⌉ − 1; up-sweep d = 0..L−1
/// (mv in block i = 0, mm elsewhere), down-sweep d = L−1..0 (mv for i ≠ 0), one final mv.
struct BlellochCounts {
  int L = 0;
  Index mm = 0, mv_up = 0, mv_down = 0;
  std::vector<Index> up_mm;    ///< mm per up-sweep phase
  std::vector<Index> down_mv;  ///< mv per down-sweep phase
};
BlellochCounts spec_blelloch(Index n) {
  BlellochCounts c;
  while ((Index{1} << (c.L + 1)) < n + 1) ++c.L;  // ⌈log2(n+1)⌉ − 1
  for (int d = 0; d < c.L; ++d) {
    const Index half = Index{1} << d, step = 2 * half;
    Index mm = 0;
    for (Index i = 0; i + half - 1 <= n - 1; i += step) {
      const Index l = i + half - 1, r = std::min(i + step - 1, n);
      if (l < r) (i == 0 ? c.mv_up : mm) += 1;
    }
    c.up_mm.push_back(mm);
    c.mm += mm;
  }
  for (int d = c.L - 1; d >= 0; --d) {
    const Index half = Index{1} << d, step = 2 * half;
    Index mv = 0;
    for (Index i = step; i + half - 1 <= n - 1; i += step)
      if (i + half - 1 < std::min(i + step - 1, n)) ++mv;
    c.down_mv.push_back(mv);
    c.mv_down += mv;
  }
  return c;
}

TEST(SimulateModel, SpecCountsForN2000) {
  const BlellochCounts c = spec_blelloch(2000);
  EXPECT_EQ(c.L, 10);
  EXPECT_EQ(c.mm, 1989);
  EXPECT_EQ(c.mv_up, 10);
  EXPECT_EQ(c.mv_down, 1989);
}

TEST(SimulateModel, LinearBatchOneIsNMvOnAnyP) {
  const CostTable t = synthetic(4);
  const Index n = 500;
  for (int p : {1, 2, 7, 64}) {
    const SimulationResult r = simulate<float>(chain(n, 4, 1), Algorithm::linear, p, 0, t);
    // One task: P = 1 runs it sample-major (no barrier); more workers run one phase, one barrier.
    EXPECT_NEAR(r.seconds, static_cast<double>(n) * kMv + barrier(p), 1e-12) << "P = " << p;
    EXPECT_DOUBLE_EQ(r.bp_seconds, r.seconds);
    EXPECT_DOUBLE_EQ(r.speedup, 1.0);
    EXPECT_EQ(r.algorithm, Algorithm::linear);
    EXPECT_EQ(r.levels, n);
    EXPECT_EQ(r.extrapolated_ops, 0);
  }
}

TEST(SimulateModel, BlellochOnOneWorkerIsTheSumOfItsProducts) {
  const CostTable t = synthetic(4);
  const Index n = 2000;
  const BlellochCounts c = spec_blelloch(n);
  const SimulationResult r = simulate<float>(chain(n, 4, 1), Algorithm::blelloch, 1, 0, t);
  EXPECT_EQ(r.mm, c.mm);
  EXPECT_EQ(r.mv, c.mv_up + c.mv_down + 1);
  EXPECT_EQ(r.levels, 2 * c.L + 1);
  // One worker: every product once, barriers cost nothing (barrier(1) = 0).
  const double expected = static_cast<double>(c.mm) * kMm + static_cast<double>(c.mv_up + c.mv_down + 1) * kMv;
  EXPECT_NEAR(r.seconds, expected, 1e-12);
  EXPECT_NEAR(r.work_seconds, expected, 1e-12);
  EXPECT_NEAR(r.bp_seconds, static_cast<double>(n) * kMv, 1e-12);
  EXPECT_NEAR(r.speedup, r.bp_seconds / r.seconds, 1e-12);
}

TEST(SimulateModel, BlellochWithUnboundedWorkersIsItsLevelsAndBarriers) {
  const CostTable t = synthetic(4);
  const Index n = 2000;
  const BlellochCounts c = spec_blelloch(n);
  {
    // Per-sample Jacobians (batch 2): no shared products, 2L+1 phases, each as long as its
    // longest unit (an up-sweep phase holds an mm, the others an mv) plus a barrier.
    const int p = 8192;
    double expected = 0;
    for (Index mm : c.up_mm) expected += (mm > 0 ? kMm : kMv) + barrier(p);
    for (Index mv : c.down_mv) expected += (mv > 0 ? kMv : 0.0) + barrier(p);
    expected += kMv + barrier(p);
    EXPECT_NEAR(expected, c.L * kMm + (c.L + 1) * kMv + (2 * c.L + 1) * barrier(p), 1e-12) << "every phase is full";
    const SimulationResult r = simulate<float>(chain(n, 4, 2), Algorithm::blelloch, p, 0, t);
    EXPECT_NEAR(r.seconds, expected, 1e-12);
    EXPECT_NEAR(r.barrier_seconds, (2 * c.L + 1) * barrier(p), 1e-12);
  }
  {
    // Batch 1: every mm is shared by the batch, so it runs in the pre-pass (L phases of mm, a
    // barrier each); the main pass is then 2L+1 phases whose longest unit is an mv.
    const int p = 4096;
    double expected = 0;
    for (Index mm : c.up_mm) expected += mm > 0 ? kMm + barrier(p) : 0.0;
    expected += c.L * (kMv + barrier(p));
    for (Index mv : c.down_mv) expected += (mv > 0 ? kMv : 0.0) + barrier(p);
    expected += kMv + barrier(p);
    const SimulationResult r = simulate<float>(chain(n, 4, 1), Algorithm::blelloch, p, 0, t);
    EXPECT_NEAR(r.seconds, expected, 1e-12);
    EXPECT_NEAR(r.seconds, c.L * kMm + (2 * c.L + 1) * kMv + (3 * c.L + 1) * barrier(p), 1e-12);
  }
}

TEST(SimulateModel, HybridWithTwoChunks) {
  const CostTable t = synthetic(4);
  const Index n = 1000;
  // Chunk 0 is positions 1..e0 (BP: e0 mv); chunk 1, positions e0+1..n, reduces with
  // m = n − e0 − 1 mm, then pushes m mv. Where the cost model put the boundary is read off the
  // Scanner's mm count.
  const RandomProblem<float> real = random_problem<float>(chain(n, 4, 1));
  ScanOptions o;
  o.algorithm = Algorithm::hybrid;
  o.threads = 1;
  o.chunks = 2;
  const ScanStats st = backward_stats(real, o);
  ASSERT_EQ(st.chunks, 2);
  const Index m = st.mm, e0 = n - 1 - m;
  ASSERT_GT(e0, 0);
  ASSERT_GT(m, 0);
  {
    // Batch 1, P = 2: the reduction (shared) runs in the pre-pass beside nothing; then phase 1
    // is chunk 0's BP, phase 2 one mv (the chunk-total scan), phase 3 chunk 1's m pushes.
    const SimulationResult r = simulate<float>(chain(n, 4, 1), Algorithm::hybrid, 2, 2, t);
    EXPECT_EQ(r.chunks, 2);
    EXPECT_EQ(r.mm, m);
    EXPECT_EQ(r.mv, n);
    const double expected = m * kMm + e0 * kMv + kMv + m * kMv + 4 * barrier(2);
    EXPECT_NEAR(r.seconds, expected, 1e-12);
  }
  {
    // Per-sample Jacobians, batch 2 on 4 workers (not sample-major): phase 1's four units
    // (2 tasks × 2 samples) run side by side.
    const SimulationResult r = simulate<float>(chain(n, 4, 2), Algorithm::hybrid, 4, 2, t);
    EXPECT_EQ(r.mm, m) << "the partition does not depend on the batch";
    const double expected = std::max(e0 * kMv, m * kMm) + kMv + m * kMv + 3 * barrier(4);
    EXPECT_NEAR(r.seconds, expected, 1e-12);
  }
}

TEST(SimulateModel, SampleMajorRunsWholeSamplesPerWorker) {
  const CostTable t = synthetic(4);
  const Index n = 300;
  const BlellochCounts c = spec_blelloch(n);
  const double per_sample = c.mm * kMm + (c.mv_up + c.mv_down + 1) * kMv;
  // Batch 4 on 2 workers: 2 samples each, straight through every phase, no barrier.
  const SimulationResult r = simulate<float>(chain(n, 4, 4), Algorithm::blelloch, 2, 0, t);
  EXPECT_NEAR(r.seconds, 2 * per_sample, 1e-12);
  EXPECT_NEAR(r.work_seconds, 4 * per_sample, 1e-12);
  EXPECT_EQ(r.barrier_seconds, 0);
  // BP the same way: 2 samples of n mv per worker.
  EXPECT_NEAR(r.bp_seconds, 2 * n * kMv, 1e-12);
}

TEST(SimulateModel, AutomaticResolvesForTheVirtualWorkers) {
  const CostTable t = synthetic(4);
  const RandomChainSpec s = chain(1000, 4, 1, ChainKind::diagonal);
  const SimulationResult one = simulate<float>(s, Algorithm::automatic, 1, 0, t);
  EXPECT_EQ(one.algorithm, Algorithm::linear) << "one worker: nothing to gain";
  const SimulationResult many = simulate<float>(s, Algorithm::automatic, 64, 0, t);
  EXPECT_NE(many.algorithm, Algorithm::linear) << "64 workers on a diagonal chain: the scan wins (cost model)";
  EXPECT_NE(many.algorithm, Algorithm::automatic);
  const SimulationResult same = simulate<float>(s, many.algorithm, 64, many.chunks, t);
  EXPECT_DOUBLE_EQ(same.seconds, many.seconds);
  EXPECT_EQ(same.levels, many.levels);
}

TEST(SimulateModel, MissingClassesScaleByFlops) {
  CostTable t;
  t.entries.push_back({mv_class(Kind::dense, 4), kMv, kMv, 1});  // 32 flop
  t.precision = "float";
  // d = 8: mv has 128 flop, 4× the calibrated one.
  const SimulationResult r = simulate<float>(chain(100, 8, 1), Algorithm::linear, 1, 0, t);
  EXPECT_EQ(r.extrapolated_ops, 100);
  EXPECT_NEAR(r.seconds, 100 * 4 * kMv, 1e-12);
  bool extrapolated = false;
  EXPECT_DOUBLE_EQ(t.cost(mv_class(Kind::dense, 4), 0, &extrapolated), kMv);
  EXPECT_FALSE(extrapolated);
  // No class of that type and kinds at all: the flop rate.
  t.flop_seconds = 1e-9;
  EXPECT_DOUBLE_EQ(t.cost(mm_class(ProductClass::Type::mm, Kind::dense, 4), 0, &extrapolated), 128e-9);
  EXPECT_TRUE(extrapolated);
}

TEST(SimulateModel, BarrierExtrapolatesAsATree) {
  CostTable t;
  t.barrier_seconds = 2 * kUs;
  t.barrier_threads = 4;
  EXPECT_EQ(t.barrier(1), 0);
  EXPECT_DOUBLE_EQ(t.barrier(4), 2 * kUs);
  EXPECT_DOUBLE_EQ(t.barrier(2), 1 * kUs);
  EXPECT_DOUBLE_EQ(t.barrier(1024), 10 * kUs);
}

TEST(SimulateModel, BadArgumentsAreRejected) {
  const CostTable t = synthetic(4);
  testutil::expect_error<InvalidArgument>([&] { simulate<float>(chain(10, 4, 1), Algorithm::linear, 0, 0, t); },
                                          {"workers", "≥ 1"});
  testutil::expect_error<InvalidArgument>([&] { simulate<double>(chain(10, 4, 1), Algorithm::linear, 1, 0, t); },
                                          {"calibrated in float"});
  testutil::expect_error<InvalidArgument>([&] { simulate<float>(chain(0, 4, 1), Algorithm::linear, 1, 0, t); },
                                          {"n must be ≥ 1"});
  testutil::expect_error<InvalidArgument>(
      [&] { simulate<float>(chain(100000000, 20, 1, ChainKind::mixed), Algorithm::linear, 1, 0, t); },
      {"mixed", "2 GiB"});
  testutil::expect_error<InvalidArgument>([&] { random_chain_layout<float>(chain(10, 4, 1, ChainKind::mixed)); },
                                          {"mixed"});
}

// ---------------------------------------------------------------------------------------
// The shared planner: simulate() plans from layouts alone what the Scanner plans from the chain.

TEST(SimulatePlanner, LayoutsMatchTheGenerator) {
  for (ChainKind k : {ChainKind::dense, ChainKind::diagonal, ChainKind::csr, ChainKind::shared_dense_diag})
    for (bool shared : {false, true}) {
      RandomChainSpec s = chain(5, 6, 3, k);
      s.shared = shared;
      const Layout<float> l = random_chain_layout<float>(s);
      const RandomProblem<float> p = random_problem<float>(s);
      for (Index i = 1; i <= 5; ++i) {
        const Layout<float>& r = p.chain.jacobian(i).layout();
        EXPECT_EQ(l.kind, r.kind);
        EXPECT_EQ(l.rows, r.rows);
        EXPECT_EQ(l.cols, r.cols);
        EXPECT_EQ(l.count, r.count);
        EXPECT_EQ(l.values_per_sample(), r.values_per_sample());
        if (k == ChainKind::csr) {
          EXPECT_TRUE(
              std::equal(l.pattern->row_ptr().begin(), l.pattern->row_ptr().end(), r.pattern->row_ptr().begin()));
          EXPECT_TRUE(
              std::equal(l.pattern->col_idx().begin(), l.pattern->col_idx().end(), r.pattern->col_idx().begin()));
        }
      }
    }
}

TEST(SimulatePlanner, SameScheduleAsTheScanner) {
  CostTable t = synthetic(3);
  t.entries.clear();  // every class from the flop rate: only the plan matters here
  for (ChainKind k : {ChainKind::dense, ChainKind::diagonal, ChainKind::csr, ChainKind::shared_dense_diag})
    for (Index n : {1, 2, 7, 300, 2000})
      for (Algorithm a : {Algorithm::linear, Algorithm::blelloch, Algorithm::hybrid, Algorithm::automatic})
        for (int chunks : {0, 3}) {
          const RandomChainSpec s = chain(n, 3, 1, k);
          const RandomProblem<float> p = random_problem<float>(s);
          ScanOptions o;
          o.algorithm = a;
          o.threads = 1;  // automatic plans for min(threads, cores) = 1 in both
          o.chunks = chunks;
          const ScanStats st = backward_stats(p, o);
          const SimulationResult r = simulate<float>(s, a, 1, chunks, t);
          const std::string what = std::string(to_string(k)) + " n " + std::to_string(n) + " " + to_string(a) +
                                   " chunks " + std::to_string(chunks);
          EXPECT_EQ(r.algorithm, st.algorithm) << what;
          EXPECT_EQ(r.chunks, st.chunks) << what;
          EXPECT_EQ(r.levels, st.levels) << what;
          EXPECT_EQ(r.mm, st.mm) << what;
          EXPECT_EQ(r.mv, st.mv) << what;
        }
  // And docs/method.md §2.3's reference counts through the layout-only path (no chain is built).
  for (auto [n, mm, levels] : {std::tuple<Index, Index, Index>{2000, 1989, 21}, {60000, 59984, 31}}) {
    const SimulationResult r = simulate<float>(chain(n, 2, 1, ChainKind::diagonal), Algorithm::blelloch, 1, 0, t);
    EXPECT_EQ(r.mm, mm);
    EXPECT_EQ(r.mv, n);
    EXPECT_EQ(r.levels, levels);
  }
}

// Issue 44: simulate ignored BPPSA_MEMORY_LIMIT. Planning a CSR chain's products from layouts alone
// grew fill-in patterns without bound (10^5 products of d = 4000: 21 GB at a 512 MB limit); the
// planner counts them as it makes them.
TEST(SimulatePlanner, FillInPatternsAreCountedAsTheyAreMade) {
  const CostTable t = synthetic(3);
  set_memory_limit(16e6);
  const std::string e = testutil::message_of<ResourceError>(
      [&] { (void)simulate<float>(chain(5000, 400, 1, ChainKind::csr), Algorithm::blelloch, 2, 0, t); });
  set_memory_limit(0);
  EXPECT_NE(e.find("[plan] the SpGEMM fill-in patterns of the first"), std::string::npos) << e;
  EXPECT_NE(e.find("products of a scan of 5000 Jacobians"), std::string::npos) << e;
  EXPECT_NE(e.find("--algo linear or hybrid"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------
// Calibration and measurement on this machine.

// Issue 44: everything calibration holds at once (the chain, the cache flusher and the miss-curve
// buffer, then each schedule's workspace) is checked before it is allocated.
TEST(SimulateCalibration, WhatItHoldsIsCheckedBeforeAllocating) {
  CalibrationOptions o;
  o.max_n = 512;
  o.repeats = 1;
  set_memory_limit(128e6);  // a request may use 102 MB; the two cache buffers alone take at least 72 MiB
  const std::string e = testutil::message_of<ResourceError>(
      [&] { (void)calibrate<float>(chain(512, 100, 1), Algorithm::blelloch, 0, o); });
  set_memory_limit(0);
  for (const char* part : {"[calibrate] calibrating on a dense chain of n = 384, d = 100, batch 1",
                           "the calibration chain", "the cache flusher", "the miss-curve buffer", "--calibration-n"})
    EXPECT_NE(e.find(part), std::string::npos) << part << " in: " << e;
}

TEST(SimulateCalibration, DenseMmCostsMoreThanMv) {
  CalibrationOptions o;
  o.max_n = 512;
  o.repeats = 2;
  std::vector<std::pair<int, int>> progress;
  o.progress = [&](int done, int total) { progress.emplace_back(done, total); };
  const CostTable t = calibrate<float>(chain(512, 20, 1), Algorithm::blelloch, 0, o);
  // Progress: every step once, in order, to the end (4 steps and 2 per repeat).
  ASSERT_EQ(progress.size(), 8u);
  for (std::size_t i = 0; i < progress.size(); ++i) EXPECT_EQ(progress[i], std::make_pair(static_cast<int>(i) + 1, 8));
  EXPECT_EQ(t.precision, "float");
  EXPECT_GE(t.cores, 1);
  EXPECT_LE(t.calibration_n, 512);
  bool extrapolated = true;
  const double mv = t.cost(mv_class(Kind::dense, 20), 0, &extrapolated);
  EXPECT_FALSE(extrapolated);
  const double mm = t.cost(mm_class(ProductClass::Type::shared_mm, Kind::dense, 20), 0, &extrapolated);
  EXPECT_FALSE(extrapolated);
  EXPECT_GT(mv, 0);
  EXPECT_GT(mm, mv) << t.summary();
  EXPECT_GE(t.barrier_seconds, 0);
  EXPECT_GE(t.dispatch_seconds, 0);
  ASSERT_FALSE(t.miss_curve.empty());
  for (std::size_t i = 1; i < t.miss_curve.size(); ++i) {
    EXPECT_GT(t.miss_curve[i].first, t.miss_curve[i - 1].first);
    EXPECT_GE(t.miss_curve[i].second, t.miss_curve[i - 1].second);
  }
  EXPECT_EQ(t.miss_curve.back().second, 1);
  EXPECT_NE(t.summary().find("shared_mm dense·dense→dense 16000 flop"), std::string::npos) << t.summary();
}

TEST(SimulateCalibration, TheCalibrationChainCapsTheBatchNotItsClasses) {
  CalibrationOptions o;  // max_batch 16, max_n 4096
  // Per-sample costs: a large batch is calibrated on 16 samples, a batch of 1 stays 1 (its mm
  // are shared by the batch, another class), a batch above 1 keeps at least 2 whatever max_batch.
  EXPECT_EQ(calibration_spec<float>(chain(100, 4, 1000000, ChainKind::diagonal), o).batch, 16);
  EXPECT_EQ(calibration_spec<float>(chain(100, 4, 5, ChainKind::diagonal), o).batch, 5);
  EXPECT_EQ(calibration_spec<float>(chain(100, 4, 1, ChainKind::diagonal), o).batch, 1);
  o.max_batch = 1;
  EXPECT_EQ(calibration_spec<float>(chain(100, 4, 7, ChainKind::diagonal), o).batch, 2);
  // n: min(n, max_n), a power of two less a quarter.
  EXPECT_EQ(calibration_spec<float>(chain(100000, 4, 1, ChainKind::diagonal), CalibrationOptions{}).n, 3072);
  o.max_batch = 0;
  EXPECT_THROW(calibrate<float>(chain(8, 2, 2, ChainKind::diagonal), Algorithm::linear, 0, o), InvalidArgument);

  // Calibrating batch 10^6 times 16 samples per element and finds the same classes as batch 16
  // (the per-sample parts).
  CalibrationOptions quick;
  quick.max_n = 16;
  quick.repeats = 1;
  const CostTable big = calibrate<float>(chain(50, 2, 1000000, ChainKind::diagonal), Algorithm::blelloch, 0, quick);
  const CostTable small = calibrate<float>(chain(50, 2, 16, ChainKind::diagonal), Algorithm::blelloch, 0, quick);
  EXPECT_EQ(big.calibration_batch, 16);
  ASSERT_EQ(big.entries.size(), small.entries.size()) << big.summary() << "\n" << small.summary();
  for (std::size_t i = 0; i < big.entries.size(); ++i) EXPECT_EQ(big.entries[i].product, small.entries[i].product);
}

// How close predictions come to measured scans is a benchmark result, not a unit test:
// bench/paper/paper.py's simulate section validates at every p this machine has (docs/simulate.md).

}  // namespace
