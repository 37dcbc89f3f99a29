// The scan report against independent oracles: fill-in and SpGEMM flops from the patterns
// themselves, counts and flops from a real Scanner run, closed forms for BP and for the
// Blelloch critical path, and the JSON round trip.
#include <map>
#include <nlohmann/json.hpp>

#include "expect_error.hpp"
#include "oracle.hpp"

namespace {

using namespace bppsa;
using oracle::Rng;
using oracle::opts;
/// 0/1 structure of a matrix (entry-wise "structurally nonzero").
using Structure = Eigen::Matrix<int, Eigen::Dynamic, Eigen::Dynamic>;


Structure structure(const CsrPattern& p) {
  Structure s = Structure::Zero(p.rows(), p.cols());
  for (Index r = 0; r < p.rows(); ++r)
    for (Index q = p.row_ptr()[r]; q < p.row_ptr()[r + 1]; ++q) s(r, p.col_idx()[q]) = 1;
  return s;
}

/// Structure of the product of two structures: entries are sums of non-negative terms, so
/// nothing cancels and a positive count is a structural nonzero.
Structure times(const Structure& a, const Structure& b) {
  Structure c = Structure::Zero(a.rows(), b.cols());
  for (Index i = 0; i < a.rows(); ++i)
    for (Index k = 0; k < a.cols(); ++k)
      if (a(i, k))
        for (Index j = 0; j < b.cols(); ++j) c(i, j) |= b(k, j);
  return c;
}

/// Structure of J_first^T ⋯ J_last^T of a CSR chain.
template <class T>
Structure structure_of(const Chain<T>& chain, Index first, Index last) {
  Structure s = structure(*chain.jacobian(first).layout().pattern);
  for (Index k = first + 1; k <= last; ++k) s = times(s, structure(*chain.jacobian(k).layout().pattern));
  return s;
}

/// Multiply-adds of Gustavson's SpGEMM A · B, ×2: 2 Σ_i Σ_{k ∈ row i of A} nnz(row k of B).
double spgemm_flops(const Structure& a, const Structure& b) {
  double terms = 0;
  for (Index i = 0; i < a.rows(); ++i)
    for (Index k = 0; k < a.cols(); ++k)
      if (a(i, k)) terms += b.row(k).sum();
  return 2 * terms;
}

/// Whether every element of first..last is shared by the batch.
template <class T>
bool all_shared(const Chain<T>& chain, Index first, Index last) {
  for (Index k = first; k <= last; ++k)
    if (!chain.jacobian(k).shared()) return false;
  return true;
}

/// A chain of n CSR Jacobians with random patterns (some rows empty, rectangular, dimensions
/// in [3, 9]), each shared or per-sample at random; small-integer values.
Chain<double> random_csr_chain(Index n, Index batch, Rng& rng) {
  Chain<double> chain(batch);
  Index rows = oracle::uniform_int(rng, 3, 9);
  for (Index k = 1; k <= n; ++k) {
    const Index cols = oracle::uniform_int(rng, 3, 9);
    Jacobian<double> j =
        Jacobian<double>::csr(oracle::random_pattern(rows, cols, rng, 30), oracle::uniform_int(rng, 0, 1) ? 1 : batch);
    for (double& x : j.values()) x = static_cast<double>(oracle::uniform_int(rng, -2, 2));
    chain.push_back(std::move(j));
    rows = cols;
  }
  return chain;
}

/// Σ over phases of the longest task, in products, from the records alone.
Index levels_of(const ScanReport& r) {
  std::map<std::pair<Index, Index>, Index> per_task;
  for (const ProductRecord& p : r.products) ++per_task[{p.phase, p.task}];
  std::vector<Index> longest(r.phase_flops.size(), 0);
  for (const auto& [where, count] : per_task)
    longest.at(static_cast<std::size_t>(where.first)) = std::max(longest[static_cast<std::size_t>(where.first)], count);
  Index levels = 0;
  for (Index l : longest) levels += l;
  return levels;
}

/// The critical-path rule of report.hpp, re-derived from the records: in every phase the
/// products of the first task with the most flops, and nothing else, are critical.
::testing::AssertionResult critical_path_is_consistent(const ScanReport& r) {
  std::map<std::pair<Index, Index>, double> task_flops;
  for (const ProductRecord& p : r.products) task_flops[{p.phase, p.task}] += p.flops;
  std::vector<Index> critical(r.phase_flops.size(), -1);
  std::vector<double> best(r.phase_flops.size(), 0);
  for (const auto& [where, flops] : task_flops) {  // ordered by (phase, task): the first wins ties
    const auto p = static_cast<std::size_t>(where.first);
    if (critical[p] < 0 || flops > best[p]) {
      critical[p] = where.second;
      best[p] = flops;
    }
  }
  double sum = 0;
  for (std::size_t p = 0; p < best.size(); ++p) {
    if (r.phase_flops[p] != best[p])
      return ::testing::AssertionFailure()
             << "phase " << p << ": phase_flops " << r.phase_flops[p] << ", expected " << best[p];
    sum += best[p];
  }
  if (r.critical_flops != sum)
    return ::testing::AssertionFailure() << "critical_flops " << r.critical_flops << " ≠ Σ " << sum;
  for (const ProductRecord& p : r.products)
    if (p.critical != (p.task == critical[static_cast<std::size_t>(p.phase)]))
      return ::testing::AssertionFailure()
             << "phase " << p.phase << " task " << p.task << " (" << p.out << ") critical = " << p.critical;
  return ::testing::AssertionSuccess();
}

/// Everything the report and an actual run must agree on.
void expect_matches_run(const ScanReport& r, const ScanStats& st, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(r.algorithm, st.algorithm);
  EXPECT_EQ(r.chunks, st.chunks);
  EXPECT_EQ(r.threads, st.threads);
  EXPECT_EQ(r.levels, st.levels);
  EXPECT_EQ(levels_of(r), st.levels);
  EXPECT_EQ(r.depth, st.depth);
  EXPECT_EQ(r.workspace_bytes, st.workspace_bytes);
  Index mm = 0, mv = 0;
  std::array<std::array<Index, kKindCount>, kKindCount> mm_by_kind{};
  std::array<Index, kKindCount> mv_by_kind{};
  double flops = 0;
  for (const ProductRecord& p : r.products) {
    flops += p.flops;
    if (p.mm) {
      ++mm;
      ++mm_by_kind[static_cast<int>(p.a_kind)][static_cast<int>(p.b_kind)];
    }
    if (!p.mm || p.affine) {  // an mm with an affine operand b also carries v_b through a
      ++mv;
      ++mv_by_kind[static_cast<int>(p.a_kind)];
    }
  }
  EXPECT_EQ(mm, st.mm);
  EXPECT_EQ(mv, st.mv);
  EXPECT_EQ(mm_by_kind, st.mm_by_kind);
  EXPECT_EQ(mv_by_kind, st.mv_by_kind);
  EXPECT_DOUBLE_EQ(flops, st.flops);
  EXPECT_DOUBLE_EQ(r.total_flops, st.flops);
  EXPECT_TRUE(critical_path_is_consistent(r));
}

// ---------------------------------------------------------------------------------------
// (a) Fill-in and flops of every product from the patterns.

TEST(ScanReport, CsrFillInAndFlopsMatchThePatterns) {
  Rng rng(11);
  for (Index n : {1, 2, 7, 16, 23}) {
    const Index batch = 3;
    const Chain<double> chain = random_csr_chain(n, batch, rng);
    for (const ScanOptions& o : {opts(Algorithm::blelloch, 2), opts(Algorithm::hybrid, 2, 3),
                                 opts(Algorithm::hybrid, 1, 5), opts(Algorithm::linear, 1)}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", " + to_string(o.algorithm) + " chunks " + std::to_string(o.chunks));
      const ScanReport r = scan_report(chain, o);
      ASSERT_EQ(r.n, n);
      Index mm = 0;
      for (const ProductRecord& p : r.products) {
        SCOPED_TRACE(p.out + " = " + p.a + " · " + p.b);
        const Structure a = structure_of(chain, p.first, p.split);
        EXPECT_EQ(p.a_kind, Kind::csr);
        if (!p.mm) {  // g_{first−1} = a · g_last: one sparse mat-vec per sample
          EXPECT_EQ(p.out, "g_" + std::to_string(p.first - 1));
          EXPECT_EQ(p.b, "g_" + std::to_string(p.last));
          EXPECT_EQ(p.out_rows, a.rows());
          EXPECT_EQ(p.flops, 2.0 * a.sum() * batch);
          continue;
        }
        ++mm;
        const Structure b = structure_of(chain, p.split + 1, p.last);
        const Structure c = times(a, b);
        const bool shared = all_shared(chain, p.first, p.last);
        EXPECT_EQ(p.b_kind, Kind::csr);
        EXPECT_EQ(p.out_kind, Kind::csr);
        EXPECT_EQ(p.out_rows, c.rows());
        EXPECT_EQ(p.out_cols, c.cols());
        EXPECT_EQ(p.out_nnz, static_cast<double>(c.sum()));
        EXPECT_EQ(p.out_shared, shared);
        EXPECT_EQ(p.flops, spgemm_flops(a, b) * (shared ? 1.0 : static_cast<double>(batch)));
      }
      if (o.algorithm == Algorithm::linear) {
        EXPECT_EQ(mm, 0);
      }
    }
  }
}

TEST(ScanReport, NamesTheOperandsByChainElements) {
  // N = 4, blelloch: positions 1..4 hold J_4^T … J_1^T. Phase 0 (up-sweep d = 0):
  // s_1 = J_4^T g_4 and J_2^T·J_3^T; 1 (d = 1): s_3 = (J_2^T·J_3^T) g_3; 2 (down-sweep d = 1):
  // no block; 3 (d = 0): s_2 = J_3^T g_3; 4: s_4 = J_1^T g_1.
  Chain<float> chain(1);
  for (int k = 0; k < 4; ++k) chain.push_back(Jacobian<float>::dense(2, 2));
  const ScanReport r = scan_report(chain, opts(Algorithm::blelloch, 1));
  std::vector<std::string> got;
  for (const ProductRecord& p : r.products)
    got.push_back(std::to_string(p.phase) + "/" + std::to_string(p.task) + " " + p.out + " = " + p.a + " · " + p.b);
  const std::vector<std::string> expected = {"0/0 g_3 = J_4^T · g_4", "0/1 J_2^T·J_3^T = J_2^T · J_3^T",
                                             "1/0 g_1 = J_2^T·J_3^T · g_3", "3/0 g_2 = J_3^T · g_3",
                                             "4/0 g_0 = J_1^T · g_1"};
  EXPECT_EQ(got, expected);
  EXPECT_EQ(r.phase_flops, (std::vector<double>{16, 8, 0, 8, 8}));  // mm 2·2³, mv 2·2²; phase 2 is empty

  // Hybrid: chunk 1 reduces several elements, e.g. J_1^T⋯J_3^T.
  Chain<float> longer(1);
  for (int k = 0; k < 20; ++k) longer.push_back(Jacobian<float>::dense(2, 2));
  bool seen = false;
  for (const ProductRecord& p : scan_report(longer, opts(Algorithm::hybrid, 1, 2)).products)
    if (p.mm && p.last - p.first == 2) {
      EXPECT_EQ(p.out, "J_" + std::to_string(p.first) + "^T⋯J_" + std::to_string(p.last) + "^T");
      seen = true;
    }
  EXPECT_TRUE(seen);
}

// ---------------------------------------------------------------------------------------
// (b) Counts, flops, levels and workspace against an actual run.

TEST(ScanReport, MatchesTheScannersStatistics) {
  for (ChainKind kind :
       {ChainKind::dense, ChainKind::diagonal, ChainKind::csr, ChainKind::shared_dense_diag, ChainKind::mixed})
    for (bool affine : {false, true})
      for (Index batch : {1, 4}) {
        const RandomProblem<float> p =
            random_problem<float>({37, 6, batch, kind, kind != ChainKind::mixed && batch == 4, affine, 5});
        for (const ScanOptions& o :
             {opts(Algorithm::blelloch, 2), opts(Algorithm::hybrid, 3), opts(Algorithm::hybrid, 2, 5),
              opts(Algorithm::linear, 1), opts(Algorithm::automatic, 2)}) {
          Scanner<float> scanner(o);
          Gradients<float> g;
          const ScanStats& st = scanner.run(p.chain, p.g_last, g);
          expect_matches_run(scan_report(p.chain, o), st,
                             std::string(to_string(kind)) + (affine ? " affine" : "") + " batch " +
                                 std::to_string(batch) + ", " + to_string(o.algorithm) + " chunks " +
                                 std::to_string(o.chunks) + " threads " + std::to_string(o.threads));
        }
      }
}

TEST(ScanReport, CsrChainMatchesTheScanner) {
  Rng rng(3);
  const Chain<double> chain = random_csr_chain(29, 2, rng);
  Rng values(4);
  const Matrix<double> g_last = oracle::small_int_matrix<double>(chain.dim(chain.size()), 2, values);
  for (const oracle::AlgoCase& a : oracle::all_algorithms()) {
    const ScanOptions o = oracle::options_for(a, 2);
    Gradients<double> g;
    Scanner<double> scanner(o);
    expect_matches_run(scan_report(chain, o), scanner.run(chain, g_last, g), a.name);
  }
}

TEST(ScanReport, LayoutsAloneGiveTheSameReport) {
  for (ChainKind kind : {ChainKind::dense, ChainKind::csr, ChainKind::mixed}) {
    const RandomProblem<double> p = random_problem<double>({45, 5, 2, kind, false, false, 9});
    std::vector<Layout<double>> layouts;
    for (Index k = 1; k <= p.chain.size(); ++k) layouts.push_back(p.chain.jacobian(k).layout());
    for (const ScanOptions& o : {opts(Algorithm::blelloch, 2), opts(Algorithm::hybrid, 2, 4)}) {
      const ScanReport a = scan_report(p.chain, o), b = scan_report(layouts, 2, o);
      EXPECT_EQ(to_json(a), to_json(b)) << to_string(kind) << " " << to_string(o.algorithm);
    }
  }
}

// ---------------------------------------------------------------------------------------
// (c) BP by closed form.

TEST(ScanReport, BpFlopsOfADenseChainByClosedForm) {
  const std::vector<Index> d = {3, 7, 2, 5, 5, 4, 9};  // d_0 … d_N
  const Index batch = 4, n = static_cast<Index>(d.size()) - 1;
  for (bool shared : {false, true}) {
    std::vector<Layout<float>> layouts;
    for (Index k = 1; k <= n; ++k)
      layouts.push_back(
          Jacobian<float>::dense(d[static_cast<std::size_t>(k - 1)], d[static_cast<std::size_t>(k)], shared ? 1 : batch)
              .layout());
    double closed = 0;
    std::vector<double> steps;  // k = N..1
    for (Index k = n; k >= 1; --k) {
      steps.push_back(2.0 * static_cast<double>(d[static_cast<std::size_t>(k - 1)] * d[static_cast<std::size_t>(k)]) *
                      static_cast<double>(batch));
      closed += steps.back();
    }
    for (Algorithm a : {Algorithm::linear, Algorithm::blelloch, Algorithm::hybrid}) {
      const ScanReport r = scan_report(layouts, batch, opts(a, 2));
      EXPECT_EQ(r.bp_step_flops, steps) << to_string(a);
      EXPECT_EQ(r.bp_flops, closed) << to_string(a);
      if (a == Algorithm::linear) {  // BP is one task: its critical path is all of its work
        EXPECT_EQ(r.total_flops, closed);
        EXPECT_EQ(r.critical_flops, closed);
        EXPECT_EQ(r.phase_flops.size(), 1u);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// (d) Blelloch's critical path by closed form.

TEST(ScanReport, BlellochCriticalPathOnPerfectTrees) {
  // N = 2^m − 1: L = m − 1 up-sweep and m − 1 down-sweep phases, then g_0: 2m − 1 phases of
  // one product per task (scanner.hpp: levels 2⌈log2(N+1)⌉ − 1).
  const Index d = 6, batch = 3;
  for (Index m = 1; m <= 7; ++m) {
    const Index n = (Index{1} << m) - 1;
    SCOPED_TRACE("m " + std::to_string(m));
    // Diagonal: mm (d per sample) and mv (d per sample) cost the same, so every phase costs
    // one product and the first task of each phase is the critical one.
    const ScanReport diag = scan_report(
        std::vector<Layout<float>>(static_cast<std::size_t>(n), Jacobian<float>::diagonal(d, batch).layout()), batch,
        opts(Algorithm::blelloch, 2));
    EXPECT_EQ(static_cast<Index>(diag.phase_flops.size()), 2 * m - 1);
    EXPECT_EQ(diag.levels, 2 * m - 1);
    EXPECT_EQ(levels_of(diag), 2 * m - 1);
    EXPECT_EQ(diag.critical_flops, static_cast<double>((2 * m - 1) * d * batch));
    for (const ProductRecord& p : diag.products) EXPECT_EQ(p.critical, p.task == 0);

    // Dense: each up-sweep phase waits for an mm (2d³ per sample), the rest for an mv (2d²).
    const ScanReport dense = scan_report(
        std::vector<Layout<float>>(static_cast<std::size_t>(n), Jacobian<float>::dense(d, d, batch).layout()), batch,
        opts(Algorithm::blelloch, 2));
    EXPECT_EQ(static_cast<Index>(dense.phase_flops.size()), 2 * m - 1);
    EXPECT_EQ(dense.critical_flops, static_cast<double>(((m - 1) * 2 * d * d * d + m * 2 * d * d) * batch));
    EXPECT_TRUE(critical_path_is_consistent(dense));
  }
}

// ---------------------------------------------------------------------------------------
// (e) JSON.

TEST(ScanReport, JsonHoldsEveryProduct) {
  const RandomProblem<float> p = random_problem<float>({20, 4, 2, ChainKind::mixed, false, true, 2});
  const ScanReport r = scan_report(p.chain, opts(Algorithm::blelloch, 2));
  const nlohmann::json j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j.at("algorithm"), "blelloch");
  EXPECT_EQ(j.at("chunks"), r.chunks);
  EXPECT_EQ(j.at("threads"), r.threads);
  EXPECT_EQ(j.at("n"), r.n);
  EXPECT_EQ(j.at("batch"), r.batch);
  EXPECT_EQ(j.at("levels"), r.levels);
  EXPECT_EQ(j.at("depth"), r.depth);
  EXPECT_EQ(j.at("phase_flops").get<std::vector<double>>(), r.phase_flops);
  EXPECT_EQ(j.at("critical_flops").get<double>(), r.critical_flops);
  EXPECT_EQ(j.at("total_flops").get<double>(), r.total_flops);
  EXPECT_EQ(j.at("bp_step_flops").get<std::vector<double>>(), r.bp_step_flops);
  EXPECT_EQ(j.at("bp_flops").get<double>(), r.bp_flops);
  EXPECT_EQ(j.at("workspace_bytes").get<std::size_t>(), r.workspace_bytes);
  const nlohmann::json& products = j.at("products");
  ASSERT_EQ(products.size(), r.products.size());
  for (std::size_t i = 0; i < r.products.size(); ++i) {
    const ProductRecord& want = r.products[i];
    const nlohmann::json& got = products[i];
    EXPECT_EQ(got.size(), 19u);  // every field of ProductRecord
    EXPECT_EQ(got.at("phase"), want.phase);
    EXPECT_EQ(got.at("task"), want.task);
    EXPECT_EQ(got.at("mm"), want.mm);
    EXPECT_EQ(got.at("a_kind"), to_string(want.a_kind));
    EXPECT_EQ(got.at("b_kind"), to_string(want.b_kind));
    EXPECT_EQ(got.at("out_kind"), to_string(want.out_kind));
    EXPECT_EQ(got.at("out_rows"), want.out_rows);
    EXPECT_EQ(got.at("out_cols"), want.out_cols);
    EXPECT_EQ(got.at("out_nnz").get<double>(), want.out_nnz);
    EXPECT_EQ(got.at("out_shared"), want.out_shared);
    EXPECT_EQ(got.at("affine"), want.affine);
    EXPECT_EQ(got.at("flops").get<double>(), want.flops);
    EXPECT_EQ(got.at("critical"), want.critical);
    EXPECT_EQ(got.at("first"), want.first);
    EXPECT_EQ(got.at("split"), want.split);
    EXPECT_EQ(got.at("last"), want.last);
    EXPECT_EQ(got.at("a"), want.a);
    EXPECT_EQ(got.at("b"), want.b);
    EXPECT_EQ(got.at("out"), want.out);
  }
}

// ---------------------------------------------------------------------------------------
// Boundary checks.

TEST(ScanReport, RejectsBadInput) {
  std::vector<Layout<float>> layouts = {Jacobian<float>::dense(3, 4).layout(), Jacobian<float>::dense(5, 2).layout()};
  testutil::expect_error<ShapeError>([&] { scan_report(layouts, 1); },
                                     {"[scan_report]", "J_2^T", "does not chain with J_1^T"});
  layouts[1] = Jacobian<float>::dense(4, 2, 3).layout();
  testutil::expect_error<ShapeError>([&] { scan_report(layouts, 2); }, {"J_2^T", "3 samples", "batch has 2"});
  testutil::expect_error<InvalidArgument>([&] { scan_report(std::vector<Layout<float>>{}, 1); }, {"no layouts"});
  testutil::expect_error<InvalidArgument>([&] { scan_report(layouts, 3, opts(Algorithm::hybrid, -1)); },
                                          {"[scan_report]", "threads must be ≥ 0"});
  testutil::expect_error<InvalidArgument>([&] { scan_report(Chain<float>(1)); }, {"[scan_report]", "empty"});
}

}  // namespace
