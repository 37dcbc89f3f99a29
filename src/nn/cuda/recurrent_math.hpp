// Per-thread arithmetic and indexing of the recurrent layer kernels (forward recurrence, BP
// through time, pre-activation gradients, Jacobian generation), as __host__ __device__
// functions over device arrays laid out exactly as the CPU's LayerRecord (src/nn/cell.hpp;
// LayerArgs in layer_args.hpp), each cell's own arithmetic in its file (rnn_cell.hpp,
// gru_cell.hpp, lstm_cell.hpp; the functions here dispatch on the cell):
// column-major, time-major blocks of B columns. recurrent_kernels.cu is loops over these; the
// g++ tests (tests/nn/cuda/test_recurrent_host.cpp) replay them phase by phase over every
// (block, thread) against the CPU engine. No Eigen, no CUDA headers.
//
// The persistent kernels (forward, BP) give each block a fixed group of samples for all T
// steps: samples are independent in the recurrence, so blocks never wait for each other and
// the only barriers are __syncthreads() between the phases of a step (forward one per step, BP
// two). W_hh sits
// in shared memory when it fits, otherwise it is read from global memory (L2). Every formula
// follows the CPU cell's association order (src/nn/cpu/<cell>_cell.cpp), so the two engines
// differ only by fused multiply-adds and the order inside dot products.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/cuda/grid.hpp"
#include "core/cuda/hd.hpp"
#include "nn/cuda/gru_cell.hpp"
#include "nn/cuda/layer_args.hpp"
#include "nn/cuda/lstm_cell.hpp"
#include "nn/cuda/rnn_cell.hpp"

namespace bppsa::detail::gpu {

/// f(Cell{}) for the layer's cell type (RnnCell for both plain RNNs): the one place the kernels
/// turn a CellCode into a cell (forward, pre-activation gradients, Jacobian values).
template <class F>
BPPSA_HD_FORCEINLINE void visit_cell(std::int32_t cell, F&& f) {
  switch (cell) {
    case kGru:
      f(GruCell{});
      break;
    case kLstm:
      f(LstmCell{});
      break;
    default:
      f(RnnCell{});
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Persistent kernels: geometry and shared memory

/// First sample of `block` and how many it has (the last block may have fewer than spb).
BPPSA_HD inline Idx block_first(Idx block, Idx spb) { return block * spb; }
BPPSA_HD inline Idx block_samples(Idx block, Idx spb, Idx batch) {
  const Idx n = batch - block * spb;
  return n < spb ? n : spb;
}
/// Blocks of a persistent launch.
BPPSA_HD inline Idx persistent_blocks(Idx batch, Idx spb) { return (batch + spb - 1) / spb; }

/// How a persistent kernel is launched: samples per block, W_hh in shared memory or read from
/// global memory, threads per block, dynamic shared memory.
struct PersistentLaunch {
  Idx spb = 1;
  bool w_shared = false;
  unsigned threads = 32;
  std::size_t smem_bytes = 0;
  bool fits = false;  ///< false: even one sample's state buffers exceed the shared memory
};

/// Shared-memory layout of a persistent kernel, offsets in values of T: [W_hh (GH·H, when in
/// shared memory)][state buffer 0][state buffer 1][gate vector (gate_vector)]. Forward: the
/// buffers hold h_{t−1} and h_t (H × spb), no gate vector (a unit's dot products stay in its
/// thread). Backward: g_t and g_{t−1} (S × spb), the vector the recurrent-side pre-activation
/// gradients (GH × spb).
struct SmemLayout {
  Idx w = 0, buf0 = 0, buf1 = 0, vec = 0, total = 0;
};
BPPSA_HD inline SmemLayout smem_layout(Idx GH, Idx H, Idx rows, Idx spb, bool w_shared, bool gate_vector = true) {
  SmemLayout s;
  s.buf0 = w_shared ? GH * H : 0;
  s.buf1 = s.buf0 + rows * spb;
  s.vec = s.buf1 + rows * spb;
  s.total = s.vec + (gate_vector ? GH * spb : 0);
  return s;
}
/// The launch for GH gate rows, hidden H, `rows` state rows per sample (forward H, backward
/// S), `batch` samples, on a GPU with `sms` multiprocessors and `smem_limit` bytes of shared
/// memory per block. Samples per block: enough blocks for every multiprocessor (spb =
/// ⌈batch / sms⌉); W_hh goes on chip when it fits, with fewer samples per block if need be,
/// otherwise it is read from global memory (L2). gate_vector: the layout's gate vector (BP; the
/// forward has none). Threads: one per gate row of the block's samples, rounded to warps, at most
/// max_threads (the loops stride beyond; the forward launches forward_threads instead).
inline PersistentLaunch persistent_launch(Idx GH, Idx H, Idx rows, Idx batch, std::size_t scalar, Idx sms,
                                          std::size_t smem_limit, Idx max_threads, bool gate_vector = true) {
  auto bytes = [&](Idx spb, bool shared) {
    return static_cast<std::size_t>(smem_layout(GH, H, rows, spb, shared, gate_vector).total) * scalar;
  };
  PersistentLaunch p;
  const Idx spb0 = sms > 0 ? (batch + sms - 1) / sms : batch;
  for (Idx spb = spb0 < 1 ? 1 : spb0; spb >= 1 && !p.fits; spb = spb == 1 ? 0 : (spb + 1) / 2)
    if (bytes(spb, true) <= smem_limit) {
      p.spb = spb;
      p.w_shared = true;
      p.fits = true;
    }
  for (Idx spb = spb0 < 1 ? 1 : spb0; spb >= 1 && !p.fits; spb = spb == 1 ? 0 : (spb + 1) / 2)
    if (bytes(spb, false) <= smem_limit) {
      p.spb = spb;
      p.w_shared = false;
      p.fits = true;
    }
  p.smem_bytes = bytes(p.spb, p.w_shared);
  const Idx wide = (GH > rows ? GH : rows) * p.spb;
  Idx threads = (wide + 31) / 32 * 32;
  if (threads > max_threads) threads = max_threads;
  if (threads < 32) threads = 32;
  p.threads = static_cast<unsigned>(threads);
  return p;
}

template <class T>
BPPSA_HD inline SmemLayout forward_smem(const LayerArgs<T>& a) {
  return smem_layout(a.GH, a.H, a.H, a.spb, a.w_shared, false);
}
template <class T>
BPPSA_HD inline SmemLayout backward_smem(const LayerArgs<T>& a) {
  return smem_layout(a.GH, a.H, a.S, a.spb, a.w_shared);
}
/// The state buffer a phase reads (which = 0) or writes (which = 1) at iteration `it`
/// (forward: it = t − 1; backward: it = T − t): the two swap every iteration.
BPPSA_HD inline Idx state_buffer(const SmemLayout& s, Idx it, int which) {
  return ((it + which) % 2 == 0) ? s.buf0 : s.buf1;
}

// ---------------------------------------------------------------------------------------------
// Forward: load, then per step t = 1..T one phase (dot products and cell per unit), a barrier after it

/// The load phase of both directions: a.w into shared memory (when w_shared) and, into buf0, the
/// block's samples of `state` (`width` values a sample, sample after sample).
template <class T>
BPPSA_HD inline void load_phase(const LayerArgs<T>& a, const SmemLayout& L, const T* state, Idx width, T* sm, Idx block,
                                Idx thread, Idx nthreads) {
  if (a.w_shared)
    for (Idx i = thread; i < a.GH * a.H; i += nthreads) sm[L.w + i] = a.w[i];
  const Idx s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B);
  for (Idx o = thread; o < width * ns; o += nthreads) {
    const Idx s = o / width, j = o - s * width;
    sm[L.buf0 + s * width + j] = state[(s0 + s) * width + j];
  }
}

/// Load phase: W_hh into shared memory (when w_shared) and h_0 of the block's samples.
template <class T>
BPPSA_HD inline void forward_load(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads) {
  load_phase(a, forward_smem(a), a.h, a.H, sm, block, thread, nthreads);
}

/// L1 prefetch hints for the n values from p (a block's slice of a record at one step), one per
/// 128-byte line, spread over the block's threads: issued a step ahead, so that the loads of the
/// next step, which sit between two barriers, hit L1. Nothing on the host; null p: nothing.
template <class T>
BPPSA_HD inline void prefetch_range(const T* p, Idx n, Idx thread, Idx nthreads) {
  if (p == nullptr || n <= 0) return;
  constexpr Idx kLine = static_cast<Idx>(128 / sizeof(T));
  for (Idx i = thread * kLine; i < n + kLine - 1; i += nthreads * kLine) hd_prefetch_l1(p + (i < n ? i : n - 1));
}

/// What the cell phase of step t reads from global memory, for this block (ax), prefetched.
template <class T>
BPPSA_HD inline void forward_prefetch(const LayerArgs<T>& a, Idx block, Idx thread, Idx nthreads, Idx t) {
  if (t < 1 || t > a.steps) return;
  const Idx s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B);
  prefetch_range(a.ax + ((t - 1) * a.B + s0) * a.GH, ns * a.GH, thread, nthreads);
}

/// wh[q] = the P partial sums of gate q's dot product added pairwise: (acc0 + acc1), then
/// + (acc2 + acc3) when P = 4.
template <int G, int P, class T>
BPPSA_HD_FORCEINLINE void sum_partials(const T (&acc)[G][P], T* wh) {
  for (int q = 0; q < G; ++q) {
    T sum = acc[q][0] + acc[q][1];
    if (P == 4) sum = sum + (acc[q][P - 2] + acc[q][P - 1]);
    wh[q] = sum;
  }
}

/// wh[q] = (W_hh h)[q·H + j], q < G: unit j's G rows of the column-major W (GH × H) at w times h
/// (H values). Each dot is P partial sums, over k ≡ p (mod P), added pairwise at the end (P = 4
/// for one gate, 2 for several): independent multiply-add chains, so that a step waits on fewer
/// dependent ones. Inlined into one loop per address space of w (a pointer that may be either is
/// read by generic loads).
template <int G, class T>
BPPSA_HD_FORCEINLINE void unit_dots(const T* w, const T* h, Idx GH, Idx H, Idx j, T* wh) {
  constexpr int P = G == 1 ? 4 : 2;
  T acc[G][P];
  for (int q = 0; q < G; ++q)
    for (int p = 0; p < P; ++p) acc[q][p] = T(0);
  const T* wj = w + j;
  Idx k = 0;
  for (; k + P <= H; k += P)
    for (int p = 0; p < P; ++p) {
      const T hk = h[k + p];
      const T* wk = wj + (k + p) * GH;
      for (int q = 0; q < G; ++q) acc[q][p] += wk[q * H] * hk;
    }
  for (; k < H; ++k) {
    const T hk = h[k];
    const T* wk = wj + k * GH;
    for (int q = 0; q < G; ++q) acc[q][0] += wk[q * H] * hk;
  }
  sum_partials<G, P>(acc, wh);
}

/// Step t of the block's samples for one cell: each thread takes units (unit, sample), unit
/// fastest; a unit reads its record values (the input projection, b_ih, b_hh; LSTM c_{t−1}),
/// forms its G dot products with h_{t−1} (one state buffer), evaluates the cell, and writes h_t
/// to the record and to the other buffer. Units share
/// nothing within a step, so one barrier after it is the step's only one.
template <class Cell, bool Len, class T>
BPPSA_HD inline void forward_step_cell(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads, Idx t) {
  constexpr int G = Cell::kGates;
  const SmemLayout L = forward_smem(a);
  const T* hp = sm + state_buffer(L, t - 1, 0);
  T* hn = sm + state_buffer(L, t - 1, 1);
  const Idx H = a.H, s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B);
  for (Idx o = thread; o < H * ns; o += nthreads) {
    const Idx s = o / H, j = o - s * H, b = s0 + s;
    if (padded_if<Len>(a, t, b)) {  // past the sample's length: zeros in the record and the state buffer
      a.h[(t * a.B + b) * H + j] = T(0);
      if (Cell::kStateParts == 2) a.c[(t * a.B + b) * H + j] = T(0);
      hn[s * H + j] = T(0);
      continue;
    }
    // The record's values first, used after the dot products: their latency hides behind them.
    const T* ax = a.ax + ((t - 1) * a.B + b) * a.GH + j;
    T axq[G], bi[G];
    UnitInput<T> in;
    for (int q = 0; q < G; ++q) {
      axq[q] = ax[q * H];
      bi[q] = a.b_ih[q * H + j];
      in.bh[q] = a.b_hh[q * H + j];
    }
    if (Cell::kStateParts == 2) in.cp = a.c[((t - 1) * a.B + b) * H + j];
    T wh[G];
    if (a.w_shared)
      unit_dots<G>(sm + L.w, hp + s * H, a.GH, H, j, wh);
    else
      unit_dots<G>(a.w, hp + s * H, a.GH, H, j, wh);
    for (int q = 0; q < G; ++q) in.xb[q] = axq[q] + bi[q];
    const T h = Cell::forward(a, in, wh, hp[s * H + j], t, b, j);
    a.h[(t * a.B + b) * H + j] = h;
    hn[s * H + j] = h;
  }
}

/// Step t of the forward recurrence (the one phase between barriers), for the layer's cell:
/// the general path, any number of units per thread.
template <bool Len, class T>
BPPSA_HD inline void forward_step(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads, Idx t) {
  visit_cell(a.cell, [&](auto cell) { forward_step_cell<decltype(cell), Len>(a, sm, block, thread, nthreads, t); });
}

/// Whether the forward kernel's block takes the one-unit-per-thread path (ForwardUnit): every
/// (unit, sample) of the block has a thread of its own.
template <class T>
BPPSA_HD inline bool forward_unit_per_thread(const LayerArgs<T>& a, Idx block, Idx nthreads) {
  return a.H * block_samples(block, a.spb, a.B) <= nthreads;
}

/// Unit j of sample b at a step t past its length: zeros in the record (h_t at h_out, which
/// moves to step t + 1; LSTM c_t) and in the next state buffer hn, as forward_step_cell.
template <class Cell, class T>
BPPSA_HD_FORCEINLINE void unit_padding(const LayerArgs<T>& a, Idx t, Idx b, Idx j, T*& h_out, T* hn) {
  *h_out = T(0);
  h_out += a.B * a.H;
  if (Cell::kStateParts == 2) a.c[(t * a.B + b) * a.H + j] = T(0);
  hn[j] = T(0);
}

/// Unit j of sample b at step t from its G dot products wh: the cell on (ax + b_ih, b_hh, c,
/// h_{t−1}[j] = hp), h_t written at h_out (which moves to step t + 1) and into hn, c left as c_t.
template <class Cell, class T>
BPPSA_HD_FORCEINLINE void unit_finish(const LayerArgs<T>& a, const T* ax, const T* bi, const T* bh, const T* wh, T hp,
                                      T& c, Idx t, Idx b, Idx j, T*& h_out, T* hn) {
  UnitInput<T> in;
  for (int q = 0; q < Cell::kGates; ++q) {
    in.xb[q] = ax[q] + bi[q];
    in.bh[q] = bh[q];
  }
  in.cp = c;
  const T h = Cell::forward(a, in, wh, hp, t, b, j);
  c = in.cp;
  *h_out = h;
  h_out += a.B * a.H;
  hn[j] = h;
}

/// What a forward unit (unit j of sample b) keeps in registers for all T steps: b_ih, b_hh,
/// c_{t−1} (LSTM) and its two walking pointers into the record.
template <class Cell, class T>
struct UnitRegisters {
  Idx j = 0, b = 0;
  T bi[Cell::kGates] = {}, bh[Cell::kGates] = {}, c = T(0);
  const T* ax_next = nullptr;  ///< unit j's input projection of the step load() reads next
  T* h_out = nullptr;          ///< h_t[j] of sample b in the record, for the step step() runs next

  /// Sets them for step 1 from j and b.
  BPPSA_HD_FORCEINLINE void start(const LayerArgs<T>& a) {
    for (int q = 0; q < Cell::kGates; ++q) {
      bi[q] = a.b_ih[q * a.H + j];
      bh[q] = a.b_hh[q * a.H + j];
    }
    if (Cell::kStateParts == 2) c = a.c[b * a.H + j];
    ax_next = a.ax + b * a.GH + j;
    h_out = a.h + (a.B + b) * a.H + j;
  }
  /// The input projection of step t into `slot` (nothing past T); the next call reads step t + 1's.
  BPPSA_HD_FORCEINLINE void load(const LayerArgs<T>& a, Idx t, T* slot) {
    if (t > a.steps) return;
    for (int q = 0; q < Cell::kGates; ++q) slot[q] = ax_next[q * a.H];
    ax_next += a.B * a.GH;
  }
};

/// The forward kernel's path when every unit has a thread of its own: thread `thread` owns unit
/// j of the block's sample s for all T steps, and keeps in registers what does not change
/// (b_ih, b_hh), c_{t−1} (LSTM) and the next step's input projection, loaded a step ahead so
/// that its latency passes behind a whole step. WShared: W_hh in shared memory (a.w_shared).
/// Same arithmetic, in the same order, as forward_step_cell.
template <class Cell, bool WShared, bool Len, class T>
struct ForwardUnit : UnitRegisters<Cell, T> {
  using R = UnitRegisters<Cell, T>;
  using R::ax_next, R::b, R::bh, R::bi, R::c, R::h_out, R::j;
  static constexpr int G = Cell::kGates;
  bool active = false;
  Idx s = 0;
  T next[G] = {};

  BPPSA_HD void init(const LayerArgs<T>& a, Idx block, Idx thread) {
    active = thread < a.H * block_samples(block, a.spb, a.B);
    if (!active) return;
    s = thread / a.H;
    j = thread - s * a.H;
    b = block_first(block, a.spb) + s;
    this->start(a);
    load(a, 1);
  }
  /// The input projection of step t into next (nothing past T).
  BPPSA_HD void load(const LayerArgs<T>& a, Idx t) { R::load(a, t, next); }
  BPPSA_HD void step(const LayerArgs<T>& a, T* sm, Idx t) {
    if (!active) return;
    const SmemLayout L = forward_smem(a);
    const T* hp = sm + state_buffer(L, t - 1, 0) + s * a.H;
    T* hn = sm + state_buffer(L, t - 1, 1) + s * a.H;
    if (padded_if<Len>(a, t, b)) {  // past the sample's length (so are the later steps)
      unit_padding<Cell>(a, t, b, j, h_out, hn);
      return;
    }
    T ax[G];
    for (int q = 0; q < G; ++q) ax[q] = next[q];
    load(a, t + 1);  // in flight during this step's dot products, cell and barrier
    T wh[G];
    unit_dots<G>(WShared ? sm + L.w : a.w, hp, a.GH, a.H, j, wh);
    unit_finish<Cell>(a, ax, bi, bh, wh, hp[j], c, t, b, j, h_out, hn);
  }
};

/// f(ForwardUnit<Cell, WShared, Len, T>{}) for the layer's cell and W_hh's place.
template <bool Len, class T, class F>
BPPSA_HD_FORCEINLINE void visit_forward_unit(const LayerArgs<T>& a, F&& f) {
  visit_cell(a.cell, [&](auto cell) {
    using Cell = decltype(cell);
    if (a.w_shared)
      f(ForwardUnit<Cell, true, Len, T>{});
    else
      f(ForwardUnit<Cell, false, Len, T>{});
  });
}

/// The forward kernel's program for one block, written once for the kernel and its host replay.
/// `ctx.each(f)` runs f(thread) for the calling thread (kernel) or, in the replay, queues it for
/// every thread; `ctx.barrier()` is __syncthreads() (kernel) or, in the replay, runs what was
/// queued thread after thread, so that a barrier missing here lets one thread run ahead of the
/// others and the replay's result change. `ctx.template per_thread<U>()` is what each thread keeps
/// in registers across the steps (`units(thread)`: the kernel's one U, the replay's U per thread).
template <bool Len, class T, class Ctx>
BPPSA_HD inline void forward_program(const LayerArgs<T>& a, T* sm, Idx block, Idx nthreads, Ctx& ctx) {
  ctx.each([=](Idx th) { forward_load(a, sm, block, th, nthreads); });
  if (forward_unit_per_thread(a, block, nthreads)) {
    visit_forward_unit<Len>(a, [&](auto proto) {
      auto units = ctx.template per_thread<decltype(proto)>();
      ctx.each([=, &units](Idx th) { units(th).init(a, block, th); });
      ctx.barrier();
      for (Idx t = 1; t <= a.steps; ++t) {
        ctx.each([=, &units](Idx th) { units(th).step(a, sm, t); });
        ctx.barrier();
      }
    });
    return;
  }
  ctx.each([=](Idx th) { forward_prefetch(a, block, th, nthreads, 1); });
  ctx.barrier();
  for (Idx t = 1; t <= a.steps; ++t) {
    ctx.each([=](Idx th) {
      forward_prefetch(a, block, th, nthreads, t + 1);  // the next step's ax, behind this step's work
      forward_step<Len>(a, sm, block, th, nthreads, t);
    });
    ctx.barrier();
  }
}

/// Threads of the forward kernel: one per (unit, sample) of a block, rounded to warps, at most
/// max_threads (the step's loop strides beyond).
BPPSA_HD inline unsigned forward_threads(Idx H, Idx spb, Idx max_threads) {
  Idx threads = (H * spb + 31) / 32 * 32;
  if (threads > max_threads) threads = max_threads;
  return static_cast<unsigned>(threads < 32 ? 32 : threads);
}

// ---------------------------------------------------------------------------------------------
// Forward, a warp per sample (small H): W_hh's rows in registers, no block barrier

/// The largest H the warp-per-sample forward takes for Cell and T: lane j keeps unit j's G rows
/// of W_hh (G·max values) in registers, at most 512 bytes of them (128 float, 64 double).
template <class Cell, class T>
BPPSA_HD constexpr int warp_forward_max_hidden() {
  constexpr std::size_t values = 512 / sizeof(T) / Cell::kGates;
  return values >= 32 ? 32 : values >= 16 ? 16 : 8;
}
/// warp_forward_max_hidden for the layer's cell.
template <class T>
BPPSA_HD inline Idx warp_forward_max_hidden(std::int32_t cell) {
  Idx m = 0;
  visit_cell(cell, [&](auto c) { m = warp_forward_max_hidden<decltype(c), T>(); });
  return m;
}
/// Warps (samples) per block of the warp-per-sample forward, at most.
inline constexpr Idx kWarpForwardSamples = 8;
/// Samples per block: ⌈batch / sms⌉ (every multiprocessor busy before any holds two), at most
/// kWarpForwardSamples.
BPPSA_HD inline Idx warp_forward_spb(Idx batch, Idx sms) {
  const Idx spb = sms > 0 ? (batch + sms - 1) / sms : batch;
  return spb < 1 ? 1 : spb > kWarpForwardSamples ? kWarpForwardSamples : spb;
}
/// Shared memory of the warp-per-sample forward, in values: two state buffers of
/// warp_forward_max_hidden values a sample (whole 4-value vectors, so h is read 4 at a time).
template <class T>
BPPSA_HD inline Idx warp_forward_smem(std::int32_t cell, Idx spb) {
  return 2 * warp_forward_max_hidden<T>(cell) * spb;
}

/// The warp-per-sample forward (H ≤ warp_forward_max_hidden): warp s of the block owns sample
/// s for all T steps and lane j its unit j. Lane j keeps unit j's G rows of W_hh in registers,
/// with b_ih, b_hh, c_{t−1} (LSTM) and a ring of the next kDepth steps' input projections (each
/// loaded kDepth steps before its use, so its latency passes behind as many steps). h_{t−1} is
/// broadcast through the warp's two shared buffers, read 4 values at a time; the warps share
/// nothing, so a step's only barrier is the warp's own (__syncwarp). Same arithmetic, in the same
/// order (unit_dots' partial sums, the cell's forward), as ForwardUnit: the same bits.
template <class Cell, bool Len, class T>
struct ForwardWarp : UnitRegisters<Cell, T> {
  using R = UnitRegisters<Cell, T>;
  using R::ax_next, R::b, R::bh, R::bi, R::c, R::h_out, R::j;
  static constexpr int G = Cell::kGates;
  static constexpr int kMax = warp_forward_max_hidden<Cell, T>();
  static constexpr int kDepth = G == 1 ? 8 : 4;  ///< even: the buffer step t reads is (t − 1) mod 2 = d mod 2
  static constexpr int P = G == 1 ? 4 : 2;       ///< unit_dots' partial sums
  static_assert(kMax % 4 == 0 && 4 % P == 0 && kDepth % 2 == 0);
  bool active = false;  ///< a lane with a unit of a sample
  T* buf = nullptr;     ///< the warp's two state buffers, kMax values each
  T w[G][kMax] = {};
  T ring[kDepth][G] = {};

  BPPSA_HD void init(const LayerArgs<T>& a, T* sm, Idx block, Idx thread) {
    const Idx s = thread / 32, lane = thread - s * 32;
    const bool sample = s < block_samples(block, a.spb, a.B);
    b = block_first(block, a.spb) + s;
    j = lane;
    buf = sm + s * 2 * kMax;
    if (lane < kMax) {  // h_0, and zeros past H (read by the 4-value loads, never used)
      buf[lane] = sample && lane < a.H ? a.h[b * a.H + lane] : T(0);
      buf[kMax + lane] = T(0);
    }
    active = sample && lane < a.H;
    if (!active) return;
    hd_unrolled<kMax>([&](auto kk) {
      constexpr int k = decltype(kk)::value;
      for (int q = 0; q < G; ++q) w[q][k] = k < a.H ? a.w[k * a.GH + q * a.H + j] : T(0);
    });
    this->start(a);
    hd_unrolled<kDepth>([&](auto d) { load(a, 1 + decltype(d)::value, ring[decltype(d)::value]); });
  }
  using R::load;
  /// Step t = t0 + D of the warp's sample (t0 ≡ 1 mod kDepth): its input projection is ring[D].
  template <int D>
  BPPSA_HD void step(const LayerArgs<T>& a, Idx t) {
    if (!active) return;
    const T* hp = buf + (D % 2) * kMax;
    T* hn = buf + (1 - D % 2) * kMax;
    if (padded_if<Len>(a, t, b)) {  // past the sample's length (so are the later steps)
      unit_padding<Cell>(a, t, b, j, h_out, hn);
      return;
    }
    T ax[G];
    for (int q = 0; q < G; ++q) ax[q] = ring[D][q];
    load(a, t + kDepth, ring[D]);  // in flight during the next kDepth steps
    T acc[G][P];
    for (int q = 0; q < G; ++q)
      for (int p = 0; p < P; ++p) acc[q][p] = T(0);
    // unit_dots' order: k ≡ p (mod P) into acc[p] over whole groups of P, the rest into acc[0].
    hd_unrolled<kMax / 4>([&](auto v) {
      constexpr int k4 = 4 * decltype(v)::value;
      if (k4 >= a.H) return;
      T h4[4];
      hd_load4(hp + k4, h4);
      hd_unrolled<4>([&](auto e) {
        constexpr int k = k4 + decltype(e)::value, p = k % P;
        if (k - p + P <= a.H) {
          for (int q = 0; q < G; ++q) acc[q][p] = hd_fma(w[q][k], h4[decltype(e)::value], acc[q][p]);
        } else if (k < a.H) {
          for (int q = 0; q < G; ++q) acc[q][0] = hd_fma(w[q][k], h4[decltype(e)::value], acc[q][0]);
        }
      });
    });
    T wh[G];
    sum_partials<G, P>(acc, wh);
    unit_finish<Cell>(a, ax, bi, bh, wh, hp[j], c, t, b, j, h_out, hn);
  }
};

/// The warp-per-sample forward's program for one block (blocks of 32·spb threads), written once
/// for its kernel and the host replay: as forward_program, with ctx.warp_barrier() (__syncwarp;
/// in the replay, a barrier) after each step, the steps unrolled kDepth at a time so that the
/// input-projection ring is indexed by constants.
template <class Cell, bool Len, class T, class Ctx>
BPPSA_HD inline void forward_warp_program(const LayerArgs<T>& a, T* sm, Idx block, Ctx& ctx) {
  using U = ForwardWarp<Cell, Len, T>;
  auto units = ctx.template per_thread<U>();
  ctx.each([=, &units](Idx th) { units(th).init(a, sm, block, th); });
  ctx.warp_barrier();
  for (Idx t0 = 1; t0 <= a.steps; t0 += U::kDepth)
    hd_unrolled<U::kDepth>([&](auto d) {
      constexpr int D = decltype(d)::value;
      if (t0 + D > a.steps) return;
      ctx.each([=, &units](Idx th) { units(th).template step<D>(a, t0 + D); });
      ctx.warp_barrier();
    });
}

// ---------------------------------------------------------------------------------------------
// Pre-activation gradients (shared by BP and the scan path)

/// Pre-activation gradients of unit j of sample b at step t from the state gradient on h_t[j]
/// (gh) and, LSTM, on c_t[j] (gc): dx[q] for gate q (input side), dh[q] (recurrent side; GRU
/// only differs, in its n gate). Formulas and association as src/nn/cpu/<cell>_cell.cpp.
template <class T>
BPPSA_HD inline void preact_unit(const LayerArgs<T>& a, Idx t, Idx b, Idx j, T gh, T gc, T* dx, T* dh) {
  visit_cell(a.cell, [&](auto cell) { decltype(cell)::preact(a, t, b, j, gh, gc, dx, dh); });
}

/// The pre-activation gradients of unit j, sample b, step t written to dx (and dh), reading the
/// state gradient g_t from g (S × (T+1)B): one work item of the scan path's flat launch
/// (item = ((t−1)·B + b)·H + j).
template <class T>
BPPSA_HD inline void preact_item(const LayerArgs<T>& a, Idx item) {
  const Idx j = item % a.H, col = item / a.H, t = col / a.B + 1, b = col % a.B;
  const T* gt = a.g + (t * a.B + b) * a.S;
  T dx[4] = {}, dh[4] = {};  // zeros past the sample's length
  if (!padded(a, t, b)) preact_unit(a, t, b, j, gt[j], a.cell == kLstm ? gt[a.H + j] : T(0), dx, dh);
  const Idx G = cell_gates(a.cell);
  // A loop of constant length (unrolled) with the gate count as a guard: dx and dh stay registers.
  for (int q = 0; q < 4; ++q) {
    if (q >= G) break;
    a.dx[col * a.GH + q * a.H + j] = dx[q];
    if (a.cell == kGru) a.dh[col * a.GH + q * a.H + j] = dh[q];
  }
}

// ---------------------------------------------------------------------------------------------
// BP through time: load, then per step t = T..1 a pre-activation phase and a transposed
// mat-vec phase, a barrier after each

/// g_T of sample b, row k (S × B block T of g): the gradient on h_T from the head or the layer
/// above (`last`, H × B, may be null) plus the extra final-state gradient (`final_grad`, S × B,
/// may be null); as the CPU: top rows = last, then += final. With lengths (`len`, `last` the
/// block of step T in an H × steps·B array), sample b's gradient on its last real output,
/// len[b] − steps blocks of B columns before: the backward carries g_T(b) down to s_{len[b]}.
template <class T>
BPPSA_HD inline T final_state_grad(Idx H, Idx S, Idx B, Idx steps, const T* last, const Idx* len, const T* final_grad,
                                   Idx b, Idx k) {
  const Idx back = len != nullptr ? steps - len[b] : 0;
  T v = (last != nullptr && k < H) ? last[(b - back * B) * H + k] : T(0);
  if (final_grad != nullptr) v += final_grad[b * S + k];
  return v;
}

/// Load phase: W_hh (row-major) into shared memory when w_shared, g_T of the block's samples.
template <class T>
BPPSA_HD inline void backward_load(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads) {
  load_phase(a, backward_smem(a), a.g + a.steps * a.B * a.S, a.S, sm, block, thread, nthreads);
}

/// Unit j's pre-activation gradients of column col (gate q at [q], q < G) into the record's dx
/// (GRU: and dh), and the recurrent-side ones (GRU's dh, else dx) into vec[q·stride] for W_hh^T·d.
template <class T>
BPPSA_HD_FORCEINLINE void store_preact(const LayerArgs<T>& a, Idx G, Idx col, Idx j, const T* dx, const T* dh, T* vec,
                                       Idx stride) {
  for (int q = 0; q < 4; ++q) {  // constant length (unrolled), guarded: dx and dh stay registers
    if (q >= G) break;
    a.dx[col * a.GH + q * a.H + j] = dx[q];
    if (a.cell == kGru) a.dh[col * a.GH + q * a.H + j] = dh[q];
    vec[q * stride] = a.cell == kGru ? dh[q] : dx[q];
  }
}

/// Phase 1 of step t: the pre-activation gradients of step t from g_t, into dx (and dh) and,
/// the recurrent-side ones, into the shared vector for phase 2.
template <bool Len, class T>
BPPSA_HD inline void backward_preact(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads, Idx t) {
  const SmemLayout L = backward_smem(a);
  const T* gc = sm + state_buffer(L, a.steps - t, 0);
  const Idx s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B);
  const Idx G = cell_gates(a.cell);
  for (Idx o = thread; o < a.H * ns; o += nthreads) {
    const Idx s = o / a.H, j = o - s * a.H, b = s0 + s, col = (t - 1) * a.B + b;
    T dx[4] = {}, dh[4] = {};  // zeros past the sample's length
    if (!padded_if<Len>(a, t, b))
      preact_unit(a, t, b, j, gc[s * a.S + j], a.cell == kLstm ? gc[s * a.S + a.H + j] : T(0), dx, dh);
    store_preact(a, G, col, j, dx, dh, sm + L.vec + s * a.GH + j, a.H);
  }
}

/// Phase 2 of step t: g_{t−1} = (injection) + W_hh^T · (recurrent-side gradients) + the direct
/// terms (GRU: z ⊙ g_t; LSTM c rows: f ⊙ δc), into the record's g and the other buffer.
/// Threads stride over (row k, sample), k fastest: consecutive threads read consecutive values
/// of the row-major W_hh.
template <class T>
BPPSA_HD_FORCEINLINE T transpose_dot(const T* w, const T* d, Idx k, Idx H, Idx GH) {
  T acc = T(0);
  for (Idx r = 0; r < GH; ++r) acc += w[r * H + k] * d[r];
  return acc;
}

/// What steps t's two phases read from global memory, for this block (h_t and h_{t−1}, c_t and
/// c_{t−1}, the gates and aux of step t, the layer above's gradient on h_{t−1}), prefetched.
template <class T>
BPPSA_HD inline void backward_prefetch(const LayerArgs<T>& a, Idx block, Idx thread, Idx nthreads, Idx t) {
  if (t < 1 || t > a.steps) return;
  const Idx s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B), H = a.H;
  for (Idx u = t - 1; u <= t; ++u) {
    prefetch_range(a.h + (u * a.B + s0) * H, ns * H, thread, nthreads);
    if (a.c != nullptr) prefetch_range(a.c + (u * a.B + s0) * H, ns * H, thread, nthreads);
  }
  if (a.gates != nullptr) prefetch_range(a.gates + ((t - 1) * a.B + s0) * a.GH, ns * a.GH, thread, nthreads);
  if (a.aux != nullptr) prefetch_range(a.aux + ((t - 1) * a.B + s0) * H, ns * H, thread, nthreads);
  if (a.above != nullptr && t >= 2) prefetch_range(a.above + ((t - 2) * a.B + s0) * H, ns * H, thread, nthreads);
}

/// Row k < H of g_{t−1} for sample b: the injection from above (none at t = 1) + acc (row k of
/// W_hh^T·d), and GRU's direct term z ⊙ g_t (gh: g_t's row k).
template <class T>
BPPSA_HD_FORCEINLINE T grad_h_row(const LayerArgs<T>& a, Idx t, Idx b, Idx k, T acc, T gh) {
  T v = (a.above != nullptr && t >= 2) ? a.above[((t - 2) * a.B + b) * a.H + k] : T(0);
  v = v + acc;
  if (a.cell == kGru) v += a.gates[((t - 1) * a.B + b) * a.GH + a.H + k] * gh;
  return v;
}

/// LSTM's c row H + j of g_{t−1} at column col: (∂c'/∂c)^T δc = f ⊙ (g_c + o(1 − tanh²c') g_h),
/// from g_t's c row (gc) and h row (gh) of unit j.
template <class T>
BPPSA_HD_FORCEINLINE T grad_c_row(const LayerArgs<T>& a, Idx col, Idx j, T gc, T gh) {
  const T f = a.gates[col * a.GH + a.H + j], o = a.gates[col * a.GH + 3 * a.H + j];
  const T tc = a.aux[col * a.H + j];
  return f * (gc + o * (T(1) - tc * tc) * gh);
}

template <bool Len, class T>
BPPSA_HD inline void backward_transpose(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads, Idx t) {
  const SmemLayout L = backward_smem(a);
  const T* gc = sm + state_buffer(L, a.steps - t, 0);
  T* gn = sm + state_buffer(L, a.steps - t, 1);
  const Idx s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B);
  const Idx H = a.H;
  for (Idx o = thread; o < a.S * ns; o += nthreads) {
    const Idx s = o / a.S, k = o - s * a.S, b = s0 + s, col = (t - 1) * a.B + b;
    const T* d = sm + L.vec + s * a.GH;
    T v;
    if (padded_if<Len>(a, t, b)) {  // past the sample's length: the identity, no injection
      v = gc[s * a.S + k];
    } else if (k < H) {
      // W in shared or in global memory: each call compiled for its address space.
      const T acc = a.w_shared ? transpose_dot(sm + L.w, d, k, H, a.GH) : transpose_dot(a.w, d, k, H, a.GH);
      v = grad_h_row(a, t, b, k, acc, gc[s * a.S + k]);
    } else {  // LSTM c rows
      v = grad_c_row(a, col, k - H, gc[s * a.S + k], gc[s * a.S + k - H]);
    }
    a.g[((t - 1) * a.B + b) * a.S + k] = v;
    gn[s * a.S + k] = v;
  }
}

/// The BP kernel's program for one block (steps T … 1, two phases a step), written once for the
/// kernel and its host replay: ctx as forward_program's.
template <bool Len, class T, class Ctx>
BPPSA_HD inline void backward_program(const LayerArgs<T>& a, T* sm, Idx block, Idx nthreads, Ctx& ctx) {
  ctx.each([=](Idx th) {
    backward_load(a, sm, block, th, nthreads);
    backward_prefetch(a, block, th, nthreads, a.steps);
  });
  ctx.barrier();
  for (Idx t = a.steps; t >= 1; --t) {
    ctx.each([=](Idx th) {
      backward_prefetch(a, block, th, nthreads, t - 1);  // the next step's record, behind this step's work
      backward_preact<Len>(a, sm, block, th, nthreads, t);
    });
    ctx.barrier();
    ctx.each([=](Idx th) { backward_transpose<Len>(a, sm, block, th, nthreads, t); });
    ctx.barrier();
  }
}

// ---------------------------------------------------------------------------------------------
// BP through time, a warp per sample (small H): W_hh's columns in registers, g_t in registers

/// How many steps ahead the warp-per-sample BP asks L1 for a step's record.
inline constexpr Idx kWarpBackwardPrefetch = 8;

/// The warp-per-sample BP (H ≤ warp_forward_max_hidden): warp s of the block owns sample s for all
/// T steps and lane k its unit k. Lane k keeps column k of W_hh (the GH values its row of
/// W_hh^T·d sums) in registers, and its rows of g_t (h row k; LSTM also c row H + k): a unit's
/// pre-activation gradients read only its own rows, so only the recurrent-side gradients d cross
/// lanes, through two shared buffers taken in turn (one __syncwarp a step). The record of step
/// t − kWarpBackwardPrefetch is asked of L1 at step t. Same arithmetic in the same order as the
/// block kernel (backward_preact, backward_transpose): the same bits.
template <class Cell, bool Len, class T>
struct BackwardWarp {
  static constexpr int G = Cell::kGates;
  static constexpr int kMax = warp_forward_max_hidden<Cell, T>();
  static_assert(kMax % 4 == 0);
  bool active = false;  ///< a lane with a unit of a sample
  Idx k = 0, b = 0;
  T* buf = nullptr;  ///< the warp's two d buffers, G·kMax values each (gate q's units at q·kMax)
  T w[G][kMax] = {};
  T gh = T(0), gc = T(0);  ///< g_t's h row k and (LSTM) c row H + k

  BPPSA_HD void init(const LayerArgs<T>& a, T* sm, Idx block, Idx thread) {
    const Idx s = thread / 32, lane = thread - s * 32;
    b = block_first(block, a.spb) + s;
    k = lane;
    buf = sm + s * 2 * G * kMax;
    if (lane < kMax)  // zeros past H in both buffers (read by the 4-value loads, never used)
      for (int i = 0; i < 2 * G; ++i) buf[i * kMax + lane] = T(0);
    active = s < block_samples(block, a.spb, a.B) && lane < a.H;
    if (!active) return;
    for (int q = 0; q < G; ++q)
      hd_unrolled<kMax>([&](auto jj) {
        constexpr int j = decltype(jj)::value;
        w[q][j] = j < a.H ? a.w[(q * a.H + j) * a.H + k] : T(0);  // row-major W_hh, column k
      });
    const T* gT = a.g + (a.steps * a.B + b) * a.S;
    gh = gT[k];
    if (Cell::kStateParts == 2) gc = gT[a.H + k];
    for (Idx t = a.steps; t > a.steps - kWarpBackwardPrefetch && t >= 1; --t) prefetch(a, t);
  }
  /// L1 hints for what steps t's two phases read of unit k (as backward_prefetch for the block).
  BPPSA_HD_FORCEINLINE void prefetch(const LayerArgs<T>& a, Idx t) const {
    if (t < 1) return;
    const Idx H = a.H, col = (t - 1) * a.B + b;
    for (Idx u = t - 1; u <= t; ++u) {
      hd_prefetch_l1(a.h + (u * a.B + b) * H + k);
      if (a.c != nullptr) hd_prefetch_l1(a.c + (u * a.B + b) * H + k);
    }
    if (a.gates != nullptr)
      for (int q = 0; q < G; ++q) hd_prefetch_l1(a.gates + col * a.GH + q * H + k);
    if (a.aux != nullptr) hd_prefetch_l1(a.aux + col * H + k);
    if (a.above != nullptr && t >= 2) hd_prefetch_l1(a.above + ((t - 2) * a.B + b) * H + k);
  }
  /// Phase 1 of step t: the pre-activation gradients of unit k from its g_t rows, into dx (and
  /// dh) and its recurrent-side ones into d buffer t mod 2.
  BPPSA_HD void preact(const LayerArgs<T>& a, Idx t) {
    if (!active) return;
    prefetch(a, t - kWarpBackwardPrefetch);
    T dx[4] = {}, dh[4] = {};  // zeros past the sample's length
    if (!padded_if<Len>(a, t, b)) preact_unit(a, t, b, k, gh, Cell::kStateParts == 2 ? gc : T(0), dx, dh);
    store_preact(a, G, (t - 1) * a.B + b, k, dx, dh, buf + (t % 2) * G * kMax + k, kMax);
  }
  /// Phase 2 of step t: g_{t−1}'s rows of unit k (backward_transpose's formulas, W_hh^T·d summed
  /// over the GH rows in order), into the record and the registers.
  BPPSA_HD void transpose(const LayerArgs<T>& a, Idx t) {
    if (!active) return;
    const Idx H = a.H;
    T vh, vc = T(0);
    if (padded_if<Len>(a, t, b)) {  // past the sample's length: the identity, no injection
      vh = gh;
      vc = gc;
    } else {
      const T* d = buf + (t % 2) * G * kMax;
      T acc = T(0);
      for (int q = 0; q < G; ++q)
        hd_unrolled<kMax / 4>([&](auto v) {
          constexpr int j4 = 4 * decltype(v)::value;
          if (j4 >= H) return;
          T d4[4];
          hd_load4(d + q * kMax + j4, d4);
          hd_unrolled<4>([&](auto e) {
            constexpr int j = j4 + decltype(e)::value;
            if (j < H) acc = hd_fma(w[q][j], d4[decltype(e)::value], acc);
          });
        });
      vh = grad_h_row(a, t, b, k, acc, gh);
      if (Cell::kStateParts == 2) vc = grad_c_row(a, (t - 1) * a.B + b, k, gc, gh);
    }
    T* g = a.g + ((t - 1) * a.B + b) * a.S;
    g[k] = vh;
    if (Cell::kStateParts == 2) g[H + k] = vc;
    gh = vh;
    gc = vc;
  }
};

/// Shared memory of the warp-per-sample BP, in values: two d buffers of G·warp_forward_max_hidden
/// values a sample.
template <class T>
BPPSA_HD inline Idx warp_backward_smem(std::int32_t cell, Idx spb) {
  return 2 * cell_gates(cell) * warp_forward_max_hidden<T>(cell) * spb;
}

/// The warp-per-sample BP's program for one block (blocks of 32·spb threads): phase 1 of step T,
/// then per step t = T … 1 phase 2 of t and phase 1 of t − 1 (the d buffers alternate), each
/// followed by ctx.warp_barrier(). Written once for its kernel and the host replay.
template <class Cell, bool Len, class T, class Ctx>
BPPSA_HD inline void backward_warp_program(const LayerArgs<T>& a, T* sm, Idx block, Ctx& ctx) {
  using U = BackwardWarp<Cell, Len, T>;
  auto units = ctx.template per_thread<U>();
  ctx.each([=, &units](Idx th) {
    units(th).init(a, sm, block, th);
    units(th).preact(a, a.steps);
  });
  ctx.warp_barrier();
  for (Idx t = a.steps; t >= 1; --t) {
    ctx.each([=, &units](Idx th) {
      units(th).transpose(a, t);
      if (t > 1) units(th).preact(a, t - 1);
    });
    ctx.warp_barrier();
  }
}

// ---------------------------------------------------------------------------------------------
// Jacobian generation for the generic GPU scan (src/scan/cuda/device_scan.hpp): J_t^T of sample
// b in the chain's layout (RNN: the per-sample diagonal of W_hh^T·diag(d); GRU, LSTM: dense
// S × S column-major, (i, j) at j·S + i). As the CPU cells' fill_jacobians.

/// Values per sample of J_t^T: H (RNN's diagonal) or S².
BPPSA_HD inline Idx jacobian_values(std::int32_t cell, Idx H) {
  const Idx S = cell_state(cell, H);
  return (cell == kRnnTanh || cell == kRnnRelu) ? H : S * S;
}

/// Value `item` of J_t^T for sample b. W_hh is row-major (a.w as the backward reads it).
template <class T>
BPPSA_HD inline T jacobian_value(const LayerArgs<T>& a, Idx t, Idx b, Idx item) {
  T v = T(0);
  if (padded(a, t, b)) return v;  // past the sample's length: zero (injection_by_length restarts the chain)
  visit_cell(a.cell, [&](auto cell) { v = decltype(cell)::jacobian_value(a, t, b, item); });
  return v;
}

/// Row `row` of sample b of the generic scan's affine part e_k (1 ≤ k ≤ T − 1): the gradient
/// on h_k from above (block k − 1 of the H × TB `above`), zeros on LSTM's c rows.
template <class T>
BPPSA_HD inline T injection_value(const T* above, Idx H, Idx B, Idx k, Idx b, Idx row) {
  return row < H ? above[((k - 1) * B + b) * H + row] : T(0);
}

/// With lengths: row `row` of sample b of e_k (1 ≤ k ≤ T − 1). The Jacobians past the sample's
/// length are zero, so e at k = len[b] restarts its chain with g_T(b) (`g_last`, S × B: the
/// gradient on its last real state); before it as injection_value (`above` may be null: none),
/// zeros after.
template <class T>
BPPSA_HD inline T injection_by_length(const T* above, const T* g_last, const Idx* len, Idx H, Idx S, Idx B, Idx k,
                                      Idx b, Idx row) {
  if (k < len[b]) return above != nullptr ? injection_value(above, H, B, k, b, row) : T(0);
  return k == len[b] ? g_last[b * S + row] : T(0);
}
/// With lengths: row `row` of sample b of the generic scan's g_T (its prefix 0): g_T(b) for a
/// sample that runs every step, else zero (injection_by_length carries it; a zero keeps a
/// non-finite g_T from turning into NaN through the zero Jacobians).
template <class T>
BPPSA_HD inline T scan_top_by_length(const T* g_last, const Idx* len, Idx S, Idx steps, Idx b, Idx row) {
  return len[b] == steps ? g_last[b * S + row] : T(0);
}

/// Zero for the columns of padded steps of an I × steps·B array (time-major), else v: what the
/// parameter-gradient GEMMs read there must be finite (their dx there is zero).
template <class T>
BPPSA_HD inline T unpadded_value(const Idx* len, Idx I, Idx B, Idx item, T v) {
  const Idx col = item / I;
  return col / B + 1 > len[col % B] ? T(0) : v;
}

/// Sample b's final state, value i of its H rows: h (H × (T+1)B) at its last real step.
template <class T>
BPPSA_HD inline T final_state_value(const T* h, const Idx* len, Idx H, Idx B, Idx steps, Idx b, Idx i) {
  const Idx t = len != nullptr ? len[b] : steps;
  return h[(t * B + b) * H + i];
}

/// Gathering a batch: value `item` of x (I × steps·batch, column t·batch + b) comes from sample
/// order[first + b] (first + b when order is null) of a [samples][steps][I] float array.
BPPSA_HD inline Idx gather_source(Idx I, Idx steps, Idx batch, const std::int64_t* order, Idx first, Idx item) {
  const Idx i = item % I, col = item / I, t = col / batch, b = col - t * batch;
  const Idx sample = order != nullptr ? order[first + b] : first + b;
  return (sample * steps + t) * I + i;
}

}  // namespace bppsa::detail::gpu
