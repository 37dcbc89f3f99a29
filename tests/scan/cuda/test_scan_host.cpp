// The CUDA backend without a GPU: the kernels' own __host__ __device__ functions (launch
// geometry, per-item product math) and whole compiled GPU programs of scans, run by g++ over
// every (block, thread) of every launch, against the CPU engine. A hazard check proves that no
// launch has two work items writing one value or one reading what another writes, so the
// sequential replay stands for any parallel order; the arena starts as NaN, so a read of a
// value nobody wrote shows in the result.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "core/cuda/hd_math.hpp"
#include "expect_error.hpp"
#include "jacobian/cuda/items.hpp"
#include "oracle.hpp"
#include "scan/cuda/executor.hpp"
#include "scan/cuda/program.hpp"
#include "scan/plan.hpp"
#include "tolerance.hpp"

namespace {

using namespace bppsa;
namespace gpu = bppsa::detail::gpu;
using gpu::Idx;
using oracle::Md;
using oracle::Rng;

template <class T>
constexpr double kTol = testutil::tol<T>(testutil::Op::cuda_items);

template <class T>
constexpr T kPoison = std::numeric_limits<T>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Launch geometry

TEST(CudaGrid, EveryWorkItemIsVisitedExactlyOnceWhateverTheGrid) {
  for (const auto& [ops, batch, items] : std::vector<std::array<Idx, 3>>{
           {1, 1, 1}, {1, 1, 300}, {3, 2, 5}, {7, 16, 33}, {1, 64, 257}, {40, 3, 1}, {5, 1, 1000}}) {
    const Idx total = gpu::total_work(ops, batch, items);
    for (unsigned grid : {gpu::grid_blocks(total), 1u, 2u, 3u, 7u})
      for (unsigned block_dim : {static_cast<unsigned>(gpu::kBlock), 32u, 1u}) {
        std::vector<int> seen(static_cast<std::size_t>(total), 0);
        for (unsigned b = 0; b < grid; ++b)
          for (unsigned t = 0; t < block_dim; ++t)
            for (Idx g = gpu::work_start(b, block_dim, t); g < total; g += gpu::work_stride(grid, block_dim)) {
              const gpu::Work w = gpu::decompose(g, batch, items);
              ASSERT_LT(w.op, ops);
              ASSERT_LT(w.sample, batch);
              ASSERT_LT(w.item, items);
              ASSERT_EQ((w.op * batch + w.sample) * items + w.item, g);
              ++seen[static_cast<std::size_t>(g)];
            }
        EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }))
            << ops << " ops × " << batch << " × " << items << ", grid " << grid << " × " << block_dim;
      }
  }
}

TEST(CudaItems, TransposeEachCopiesEveryRowMajorMatrixColumnMajor) {
  // The resident scan's load of J_k given untransposed (resident_kernels.cu): count row-major
  // rows × cols matrices → the same matrices column-major, against Eigen's maps.
  for (const auto& [count, rows, cols] : {std::tuple<Idx, Idx, Idx>{1, 1, 1}, {1, 3, 5}, {4, 5, 3}, {3, 1, 7}}) {
    std::vector<double> in(static_cast<std::size_t>(count * rows * cols)), out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<double>(i) + 0.5;
    for (Idx i = 0; i < count * rows * cols; ++i)
      out[static_cast<std::size_t>(i)] = in[static_cast<std::size_t>(gpu::transpose_each_source(rows, cols, i))];
    for (Idx s = 0; s < count; ++s) {
      const Eigen::Map<const Eigen::Matrix<double, -1, -1, Eigen::RowMajor>> a(in.data() + s * rows * cols, rows, cols);
      const Eigen::Map<const Md> b(out.data() + s * rows * cols, rows, cols);
      EXPECT_EQ(Md(b), Md(a)) << count << "×" << rows << "×" << cols << " matrix " << s;
    }
  }
}

TEST(CudaItems, GatherEachAppliesOneGatherToEveryArray) {
  // The resident scan's load of a CSR J_k given in J_k's order, per sample (resident_kernels.cu).
  const std::vector<std::int32_t> from{2, 0, 3, 1};
  const Idx n = 4, count = 3;
  std::vector<int> in(static_cast<std::size_t>(count * n));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = 10 * static_cast<int>(i);
  for (Idx i = 0; i < count * n; ++i) {
    const Idx s = i / n, q = i % n;
    EXPECT_EQ(in[static_cast<std::size_t>(gpu::gather_each_source(from.data(), n, i))],
              10 * static_cast<int>(s * n + from[static_cast<std::size_t>(q)]))
        << "item " << i;
  }
}

TEST(CudaGrid, GridSizeCoversSmallWorkAndCapsLargeWork) {
  EXPECT_EQ(gpu::grid_blocks(0), 1u);
  EXPECT_EQ(gpu::grid_blocks(1), 1u);
  EXPECT_EQ(gpu::grid_blocks(gpu::kBlock), 1u);
  EXPECT_EQ(gpu::grid_blocks(gpu::kBlock + 1), 2u);
  EXPECT_EQ(gpu::grid_blocks(Idx{1} << 40), static_cast<unsigned>(gpu::kMaxBlocks));
  // 2^40 items: the product of a launch's sizes must not overflow Idx for realistic plans.
  EXPECT_EQ(gpu::total_work(Idx{60000}, 64, 65536), Idx{60000} * 64 * 65536);
}

TEST(CudaItems, RowOfAndFindColumnMatchALinearSearch) {
  Rng rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const Index rows = oracle::uniform_int(rng, 1, 12), cols = oracle::uniform_int(rng, 1, 12);
    const CsrPatternPtr p = oracle::random_pattern(rows, cols, rng, 30);  // empty rows included
    const auto rp = p->row_ptr();
    const auto ci = p->col_idx();
    for (Index r = 0; r < rows; ++r)
      for (std::int32_t q = rp[r]; q < rp[r + 1]; ++q) {
        EXPECT_EQ(gpu::row_of(rp.data(), rows, q), r);
        EXPECT_EQ(gpu::find_column(ci.data(), rp[r], rp[r + 1], ci[q]), q);
      }
  }
}

// ---------------------------------------------------------------------------------------------
// One product at a time: the item functions against the CPU half (bppsa::multiply / apply)

/// A flat value arena and index arena as the GPU program lays them out, built by hand.
template <class T>
struct Arena {
  std::vector<T> v;
  std::vector<std::int32_t> ix;

  Idx put(const T* data, Idx n) {
    const Idx off = static_cast<Idx>(v.size());
    v.insert(v.end(), data, data + n);
    return off;
  }
  Idx reserve(Idx n) {
    const Idx off = static_cast<Idx>(v.size());
    v.resize(v.size() + static_cast<std::size_t>(n), kPoison<T>);
    return off;
  }
  std::pair<Idx, Idx> pattern(const CsrPattern& p) {
    const Idx rp = static_cast<Idx>(ix.size());
    ix.insert(ix.end(), p.row_ptr().begin(), p.row_ptr().end());
    const Idx ci = static_cast<Idx>(ix.size());
    ix.insert(ix.end(), p.col_idx().begin(), p.col_idx().end());
    return {rp, ci};
  }
  gpu::MatArg arg(const Jacobian<T>& j) {
    gpu::MatArg a;
    a.kind = static_cast<std::int32_t>(j.kind());
    a.rows = j.rows();
    a.cols = j.cols();
    if (!j.values().empty()) a.values = put(j.values().data(), static_cast<Idx>(j.values().size()));
    a.stride = j.shared() ? 0 : j.layout().values_per_sample();
    if (j.kind() == Kind::csr) {
      std::tie(a.row_ptr, a.col_idx) = pattern(*j.layout().pattern);
      a.nnz = j.layout().pattern->nnz();
    }
    if (j.kind() == Kind::shared_dense_diag) a.s = put(j.layout().shared_dense->data(), j.rows() * j.cols());
    return a;
  }
};

/// Runs a kernel body (gpu::mat_thread or gpu::vec_thread) over every (block, thread) of its launch.
template <class T, class Op, class Body>
void run_launch(const std::vector<Op>& ops, Idx batch, Arena<T>& arena, Body body) {
  Idx items = 0;
  for (const auto& o : ops) items = std::max(items, o.items);
  const Idx total = gpu::total_work(static_cast<Idx>(ops.size()), batch, items);
  const unsigned grid = gpu::grid_blocks(total);
  for (unsigned b = 0; b < grid; ++b)
    for (unsigned t = 0; t < static_cast<unsigned>(gpu::kBlock); ++t)
      body(ops.data(), static_cast<Idx>(ops.size()), batch, items, arena.v.data(), arena.ix.data(), b, gpu::kBlock, t,
           grid);
}

template <class T>
void run_mat(const std::vector<gpu::MatOp>& ops, Idx batch, Arena<T>& arena) {
  run_launch(ops, batch, arena, [](auto&&... a) { gpu::mat_thread(a...); });
}

template <class T>
void run_vec(const std::vector<gpu::VecOp>& ops, Idx batch, Arena<T>& arena) {
  run_launch(ops, batch, arena, [](auto&&... a) { gpu::vec_thread(a...); });
}

/// A · B on the "device" (items) and on the CPU, sample by sample: exactly equal on small
/// integers; for floats within rounding (the CPU half sums dense products in Eigen's order).
template <class T>
void check_product(const Jacobian<T>& a, const Jacobian<T>& b, Index batch, bool exact, const std::string& what) {
  const ProductPlan<T> plan = plan_product(a.layout(), b.layout(), batch);
  const Layout<T>& out = plan.out;
  Arena<T> arena;
  gpu::MatOp op;
  op.a = arena.arg(a);
  op.b = arena.arg(b);
  const Idx per = out.values_per_sample();
  op.out = arena.reserve(per * out.count);
  op.out_stride = out.shared() ? 0 : per;
  if (a.kind() == Kind::csr && b.kind() == Kind::csr) {
    std::tie(op.out_row_ptr, op.out_col_idx) = arena.pattern(*out.pattern);
    op.out_nnz = out.pattern->nnz();
  }
  op.out_values = per;
  op.items = gpu::mat_items(op.a.kind, op.b.kind, op.a.rows, op.b.cols, op.a.nnz, op.b.nnz, per);
  run_mat<T>({op}, out.count, arena);
  Scratch<T> scratch;
  std::vector<T> ref(static_cast<std::size_t>(per));
  for (Index s = 0; s < out.count; ++s) {
    if (per > 0) multiply(plan, view(a), view(b), s, ref.data(), scratch);
    const T* got = arena.v.data() + op.out + s * op.out_stride;
    double err = 0, scale = 0;
    for (Idx i = 0; i < per; ++i) {
      if (exact) {
        ASSERT_EQ(got[i], ref[static_cast<std::size_t>(i)]) << what << ", sample " << s << ", value " << i;
      }
      err = std::max(err, std::abs(double(got[i]) - double(ref[static_cast<std::size_t>(i)])));
      scale = std::max(scale, std::abs(double(ref[static_cast<std::size_t>(i)])));
    }
    EXPECT_LE(err, kTol<T> * std::max(1.0, scale)) << what << ", sample " << s;
  }
}

/// A random Jacobian of `kind` with shape rows × cols: small integers, or floats in [-1, 1].
template <class T>
Jacobian<T> random_jacobian(Kind kind, Index rows, Index cols, Index count, Rng& rng, bool integers) {
  Jacobian<T> j = oracle::small_int_jacobian<T>(kind, rows, cols, count, rng);
  if (!integers) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (T& x : j.values()) x = T(u(rng));
  }
  return j;
}

bool square_only(Kind k) { return k == Kind::identity || k == Kind::diagonal; }

template <class T>
void every_kind_pair(bool integers) {
  Rng rng(integers ? 11 : 12);
  for (int ka = 0; ka < kKindCount; ++ka)
    for (int kb = 0; kb < kKindCount; ++kb)
      for (int trial = 0; trial < 12; ++trial) {
        const Kind a = static_cast<Kind>(ka), b = static_cast<Kind>(kb);
        const Index batch = trial % 3 == 0 ? 1 : 3;
        const Index k = trial == 11 ? 33 : oracle::uniform_int(rng, 1, 6);
        const Index m = square_only(a) ? k : (trial == 10 ? 40 : oracle::uniform_int(rng, 1, 6));
        const Index n = square_only(b) ? k : oracle::uniform_int(rng, 1, 6);
        const Index ca = trial % 2 ? 1 : batch, cb = trial % 4 < 2 ? batch : 1;
        const Jacobian<T> ja = random_jacobian<T>(a, m, k, ca, rng, integers);
        const Jacobian<T> jb = random_jacobian<T>(b, k, n, cb, rng, integers);
        check_product(ja, jb, batch, integers,
                      std::string(to_string(a)) + "·" + to_string(b) + " " + ja.layout().describe() + " · " +
                          jb.layout().describe());
        if (::testing::Test::HasFatalFailure()) return;
      }
}

TEST(CudaItems, EveryKindPairMatchesTheCpuProductExactlyOnSmallIntegers) {
  every_kind_pair<double>(true);
  every_kind_pair<float>(true);
}

TEST(CudaItems, EveryKindPairMatchesTheCpuProductInFloatingPoint) {
  every_kind_pair<double>(false);
  every_kind_pair<float>(false);
}

TEST(CudaItems, SpgemmRowKernelIsBitIdenticalToTheCpuGustavson) {
  // Same summation order as src/jacobian/cpu/spgemm.cpp: the same bits in float, not just close.
  Rng rng(21);
  for (int trial = 0; trial < 30; ++trial) {
    const Index m = oracle::uniform_int(rng, 1, 30), k = oracle::uniform_int(rng, 1, 30),
                n = oracle::uniform_int(rng, 1, 30);
    const Jacobian<float> a = random_jacobian<float>(Kind::csr, m, k, 2, rng, false);
    const Jacobian<float> b = random_jacobian<float>(Kind::csr, k, n, trial % 2 ? 1 : 2, rng, false);
    const ProductPlan<float> plan = plan_product(a.layout(), b.layout(), 2);
    Arena<float> arena;
    gpu::MatOp op;
    op.a = arena.arg(a);
    op.b = arena.arg(b);
    const Idx per = plan.out.values_per_sample();
    op.out = arena.reserve(2 * per);
    op.out_stride = per;
    std::tie(op.out_row_ptr, op.out_col_idx) = arena.pattern(*plan.out.pattern);
    op.out_nnz = op.out_values = per;
    op.items = gpu::mat_items(gpu::kCsr, gpu::kCsr, m, n, op.a.nnz, op.b.nnz, per);
    run_mat<float>({op}, 2, arena);
    Scratch<float> scratch;
    std::vector<float> ref(static_cast<std::size_t>(per));
    for (Index s = 0; s < 2; ++s) {
      multiply(plan, view(a), view(b), s, ref.data(), scratch);
      EXPECT_EQ(0, std::memcmp(ref.data(), arena.v.data() + op.out + s * per, sizeof(float) * ref.size()))
          << "trial " << trial << ", sample " << s;
    }
  }
}

template <class T>
void every_vector_kind(bool integers) {
  Rng rng(integers ? 31 : 32);
  for (int ka = 0; ka < kKindCount; ++ka)
    for (int trial = 0; trial < 10; ++trial) {
      const Kind kind = static_cast<Kind>(ka);
      const Index batch = trial % 3 == 0 ? 1 : 4;
      const Index k = trial == 9 ? 45 : oracle::uniform_int(rng, 1, 7);
      const Index m = square_only(kind) ? k : oracle::uniform_int(rng, 1, 7);
      const Jacobian<T> a = random_jacobian<T>(kind, m, k, trial % 2 ? 1 : batch, rng, integers);
      const Matrix<T> x = oracle::small_int_matrix<T>(k, batch, rng);
      const Matrix<T> z = oracle::small_int_matrix<T>(m, batch, rng);
      const bool affine = trial % 2 == 0;
      Arena<T> arena;
      gpu::VecOp op;
      op.a = arena.arg(a);
      op.x = arena.put(x.data(), x.size());
      op.ldx = k;
      op.y = arena.reserve(m * batch);
      op.ldy = m;
      if (affine) {
        op.z = arena.put(z.data(), z.size());
        op.ldz = m;
      }
      op.items = m;
      run_vec<T>({op}, batch, arena);
      Matrix<T> ref(m, batch);
      Scratch<T> scratch;
      apply(view(a), 0, batch, x.data(), k, ref.data(), m, false, scratch);
      if (affine) ref += z;
      const Eigen::Map<const Matrix<T>> got(arena.v.data() + op.y, m, batch);
      if (integers)
        EXPECT_EQ(got, ref) << to_string(kind) << " " << a.layout().describe();
      else
        EXPECT_LE((got - ref).cwiseAbs().maxCoeff(), kTol<T> * std::max<double>(1.0, ref.cwiseAbs().maxCoeff()))
            << to_string(kind) << " " << a.layout().describe();
    }
}

TEST(CudaItems, EveryMatrixVectorKindMatchesTheCpuApply) {
  every_vector_kind<double>(true);
  every_vector_kind<float>(true);
  every_vector_kind<double>(false);
  every_vector_kind<float>(false);
}

// ---------------------------------------------------------------------------------------------
// Whole programs: a scan compiled for the GPU, replayed on the CPU

/// Value ranges [begin, end) one (op, sample) reads and writes.
struct Ranges {
  std::vector<std::pair<Idx, Idx>> reads, writes;
};

void add_arg(Ranges& r, const gpu::MatArg& a, Idx s) {
  const Idx n = gpu::arg_values(a);
  if (a.values >= 0 && n > 0) r.reads.push_back({a.values + s * a.stride, a.values + s * a.stride + n});
  if (a.s >= 0) r.reads.push_back({a.s, a.s + a.rows * a.cols});
}

/// Checks a launch: every range inside the arena, no two work units writing one value, no
/// value both written and read. Then the launch's outcome does not depend on the order of its
/// items, and a sequential replay is as good as the GPU's parallel one.
template <class T>
::testing::AssertionResult hazard_free(const gpu::Program<T>& p, const gpu::Launch& l) {
  Ranges all;
  for (Idx i = 0; i < l.count; ++i)
    for (Idx s = 0; s < l.batch; ++s) {
      if (l.type == gpu::Launch::Type::mat) {
        const gpu::MatOp& o = p.mat_ops[static_cast<std::size_t>(l.first + i)];
        add_arg(all, o.a, s);
        add_arg(all, o.b, s);
        if (o.out_values > 0) all.writes.push_back({o.out + s * o.out_stride, o.out + s * o.out_stride + o.out_values});
      } else {
        const gpu::VecOp& o = p.vec_ops[static_cast<std::size_t>(l.first + i)];
        add_arg(all, o.a, s);
        all.reads.push_back({o.x + s * o.ldx, o.x + s * o.ldx + o.a.cols});
        if (o.z >= 0) all.reads.push_back({o.z + s * o.ldz, o.z + s * o.ldz + o.a.rows});
        all.writes.push_back({o.y + s * o.ldy, o.y + s * o.ldy + o.a.rows});
      }
    }
  for (const auto* list : {&all.reads, &all.writes})
    for (const auto& [b, e] : *list)
      if (b < 0 || e > p.values || b > e)
        return ::testing::AssertionFailure() << "range [" << b << ", " << e << ") outside the arena";
  std::sort(all.writes.begin(), all.writes.end());
  for (std::size_t i = 1; i < all.writes.size(); ++i)
    if (all.writes[i].first < all.writes[i - 1].second)
      return ::testing::AssertionFailure()
             << "two work units write [" << all.writes[i].first << ", " << all.writes[i - 1].second << ")";
  for (const auto& [b, e] : all.reads) {
    if (b == e) continue;
    auto it = std::lower_bound(all.writes.begin(), all.writes.end(), std::make_pair(e, Idx{0}));
    if (it != all.writes.begin() && std::prev(it)->second > b)
      return ::testing::AssertionFailure() << "[" << b << ", " << e << ") is read and written in one launch";
  }
  return ::testing::AssertionSuccess();
}

/// The GPU run of Scanner::run, on the CPU: plan as the Scanner plans, compile, pack, run every
/// launch with the kernels' item loops, unpack.
template <class T>
struct Emulated {
  Gradients<T> g;
  gpu::Program<T> program;
  ScanStats stats;
};

template <class T>
Emulated<T> emulate(const Chain<T>& chain, const Matrix<T>& g_last, const ScanOptions& options) {
  const int threads = detail::run_threads(options);
  detail::PlannedSchedule<T> planned = detail::plan_run(detail::scan_elements(chain), chain.batch(), options, threads);
  Emulated<T> e;
  e.stats = planned.schedule.stats;
  e.program = gpu::compile_program(planned.schedule, detail::scan_elements(chain), chain.batch());
  const gpu::Program<T>& p = e.program;
  std::vector<T> arena(static_cast<std::size_t>(p.values), kPoison<T>);
  gpu::pack_inputs(p, chain, g_last, arena.data(), threads);
  for (const gpu::Launch& l : p.launches) {
    EXPECT_TRUE(hazard_free(p, l)) << gpu::describe(p);
    const Idx total = gpu::total_work(l.count, l.batch, l.items);
    const unsigned grid = gpu::grid_blocks(total);
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned t = 0; t < static_cast<unsigned>(gpu::kBlock); ++t) {
        if (l.type == gpu::Launch::Type::mat)
          gpu::mat_thread(p.mat_ops.data() + l.first, l.count, l.batch, l.items, arena.data(), p.indices.data(), b,
                          gpu::kBlock, t, grid);
        else
          gpu::vec_thread(p.vec_ops.data() + l.first, l.count, l.batch, l.items, arena.data(), p.indices.data(), b,
                          gpu::kBlock, t, grid);
      }
  }
  gpu::unpack_outputs(p, chain, g_last, arena.data() + p.download_begin, e.g, threads);
  return e;
}

/// Emulated GPU run against the CPU engine with the same options (and, for exact data, against
/// the naive oracle, bit for bit).
template <class T>
void check_against_cpu(const Chain<T>& chain, const Matrix<T>& g_last, bool exact) {
  const std::vector<Md> ref = oracle::naive_backward(chain, g_last);
  for (const auto& a : oracle::all_algorithms()) {
    const ScanOptions options = oracle::options_for(a, 2);
    const Emulated<T> e = emulate(chain, g_last, options);
    Scanner<T> cpu(options);
    Gradients<T> want;
    const ScanStats& st = cpu.run(chain, g_last, want);
    SCOPED_TRACE(a.name + ", N = " + std::to_string(chain.size()) + ", batch " + std::to_string(chain.batch()));
    if (exact) {
      EXPECT_TRUE(oracle::equal_to(e.g, ref));
    } else {
      std::vector<Md> cpu_result;
      for (Index k = 0; k < want.size(); ++k) cpu_result.push_back(want.g(k).template cast<double>());
      EXPECT_TRUE(oracle::close_to(e.g, cpu_result, kTol<T> * 10));
    }
    // Same schedule as the CPU run: the statistics the GPU run reports are the CPU's.
    EXPECT_EQ(e.stats.levels, st.levels);
    EXPECT_EQ(e.stats.mm, st.mm);
    EXPECT_EQ(e.stats.mv, st.mv);
    if (::testing::Test::HasFailure()) return;
  }
}

class EveryChainKind : public ::testing::TestWithParam<ChainKind> {};
INSTANTIATE_TEST_SUITE_P(CudaProgram, EveryChainKind,
                         ::testing::Values(ChainKind::dense, ChainKind::diagonal, ChainKind::csr,
                                           ChainKind::shared_dense_diag, ChainKind::mixed),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_P(EveryChainKind, MatchesTheCpuEngineForEveryAlgorithm) {
  for (const Index n : {1, 2, 3, 4, 7, 8, 9, 16, 17, 33, 100})
    for (const Index batch : {1, 3}) {
      const bool shared = n % 2 == 1;
      const auto p = random_problem<double>({n, 5, batch, GetParam(), shared && GetParam() != ChainKind::mixed, false,
                                             static_cast<std::uint64_t>(n * 7 + batch)});
      check_against_cpu(p.chain, p.g_last, false);
      if (HasFailure()) return;
    }
}

TEST_P(EveryChainKind, FloatAndAffineMatchTheCpuEngine) {
  for (const Index n : {1, 2, 5, 31, 64})
    for (const bool affine : {false, true}) {
      const auto p = random_problem<float>({n, 6, 4, GetParam(), false, affine, static_cast<std::uint64_t>(n + 100)});
      check_against_cpu(p.chain, p.g_last, false);
      if (HasFailure()) return;
    }
}

TEST(CudaProgram, SmallIntegerChainsAreExactAndKeepOperandOrder) {
  Rng rng(41);
  for (const Index n : {1, 2, 3, 5, 8, 15, 16, 17, 40}) {
    for (const Index batch : {1, 2}) {
      const Chain<double> chain = oracle::small_int_chain<double>(n, batch, rng);
      check_against_cpu(chain, oracle::small_int_matrix<double>(chain.dim(n), batch, rng), true);
      const Chain<float> perm = oracle::signed_permutation_chain<float>(n, 4, batch, rng);
      check_against_cpu(perm, oracle::small_int_matrix<float>(4, batch, rng), true);
      if (HasFailure()) return;
    }
  }
}

TEST(CudaProgram, AffineSmallIntegerChainsAreExact) {
  Rng rng(43);
  for (const Index n : {1, 2, 6, 13}) {
    Chain<double> chain = oracle::signed_permutation_chain<double>(n, 3, 2, rng);
    for (Index k = 0; k < n; ++k)
      if (k % 3 != 1) chain.set_injection(k, oracle::small_int_matrix<double>(3, 2, rng));
    check_against_cpu(chain, oracle::small_int_matrix<double>(3, 2, rng), true);
  }
}

TEST(CudaProgram, DegenerateElementsIdentityChainsAndEmptyCsr) {
  Rng rng(44);
  for (const Index n : {1, 2, 9}) {
    Chain<double> ids(2);
    for (Index k = 0; k < n; ++k) ids.push_back(Jacobian<double>::identity(3));
    check_against_cpu(ids, oracle::small_int_matrix<double>(3, 2, rng), true);
    Chain<double> mixed(2);
    for (Index k = 0; k < n; ++k) {
      if (k == n / 2)
        mixed.push_back(Jacobian<double>::csr(make_csr_pattern(2, 2, {0, 0, 0}, {}), 2));
      else
        mixed.push_back(oracle::small_int_jacobian<double>(k % 2 ? Kind::dense : Kind::csr, 2, 2, 1, rng));
    }
    check_against_cpu(mixed, oracle::small_int_matrix<double>(2, 2, rng), true);
  }
}

TEST(CudaProgram, SequentialBpIsOneLaunchPerElement) {
  // The in-house GPU baseline: the linear schedule is N dependent matrix-vector launches.
  for (const Index n : {1, 10, 257}) {
    const auto p = random_problem<float>({n, 8, 16, ChainKind::shared_dense_diag, false, false, 5});
    const Emulated<float> e = emulate(p.chain, p.g_last, oracle::opts(Algorithm::linear, 2));
    EXPECT_EQ(static_cast<Index>(e.program.launches.size()), n);
    for (const gpu::Launch& l : e.program.launches) {
      EXPECT_EQ(l.type, gpu::Launch::Type::vec);
      EXPECT_EQ(l.count, 1);
      EXPECT_EQ(l.batch, 16);
    }
  }
}

TEST(CudaProgram, BlellochLaunchesPerLevelAndSharedProductsOnce) {
  // Shared dense chain: every mm is shared by the batch, so it runs once (batch 1) in the shared
  // pass; the per-sample pass holds only matrix-vector launches, about one per level.
  const auto p = random_problem<double>({1000, 4, 8, ChainKind::dense, true, false, 9});
  const Emulated<double> e = emulate(p.chain, p.g_last, oracle::opts(Algorithm::blelloch, 2));
  const gpu::Program<double>& prog = e.program;
  for (std::size_t i = 0; i < prog.launches.size(); ++i) {
    const gpu::Launch& l = prog.launches[i];
    EXPECT_EQ(l.shared, i < prog.shared_launches);
    EXPECT_EQ(l.type == gpu::Launch::Type::mat, l.shared) << gpu::describe(prog);
    EXPECT_EQ(l.batch, l.shared ? 1 : 8);
  }
  EXPECT_EQ(static_cast<Index>(prog.launches.size() - prog.shared_launches), e.stats.levels);
  std::vector<Md> cpu;
  const Gradients<double> want = backward(p.chain, p.g_last, oracle::opts(Algorithm::blelloch, 2));
  for (Index k = 0; k < want.size(); ++k) cpu.push_back(want.g(k));
  EXPECT_TRUE(oracle::close_to(e.g, cpu, kTol<double>));
}

TEST(CudaProgram, LongChainsMatchTheCpuEngine) {
  for (const ChainKind kind : {ChainKind::shared_dense_diag, ChainKind::mixed}) {
    const auto p = random_problem<float>({3000, 6, 2, kind, false, true, 17});
    for (const Algorithm a : {Algorithm::blelloch, Algorithm::hybrid}) {
      const Emulated<float> e = emulate(p.chain, p.g_last, oracle::opts(a, 2, 8));
      const Gradients<float> want = backward(p.chain, p.g_last, oracle::opts(a, 2, 8));
      std::vector<Md> cpu;
      for (Index k = 0; k < want.size(); ++k) cpu.push_back(want.g(k).cast<double>());
      EXPECT_TRUE(oracle::close_to(e.g, cpu, testutil::tol<float>(testutil::Op::scan)))
          << to_string(kind) << " " << to_string(a);
    }
  }
}

TEST(CudaProgram, UploadAndDownloadRegionsAreContiguousAndInOrder) {
  const auto p = random_problem<double>({20, 5, 3, ChainKind::mixed, false, true, 3});
  const Emulated<double> e = emulate(p.chain, p.g_last, oracle::opts(Algorithm::blelloch, 2));
  const gpu::Program<double>& prog = e.program;
  EXPECT_LT(prog.prefix_offset[0], prog.upload_values);
  EXPECT_EQ(prog.download_begin, prog.prefix_offset[1]);
  for (Index i = 1; i <= prog.n; ++i) {
    EXPECT_LT(prog.prefix_offset[static_cast<std::size_t>(i - 1)], prog.prefix_offset[static_cast<std::size_t>(i)]);
    EXPECT_LE(prog.prefix_offset[static_cast<std::size_t>(i)] + prog.prefix_rows[static_cast<std::size_t>(i)] * 3,
              prog.download_end);
    if (prog.element_offset[static_cast<std::size_t>(i)] >= 0) {
      EXPECT_LE(prog.element_offset[static_cast<std::size_t>(i)] + prog.element_values[static_cast<std::size_t>(i)],
                prog.upload_values);
    }
    if (prog.injection_offset[static_cast<std::size_t>(i)] >= 0) {
      EXPECT_LT(prog.injection_offset[static_cast<std::size_t>(i)], prog.upload_values);
    }
  }
  EXPECT_LE(prog.download_end + prog.workspace_values, prog.values);
}

// ---------------------------------------------------------------------------------------------
// The Scanner's device option on a machine without a usable GPU

TEST(CudaScanner, DeviceCudaWithoutAGpuFailsClearlyAndTheCpuStillWorks) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present: bppsa_test_gpu covers Device::cuda";
  const auto p = random_problem<double>({5, 3, 2, ChainKind::dense, false, false, 1});
  ScanOptions o = oracle::opts(Algorithm::blelloch, 2);
  o.device = Device::cuda;
  Scanner<double> scanner(o);
  Gradients<double> out;
  testutil::expect_no_gpu_error([&] { scanner.run(p.chain, p.g_last, out); });
  o.device = Device::cpu;
  scanner.set_options(o);
  const ScanStats& st = scanner.run(p.chain, p.g_last, out);
  EXPECT_EQ(st.device, Device::cpu);
  EXPECT_EQ(st.launches, 0);
  EXPECT_NE(cuda_summary(), "");
}

TEST(CudaScanner, DeviceNamesAndProductPolicies) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu);
  EXPECT_EQ(parse_device("cuda"), Device::cuda);
  EXPECT_STREQ(to_string(Device::cuda), "cuda");
  EXPECT_THROW(parse_device("gpu"), InvalidArgument);
  detail::set_cuda_products(detail::CudaProducts::kernels);
  EXPECT_EQ(detail::cuda_products(), detail::CudaProducts::kernels);
  detail::set_cuda_products(detail::CudaProducts::automatic);
  EXPECT_EQ(detail::cuda_products(), detail::CudaProducts::automatic);
}

}  // namespace
