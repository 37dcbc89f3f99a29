// The GPU recurrent model without a GPU: the kernels' own __host__ __device__ phases
// (src/nn/cuda/*_math.hpp) replayed by g++ over every (block, thread), phase by phase between
// the barriers, and every matrix product as described for cuBLAS (layer_gemms.hpp) run by a
// naive reference GEMM, against the CPU engine: the forward record, BP through time, the
// generic scan's program over device-generated Jacobians, pre-activation and parameter
// gradients, the head and the loss, Adam and SGD — every cell, 1–2 layers, head last/every,
// ce/mse. Each persistent kernel is replayed twice, threads in opposite orders, and must give
// bit-identical results (no thread of a phase reads what another writes); arrays start as NaN,
// so a read of a value nobody wrote shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/nn/model.hpp"
#include "bppsa/train/optimizer.hpp"
#include "cuda/optimizer_replay.hpp"
#include "expect_error.hpp"
#include "jacobian/cuda/items.hpp"
#include "nn/cell.hpp"
#include "nn/cuda/cluster_recurrence.hpp"
#include "nn/cuda/head_math.hpp"
#include "nn/cuda/layer_gemms.hpp"
#include "nn/cuda/recurrent_math.hpp"
#include "nn/cuda/scan_layout.hpp"
#include "nn/lengths.hpp"
#include "scan/cuda/program.hpp"
#include "scan/plan.hpp"
#include "tolerance.hpp"

namespace {

using namespace bppsa;
namespace gpu = bppsa::detail::gpu;
using gpu::Idx;

template <class T>
constexpr T kPoison = std::numeric_limits<T>::quiet_NaN();
/// Relative tolerance per tensor against the CPU engine: summation order and FMA only.
template <class T>
constexpr double kTol = testutil::tol<T>(testutil::Op::cuda_recurrent);

using testutil::max_rel_error;
using testutil::replay_optimizer;

#define EXPECT_CLOSE(T, got, want, n, what) EXPECT_LE(max_rel_error((got), (want), (n)), kTol<T>) << (what)

// ---------------------------------------------------------------------------------------------
// Reference cuBLAS semantics (column-major, leading dimensions), for layer_gemms.hpp

template <class T>
void reference(const gpu::Gemm<T>& g) {
  for (Idx j = 0; j < g.n; ++j)
    for (Idx i = 0; i < g.m; ++i) {
      double acc = 0;
      for (Idx p = 0; p < g.k; ++p) {
        const double a = g.ta ? g.a[p + i * g.lda] : g.a[i + p * g.lda];
        const double b = g.tb ? g.b[j + p * g.ldb] : g.b[p + j * g.ldb];
        acc += a * b;
      }
      g.c[i + j * g.ldc] = static_cast<T>(acc);
    }
}
template <class T>
void reference(const gpu::Gemv<T>& g) {
  for (Idx i = 0; i < g.m; ++i) {
    double acc = 0;
    for (Idx j = 0; j < g.n; ++j) acc += static_cast<double>(g.a[i + j * g.lda]) * g.x[j];
    g.y[i] = static_cast<T>(acc);
  }
}

// ---------------------------------------------------------------------------------------------
// Cells and random models

struct CellCase {
  CellType cell;
  Nonlinearity nl;
  std::int32_t code;
  const char* name;
};
const std::vector<CellCase>& every_cell() {
  static const std::vector<CellCase> cells{{CellType::rnn, Nonlinearity::tanh, gpu::kRnnTanh, "rnn"},
                                           {CellType::rnn, Nonlinearity::relu, gpu::kRnnRelu, "rnn-relu"},
                                           {CellType::gru, Nonlinearity::tanh, gpu::kGru, "gru"},
                                           {CellType::lstm, Nonlinearity::tanh, gpu::kLstm, "lstm"}};
  return cells;
}

template <class T>
Matrix<T> random_matrix(Index rows, Index cols, std::mt19937_64& rng, double scale = 1) {
  std::normal_distribution<double> n(0, scale);
  Matrix<T> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(n(rng));
  return m;
}

/// A CPU stack with weights wider than the default init (the nonlinearities matter).
template <class T>
Recurrent<T> random_stack(const CellCase& c, Index input, Index hidden, Index layers, std::uint64_t seed) {
  Recurrent<T> r(RecurrentConfig{c.cell, input, hidden, layers, c.nl});
  r.reset_parameters(seed);
  for (Index l = 0; l < layers; ++l) {
    auto& p = r.params(l);
    for (auto* m : {&p.w_ih, &p.w_hh}) *m *= T(1.7);
    for (auto* v : {&p.b_ih, &p.b_hh}) *v *= T(1.7);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Persistent kernels, replayed

/// One layer's device arrays on the host (LayerRecord's layout), NaN-initialised.
template <class T>
struct HostLayer {
  std::vector<T> ax, h, c, gates, aux, w_col, g, dx, dh, gx, g_last;
};

/// forward_program's context in the replay: each() queues a phase for every thread, barrier()
/// runs the queued phases thread after thread (threads in forward or reverse order), so that
/// a thread runs ahead of the others up to the next barrier, as it may on a GPU.
struct ReplayBlock {
  unsigned threads;
  bool reverse;
  std::vector<std::function<void(Idx)>> queued;
  template <class U>
  struct PerThread {
    std::shared_ptr<std::vector<U>> u;
    U& operator()(Idx th) { return (*u)[static_cast<std::size_t>(th)]; }
  };
  void each(std::function<void(Idx)> f) { queued.push_back(std::move(f)); }
  void barrier() {
    for (unsigned i = 0; i < threads; ++i)
      for (auto& f : queued) f(static_cast<Idx>(reverse ? threads - 1 - i : i));
    queued.clear();
  }
  /// __syncwarp: the whole block's barrier here (the warp-per-sample forward's warps share nothing,
  /// which the replays in opposite thread orders check).
  void warp_barrier() { barrier(); }
  template <class U>
  PerThread<U> per_thread() {
    return {std::make_shared<std::vector<U>>(threads)};
  }
};

/// Replays a persistent kernel: each block in turn (blocks share nothing) on shared memory of
/// layout L (poisoned), its program (forward_program, backward_program: the kernel's own code)
/// with ReplayBlock's barriers.
template <class T, class Program>
void replay(const gpu::LayerArgs<T>& a, const gpu::SmemLayout& L, unsigned threads, bool reverse, Program program) {
  for (Idx block = 0; block < gpu::persistent_blocks(a.B, a.spb); ++block) {
    std::vector<T> sm(static_cast<std::size_t>(L.total), kPoison<T>);
    ReplayBlock ctx{threads, reverse, {}};
    program(a, sm.data(), block, static_cast<Idx>(threads), ctx);
    // A program ends with a barrier: a phase queued after it would run on its registers (per_thread)
    // after the program has returned, and a kernel's last phase unordered against nothing is a
    // barrier missing.
    EXPECT_TRUE(ctx.queued.empty()) << "block " << block << ": the program's last phase is not followed by a barrier";
    ctx.queued.clear();
  }
}

/// forward_cluster_program's context in the replay: the blocks of one cluster, each with its own
/// shared memory. each() queues a phase for every (block, thread), block_barrier() ends a phase,
/// cluster_barrier() runs what was queued: in step (every block's first phase, then every block's
/// second, …) or, `skewed`, block after block, each running all its phases before the next block
/// starts (as far ahead of the others as the cluster barrier lets it), so that a block reading
/// what another writes between the same two cluster barriers changes the result. Blocks and
/// threads in forward or reverse order.
template <class T>
struct ReplayCluster {
  Idx ctas;
  unsigned threads;
  bool reverse, skewed;
  std::vector<std::vector<T>> smems;
  std::vector<std::vector<std::function<void(Idx, Idx)>>> phases{1};
  template <class U>
  struct PerThread {
    std::shared_ptr<std::vector<U>> u;
    unsigned threads;
    U& operator()(Idx rank, Idx th) { return (*u)[static_cast<std::size_t>(rank * threads + th)]; }
  };
  void each(std::function<void(Idx, Idx)> f) { phases.back().push_back(std::move(f)); }
  void block_barrier() { phases.emplace_back(); }
  T* smem(Idx rank) { return smems[static_cast<std::size_t>(rank)].data(); }
  void run(Idx rank, const std::vector<std::function<void(Idx, Idx)>>& phase) {
    for (unsigned i = 0; i < threads; ++i)
      for (auto& f : phase) f(rank, static_cast<Idx>(reverse ? threads - 1 - i : i));
  }
  void cluster_barrier() {
    const auto rank = [&](Idx i) { return reverse ? ctas - 1 - i : i; };
    if (skewed) {
      for (Idx i = 0; i < ctas; ++i)
        for (const auto& phase : phases) run(rank(i), phase);
    } else {
      for (const auto& phase : phases)
        for (Idx i = 0; i < ctas; ++i) run(rank(i), phase);
    }
    phases.assign(1, {});
  }
  bool idle() const { return phases.size() == 1 && phases[0].empty(); }
  template <class U>
  PerThread<U> per_thread() {
    return {std::make_shared<std::vector<U>>(static_cast<std::size_t>(ctas) * threads), threads};
  }
};

/// How a persistent kernel is launched in a test: samples per block, W_hh on chip, threads; warp:
/// the forward runs the warp-per-sample kernel (spb warps a block; w_shared and threads unused);
/// cluster > 0: the forward and BP run the cluster kernels with that many blocks a cluster, spb
/// samples a cluster and (BP) `slices` threads a row (w_shared and threads unused).
struct Launch {
  Idx spb;
  bool w_shared;
  unsigned threads;
  bool warp = false;
  Idx cluster = 0;
  Idx slices = 1;
};
const std::vector<Launch>& launches() {
  static const std::vector<Launch> l{
      {1, true, 32}, {2, false, 64}, {3, true, 32}, {1, false, 96}, {2, false, 64, true}};
  return l;
}

/// Everything one layer is: its shape and the host arrays; forward and BP as the GPU runs them.
template <class T>
struct LayerSim {
  std::int32_t cell;
  Idx I, H, GH, S, B, steps;
  const RecurrentLayerParams<T>* p;
  HostLayer<T> a;
  std::vector<Idx> len;  ///< per-sample lengths (LayerArgs::len), empty = none

  LayerSim(std::int32_t cell_, Idx input, Idx hidden, Idx batch, Idx steps_, const RecurrentLayerParams<T>& params)
      : cell(cell_),
        I(input),
        H(hidden),
        GH(gpu::cell_gates(cell_) * hidden),
        S(gpu::cell_state(cell_, hidden)),
        B(batch),
        steps(steps_),
        p(&params) {
    const Idx TB = steps * B, T1B = (steps + 1) * B;
    a.ax.assign(static_cast<std::size_t>(GH * TB), kPoison<T>);
    a.h.assign(static_cast<std::size_t>(H * T1B), kPoison<T>);
    a.c.assign(static_cast<std::size_t>(H * T1B), kPoison<T>);
    a.gates.assign(static_cast<std::size_t>(GH * TB), kPoison<T>);
    a.aux.assign(static_cast<std::size_t>(H * TB), kPoison<T>);
    a.w_col.assign(static_cast<std::size_t>(GH * H), kPoison<T>);
    a.g.assign(static_cast<std::size_t>(S * T1B), kPoison<T>);
    a.dx.assign(static_cast<std::size_t>(GH * TB), kPoison<T>);
    a.dh.assign(static_cast<std::size_t>(GH * TB), kPoison<T>);
    a.gx.assign(static_cast<std::size_t>(I * TB), kPoison<T>);
    a.g_last.assign(static_cast<std::size_t>(S * B), kPoison<T>);
  }

  gpu::LayerArgs<T> args(const Launch& l) {
    gpu::LayerArgs<T> r;
    r.cell = cell;
    r.H = H;
    r.GH = GH;
    r.S = S;
    r.B = B;
    r.steps = steps;
    r.spb = l.spb;
    r.w_shared = l.w_shared;
    r.b_ih = p->b_ih.data();
    r.b_hh = p->b_hh.data();
    r.ax = a.ax.data();
    r.h = a.h.data();
    r.c = a.c.data();
    r.gates = a.gates.data();
    r.aux = a.aux.data();
    r.g = a.g.data();
    r.dx = a.dx.data();
    r.dh = a.dh.data();
    r.len = len.empty() ? nullptr : len.data();
    return r;
  }

  /// The layer-0 input as the stack holds it: zero_padding_kernel's items over x (I × TB).
  std::vector<T> device_input(const T* x) const {
    std::vector<T> d(x, x + I * steps * B);
    for (Idx i = 0; !len.empty() && i < I * steps * B; ++i)
      d[static_cast<std::size_t>(i)] = gpu::unpadded_value(len.data(), I, B, i, d[static_cast<std::size_t>(i)]);
    return d;
  }

  /// final_state_kernel's items: the final state, S × B (h rows over c rows).
  Matrix<T> final_state() const {
    Matrix<T> s(S, B);
    const Idx* l = len.empty() ? nullptr : len.data();
    for (Idx b = 0; b < B; ++b)
      for (Idx i = 0; i < H; ++i) {
        s(i, b) = gpu::final_state_value(a.h.data(), l, H, B, steps, b, i);
        if (cell == gpu::kLstm) s(H + i, b) = gpu::final_state_value(a.c.data(), l, H, B, steps, b, i);
      }
    return s;
  }

  /// x: I × TB (the layer's input); s0: S × B or empty. skewed: the cluster kernel's replay runs
  /// its blocks one after the other between cluster barriers (ReplayCluster).
  void forward(const T* x, const Matrix<T>& s0, const Launch& l, bool reverse = false, bool skewed = false) {
    reference(gpu::input_projection(GH, I, steps * B, p->w_ih.data(), x, a.ax.data()));
    for (Idx b = 0; b < B; ++b)
      for (Idx j = 0; j < H; ++j) {
        a.h[static_cast<std::size_t>(b * H + j)] = s0.size() ? s0(j, b) : T(0);
        a.c[static_cast<std::size_t>(b * H + j)] = s0.size() && cell == gpu::kLstm ? s0(H + j, b) : T(0);
      }
    for (Idx i = 0; i < GH * H; ++i)
      a.w_col[static_cast<std::size_t>(i)] = p->w_hh.data()[gpu::transpose_source(GH, H, i)];
    gpu::LayerArgs<T> r = args(l);
    r.w = a.w_col.data();
    if (l.cluster > 0) {
      run_cluster(r, l, false, reverse, skewed);
      return;
    }
    if (l.warp && H <= gpu::warp_forward_max_hidden<T>(cell)) {  // else the block kernel, as the stack picks
      gpu::SmemLayout L;
      L.total = gpu::warp_forward_smem<T>(cell, l.spb);
      replay(r, L, static_cast<unsigned>(32 * l.spb), reverse, [&](auto&&... p) { forward_warp(p...); });
      return;
    }
    if (len.empty())
      replay(r, gpu::forward_smem(r), l.threads, reverse,
             [](auto&&... p) { gpu::forward_program<false>(std::forward<decltype(p)>(p)...); });
    else
      replay(r, gpu::forward_smem(r), l.threads, reverse,
             [](auto&&... p) { gpu::forward_program<true>(std::forward<decltype(p)>(p)...); });
  }

  /// A cluster kernel (forward_cluster_program or backward_cluster_program, as launch_cluster runs
  /// them) with l.cluster blocks a cluster, l.spb samples and (BP) l.slices threads a row, each
  /// cluster in turn (clusters share nothing) on poisoned shared memory.
  void run_cluster(const gpu::LayerArgs<T>& r, const Launch& l, bool backward, bool reverse, bool skewed) {
    gpu::ClusterLaunch cl;
    const Idx G = GH / H;
    cl.ctas = l.cluster;
    cl.units = (H + l.cluster - 1) / l.cluster;
    cl.spb = l.spb;
    cl.slices = backward ? l.slices : gpu::cluster_slices(G);
    cl.threads = static_cast<unsigned>(gpu::cluster_threads(cl.slices, cl.units, cl.spb));
    cl.fits = true;
    const Idx values = backward ? gpu::cluster_bp_smem(GH, cl.units, cl.spb, cl.slices).total
                                : gpu::cluster_smem(G, H, cl.units, cl.spb).total;
    for (Idx c = 0; c < gpu::cluster_count(B, l.spb); ++c) {
      ReplayCluster<T> ctx{l.cluster, cl.threads, reverse, skewed, {}};
      ctx.smems.assign(static_cast<std::size_t>(l.cluster),
                       std::vector<T>(static_cast<std::size_t>(values), kPoison<T>));
      gpu::visit_cell(r.cell, [&](auto cell) {
        using Cell = decltype(cell);
        if (backward && r.len != nullptr)
          gpu::backward_cluster_program<Cell, true>(r, cl, c, ctx);
        else if (backward)
          gpu::backward_cluster_program<Cell, false>(r, cl, c, ctx);
        else if (r.len != nullptr)
          gpu::forward_cluster_program<Cell, true>(r, cl, c, ctx);
        else
          gpu::forward_cluster_program<Cell, false>(r, cl, c, ctx);
      });
      EXPECT_TRUE(ctx.idle()) << "cluster " << c << ": the program's last phase is not followed by a cluster barrier";
    }
  }

  /// forward_warp_program for the layer's cell and lengths (the kernel launch_forward_warp picks).
  template <class Ctx>
  static void forward_warp(const gpu::LayerArgs<T>& r, T* sm, Idx block, Idx, Ctx& ctx) {
    gpu::visit_cell(r.cell, [&](auto cell) {
      if (r.len != nullptr)
        gpu::forward_warp_program<decltype(cell), true>(r, sm, block, ctx);
      else
        gpu::forward_warp_program<decltype(cell), false>(r, sm, block, ctx);
    });
  }

  /// backward_warp_program for the layer's cell and lengths (the kernel launch_backward_warp picks).
  template <class Ctx>
  static void backward_warp(const gpu::LayerArgs<T>& r, T* sm, Idx block, Idx, Ctx& ctx) {
    gpu::visit_cell(r.cell, [&](auto cell) {
      if (r.len != nullptr)
        gpu::backward_warp_program<decltype(cell), true>(r, sm, block, ctx);
      else
        gpu::backward_warp_program<decltype(cell), false>(r, sm, block, ctx);
    });
  }

  /// g_T from `last` (H × B or null; with injections and lengths, above's block T) and `extra`
  /// (S × B or empty) into `dst` (S × B), as backward_from launches final_grad_kernel.
  void set_final(const T* last, bool inject, const Matrix<T>& extra, T* dst) {
    const Idx* l = inject && !len.empty() ? len.data() : nullptr;
    for (Idx i = 0; i < S * B; ++i)
      dst[i] = gpu::final_state_grad(H, S, B, steps, last, l, extra.size() ? extra.data() : nullptr, i / S, i % S);
  }

  /// BP: above (H × TB) injected when `inject`, else `above` is the H × B gradient on h_T.
  void backward_bp(const T* above, bool inject, const Matrix<T>& final_grad, const Launch& l, bool reverse = false,
                   bool skewed = false) {
    set_final(inject ? above + (steps - 1) * B * H : above, inject, final_grad, a.g.data() + steps * B * S);
    gpu::LayerArgs<T> r = args(l);
    r.w = p->w_hh.data();
    r.above = inject ? above : nullptr;
    if (l.cluster > 0) {
      run_cluster(r, l, true, reverse, skewed);
      return;
    }
    if (l.warp && H <= gpu::warp_forward_max_hidden<T>(cell)) {  // else the block kernel, as the stack picks
      gpu::SmemLayout L;
      L.total = gpu::warp_backward_smem<T>(cell, l.spb);
      replay(r, L, static_cast<unsigned>(32 * l.spb), reverse, [&](auto&&... p) { backward_warp(p...); });
      return;
    }
    if (len.empty())
      replay(r, gpu::backward_smem(r), l.threads, reverse,
             [](auto&&... p) { gpu::backward_program<false>(std::forward<decltype(p)>(p)...); });
    else
      replay(r, gpu::backward_smem(r), l.threads, reverse,
             [](auto&&... p) { gpu::backward_program<true>(std::forward<decltype(p)>(p)...); });
  }

  /// The scan path: every g_t from the generic GPU scan's program (Jacobians, injections and
  /// g_T written where GenericLayerScan writes them), replayed; then the pre-activation
  /// gradients of every item. With lengths the plan has injections (injection_by_length).
  void backward_scan(const T* above, bool inject, const Matrix<T>& final_grad, Algorithm algorithm, int chunks) {
    set_final(inject ? above + (steps - 1) * B * H : above, inject, final_grad, a.g.data() + steps * B * S);
    const bool affine = inject || !len.empty();
    const Layout<T> layout = gpu::layer_scan_layout<T>(cell, H, B);
    const auto elements = gpu::layer_scan_elements(layout, steps, affine);
    const auto planned = detail::plan_schedule(elements, B, algorithm, 1, chunks, 1);
    const gpu::Program<T> prog = gpu::compile_program(planned.schedule, elements, B);
    std::vector<T> arena(static_cast<std::size_t>(prog.values), kPoison<T>);
    const gpu::LayerScanOffsets o = gpu::layer_scan_offsets(prog, steps, affine);
    gpu::LayerArgs<T> r = args(launches()[0]);
    r.w = p->w_hh.data();
    r.above = inject ? above : nullptr;
    const Idx per = gpu::jacobian_values(cell, H);
    for (Idx t = 1; t <= steps; ++t)  // jacobian_kernel's items
      for (Idx b = 0; b < B; ++b)
        for (Idx item = 0; item < per; ++item)
          arena[static_cast<std::size_t>(o.element[static_cast<std::size_t>(t - 1)] + b * per + item)] =
              gpu::jacobian_value(r, t, b, item);
    for (const auto& m : prog.shared_matrices)  // S = W_hh^T: W_hh's row-major values
      std::copy_n(p->w_hh.data(), H * H, arena.begin() + m.offset);
    const T* g_top = a.g.data() + steps * B * S;
    const T* up = inject ? above : nullptr;
    for (Idx k = 1; affine && k <= steps - 1; ++k)  // injection_kernel's (injection_by_length_kernel's) items
      for (Idx b = 0; b < B; ++b)
        for (Idx row = 0; row < S; ++row)
          arena[static_cast<std::size_t>(o.injection[static_cast<std::size_t>(k - 1)] + b * S + row)] =
              len.empty() ? gpu::injection_value(above, H, B, k, b, row)
                          : gpu::injection_by_length(up, g_top, len.data(), H, S, B, k, b, row);
    T* top = arena.data() + o.prefix[static_cast<std::size_t>(steps)];
    for (Idx i = 0; i < S * B; ++i)
      top[i] = len.empty() ? g_top[i] : gpu::scan_top_by_length(g_top, len.data(), S, steps, i / S, i % S);
    for (const gpu::Launch& l : prog.launches) {
      const Idx total = gpu::total_work(l.count, l.batch, l.items);
      const unsigned grid = gpu::grid_blocks(total);
      for (unsigned blk = 0; blk < grid; ++blk)
        for (unsigned th = 0; th < static_cast<unsigned>(gpu::kBlock); ++th) {
          if (l.type == gpu::Launch::Type::mat)
            gpu::mat_thread(prog.mat_ops.data() + l.first, l.count, l.batch, l.items, arena.data(), prog.indices.data(),
                            blk, gpu::kBlock, th, grid);
          else
            gpu::vec_thread(prog.vec_ops.data() + l.first, l.count, l.batch, l.items, arena.data(), prog.indices.data(),
                            blk, gpu::kBlock, th, grid);
        }
    }
    for (Idx t = 0; t < steps; ++t)  // gather_blocks_kernel
      std::copy_n(arena.begin() + o.prefix[static_cast<std::size_t>(t)], S * B, a.g.begin() + t * S * B);
    for (Idx i = 0; i < steps * B * H; ++i) gpu::preact_item(r, i);  // preact_kernel
  }

  /// Parameter gradients and the input gradient (layer_grad_products) from dx/dh.
  void param_grads(const T* x, RecurrentLayerParams<T>& g) {
    const Idx TB = steps * B;
    const std::vector<T> ones(static_cast<std::size_t>(TB), T(1));
    g.w_ih.setConstant(GH, I, kPoison<T>);
    g.w_hh.setConstant(GH, H, kPoison<T>);
    g.b_ih.setConstant(GH, kPoison<T>);
    g.b_hh.setConstant(GH, kPoison<T>);
    const T* dh = cell == gpu::kGru ? a.dh.data() : a.dx.data();
    const auto prods =
        gpu::layer_grad_products(I, H, GH, TB, x, a.h.data(), a.dx.data(), dh, p->w_ih.data(), ones.data(),
                                 g.w_ih.data(), g.w_hh.data(), g.b_ih.data(), g.b_hh.data(), a.gx.data());
    reference(prods.w_ih);
    reference(prods.w_hh);
    reference(prods.input);
    reference(prods.b_ih);
    reference(prods.b_hh);
  }

  const T* output() const { return a.h.data() + B * H; }
};

// ---------------------------------------------------------------------------------------------
// Launch geometry

TEST(CudaRecurrentLaunch, PersistentLaunchFillsTheMultiprocessorsAndKeepsWOnChipWhenItFits) {
  const std::size_t smem = 227 * 1024;
  // The paper's RNN: W_hh on chip, one sample per block up to one block per SM.
  auto p = gpu::persistent_launch(20, 20, 20, 16, 4, 132, smem, 512);
  EXPECT_TRUE(p.fits);
  EXPECT_TRUE(p.w_shared);
  EXPECT_EQ(p.spb, 1);
  EXPECT_EQ(p.threads, 32u);
  EXPECT_EQ(p.smem_bytes, static_cast<std::size_t>(20 * 20 + 2 * 20 + 20) * 4);
  // More samples than SMs: ⌈B / SMs⌉ per block.
  p = gpu::persistent_launch(20, 20, 20, 1000, 4, 132, smem, 512);
  EXPECT_EQ(p.spb, 8);
  EXPECT_EQ(gpu::persistent_blocks(1000, p.spb), 125);
  // LSTM H 128 (256 KiB of W_hh): from global memory, the buffers on chip.
  p = gpu::persistent_launch(512, 128, 256, 16, 4, 132, smem, 512);
  EXPECT_TRUE(p.fits);
  EXPECT_FALSE(p.w_shared);
  EXPECT_EQ(p.threads, 512u);
  // GRU H 128: W_hh (192 KiB) stays on chip with fewer samples per block than ⌈B / SMs⌉ = 20
  // (640 values each beside it: at most 14 fit; halving gives 10).
  p = gpu::persistent_launch(384, 128, 128, 2640, 4, 132, smem, 512);
  EXPECT_TRUE(p.w_shared);
  EXPECT_EQ(p.spb, 10);
  // The forward keeps no gate vector: (384·128 + 2·128·20)·4 = 217,088 bytes hold W_hh and 20 samples.
  p = gpu::persistent_launch(384, 128, 128, 2640, 4, 132, smem, 512, false);
  EXPECT_TRUE(p.w_shared);
  EXPECT_EQ(p.spb, 20);
  EXPECT_EQ(p.smem_bytes, static_cast<std::size_t>(217088));
  // Double precision halves what fits.
  p = gpu::persistent_launch(384, 128, 128, 16, 8, 132, smem, 512);
  EXPECT_FALSE(p.w_shared);
  // Beyond any shared memory: refused (the caller throws).
  p = gpu::persistent_launch(4 * 20000, 20000, 40000, 1, 4, 132, smem, 512);
  EXPECT_FALSE(p.fits);
  // Every choice fits what it claims and covers the batch.
  for (Idx B : {1, 7, 133, 300})
    for (Idx H : {1, 20, 64, 256}) {
      p = gpu::persistent_launch(4 * H, H, 2 * H, B, 4, 132, smem, 512);
      ASSERT_TRUE(p.fits);
      EXPECT_LE(p.smem_bytes, smem);
      EXPECT_GE(gpu::persistent_blocks(B, p.spb) * p.spb, B);
      EXPECT_EQ(p.threads % 32, 0u);
    }
}

TEST(CudaRecurrentLaunch, ForwardThreadsAreOnePerUnitRoundedToWarps) {
  EXPECT_EQ(gpu::forward_threads(20, 1, 512), 32u);  // the paper's RNN: one warp
  EXPECT_EQ(gpu::forward_threads(20, 3, 512), 64u);  // 60 units
  EXPECT_EQ(gpu::forward_threads(64, 2, 512), 128u);
  EXPECT_EQ(gpu::forward_threads(128, 10, 512), 512u);  // capped: the step's loop strides beyond
  EXPECT_EQ(gpu::forward_threads(1, 1, 512), 32u);
}

TEST(CudaRecurrentLaunch, BlocksPartitionTheBatch) {
  for (Idx B : {1, 2, 5, 16})
    for (Idx spb : {1, 2, 3, 7}) {
      std::vector<int> seen(static_cast<std::size_t>(B), 0);
      for (Idx blk = 0; blk < gpu::persistent_blocks(B, spb); ++blk) {
        ASSERT_GE(gpu::block_samples(blk, spb, B), 1);
        for (Idx s = 0; s < gpu::block_samples(blk, spb, B); ++s)
          ++seen[static_cast<std::size_t>(gpu::block_first(blk, spb) + s)];
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << B << " / " << spb;
    }
}

// ---------------------------------------------------------------------------------------------
// One layer: forward record, BP, scan path

/// The CPU cell's forward on the same input and initial state: the reference record.
template <class T>
detail::LayerRecord<T> cpu_record(const CellCase& c, const RecurrentLayerParams<T>& p, const Matrix<T>& x, Idx H, Idx B,
                                  Idx steps, const Matrix<T>& s0) {
  detail::LayerRecord<T> rec;
  rec.steps = steps;
  rec.batch = B;
  rec.hidden = H;
  rec.x = x;
  rec.ax = p.w_ih * x;
  rec.ax.colwise() += p.b_ih;
  rec.h.setZero(H, (steps + 1) * B);
  rec.c.setZero(H, (steps + 1) * B);
  if (s0.size()) {
    rec.h.leftCols(B) = s0.topRows(H);
    if (c.cell == CellType::lstm) rec.c.leftCols(B) = s0.bottomRows(H);
  }
  if (c.cell != CellType::rnn) {
    rec.gates.resize(gate_count(c.cell) * H, steps * B);
    rec.aux.resize(H, steps * B);
  }
  detail::cell_ops<T>(c.cell, c.nl).forward(p, rec, 1);
  return rec;
}

template <class T>
void forward_record_matches_cpu() {
  std::mt19937_64 rng(11);
  for (const CellCase& c : every_cell())
    // {20, 4, 3} with 3 samples a block and 32 threads: one launch, both forward paths (the first
    // block has more units than threads, the second, one sample, a thread per unit).
    for (const auto& [H, B, steps] :
         std::vector<std::array<Idx, 3>>{{1, 1, 1}, {3, 3, 2}, {5, 4, 7}, {20, 2, 5}, {20, 4, 3}})
      for (const Launch& l : launches()) {
        SCOPED_TRACE(std::string(c.name) + " H " + std::to_string(H) + " B " + std::to_string(B) + " T " +
                     std::to_string(steps) + " spb " + std::to_string(l.spb) + (l.w_shared ? " smem" : " global"));
        const Idx I = 2;
        Recurrent<T> cpu = random_stack<T>(c, I, H, 1, 5 + static_cast<std::uint64_t>(H));
        const auto& p = cpu.params(0);
        const Matrix<T> x = random_matrix<T>(I, steps * B, rng);
        const Matrix<T> s0 = (H + B) % 2 ? random_matrix<T>(gpu::cell_state(c.code, H), B, rng, 0.5) : Matrix<T>();
        const detail::LayerRecord<T> want = cpu_record(c, p, x, H, B, steps, s0);
        LayerSim<T> fwd(c.code, I, H, B, steps, p), rev(c.code, I, H, B, steps, p);
        fwd.forward(x.data(), s0, l, false);
        rev.forward(x.data(), s0, l, true);
        EXPECT_EQ(0, std::memcmp(fwd.a.h.data(), rev.a.h.data(), fwd.a.h.size() * sizeof(T)))
            << "thread order changed the result: a phase reads what another thread of it writes";
        EXPECT_CLOSE(T, fwd.a.h.data(), want.h.data(), want.h.size(), "h");
        if (c.cell == CellType::lstm) {
          EXPECT_CLOSE(T, fwd.a.c.data(), want.c.data(), want.c.size(), "c");
          EXPECT_EQ(0, std::memcmp(fwd.a.c.data(), rev.a.c.data(), fwd.a.c.size() * sizeof(T)));
        }
        if (c.cell != CellType::rnn) {
          EXPECT_CLOSE(T, fwd.a.gates.data(), want.gates.data(), want.gates.size(), "gates");
          EXPECT_CLOSE(T, fwd.a.aux.data(), want.aux.data(), want.aux.size(), "aux");
        }
      }
}

/// Whether two arrays hold the same bits.
template <class T>
bool same(const std::vector<T>& u, const std::vector<T>& v) {
  return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(T)) == 0;
}

/// Per-sample lengths for B samples of `steps`: non-increasing, 1 … T, some short.
std::vector<Idx> falling_lengths(Idx B, Idx steps) {
  std::vector<Idx> len;
  for (Idx b = 0; b < B; ++b) len.push_back(std::max<Idx>(1, steps - b * (steps / 3 + 1)));
  return len;
}

/// The warp-per-sample forward and BP against the block kernels (themselves checked against the
/// CPU engine): the same record, state gradients and pre-activation gradients bit for bit (same
/// arithmetic in the same order), in either thread order, for every H it takes (the vector tails of 4 and the dots'
/// groups of P), samples per block that leave the last block short, T around its ring depth, with and without lengths.
template <class T>
void warp_kernels_match_the_block_kernels() {
  std::mt19937_64 rng(17);
  int n = 0;
  for (const CellCase& c : every_cell()) {
    const Idx max = gpu::warp_forward_max_hidden<T>(c.code);
    for (const Idx H : {Idx{1}, Idx{3}, Idx{5}, Idx{8}, Idx{13}, Idx{16}, Idx{20}, Idx{31}, Idx{32}}) {
      if (H > max) continue;
      for (const Idx steps : {Idx{1}, Idx{4}, Idx{9}, Idx{17}}) {
        ++n;
        // Each option drawn on its own, so that every pair of them meets somewhere in the sweep.
        const auto coin = [&] { return (rng() >> 7) % 2 == 0; };
        const bool by_length = coin(), with_s0 = coin(), inject = coin(), with_extra = coin();
        const Idx B = 1 + static_cast<Idx>(rng() % 5), I = 2, spb = 1 + static_cast<Idx>(rng() % 3);
        SCOPED_TRACE(std::string(c.name) + " H " + std::to_string(H) + " B " + std::to_string(B) + " T " +
                     std::to_string(steps) + " spb " + std::to_string(spb) + (by_length ? " lengths" : "") +
                     (with_s0 ? " s0" : "") + (inject ? " injected" : "") + (with_extra ? " final grad" : ""));
        Recurrent<T> cpu = random_stack<T>(c, I, H, 1, 40 + static_cast<std::uint64_t>(n));
        const auto& p = cpu.params(0);
        const Matrix<T> x = random_matrix<T>(I, steps * B, rng);
        const Matrix<T> s0 = with_s0 ? random_matrix<T>(gpu::cell_state(c.code, H), B, rng, 0.5) : Matrix<T>();
        const std::vector<Idx> len = by_length ? falling_lengths(B, steps) : std::vector<Idx>();
        LayerSim<T> block(c.code, I, H, B, steps, p), warp(c.code, I, H, B, steps, p), back(c.code, I, H, B, steps, p);
        block.len = warp.len = back.len = len;
        const std::vector<T> xd = block.device_input(x.data());
        block.forward(xd.data(), s0, Launch{spb, true, 32});
        warp.forward(xd.data(), s0, Launch{spb, false, 0, true});
        back.forward(xd.data(), s0, Launch{spb, false, 0, true}, true);
        EXPECT_TRUE(same(warp.a.h, block.a.h)) << "h differs from the block kernel's";
        EXPECT_TRUE(same(warp.a.h, back.a.h)) << "thread order changed h: a step reads what another lane writes";
        if (c.cell == CellType::lstm) {
          EXPECT_TRUE(same(warp.a.c, block.a.c) && same(warp.a.c, back.a.c)) << "c";
        }
        if (c.cell != CellType::rnn) {
          EXPECT_TRUE(same(warp.a.gates, block.a.gates) && same(warp.a.aux, block.a.aux)) << "gates, aux";
        }
        // BP on those records: injections from above at every step or only g_T, a final-state
        // gradient or not.
        const Matrix<T> up = random_matrix<T>(H, steps * B, rng);
        const Matrix<T> extra = with_extra ? random_matrix<T>(gpu::cell_state(c.code, H), B, rng) : Matrix<T>();
        block.backward_bp(up.data(), inject, extra, Launch{spb, true, 32});
        warp.backward_bp(up.data(), inject, extra, Launch{spb, false, 0, true});
        back.backward_bp(up.data(), inject, extra, Launch{spb, false, 0, true}, true);
        EXPECT_TRUE(same(warp.a.g, block.a.g)) << "g differs from the block BP's";
        EXPECT_TRUE(same(warp.a.g, back.a.g)) << "thread order changed g: a phase reads what another lane writes";
        EXPECT_TRUE(same(warp.a.dx, block.a.dx) && same(warp.a.dx, back.a.dx)) << "dx";
        if (c.cell == CellType::gru) {
          EXPECT_TRUE(same(warp.a.dh, block.a.dh) && same(warp.a.dh, back.a.dh)) << "dh";
        }
      }
    }
  }
  EXPECT_GT(n, 40);
}

TEST(CudaRecurrentHost, WarpKernelsGiveTheBlockKernelsBitsDouble) { warp_kernels_match_the_block_kernels<double>(); }
TEST(CudaRecurrentHost, WarpKernelsGiveTheBlockKernelsBitsFloat) { warp_kernels_match_the_block_kernels<float>(); }

/// The cluster forward against the block kernel (itself checked against the CPU engine): the same
/// record bit for bit (the block kernel's dot-product slices, added in its order), under every
/// schedule the replay has (blocks in step or skewed, either order), for clusters of 1–4 blocks
/// whose last blocks have fewer units or none, samples a cluster that leave the last cluster
/// short, H around the slices' tails, with and without lengths and s0.
template <class T>
void cluster_forward_matches_the_block_kernel() {
  std::mt19937_64 rng(23);
  int n = 0;
  for (const CellCase& c : every_cell())
    for (const Idx H : {Idx{1}, Idx{3}, Idx{5}, Idx{8}, Idx{13}, Idx{33}})
      for (const Idx ctas : {Idx{1}, Idx{2}, Idx{3}, Idx{4}}) {
        ++n;
        const auto coin = [&] { return (rng() >> 7) % 2 == 0; };
        const bool by_length = coin(), with_s0 = coin();
        const Idx B = 1 + static_cast<Idx>(rng() % 5), I = 2, spb = 1 + static_cast<Idx>(rng() % 3);
        const Idx steps = std::array<Idx, 3>{1, 4, 9}[rng() % 3];
        SCOPED_TRACE(std::string(c.name) + " H " + std::to_string(H) + " blocks " + std::to_string(ctas) + " B " +
                     std::to_string(B) + " spb " + std::to_string(spb) + " T " + std::to_string(steps) +
                     (by_length ? " lengths" : "") + (with_s0 ? " s0" : ""));
        Recurrent<T> cpu = random_stack<T>(c, I, H, 1, 90 + static_cast<std::uint64_t>(n));
        const auto& p = cpu.params(0);
        const Matrix<T> x = random_matrix<T>(I, steps * B, rng);
        const Matrix<T> s0 = with_s0 ? random_matrix<T>(gpu::cell_state(c.code, H), B, rng, 0.5) : Matrix<T>();
        const std::vector<Idx> len = by_length ? falling_lengths(B, steps) : std::vector<Idx>();
        LayerSim<T> block(c.code, I, H, B, steps, p);
        block.len = len;
        const std::vector<T> xd = block.device_input(x.data());
        block.forward(xd.data(), s0, Launch{1, true, 64});
        for (int schedule = 0; schedule < 4; ++schedule) {
          const bool reverse = (schedule & 1) != 0, skewed = (schedule & 2) != 0;
          SCOPED_TRACE(std::string(skewed ? "skewed" : "in step") + (reverse ? ", reversed" : ""));
          LayerSim<T> sim(c.code, I, H, B, steps, p);
          sim.len = len;
          sim.forward(xd.data(), s0, Launch{spb, false, 0, false, ctas}, reverse, skewed);
          EXPECT_TRUE(same(sim.a.h, block.a.h)) << "h differs from the block kernel's";
          if (c.cell == CellType::lstm) {
            EXPECT_TRUE(same(sim.a.c, block.a.c)) << "c";
          }
          if (c.cell != CellType::rnn) {
            EXPECT_TRUE(same(sim.a.gates, block.a.gates) && same(sim.a.aux, block.a.aux)) << "gates, aux";
          }
        }
      }
  EXPECT_EQ(n, 96);
}

TEST(CudaRecurrentHost, ClusterForwardGivesTheBlockKernelsBitsDouble) {
  cluster_forward_matches_the_block_kernel<double>();
}
TEST(CudaRecurrentHost, ClusterForwardGivesTheBlockKernelsBitsFloat) {
  cluster_forward_matches_the_block_kernel<float>();
}

/// The cluster BP against the block BP on the same record (itself checked against the CPU engine):
/// with one thread a row the same sum in the same order, so the same g, dx and dh bit for bit; with
/// 2, 3 or 8 (the sums split), the same within the tolerance against the CPU. Every schedule of the
/// replay gives the same bits. Clusters of 1–4 blocks, injections at every step or only g_T, a
/// final-state gradient or not, lengths or not.
template <class T>
void cluster_bp_matches_the_block_bp() {
  std::mt19937_64 rng(29);
  int n = 0;
  for (const CellCase& c : every_cell())
    for (const Idx H : {Idx{1}, Idx{5}, Idx{13}, Idx{33}})
      for (const Idx ctas : {Idx{1}, Idx{2}, Idx{3}, Idx{4}})
        for (const Idx slices : {Idx{1}, Idx{2}, Idx{3}, Idx{8}}) {
          ++n;
          const auto coin = [&] { return (rng() >> 7) % 2 == 0; };
          const bool by_length = coin(), inject = coin(), with_extra = coin();
          const Idx B = 1 + static_cast<Idx>(rng() % 5), I = 2, spb = 1 + static_cast<Idx>(rng() % 3);
          const Idx steps = std::array<Idx, 3>{1, 4, 9}[rng() % 3];
          SCOPED_TRACE(std::string(c.name) + " H " + std::to_string(H) + " blocks " + std::to_string(ctas) +
                       " slices " + std::to_string(slices) + " B " + std::to_string(B) + " spb " + std::to_string(spb) +
                       " T " + std::to_string(steps) + (by_length ? " lengths" : "") + (inject ? " injected" : "") +
                       (with_extra ? " final grad" : ""));
          Recurrent<T> cpu = random_stack<T>(c, I, H, 1, 300 + static_cast<std::uint64_t>(n));
          const auto& p = cpu.params(0);
          const Matrix<T> x = random_matrix<T>(I, steps * B, rng);
          const std::vector<Idx> len = by_length ? falling_lengths(B, steps) : std::vector<Idx>();
          const Matrix<T> up = random_matrix<T>(H, steps * B, rng);
          const Matrix<T> extra = with_extra ? random_matrix<T>(gpu::cell_state(c.code, H), B, rng) : Matrix<T>();
          LayerSim<T> block(c.code, I, H, B, steps, p);
          block.len = len;
          const std::vector<T> xd = block.device_input(x.data());
          block.forward(xd.data(), {}, Launch{1, true, 64});
          block.backward_bp(up.data(), inject, extra, Launch{1, true, 64});
          std::vector<T> first_g;
          for (int schedule = 0; schedule < 4; ++schedule) {
            const bool reverse = (schedule & 1) != 0, skewed = (schedule & 2) != 0;
            SCOPED_TRACE(std::string(skewed ? "skewed" : "in step") + (reverse ? ", reversed" : ""));
            LayerSim<T> sim(c.code, I, H, B, steps, p);
            sim.len = len;
            sim.a.ax = block.a.ax, sim.a.h = block.a.h, sim.a.c = block.a.c;  // the block kernel's record
            sim.a.gates = block.a.gates, sim.a.aux = block.a.aux;
            sim.backward_bp(up.data(), inject, extra, Launch{spb, false, 0, false, ctas, slices}, reverse, skewed);
            if (slices == 1) {
              EXPECT_TRUE(same(sim.a.g, block.a.g)) << "g differs from the block BP's";
              EXPECT_TRUE(same(sim.a.dx, block.a.dx)) << "dx";
              if (c.cell == CellType::gru) {
                EXPECT_TRUE(same(sim.a.dh, block.a.dh)) << "dh";
              }
            } else {
              EXPECT_CLOSE(T, sim.a.g.data(), block.a.g.data(), block.a.g.size(), "g");
              EXPECT_CLOSE(T, sim.a.dx.data(), block.a.dx.data(), block.a.dx.size(), "dx");
            }
            if (schedule == 0) first_g = sim.a.g;
            EXPECT_TRUE(same(sim.a.g, first_g)) << "the schedule changed g: a phase reads what another block writes";
          }
        }
  EXPECT_EQ(n, 256);
}

TEST(CudaRecurrentHost, ClusterBpMatchesTheBlockBpDouble) { cluster_bp_matches_the_block_bp<double>(); }
TEST(CudaRecurrentHost, ClusterBpMatchesTheBlockBpFloat) { cluster_bp_matches_the_block_bp<float>(); }

TEST(CudaRecurrentLaunch, ClusterForwardSplitsWOverTheFewestBlocksThatHoldIt) {
  const std::size_t smem = 227 * 1024;
  // RNN H 256 float: W_hh is 256 KiB, over one block's 227; two blocks hold 128 KiB each. 66
  // clusters for 132 SMs: one sample a cluster at B 16; 4 threads a unit (unit_dots' P for one gate).
  auto l = gpu::cluster_launch(1, 256, 16, 4, 132, smem, gpu::kClusterMaxBlocks);
  EXPECT_TRUE(l.fits);
  EXPECT_EQ(l.ctas, 2);
  EXPECT_EQ(l.units, 128);
  EXPECT_EQ(l.spb, 1);
  EXPECT_EQ(l.threads, 512u);
  EXPECT_EQ(l.smem_bytes, static_cast<std::size_t>(128 * 256 + 2 * 256 + 3 * 128) * 4);
  // GRU H 256 (768 KiB): four blocks of 192 KiB; LSTM H 256 (1 MiB): eight of 128 KiB, 16
  // clusters, one sample each at B 16, two at B 32, 2 threads a unit.
  l = gpu::cluster_launch(3, 256, 16, 4, 132, smem, gpu::kClusterMaxBlocks);
  EXPECT_TRUE(l.fits);
  EXPECT_EQ(l.ctas, 4);
  l = gpu::cluster_launch(4, 256, 16, 4, 132, smem, gpu::kClusterMaxBlocks);
  EXPECT_TRUE(l.fits);
  EXPECT_EQ(l.ctas, 8);
  EXPECT_EQ(l.units, 32);
  EXPECT_EQ(l.spb, 1);
  EXPECT_EQ(l.threads, 64u);
  EXPECT_EQ(gpu::cluster_launch(4, 256, 32, 4, 132, smem, gpu::kClusterMaxBlocks).spb, 2);
  // A device that places 15 such clusters at once (a cluster lies within one GPC): 3 samples each.
  l = gpu::cluster_launch(4, 256, 32, 4, 132, smem, gpu::kClusterMaxBlocks, false, 8, 15);
  EXPECT_EQ(l.ctas, 8);
  EXPECT_EQ(l.spb, 3);
  // Samples a cluster shrink to what fits: 1000 samples would be 63 a cluster; the buffers and
  // threads allow fewer.
  l = gpu::cluster_launch(4, 256, 1000, 4, 132, smem, gpu::kClusterMaxBlocks);
  EXPECT_TRUE(l.fits);
  EXPECT_LT(l.spb, 63);
  EXPECT_LE(static_cast<Idx>(l.threads), gpu::kClusterMaxThreads);
  EXPECT_LE(l.smem_bytes, smem);
  // The BP: the same blocks (W_hh's columns instead of its rows), the most threads a row up to 8
  // within 512 a block: RNN H 256 4 (128 units a block), GRU H 256 8 (64), LSTM H 256 8 (32).
  l = gpu::cluster_launch(1, 256, 16, 4, 132, smem, gpu::kClusterMaxBlocks, true);
  EXPECT_TRUE(l.fits);
  EXPECT_EQ(l.ctas, 2);
  EXPECT_EQ(l.slices, 4);
  EXPECT_EQ(l.threads, 512u);
  EXPECT_EQ(l.smem_bytes, static_cast<std::size_t>(256 * 128 + 2 * 256 + 3 * 128) * 4);
  l = gpu::cluster_launch(3, 256, 16, 4, 132, smem, gpu::kClusterMaxBlocks, true);
  EXPECT_EQ(l.ctas, 4);
  EXPECT_EQ(l.slices, 8);
  l = gpu::cluster_launch(4, 256, 16, 4, 132, smem, gpu::kClusterMaxBlocks, true);
  EXPECT_EQ(l.ctas, 8);
  EXPECT_EQ(l.slices, 8);
  EXPECT_EQ(l.threads, 256u);
  // What no cluster of eight holds: LSTM H 512 float (4 MiB), LSTM H 256 double (2 MiB).
  EXPECT_FALSE(gpu::cluster_launch(4, 512, 16, 4, 132, smem, gpu::kClusterMaxBlocks).fits);
  EXPECT_FALSE(gpu::cluster_launch(4, 256, 16, 8, 132, smem, gpu::kClusterMaxBlocks).fits);
  EXPECT_FALSE(gpu::cluster_launch(4, 512, 16, 4, 132, smem, gpu::kClusterMaxBlocks, true).fits);
}

TEST(CudaRecurrentLaunch, WarpForwardTakesHiddenSizesItsRegistersHold) {
  // 128 float or 64 double registers of W_hh a lane: float every cell to 32; double the plain RNN to 32, GRU and LSTM
  // to 16.
  for (const std::int32_t cell : {gpu::kRnnTanh, gpu::kRnnRelu, gpu::kGru, gpu::kLstm})
    EXPECT_EQ(gpu::warp_forward_max_hidden<float>(cell), 32);
  EXPECT_EQ(gpu::warp_forward_max_hidden<double>(gpu::kRnnTanh), 32);
  EXPECT_EQ(gpu::warp_forward_max_hidden<double>(gpu::kGru), 16);
  EXPECT_EQ(gpu::warp_forward_max_hidden<double>(gpu::kLstm), 16);
  // ⌈B / SMs⌉ warps a block, at most kWarpForwardSamples: the paper's B 16 is 16 one-warp blocks.
  EXPECT_EQ(gpu::warp_forward_spb(16, 132), 1);
  EXPECT_EQ(gpu::warp_forward_spb(300, 132), 3);
  EXPECT_EQ(gpu::warp_forward_spb(100000, 132), gpu::kWarpForwardSamples);
  EXPECT_EQ(gpu::warp_forward_smem<float>(gpu::kGru, 3), 2 * 32 * 3);
}

TEST(CudaRecurrentHost, ForwardRecordMatchesTheCpuCellsDouble) { forward_record_matches_cpu<double>(); }
TEST(CudaRecurrentHost, ForwardRecordMatchesTheCpuCellsFloat) { forward_record_matches_cpu<float>(); }

/// A stack of `layers` simulated layers on the CPU engine's weights: forward, then BP or the
/// scan path top-down (as RecurrentCuda::backward_layer orders it), then every gradient,
/// compared with Recurrent<T> on the CPU (BP).
template <class T>
void stack_matches_cpu(const CellCase& c, Idx layers, Idx H, Idx B, Idx steps, bool every_step, bool extras,
                       BackwardMethod method, const Launch& l, const std::vector<Idx>& lengths = {}) {
  std::ostringstream trace;
  trace << c.name << " layers " << layers << " H " << H << " B " << B << " T " << steps
        << (every_step ? " every" : " last") << (extras ? " s0+final" : "") << " " << to_string(method) << " spb "
        << l.spb << (l.warp ? " warp" : "") << (lengths.empty() ? "" : " lengths");
  for (const Idx n : lengths) trace << " " << n;
  SCOPED_TRACE(trace.str());
  std::mt19937_64 rng(17 + static_cast<std::uint64_t>(H * 31 + B * 7 + steps));
  const Idx I = 3, S = gpu::cell_state(c.code, H), TB = steps * B;
  const auto len_of = [&](Idx b) { return lengths.empty() ? steps : lengths[static_cast<std::size_t>(b)]; };
  Recurrent<T> cpu = random_stack<T>(c, I, H, layers, 23);
  Matrix<T> x = random_matrix<T>(I, TB, rng);
  Matrix<T> grad_out = random_matrix<T>(H, TB, rng);
  if (!every_step)  // many-to-one: each sample's last step only
    for (Idx b = 0; b < B; ++b)
      for (Idx t = 1; t <= steps; ++t)
        if (t != len_of(b)) grad_out.col((t - 1) * B + b).setZero();
  // Padding (input and output gradients past a sample's length) is never to be used: NaN there.
  for (Idx b = 0; b < B; ++b)
    for (Idx t = len_of(b) + 1; t <= steps; ++t) {
      x.col((t - 1) * B + b).setConstant(kPoison<T>);
      grad_out.col((t - 1) * B + b).setConstant(kPoison<T>);
    }
  std::vector<Matrix<T>> s0(static_cast<std::size_t>(layers)), gf(static_cast<std::size_t>(layers));
  if (extras)
    for (Idx k = 0; k < layers; ++k) {
      s0[static_cast<std::size_t>(k)] = random_matrix<T>(S, B, rng, 0.5);
      gf[static_cast<std::size_t>(k)] = random_matrix<T>(S, B, rng);
      cpu.set_initial_state(k, s0[static_cast<std::size_t>(k)]);
      cpu.set_final_state_grad(k, gf[static_cast<std::size_t>(k)]);
    }
  cpu.forward(x, steps, B, std::vector<Index>(lengths.begin(), lengths.end()));
  cpu.backward(grad_out, every_step, BackwardOptions{.method = BackwardMethod::bp, .threads = 1});

  std::vector<LayerSim<T>> sim;
  for (Idx k = 0; k < layers; ++k) {
    sim.emplace_back(c.code, k == 0 ? I : H, H, B, steps, cpu.params(k));
    sim.back().len = lengths;
  }
  const std::vector<T> x0 = sim[0].device_input(x.data());
  for (Idx k = 0; k < layers; ++k)
    sim[static_cast<std::size_t>(k)].forward(k == 0 ? x0.data() : sim[static_cast<std::size_t>(k - 1)].output(),
                                             s0[static_cast<std::size_t>(k)], l);
  for (Idx k = 0; k < layers; ++k) {  // the forward: outputs (zeros past each length) and final states
    const LayerSim<T>& L = sim[static_cast<std::size_t>(k)];
    Matrix<T> out(H, TB);
    for (Idx t = 1; t <= steps; ++t) out.middleCols((t - 1) * B, B) = cpu.state(k, t).topRows(H);
    EXPECT_CLOSE(T, L.output(), out.data(), H * TB, "outputs of layer " + std::to_string(k));
    const Matrix<T> fs = L.final_state(), want_fs = cpu.final_state(k);
    EXPECT_CLOSE(T, fs.data(), want_fs.data(), S * B, "final state of layer " + std::to_string(k));
  }
  // many-to-one: the top's gradient on each sample's last output (RecurrentCuda::backward_begin).
  Matrix<T> last(H, B);
  for (Idx b = 0; b < B; ++b) last.col(b) = grad_out.col((len_of(b) - 1) * B + b);
  std::vector<RecurrentLayerParams<T>> grads(static_cast<std::size_t>(layers));
  for (Idx k = layers - 1; k >= 0; --k) {
    LayerSim<T>& L = sim[static_cast<std::size_t>(k)];
    const bool top = k == layers - 1;
    const bool inject = top ? every_step : true;
    const T* above =
        top ? (every_step ? grad_out.data() : last.data()) : sim[static_cast<std::size_t>(k + 1)].a.gx.data();
    if (method == BackwardMethod::bp)
      L.backward_bp(above, inject, gf[static_cast<std::size_t>(k)], l);
    else
      L.backward_scan(above, inject, gf[static_cast<std::size_t>(k)],
                      method == BackwardMethod::linear ? Algorithm::linear : Algorithm::hybrid, 2);
    L.param_grads(k == 0 ? x0.data() : sim[static_cast<std::size_t>(k - 1)].output(),
                  grads[static_cast<std::size_t>(k)]);
  }
  for (Idx k = 0; k < layers; ++k) {
    const auto& want = cpu.grads(k);
    const auto& got = grads[static_cast<std::size_t>(k)];
    EXPECT_CLOSE(T, got.w_ih.data(), want.w_ih.data(), want.w_ih.size(), "w_ih of layer " + std::to_string(k));
    EXPECT_CLOSE(T, got.w_hh.data(), want.w_hh.data(), want.w_hh.size(), "w_hh of layer " + std::to_string(k));
    EXPECT_CLOSE(T, got.b_ih.data(), want.b_ih.data(), want.b_ih.size(), "b_ih of layer " + std::to_string(k));
    EXPECT_CLOSE(T, got.b_hh.data(), want.b_hh.data(), want.b_hh.size(), "b_hh of layer " + std::to_string(k));
    EXPECT_CLOSE(T, sim[static_cast<std::size_t>(k)].a.g.data(), cpu.state0_grad(k).data(), S * B,
                 "g_0 of layer " + std::to_string(k));
  }
  EXPECT_CLOSE(T, sim[0].a.gx.data(), cpu.input_grad().data(), I * TB, "input gradient");
}

TEST(CudaRecurrentHost, BpThroughTimeMatchesTheCpuEngine) {
  for (const CellCase& c : every_cell())
    for (const Idx layers : {1, 2})
      for (const bool every : {false, true})
        for (const bool extras : {false, true}) {
          stack_matches_cpu<double>(c, layers, 4, 3, 5, every, extras, BackwardMethod::bp,
                                    launches()[(layers + every) % 4]);
          stack_matches_cpu<float>(c, layers, 3, 2, 4, every, extras, BackwardMethod::bp, launches()[(2 + extras) % 4]);
        }
  // Longer and wider.
  stack_matches_cpu<double>(every_cell()[2], 2, 20, 5, 17, true, true, BackwardMethod::bp, launches()[1]);
  stack_matches_cpu<double>(every_cell()[3], 1, 9, 1, 30, false, false, BackwardMethod::bp, launches()[3]);
}

TEST(CudaRecurrentHost, BpReplaysAreBitIdenticalInEitherThreadOrder) {
  for (const CellCase& c : every_cell()) {
    const Idx H = 5, B = 3, steps = 6, I = 2;
    std::mt19937_64 rng(3);
    Recurrent<double> cpu = random_stack<double>(c, I, H, 1, 9);
    const Matrix<double> x = random_matrix<double>(I, steps * B, rng), up = random_matrix<double>(H, steps * B, rng);
    for (const Launch& l : launches()) {
      LayerSim<double> a(c.code, I, H, B, steps, cpu.params(0)), b(c.code, I, H, B, steps, cpu.params(0));
      a.forward(x.data(), {}, l);
      b.forward(x.data(), {}, l);
      a.backward_bp(up.data(), true, {}, l, false);
      b.backward_bp(up.data(), true, {}, l, true);
      EXPECT_EQ(0, std::memcmp(a.a.g.data(), b.a.g.data(), a.a.g.size() * sizeof(double))) << c.name;
      EXPECT_EQ(0, std::memcmp(a.a.dx.data(), b.a.dx.data(), a.a.dx.size() * sizeof(double))) << c.name;
    }
  }
}

TEST(CudaRecurrentHost, GenericScanOverDeviceJacobiansMatchesTheCpuEngine) {
  for (const CellCase& c : every_cell())
    for (const Idx layers : {1, 2})
      for (const bool every : {false, true})
        for (const BackwardMethod m : {BackwardMethod::linear, BackwardMethod::hybrid}) {
          stack_matches_cpu<double>(c, layers, 3, 2, 6, every, every, m, launches()[0]);
          stack_matches_cpu<float>(c, layers, 4, 3, 3, every, !every, m, launches()[1]);
        }
  stack_matches_cpu<double>(every_cell()[0], 1, 7, 2, 1, true, true, BackwardMethod::hybrid, launches()[0]);  // T = 1
}

TEST(CudaRecurrentHost, PerSampleLengthsMatchTheCpuEngineOnEveryPath) {
  // Lengths longest first, with repeats, 1 and T; the padding of the input and of the incoming
  // gradients is NaN, so any use of it shows. bp: the BP kernel; linear, hybrid: the generic scan.
  const std::vector<std::pair<Idx, std::vector<Idx>>> cases{
      {5, {5, 3, 3, 1}}, {6, {4, 4, 2}}, {1, {1, 1}}, {7, {7, 7, 6}}, {9, {2, 1, 1}}};
  int n = 0;
  for (const CellCase& c : every_cell())
    for (const auto& [steps, lengths] : cases)
      for (const BackwardMethod m : {BackwardMethod::bp, BackwardMethod::linear, BackwardMethod::hybrid})
        for (const bool every : {false, true}) {
          const Idx B = static_cast<Idx>(lengths.size());
          const Launch& l = launches()[static_cast<std::size_t>(n++) % launches().size()];
          stack_matches_cpu<double>(c, 1 + n % 2, 4, B, steps, every, n % 3 != 0, m, l, lengths);
          stack_matches_cpu<float>(c, 1 + (n + 1) % 2, 3, B, steps, every, n % 3 == 0, m, l, lengths);
        }
}

TEST(CudaRecurrentHost, JacobiansMatchTheCpuGenerators) {
  std::mt19937_64 rng(5);
  for (const CellCase& c : every_cell())
    for (const Idx H : {1, 3, 6}) {
      const Idx I = 2, B = 3, steps = 4;
      Recurrent<double> cpu = random_stack<double>(c, I, H, 1, 2);
      const auto& p = cpu.params(0);
      const Matrix<double> x = random_matrix<double>(I, steps * B, rng);
      const detail::LayerRecord<double> rec = cpu_record(c, p, x, H, B, steps, Matrix<double>());
      const auto& ops = detail::cell_ops<double>(c.cell, c.nl);
      Chain<double> chain(B);
      auto wt = std::make_shared<Matrix<double>>(p.w_hh.transpose());
      detail::make_chain(ops, p, rec, wt, chain);
      detail::fill_jacobians(ops, p, rec, chain, 1, steps + 1);
      LayerSim<double> sim(c.code, I, H, B, steps, p);
      sim.forward(x.data(), Matrix<double>(), launches()[0]);
      gpu::LayerArgs<double> a = sim.args(launches()[0]);
      a.w = p.w_hh.data();
      const Idx per = gpu::jacobian_values(c.code, H);
      for (Idx t = 1; t <= steps; ++t)
        for (Idx b = 0; b < B; ++b) {
          const auto want = chain.jacobian(t).sample(b);
          ASSERT_EQ(static_cast<Idx>(want.size()), per) << c.name;
          std::vector<double> got(static_cast<std::size_t>(per));
          for (Idx i = 0; i < per; ++i) got[static_cast<std::size_t>(i)] = gpu::jacobian_value(a, t, b, i);
          EXPECT_LE(max_rel_error(got.data(), want.data(), per), 1e-13)
              << c.name << " H " << H << " t " << t << " b " << b;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Head, loss, the whole model and the optimizer

/// Replays loss_finish_kernel: kReduceThreads threads, then the tree, then thread 0.
template <class T>
void replay_loss_finish(bool mse, Idx C, Idx N, Idx B, const double* col_loss, const T* logits,
                        const std::int64_t* labels, std::int64_t* predictions, gpu::DeviceStatus* st) {
  constexpr Idx n = gpu::kReduceThreads;
  std::vector<double> sum(n);
  std::vector<long long> hits(n);
  for (Idx th = 0; th < n; ++th)
    gpu::loss_finish_thread(C, N, B, col_loss, logits, labels, predictions, th, n, sum[static_cast<std::size_t>(th)],
                            hits[static_cast<std::size_t>(th)]);
  for (Idx width = n; width > 1; width /= 2)
    for (Idx th = 0; th < n; ++th) {
      gpu::block_tree_step(sum.data(), width, th);
      gpu::block_tree_step(hits.data(), width, th);
    }
  gpu::loss_finish_status<T>(mse, C, N, B, sum[0], hits[0], st);
}

/// The whole model as the GPU runs it (gather, forward, head, loss, head backward, the stack's
/// backward by BP, then optimizer steps), against SequenceClassifier<T> + Optimizer<T> on the CPU.
template <class T>
void model_matches_cpu(const CellCase& c, Idx layers, HeadMode head, LossType loss, const OptimizerConfig& oc,
                       const std::vector<Index>& lengths = {}) {
  SCOPED_TRACE(std::string(c.name) + " layers " + std::to_string(layers) + " head " + to_string(head) + " loss " +
               to_string(loss) + " " + to_string(oc.type) + (lengths.empty() ? "" : " with lengths"));
  const Idx I = 2, H = 4, C = 5, B = 3, steps = 4, TB = steps * B;
  ModelConfig mc;
  mc.rnn = RecurrentConfig{c.cell, I, H, layers, c.nl};
  mc.classes = C;
  mc.head = head;
  mc.loss = loss;
  SequenceClassifier<T> cpu(mc);
  cpu.reset_parameters(77);
  std::mt19937_64 rng(8);
  std::vector<float> xb(static_cast<std::size_t>(B * steps * I));
  std::normal_distribution<float> nd;
  for (float& v : xb) v = nd(rng);
  const std::vector<std::int64_t> y{1, 4, 0};
  // With lengths (any order): NaN in each sample's padding, which nothing may read. The GPU model
  // runs the batch sorted longest first (ClassifierCuda::set_batch, ClassifierCuda::queue_step: the ids in
  // that order, gathered), each sample at its length, the head on head_columns' columns.
  for (Idx b = 0; b < static_cast<Idx>(lengths.size()); ++b)
    for (Idx t = lengths[static_cast<std::size_t>(b)]; t < steps; ++t)
      for (Idx i = 0; i < I; ++i) xb[static_cast<std::size_t>((b * steps + t) * I + i)] = std::nanf("");
  const std::vector<Index> order = detail::longest_first(lengths, steps, B);
  std::vector<std::int64_t> ids(order.begin(), order.end());
  std::vector<Idx> sorted_len;
  for (const Index b : order)
    if (!lengths.empty() && *std::min_element(lengths.begin(), lengths.end()) < steps)
      sorted_len.push_back(lengths[static_cast<std::size_t>(b)]);
  // The GPU path's copies of the weights (the device arenas), from the CPU model's.
  std::vector<RecurrentLayerParams<T>> params;
  for (Idx l = 0; l < layers; ++l) params.push_back(cpu.rnn().params(l));
  RowMatrix<T> hw = cpu.head().weight;
  Vector<T> hb = cpu.head().bias;
  Optimizer<T> opt(oc);
  std::vector<T> m, v;  // the GPU optimizer's state (flat, parameters() order)

  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // --- CPU
    const T want_loss = cpu.loss_and_grad(xb, B, steps, y, BackwardOptions{.method = BackwardMethod::bp, .threads = 1},
                                          nullptr, nullptr, lengths);
    const auto want = cpu.parameters();
    std::vector<std::vector<T>> want_grads;
    for (const auto& p : want) want_grads.emplace_back(p.grad, p.grad + p.size);

    // --- GPU path, replayed: gather (set_batch's upload), forward, head, loss
    std::vector<T> x(static_cast<std::size_t>(I * TB), kPoison<T>);
    std::vector<std::int64_t> labels(static_cast<std::size_t>(B), -1);
    for (Idx i = 0; i < I * TB; ++i)  // gather_kernel's items (the ids' order)
      x[static_cast<std::size_t>(i)] =
          static_cast<T>(xb[static_cast<std::size_t>(gpu::gather_source(I, steps, B, ids.data(), 0, i))]);
    for (Idx b = 0; b < B; ++b)
      labels[static_cast<std::size_t>(b)] = y[static_cast<std::size_t>(ids[static_cast<std::size_t>(b)])];
    std::vector<LayerSim<T>> sim;
    for (Idx l = 0; l < layers; ++l) {
      sim.emplace_back(c.code, l == 0 ? I : H, H, B, steps, params[static_cast<std::size_t>(l)]);
      sim.back().len = sorted_len;
    }
    x = sim[0].device_input(x.data());  // zero_padding_kernel
    for (Idx l = 0; l < layers; ++l)
      sim[static_cast<std::size_t>(l)].forward(l == 0 ? x.data() : sim[static_cast<std::size_t>(l - 1)].output(), {},
                                               launches()[static_cast<std::size_t>(l + step) % 4]);
    const bool every = head == HeadMode::every;
    // With lengths: head_columns_kernel's items (the head's input and each column's label).
    std::vector<Index> cols;
    std::vector<std::int64_t> unused, col_labels;
    std::vector<Idx> cols_d;
    std::vector<T> head_in;
    if (!sorted_len.empty()) {
      detail::head_columns(every, std::vector<Index>(sorted_len.begin(), sorted_len.end()), labels, cols, unused);
      cols_d.assign(cols.begin(), cols.end());
      const auto n = static_cast<Idx>(cols.size());
      head_in.resize(static_cast<std::size_t>(H * n));
      col_labels.resize(static_cast<std::size_t>(n));
      for (Idx i = 0; i < H * n; ++i)
        head_in[static_cast<std::size_t>(i)] = sim.back().output()[gpu::head_column_source(H, cols_d.data(), i)];
      for (Idx j = 0; j < n; ++j)
        col_labels[static_cast<std::size_t>(j)] = gpu::head_column_label(labels.data(), cols_d.data(), B, j);
    }
    const bool len = !sorted_len.empty();
    const Idx N = len ? static_cast<Idx>(cols.size()) : every ? TB : B;
    const T* hx = len ? head_in.data() : every ? sim.back().output() : sim.back().output() + (steps - 1) * B * H;
    std::vector<T> logits(static_cast<std::size_t>(C * N), kPoison<T>), dlogits(logits.size(), kPoison<T>);
    std::vector<double> col_loss(static_cast<std::size_t>(N));
    std::vector<std::int64_t> pred(static_cast<std::size_t>(B), -1);
    reference(gpu::head_logits(C, H, N, hw.data(), hx, logits.data()));
    for (Idx j = 0; j < N; ++j)
      col_loss[static_cast<std::size_t>(j)] =
          gpu::loss_column(loss == LossType::mse, C, N, logits.data() + j * C, hb.data(),
                           len ? gpu::column_label(col_labels.data(), N, j) : gpu::column_label(labels.data(), B, j),
                           dlogits.data() + j * C);
    gpu::DeviceStatus st;
    replay_loss_finish(loss == LossType::mse, C, N, B, col_loss.data(), logits.data(), labels.data(), pred.data(), &st);
    EXPECT_LE(std::abs(st.loss - static_cast<double>(want_loss)), kTol<T> * std::abs(static_cast<double>(want_loss)));
    EXPECT_EQ(st.samples, B);
    EXPECT_EQ(st.flags, 0);
    std::vector<std::int64_t> cpu_pred;
    cpu.evaluate(xb, B, steps, y, &cpu_pred, lengths);
    std::vector<std::int64_t> caller_pred(pred.size());  // ClassifierGpu::forward_loss's mapping back
    for (std::size_t k = 0; k < pred.size(); ++k) caller_pred[static_cast<std::size_t>(order[k])] = pred[k];
    EXPECT_EQ(caller_pred, cpu_pred);
    std::int64_t correct = 0;
    for (Idx b = 0; b < B; ++b) correct += cpu_pred[static_cast<std::size_t>(b)] == y[static_cast<std::size_t>(b)];
    EXPECT_EQ(st.correct, correct);
    EXPECT_EQ(st.loss_sum, st.loss * static_cast<double>(B));

    // --- backward: head, then the stack by BP
    std::vector<T> ones(static_cast<std::size_t>(N), T(1)), dout(static_cast<std::size_t>(H * N), kPoison<T>);
    std::vector<T> head_grads(static_cast<std::size_t>(C * H + C), kPoison<T>);
    const auto hp = gpu::head_grad_products(C, H, N, hw.data(), hx, dlogits.data(), ones.data(), head_grads.data(),
                                            head_grads.data() + C * H, dout.data());
    reference(hp.weight);
    reference(hp.bias);
    reference(hp.input);
    std::vector<T> dfull;  // scatter_head_grad_kernel (per-step head with lengths): zeros, dout at cols
    if (len && every) {
      dfull.assign(static_cast<std::size_t>(H * TB), T(0));
      for (Idx i = 0; i < H * N; ++i)
        dfull[static_cast<std::size_t>(gpu::head_column_source(H, cols_d.data(), i))] =
            dout[static_cast<std::size_t>(i)];
    }
    const T* top_grad = dfull.empty() ? dout.data() : dfull.data();
    std::vector<RecurrentLayerParams<T>> grads(static_cast<std::size_t>(layers));
    for (Idx l = layers - 1; l >= 0; --l) {
      LayerSim<T>& L = sim[static_cast<std::size_t>(l)];
      const bool top = l == layers - 1;
      L.backward_bp(top ? top_grad : sim[static_cast<std::size_t>(l + 1)].a.gx.data(), top ? every : true, {},
                    launches()[static_cast<std::size_t>(l) % 4]);
      L.param_grads(l == 0 ? x.data() : sim[static_cast<std::size_t>(l - 1)].output(),
                    grads[static_cast<std::size_t>(l)]);
    }
    // The arenas in parameters() order: the recurrent one (w_ih, w_hh, b_ih, b_hh per layer), the head's.
    std::vector<T> rv, rg;
    auto append = [](std::vector<T>& to, const T* from, Index n) { to.insert(to.end(), from, from + n); };
    for (Idx l = 0; l < layers; ++l) {
      const auto& p = params[static_cast<std::size_t>(l)];
      const auto& g = grads[static_cast<std::size_t>(l)];
      append(rv, p.w_ih.data(), p.w_ih.size());
      append(rv, p.w_hh.data(), p.w_hh.size());
      append(rv, p.b_ih.data(), p.b_ih.size());
      append(rv, p.b_hh.data(), p.b_hh.size());
      append(rg, g.w_ih.data(), g.w_ih.size());
      append(rg, g.w_hh.data(), g.w_hh.size());
      append(rg, g.b_ih.data(), g.b_ih.size());
      append(rg, g.b_hh.data(), g.b_hh.size());
    }
    std::vector<T> hv(hw.data(), hw.data() + hw.size());
    hv.insert(hv.end(), hb.data(), hb.data() + hb.size());
    // Every gradient, tensor by tensor, in the flat order.
    Idx off = 0;
    std::vector<T> all_grads = rg;
    all_grads.insert(all_grads.end(), head_grads.begin(), head_grads.end());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_CLOSE(T, all_grads.data() + off, want_grads[i].data(), want[i].size, want[i].name);
      off += want[i].size;
    }

    // --- the optimizer step on both sides
    if (step == 1) {
      m.assign(static_cast<std::size_t>(off), T(0));
      v.assign(static_cast<std::size_t>(off), T(0));
    }
    gpu::Segments<T> seg;
    seg.values[0] = rv.data();
    seg.grads[0] = rg.data();
    seg.size[0] = static_cast<Idx>(rv.size());
    seg.values[1] = hv.data();
    seg.grads[1] = head_grads.data();
    seg.size[1] = static_cast<Idx>(hv.size());
    seg.count = 2;
    replay_optimizer(seg, m, v, detail::step_constants<T>(oc, step), &st);
    opt.step(cpu.parameters());
    EXPECT_LE(std::abs(st.grad_norm - opt.last_grad_norm()), 1e-12 + kTol<T> * opt.last_grad_norm());
    EXPECT_EQ(st.flags, 0);
    const auto after = cpu.parameters();
    std::vector<T> got_values = rv;
    got_values.insert(got_values.end(), hv.begin(), hv.end());
    off = 0;
    for (const auto& p : after) {
      EXPECT_CLOSE(T, got_values.data() + off, p.value, p.size, "updated " + p.name);
      off += p.size;
    }
    // Carry the replayed side's values into its own arrays for the next step.
    off = 0;
    for (Idx l = 0; l < layers; ++l) {
      auto& p = params[static_cast<std::size_t>(l)];
      for (auto* m2 : {&p.w_ih, &p.w_hh}) {
        std::copy_n(rv.begin() + off, m2->size(), m2->data());
        off += m2->size();
      }
      for (auto* v2 : {&p.b_ih, &p.b_hh}) {
        std::copy_n(rv.begin() + off, v2->size(), v2->data());
        off += v2->size();
      }
    }
    std::copy_n(hv.begin(), hw.size(), hw.data());
    std::copy_n(hv.begin() + hw.size(), hb.size(), hb.data());
  }
}

TEST(CudaRecurrentHost, ModelStepMatchesTheCpuEngineEveryCellHeadLossAndOptimizer) {
  OptimizerConfig adam;
  adam.lr = 1e-2;
  adam.clip_grad_norm = 0.5;  // clips
  adam.weight_decay = 1e-3;
  OptimizerConfig sgd;
  sgd.type = OptimizerType::sgd;
  sgd.lr = 5e-2;
  sgd.momentum = 0.9;
  sgd.weight_decay = 1e-2;
  for (const CellCase& c : every_cell())
    for (const Idx layers : {1, 2})
      for (const HeadMode head : {HeadMode::last, HeadMode::every})
        for (const LossType loss : {LossType::cross_entropy, LossType::mse}) {
          model_matches_cpu<double>(c, layers, head, loss, (layers + static_cast<int>(head)) % 2 ? sgd : adam);
          if (layers == 1) model_matches_cpu<float>(c, layers, head, loss, static_cast<int>(loss) ? sgd : adam);
        }
  OptimizerConfig plain;  // SGD without momentum, no clipping
  plain.type = OptimizerType::sgd;
  plain.lr = 0.1;
  model_matches_cpu<double>(every_cell()[2], 1, HeadMode::last, LossType::cross_entropy, plain);
}

TEST(CudaRecurrentHost, ModelStepWithLengthsMatchesTheCpuEngine) {
  // Samples of different lengths in the caller's order (unsorted, one at T, one of 1): the
  // sorted gather, the stack at each length, the head's chosen columns and their labels, the
  // loss, the predictions mapped back, the head's gradient scattered back, every gradient and
  // the optimizer step, against SequenceClassifier on the CPU with the same lengths.
  OptimizerConfig adam;
  adam.lr = 1e-2;
  for (const CellCase& c : every_cell())
    for (const Idx layers : {1, 2})
      for (const HeadMode head : {HeadMode::last, HeadMode::every})
        for (const LossType loss : {LossType::cross_entropy, LossType::mse}) {
          model_matches_cpu<double>(c, layers, head, loss, adam, {2, 4, 1});
          if (layers == 1) model_matches_cpu<float>(c, layers, head, loss, adam, {1, 3, 3});
        }
}

TEST(CudaRecurrentHost, NonFiniteLossAndParametersAreFlagged) {
  // The loss of a NaN logit.
  std::vector<double> z{0.5, std::numeric_limits<double>::quiet_NaN(), 1.0}, bias{0, 0, 0};
  const double share = gpu::loss_column(false, 3, 1, z.data(), bias.data(), 0, static_cast<double*>(nullptr));
  std::vector<double> shares{share};
  std::vector<std::int64_t> labels{0}, pred{-1};
  gpu::DeviceStatus st;
  replay_loss_finish(false, 3, 1, 1, shares.data(), z.data(), labels.data(), pred.data(), &st);
  EXPECT_NE(st.flags & gpu::kLossNotFinite, 0);
  // An update that overflows.
  std::vector<float> value{1.0f, 3e38f}, grad{0.0f, -1.0f}, m(2, 0.0f), v(2, 0.0f);
  gpu::Segments<float> seg;
  seg.values[0] = value.data();
  seg.grads[0] = grad.data();
  seg.size[0] = 2;
  seg.count = 1;
  OptimizerConfig big;
  big.type = OptimizerType::sgd;
  big.lr = 1e38;
  gpu::DeviceStatus st2;
  replay_optimizer(seg, m, v, detail::step_constants<float>(big, 1), &st2);
  EXPECT_NE(st2.flags & gpu::kParamNotFinite, 0);
  EXPECT_FALSE(gpu::hd_finite(std::numeric_limits<float>::infinity()));
  EXPECT_FALSE(gpu::hd_finite(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_TRUE(gpu::hd_finite(-3.5f));
}

TEST(CudaRecurrentHost, BatchesAreGatheredAsTheCpuTrainerGathersThem) {
  // A [samples][steps][I] array gathered in a shuffled order equals gather_batch + set_batch's
  // conversion: x(i, t·B + b) = data[order[first + b]][t][i].
  const Idx N = 7, steps = 3, I = 2, B = 3, first = 2;
  std::vector<float> data(static_cast<std::size_t>(N * steps * I));
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  const std::vector<std::int64_t> order{6, 0, 5, 1, 4, 2, 3};
  for (Idx item = 0; item < I * steps * B; ++item) {
    const Idx i = item % I, col = item / I, t = col / B, b = col % B;
    const Idx want = (order[static_cast<std::size_t>(first + b)] * steps + t) * I + i;
    EXPECT_EQ(gpu::gather_source(I, steps, B, order.data(), first, item), want);
    EXPECT_EQ(gpu::gather_source(I, steps, B, nullptr, first, item), ((first + b) * steps + t) * I + i);
  }
  // Column labels: every step predicts its sample's label.
  const std::vector<std::int64_t> y{4, 1, 2};
  for (Idx j = 0; j < 4 * B; ++j) EXPECT_EQ(gpu::column_label(y.data(), B, j), y[static_cast<std::size_t>(j % B)]);
}

TEST(CudaRecurrentHost, BlockReductionsSumEveryValueOnceInAFixedOrder) {
  for (const Idx n : {0, 1, 7, 255, 256, 257, 1000}) {
    std::vector<double> x(static_cast<std::size_t>(n));
    for (Idx i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = static_cast<double>(i % 13) - 4.5;
    std::vector<double> s(gpu::kReduceThreads);
    for (Idx th = 0; th < gpu::kReduceThreads; ++th)
      s[static_cast<std::size_t>(th)] = gpu::strided_sum(x.data(), n, th, gpu::kReduceThreads);
    for (Idx w = gpu::kReduceThreads; w > 1; w /= 2)
      for (Idx th = 0; th < gpu::kReduceThreads; ++th) gpu::block_tree_step(s.data(), w, th);
    double want = 0;
    for (double v : x) want += v;
    EXPECT_EQ(s[0], want) << n;  // small integers and halves: exact
  }
}

TEST(CudaRecurrentHost, StoredBatchesAndModelStepsAreTheSameOnTheCpu) {
  // The API the GPU path added (set_batch + forward_loss(), Optimizer::step(model)) means the same
  // on a CPU model as forward_loss(x, …) and step(parameters()), bit for bit.
  ModelConfig mc;
  mc.rnn = RecurrentConfig{CellType::gru, 2, 5, 2};
  mc.classes = 3;
  SequenceClassifier<float> a(mc), b(mc);
  a.reset_parameters(4);
  b.reset_parameters(4);
  std::vector<float> x(4 * 6 * 2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  const std::vector<std::int64_t> y{0, 2, 1, 1};
  EXPECT_THROW(a.forward_loss(), InvalidArgument);
  a.set_batch(x, 4, 6, y);
  OptimizerConfig oc;
  oc.lr = 0.05;
  Optimizer<float> oa(oc), ob(oc);
  for (int step = 0; step < 2; ++step) {
    const float la = a.forward_loss(), lb = b.forward_loss(x, 4, 6, y);
    EXPECT_EQ(la, lb);
    a.backward(BackwardOptions{.method = BackwardMethod::bp, .threads = 1});
    b.backward(BackwardOptions{.method = BackwardMethod::bp, .threads = 1});
    oa.step(a);
    ob.step(b.parameters());
  }
  const auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(0, std::memcmp(pa[i].value, pb[i].value, static_cast<std::size_t>(pa[i].size) * sizeof(float)))
        << pa[i].name;
  EXPECT_EQ(a.device_bytes(), 0u);
  EXPECT_NO_THROW(a.synchronize());
}

TEST(CudaRecurrentHost, DeviceCudaWithoutAGpuIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is usable here: bppsa_test_gpu covers Device::cuda";
  // A build without CUDA says so; a CUDA build on a machine without a GPU says that.
  ModelConfig mc;
  mc.rnn.device = Device::cuda;
  for (const auto& make : std::vector<std::function<void()>>{[&] { Recurrent<float> r(mc.rnn); },
                                                             [&] { SequenceClassifier<double> m(mc); }})
    testutil::expect_no_gpu_error(make);
}

}  // namespace
