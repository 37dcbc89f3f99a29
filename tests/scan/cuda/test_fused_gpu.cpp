// The fused chunked scan (src/scan/cuda/fused/, a layer through src/nn/cuda/fused_scan.hpp) on the GPU against the CPU
// engine's BP (tests/common/cuda/fused_record.hpp): every cell, every compiled kernel (tile × columns, W_hh on chip or
// not), exact operand order on small integers, CUDA Graph replays and pointer changes, errors, and a covering set of
// the issue's sizes (T up to 30000, H 1…256, batch 1…64). GpuSmall.* stays small for compute-sanitizer (memcheck,
// racecheck); GpuFused.* is the rest.
#include <cstdlib>
#include <cstring>

#include "core/cuda/buffer.hpp"
#include "cuda/fused_record.hpp"
#include "cuda/gpu_compare.hpp"
#include "expect_error.hpp"
#include "nn/cuda/fused_cells.hpp"
#include "nn/cuda/fused_scan.hpp"

namespace {

using namespace fused_test;
namespace cuda = bppsa::detail::cuda;
using gpu::FusedDevicePtrs;
using gpu::FusedGraphs;
using gpu::FusedRecurrentScan;
using gpu::FusedScanOptions;
using gpu::FusedScanStats;
using gpu::kGru;
using gpu::kLstm;
using gpu::kRnnRelu;
using gpu::kRnnTanh;
using gpu_test::pick;
using Sizes = std::vector<Index>;

template <class T>
constexpr double kTol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
/// Float gradients that vanish below this share of the largest are compared at that scale.
constexpr double kFloor = 1e-6;

/// A device copy of a dense matrix, in its storage order (Matrix or RowMatrix).
template <class M>
cuda::DeviceBuffer<typename M::Scalar> upload(const M& m) {
  cuda::DeviceBuffer<typename M::Scalar> b(static_cast<std::size_t>(m.size()));
  b.upload(m.data(), static_cast<std::size_t>(m.size()));
  return b;
}

/// A layer's record on the device, and an output buffer filled with NaN (a value the scan does
/// not write stays NaN and fails the comparison).
template <class T>
struct DeviceLayer {
  cuda::DeviceBuffer<T> w, h, c, gates, aux, g_last, above, g;
  explicit DeviceLayer(const FusedLayer<T>& L)
      : w(upload(L.p.w_hh)),
        h(upload(L.rec.h)),
        c(upload(L.rec.c)),
        gates(upload(L.rec.gates)),
        aux(upload(L.rec.aux)),
        g_last(upload(L.g_last)),
        above(L.inject ? upload(L.above) : cuda::DeviceBuffer<T>()),
        g(static_cast<std::size_t>(L.S * (L.steps + 1) * L.B)) {
    poison();
  }
  void poison() { g.fill_bytes(0xFF); }  // complete before the scan's non-blocking stream starts
  FusedDevicePtrs<T> ptrs() const {
    FusedDevicePtrs<T> p;
    p.w_hh = w.data();
    p.h = h.data();
    p.c = c.data();
    p.gates = gates.data();
    p.aux = aux.data();
    p.g_last = g_last.data();
    p.above = above.data();
    p.g = g.data();
    return p;
  }
  std::vector<T> download() const {
    std::vector<T> out(g.size());
    BPPSA_CUDA_CHECK(cudaMemcpy(out.data(), g.data(), g.bytes(), cudaMemcpyDeviceToHost));
    return out;
  }
};

FusedScanOptions options(bool inject, Idx chunk = 0, int reduce_tile = 0, int reduce_columns = 0, int push_tile = 0,
                         int w_shared = -1, FusedGraphs graphs = FusedGraphs::automatic) {
  FusedScanOptions o;
  o.injections = inject;
  o.chunk_length = chunk;
  o.reduce_tile = reduce_tile;
  o.reduce_columns = reduce_columns;
  o.push_tile = push_tile;
  o.w_shared = w_shared;
  o.graphs = graphs;
  return o;
}

std::string describe(const FusedScanStats& s) {
  return " [L " + std::to_string(s.chunk_length) + ", C " + std::to_string(s.chunks) + ", reduce " +
         std::to_string(s.reduce_tile) + "×" + std::to_string(s.reduce_columns) + "/" +
         std::to_string(s.reduce_threads_per_column) + ", push " + std::to_string(s.push_tile) + "/" +
         std::to_string(s.push_threads_per_column) + (s.w_shared ? "" : ", W_hh global") + (s.graph ? ", graph" : "") +
         "]";
}

/// Plans, runs `runs` times on a stream (the automatic graph policy captures from the second),
/// and downloads every g_t.
template <class T>
std::vector<T> run_fused(const FusedLayer<T>& L, const FusedScanOptions& o, FusedScanStats* stats = nullptr,
                         int runs = 1) {
  DeviceLayer<T> d(L);
  auto scan = FusedRecurrentScan<T>::plan(L.code, L.H, L.steps, L.B, o);
  cuda::Stream stream;
  for (int i = 0; i < runs; ++i) {
    if (i > 0) d.poison();
    scan.run(stream.get(), d.ptrs());
  }
  stream.synchronize();
  if (stats) *stats = scan.stats();
  return d.download();
}

template <class T>
::testing::AssertionResult matches_bp(const FusedLayer<T>& L, const FusedScanOptions& o, int runs = 1) {
  FusedScanStats st;
  const std::vector<T> got = run_fused(L, o, &st, runs);
  const Matrix<double> want = oracle_bp(L);
  const double floor = std::is_same_v<T, float> ? kFloor : 0;
  const auto r = close_to_oracle(got.data(), want, L.B, float_tolerance(L, want, kTol<T>, floor), floor);
  if (!r) return ::testing::AssertionFailure() << L.describe() << describe(st) << ": " << r.message();
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Small cases (also under compute-sanitizer)

TEST(GpuSmall, FusedScanEveryCellAndChunkingMatchesBp) {
  for (const std::int32_t cell : kCells)
    for (const Index H : pick<Sizes>({1, 3, 20, 33}, {20}))
      for (const Index T_ : pick<Sizes>({1, 2, 7, 65}, {9}))
        for (const Index B : pick<Sizes>({1, 3}, {3}))
          for (const bool inject : {false, true}) {
            const bool final_grad = (H + T_) % 2 == 1;
            const std::uint64_t seed = static_cast<std::uint64_t>(100 * H + T_ + B);
            const auto Lf = make_layer<float>(cell, H, T_, B, inject, final_grad, seed);
            ASSERT_TRUE(matches_bp(Lf, options(inject)));
            ASSERT_TRUE(matches_bp(Lf, options(inject, 1, 4, 1, 4, -1, FusedGraphs::always)));
            ASSERT_TRUE(matches_bp(Lf, options(inject, 3, 20, 4, 8, -1, FusedGraphs::never)));
            ASSERT_TRUE(matches_bp(Lf, options(inject, 5, 8, 1, 4, 0)));  // W_hh from global memory
            const auto Ld = make_layer<double>(cell, H, T_, B, inject, final_grad, seed);
            ASSERT_TRUE(matches_bp(Ld, options(inject)));
            ASSERT_TRUE(matches_bp(Ld, options(inject, 2, 4, 1, 16, 0)));
          }
}

TEST(GpuSmall, FusedScanEveryCompiledKernelMatchesBp) {
  // Every (cell, tile, columns, precision) kernel, W_hh on chip and from global memory.
  // Reduced (sanitizers): tiles 4 (many threads per column: the barriers), 20 and 64, each
  // with W_hh on chip or not; double at tile 8.
  for (const std::int32_t cell : {kRnnRelu, kGru, kLstm})
    for (int ti = 0; ti < gpu::kFusedTileCount; ++ti)
      for (const int nc : {1, 4})
        for (const int w_shared : pick<std::vector<int>>({1, 0}, {(ti + nc) % 2})) {
          const int tile = gpu::kFusedTiles[ti];
          if (gpu_test::reduced() && tile != 4 && tile != 20 && tile != 64 && tile != 8) continue;
          const auto Lf = make_layer<float>(cell, 37, 11, 2, true, true, 3);
          if (gpu::fused_combo_compiled(tile, nc, 4, gpu::fused_cell_info(cell).max_tile4) &&
              (!gpu_test::reduced() || tile != 8)) {
            ASSERT_TRUE(matches_bp(Lf, options(true, 4, tile, nc, tile, w_shared)));
          }
          const auto Ld = make_layer<double>(cell, 37, 11, 2, true, true, 3);
          if (gpu::fused_combo_compiled(tile, nc, 8, gpu::fused_cell_info(cell).max_tile4) &&
              (!gpu_test::reduced() || tile == 8)) {
            ASSERT_TRUE(matches_bp(Ld, options(true, 4, tile, nc, tile, w_shared)));
          }
        }
}

TEST(GpuSmall, FusedCarrysRingGivesTheBitsOfGlobalReads) {
  // The carry's ring of totals (cp.async, 4 stages) against global reads: the same arithmetic,
  // so the same bits.
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true}) {
      const auto L = make_layer<float>(cell, 20, pick<Index>(203, 61), 3, inject, true, 12);
      FusedScanOptions ring = options(inject, 4, 20, 4, 20), global = ring;
      global.carry_ring = 0;
      ring.carry_ring = 1;
      FusedScanStats with{}, without{};
      const std::vector<float> a = run_fused(L, ring, &with), b = run_fused(L, global, &without);
      EXPECT_EQ(with.carry_stages, gpu::kFusedCarryStages);
      EXPECT_EQ(without.carry_stages, 0);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << L.describe() << describe(with);
      ASSERT_TRUE(matches_bp(L, ring));
    }
}

TEST(GpuSmall, FusedRecordsRingGivesTheBitsOfGlobalReads) {
  // The record staged into shared memory by cp.async (3 slots a group) against the steps' own
  // global reads: the same arithmetic, so the same bits; one thread a column (20 rows) and several
  // (4 rows, the group's barrier), 16-byte copies (H 20) and one-value copies (H 13).
  for (const std::int32_t cell : kCells)
    for (const Index H : {20, 13})
      for (const Index tile : {20, 4}) {
        const auto L = make_layer<float>(cell, H, pick<Index>(203, 61), 3, true, true, 16);
        const Index nc = tile == 20 && cell != gpu::kLstm ? 4 : 1;
        FusedScanOptions ring = options(true, 4, tile, nc, tile), global = ring;
        ring.record_ring = 1;
        global.record_ring = 0;
        FusedScanStats with{}, without{};
        const std::vector<float> a = run_fused(L, ring, &with), b = run_fused(L, global, &without);
        EXPECT_EQ(with.reduce_stages, gpu::kFusedRecordStages);
        EXPECT_EQ(with.push_stages, gpu::kFusedRecordStages);
        EXPECT_EQ(without.reduce_stages + without.push_stages, 0);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << L.describe() << describe(with);
        ASSERT_TRUE(matches_bp(L, ring));
      }
}

TEST(GpuSmall, FusedPushWritesThePreactGradients) {
  // dx (and the GRU's dh) written by the push against the scan path's preact (preact_item) run on
  // the host over the g_t the same run wrote: every value written (the buffers start NaN), within
  // float rounding (the device may fuse a product and a sum), chunked (a chunk's first step from
  // the push's tail) and not, with the record's ring and without.
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true})
      for (const int ring : {1, 0}) {
        const Index T_ = pick<Index>(203, 61);
        const auto L = make_layer<float>(cell, 20, T_, 3, inject, true, 18);
        const bool gru = cell == kGru;
        const Index GH = (cell == kLstm ? 4 : gru ? 3 : 1) * L.H, n = GH * T_ * L.B;
        DeviceLayer<float> d(L);
        cuda::DeviceBuffer<float> dx(static_cast<std::size_t>(n)), dh(static_cast<std::size_t>(n));
        dx.fill_bytes(0xFF);
        dh.fill_bytes(0xFF);
        for (const Idx chunk : {Idx(4), T_}) {
          FusedScanOptions o = options(inject, chunk, 20, 1, 4);
          o.record_ring = ring;
          auto scan = FusedRecurrentScan<float>::plan(L.code, L.H, L.steps, L.B, o);
          FusedDevicePtrs<float> p = d.ptrs();
          p.dx = dx.data();
          p.dh = gru ? dh.data() : nullptr;
          cuda::Stream stream;
          scan.run(stream.get(), p);
          stream.synchronize();
          std::vector<float> g = d.download(), got_x(static_cast<std::size_t>(n)), got_h(static_cast<std::size_t>(n));
          BPPSA_CUDA_CHECK(cudaMemcpy(got_x.data(), dx.data(), dx.bytes(), cudaMemcpyDeviceToHost));
          BPPSA_CUDA_CHECK(cudaMemcpy(got_h.data(), dh.data(), dh.bytes(), cudaMemcpyDeviceToHost));
          FusedLayer<float> host = L;  // the host's preact over the device's g
          std::vector<float> want_x(got_x.size()), want_h(got_h.size());
          gpu::LayerArgs<float> la;
          la.cell = cell;
          la.H = L.H;
          la.GH = GH;
          la.S = L.S;
          la.B = L.B;
          la.steps = T_;
          la.h = host.rec.h.data();
          la.c = host.rec.c.size() ? host.rec.c.data() : nullptr;
          la.gates = host.rec.gates.size() ? host.rec.gates.data() : nullptr;
          la.aux = host.rec.aux.size() ? host.rec.aux.data() : nullptr;
          la.g = g.data();
          la.dx = want_x.data();
          la.dh = want_h.data();
          for (Idx item = 0; item < T_ * L.B * L.H; ++item) gpu::preact_item(la, item);
          double scale = 0;
          for (const float v : want_x) scale = std::max(scale, static_cast<double>(std::abs(v)));
          for (Index i = 0; i < n; ++i) {
            const auto at = static_cast<std::size_t>(i);
            ASSERT_LE(std::abs(got_x[at] - want_x[at]), 1e-5 * scale)
                << L.describe() << " dx " << i << " chunk " << chunk;
            if (gru) {
              ASSERT_LE(std::abs(got_h[at] - want_h[at]), 1e-5 * scale) << L.describe() << " dh " << i;
            }
          }
          dx.fill_bytes(0xFF);
          dh.fill_bytes(0xFF);
        }
      }
}

TEST(GpuSmall, FusedVColumnApartGivesTheBitsOfOneLaunch) {
  // v_c in a launch of its own on a second stream (event fork and join), plain and captured in
  // the plan's graph (run 3 replays it, after poisoned outputs): the bits of v_c among four
  // columns a thread.
  for (const std::int32_t cell : kCells)
    for (const FusedGraphs graphs : {FusedGraphs::never, FusedGraphs::always}) {
      const auto L = make_layer<float>(cell, 20, pick<Index>(203, 61), 3, true, true, 14);
      FusedScanOptions apart = options(true, 4, 20, 4, 20, -1, graphs), one = apart;
      apart.v_apart = 1;
      one.v_apart = 0;
      FusedScanStats with{}, without{};
      const std::vector<float> a = run_fused(L, apart, &with, 3), b = run_fused(L, one, &without);
      EXPECT_GT(with.v_tile, 0);
      EXPECT_EQ(with.launches, 5);
      EXPECT_EQ(without.v_tile, 0);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << L.describe() << describe(with);
      ASSERT_TRUE(matches_bp(L, apart));
    }
}

TEST(GpuSmall, FusedScanIsExactOnSmallIntegersForEveryChunking) {
  // Exact arithmetic: equal to BP bit for bit, so the order of the products is proven.
  for (const std::int32_t cell : kCells)
    for (const Index T_ : pick<Sizes>({1, 2, 3, 4}, {4}))
      for (const bool inject : {false, true}) {
        const FusedLayer<double> L = exact_layer(cell, 3, T_, 2, inject, static_cast<std::uint64_t>(7 * T_ + inject));
        const Matrix<double> want = oracle_bp(L);
        for (Idx chunk = 1; chunk <= T_; ++chunk) {
          const std::vector<double> got = run_fused(L, options(inject, chunk, 4, 1, 4));
          // Value by value (== : a product f·x that is −0 where BP's sum gives +0 is the same value).
          ASSERT_EQ(got.size(), static_cast<std::size_t>(want.size()));
          for (std::size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], want.data()[i]) << L.describe() << " chunk " << chunk << ", value " << i;
        }
      }
}

TEST(GpuSmall, FusedScanGraphsReplayAndFollowNewPointers) {
  const auto L = make_layer<float>(kGru, 20, 40, 3, true, true, 8);
  const Matrix<double> want = oracle_bp(L);
  for (const FusedGraphs graphs : {FusedGraphs::automatic, FusedGraphs::always, FusedGraphs::never}) {
    auto scan = FusedRecurrentScan<float>::plan(L.code, L.H, L.steps, L.B, options(true, 6, 0, 0, 0, -1, graphs));
    DeviceLayer<float> a(L), b(L);
    cuda::Stream stream;
    // Runs 1–3 on a's buffers (automatic: direct, then captured, then replayed), 4 on b's
    // (the graph follows the new pointers), 5 on a's again.
    for (int run = 1; run <= 5; ++run) {
      DeviceLayer<float>& d = run == 4 ? b : a;
      d.poison();
      scan.run(stream.get(), d.ptrs());
      stream.synchronize();
      const bool graph = scan.stats().graph;
      EXPECT_EQ(graph,
                graphs == FusedGraphs::always || (graphs == FusedGraphs::automatic && run >= 2 && run != 4 && run != 5))
          << "run " << run;
      const std::vector<float> got = d.download();
      ASSERT_TRUE(close_to_oracle(got.data(), want, L.B, kTol<float>, kFloor)) << "run " << run;
    }
  }
}

TEST(GpuSmall, FusedGraphsEnvironmentVariableOverridesThePlan) {
  const auto L = make_layer<float>(kRnnTanh, 5, 12, 2, false, true, 4);
  DeviceLayer<float> d(L);
  cuda::Stream stream;
  for (const char* v : {"never", "always"}) {
    ASSERT_EQ(setenv("BPPSA_FUSED_GRAPHS", v, 1), 0);
    auto scan = FusedRecurrentScan<float>::plan(L.code, L.H, L.steps, L.B, options(false));
    for (int run = 0; run < 3; ++run) scan.run(stream.get(), d.ptrs());
    stream.synchronize();
    EXPECT_EQ(scan.stats().graph, std::string(v) == "always") << v;
    ASSERT_TRUE(close_to_oracle(d.download().data(), oracle_bp(L), L.B, kTol<float>, kFloor)) << v;
  }
  ASSERT_EQ(setenv("BPPSA_FUSED_GRAPHS", "sometimes", 1), 0);
  testutil::expect_error<InvalidArgument>(
      [&] { FusedRecurrentScan<float>::plan(L.code, L.H, L.steps, L.B, options(false)); }, {"BPPSA_FUSED_GRAPHS"});
  ASSERT_EQ(unsetenv("BPPSA_FUSED_GRAPHS"), 0);
}

TEST(GpuSmall, FusedScanErrorsNameTheProblem) {
  using testutil::expect_error;
  expect_error<InvalidArgument>([] { FusedRecurrentScan<float>::plan(gpu::kGru, 0, 5, 2); }, {"hidden size"});
  expect_error<InvalidArgument>([] { FusedRecurrentScan<float>::plan(9, 4, 5, 2); }, {"unknown cell code 9"});
  expect_error<InvalidArgument>([] { FusedRecurrentScan<float>::plan(gpu::kGru, 4, 5, 2, options(false, 0, 12)); },
                                {"tile", "not compiled"});
  expect_error<InvalidArgument>([] { FusedRecurrentScan<double>::plan(gpu::kGru, 4, 5, 2, options(false, 0, 8, 4)); },
                                {"columns per reduce"});
  const auto L = make_layer<float>(kLstm, 4, 5, 2, true, false, 1);
  DeviceLayer<float> d(L);
  auto with = FusedRecurrentScan<float>::plan(kLstm, 4, 5, 2, options(true));
  auto without = FusedRecurrentScan<float>::plan(kLstm, 4, 5, 2, options(false));
  FusedDevicePtrs<float> p = d.ptrs();
  p.c = nullptr;
  expect_error<InvalidArgument>([&] { with.run(nullptr, p); }, {"null device pointers", " c"});
  p = d.ptrs();
  p.above = nullptr;
  expect_error<InvalidArgument>([&] { with.run(nullptr, p); }, {"above (planned with injections)"});
  expect_error<InvalidArgument>([&] { without.run(nullptr, d.ptrs()); }, {"injections = true"});
  // The pre-activation outputs: dh only for a GRU, and then with dx.
  cuda::DeviceBuffer<float> dx(static_cast<std::size_t>(4 * 4 * 5 * 2)), dh(dx.size());
  p = d.ptrs();
  p.dh = dh.data();
  expect_error<InvalidArgument>([&] { with.run(nullptr, p); }, {"dh given without dx"});
  p.dx = dx.data();
  expect_error<InvalidArgument>([&] { with.run(nullptr, p); }, {"dh given for a cell that uses dx for both sides"});
  const auto G = make_layer<float>(kGru, 4, 5, 2, false, false, 1);
  DeviceLayer<float> dg(G);
  auto gru = FusedRecurrentScan<float>::plan(kGru, 4, 5, 2, options(false));
  FusedDevicePtrs<float> q = dg.ptrs();
  q.dx = dx.data();
  expect_error<InvalidArgument>([&] { gru.run(nullptr, q); }, {"null device pointers", "dh (with dx"});
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(GpuSmall, FusedScanWithLengthsMatchesEachSamplesBp) {
  // Per-sample lengths (tests/scan/cuda/test_fused_host.cpp, FusedLengths.* on the host):
  // the padding's record and injections are NaN, each sample's g_t against its own chain's BP.
  // With graphs: a new lengths pointer (or none) is followed as the other pointers are.
  const std::vector<Idx> len{13, 9, 9, 4, 1}, other{13, 13, 7, 2, 2};
  cuda::DeviceBuffer<Idx> dlen(len.size()), dother(other.size());
  dlen.upload(len);
  dother.upload(other);
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true}) {
      const auto Lf = make_layer<float>(cell, 20, 13, 5, inject, !inject, 41);
      const auto Ld = make_layer<double>(cell, 20, 13, 5, inject, !inject, 41);
      auto check = [&](const auto& L, const std::vector<Idx>& lengths, const cuda::DeviceBuffer<Idx>& dl,
                       const FusedScanOptions& o) {
        using T = typename std::decay_t<decltype(L.g_last)>::Scalar;
        const double floor = std::is_same_v<T, float> ? kFloor : 0;
        DeviceLayer<T> d(packed_layer(L, lengths));
        auto scan = FusedRecurrentScan<T>::plan(L.code, L.H, L.steps, L.B, o);
        FusedDevicePtrs<T> p = d.ptrs();
        p.len = dl.data();
        cuda::Stream stream;
        for (int run = 0; run < 2; ++run) {  // automatic graphs: captured on the second
          d.poison();
          scan.run(stream.get(), p);
          stream.synchronize();
          const std::vector<T> got = d.download();
          ASSERT_TRUE(matches_per_sample(got.data(), L, lengths, kTol<T>, floor))
              << L.describe() << describe(scan.stats()) << " run " << run;
        }
      };
      for (const FusedScanOptions& o :
           {options(inject), options(inject, 1, 4, 1, 4, -1, FusedGraphs::always),
            options(inject, 3, 20, 4, 8, -1, FusedGraphs::never), options(inject, 5, 8, 1, 4, 0)}) {
        check(Lf, len, dlen, o);
        check(Lf, other, dother, o);
      }
      check(Ld, len, dlen, options(inject));
      check(Ld, other, dother, options(inject, 2, 4, 1, 16, 0));
    }
  // One plan, graphs always: lengths, other lengths, none (the full layer), lengths again.
  const auto L = make_layer<float>(kLstm, 20, 13, 5, true, true, 42);
  auto scan =
      FusedRecurrentScan<float>::plan(L.code, L.H, L.steps, L.B, options(true, 3, 0, 0, 0, -1, FusedGraphs::always));
  cuda::Stream stream;
  DeviceLayer<float> a(packed_layer(L, len)), b(packed_layer(L, other)), full(L);
  for (int run = 0; run < 4; ++run) {
    DeviceLayer<float>& d = run == 1 ? b : run == 2 ? full : a;
    FusedDevicePtrs<float> p = d.ptrs();
    p.len = run == 1 ? dother.data() : run == 2 ? nullptr : dlen.data();
    d.poison();
    scan.run(stream.get(), p);
    stream.synchronize();
    EXPECT_TRUE(scan.stats().graph);
    const std::vector<float> got = d.download();
    if (run == 2) {
      ASSERT_TRUE(close_to_oracle(got.data(), oracle_bp(L), L.B, kTol<float>, kFloor)) << "run " << run;
    } else {
      ASSERT_TRUE(matches_per_sample(got.data(), L, run == 1 ? other : len, kTol<float>, kFloor)) << "run " << run;
    }
  }
  // Automatic graphs, batches alternating between full length and shorter: each kind keeps its
  // own graph, replayed from its second run on (not dropped at each switch).
  auto alternating =
      FusedRecurrentScan<float>::plan(L.code, L.H, L.steps, L.B, options(true, 3, 0, 0, 0, -1, FusedGraphs::automatic));
  for (int run = 0; run < 6; ++run) {
    const bool with_lengths = run % 2 == 1;
    DeviceLayer<float>& d = with_lengths ? a : full;
    FusedDevicePtrs<float> p = d.ptrs();
    p.len = with_lengths ? dlen.data() : nullptr;
    d.poison();
    alternating.run(stream.get(), p);
    stream.synchronize();
    EXPECT_EQ(alternating.stats().graph, run >= 2) << "run " << run;
    const std::vector<float> got = d.download();
    if (with_lengths) {
      ASSERT_TRUE(matches_per_sample(got.data(), L, len, kTol<float>, kFloor)) << "alternating run " << run;
    } else {
      ASSERT_TRUE(close_to_oracle(got.data(), oracle_bp(L), L.B, kTol<float>, kFloor)) << "alternating run " << run;
    }
  }
}

TEST(GpuSmall, FusedEstimateIsWhatThePlanDoes) {
  for (const std::int32_t cell : kCells) {
    const FusedScanStats e = FusedRecurrentScan<float>::estimate(cell, 20, 1000, 16, options(true));
    const auto scan = FusedRecurrentScan<float>::plan(cell, 20, 1000, 16, options(true));
    const FusedScanStats& s = scan.stats();
    EXPECT_EQ(e.chunk_length, s.chunk_length);
    EXPECT_EQ(e.chunks, s.chunks);
    EXPECT_EQ(e.device_bytes, s.device_bytes);
    EXPECT_EQ(e.launches, s.launches);
    EXPECT_GT(s.flops, 0);
    EXPECT_GT(s.bytes, 0);
    EXPECT_GT(s.estimate_us, 0);
    EXPECT_EQ(s.launches, s.chunks > 1 ? 4 : 2);
  }
}

// ---------------------------------------------------------------------------------------------
// The issue's sizes (a covering set, float; the cost model's plan unless said otherwise)

struct SizeCase {
  std::int32_t cell;
  Index H, T, B;
  Idx chunk = 0;  ///< forced chunk length (the reduce at sizes where the model would push only)
};

TEST(GpuFused, IssueSizesMatchBp) {
  const std::vector<SizeCase> cases = {
      {kRnnTanh, 20, 30000, 16}, {kRnnTanh, 20, 1000, 16}, {kRnnTanh, 1, 30000, 1},   {kRnnTanh, 32, 1000, 64},
      {kRnnTanh, 33, 1025, 16},  {kRnnTanh, 64, 1000, 16}, {kRnnTanh, 256, 1000, 16}, {kRnnTanh, 20, 1, 64},
      {kRnnTanh, 20, 2, 16},     {kRnnTanh, 20, 3, 1},     {kRnnTanh, 64, 255, 64},   {kRnnTanh, 256, 257, 1, 16},
      {kRnnRelu, 20, 1000, 16},  {kRnnRelu, 64, 129, 64},  {kGru, 20, 1034, 16},      {kGru, 33, 1000, 64},
      {kGru, 64, 1000, 16},      {kGru, 256, 65, 16, 8},   {kGru, 1, 30000, 16},      {kLstm, 20, 1000, 16},
      {kLstm, 32, 1000, 64},     {kLstm, 64, 1023, 16},    {kLstm, 256, 1000, 1},     {kLstm, 256, 33, 2, 8},
      {kLstm, 1, 3, 64},         {kGru, 32, 30000, 16},    {kLstm, 20, 30000, 16}};
  int i = 0;
  for (const SizeCase& c : cases) {
    const bool inject = i++ % 2 == 0;
    const auto L = make_layer<float>(c.cell, c.H, c.T, c.B, inject, !inject, static_cast<std::uint64_t>(i));
    ASSERT_TRUE(matches_bp(L, options(inject, c.chunk), 2));
  }
}

TEST(GpuFused, LongDoubleChainsMatchBpTightly) {
  for (const std::int32_t cell : kCells) {
    const auto L = make_layer<double>(cell, 20, 3001, 16, true, true, 5);
    ASSERT_TRUE(matches_bp(L, options(true)));
    ASSERT_TRUE(matches_bp(L, options(true, 64, 32, 1, 4, 0)));
  }
}

}  // namespace
