// Per-thread arithmetic and indexing of the fused chunked scan (fused_scan.hpp): the chunking,
// the mapping of threads to columns and row tiles, and the __host__ __device__ phase functions
// the kernels of kernels.cuh run between barriers, over a Step (step.hpp).
// tests/scan/cuda/test_fused_host.cpp replays them over every (block, thread) against the CPU
// engine's BP. The cost model choosing the chunk length and the mapping is plan.hpp. No CUDA
// headers, no Eigen.
//
// The column recurrence. A "column" is a vector x that runs the BP recurrence backwards through
// the steps of one chunk of one sample: x ← J_t^T x (+ e_{t−1}). The reduce runs the S + 1
// columns [I | 0] of a (chunk, sample) and stores [M_c | v_c]; the push runs one column from the
// chunk's boundary gradient and stores every g_t. J_t^T x = W^T y + direct, with y (G·H) from the
// Step's coefficients (for the recurrent cells: the CPU cells' formulas and association order,
// src/nn/cpu/*_cell.cpp, in nn/cuda/*_cell.hpp).
//
// Threads: a thread owns `nc` columns of one (chunk, sample) and a tile of `tile` rows of the
// product W^T y, accumulated in registers; `ntile` threads (one per tile) share a column
// group, whose x lives in shared memory (double-buffered when ntile > 1: one barrier per step).
// W sits in shared memory (zero-padded to ntile·tile columns) or, for large H, is read from a
// padded copy in global memory (L1/L2). Thread tid of a block: tile tid / gpb, group tid % gpb,
// so a warp's threads share a tile and read W's row pieces as broadcasts.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/cuda/grid.hpp"
#include "core/cuda/hd.hpp"
#include "scan/cuda/fused/step.hpp"

namespace bppsa::detail::gpu {

// ---------------------------------------------------------------------------------------------
// Compile-time unrolling (no #pragma: the same code is g++'s) and aligned 4-value loads

template <class F, int... I>
BPPSA_HD_FORCEINLINE void fused_unrolled(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
/// f(std::integral_constant<int, i>) for i = 0 … N−1, fully unrolled (register arrays stay registers).
template <int N, class F>
BPPSA_HD_FORCEINLINE void fused_unroll(F&& f) {
  fused_unrolled(f, std::make_integer_sequence<int, N>{});
}

/// Four consecutive values, 4·sizeof(T)-aligned: one 128-bit load (two for double).
template <class T>
struct alignas(4 * sizeof(T)) FusedQuad {
  T v[4];
};
template <class T>
BPPSA_HD inline FusedQuad<T> load_quad(const T* p) {
  return *reinterpret_cast<const FusedQuad<T>*>(p);
}

// ---------------------------------------------------------------------------------------------
// Cells, tiles and the problem's shape

/// Row tiles the column kernels are compiled for (registers per column per thread).
inline constexpr int kFusedTiles[] = {4, 8, 16, 20, 32, 64};
inline constexpr int kFusedTileCount = 6;
/// The largest tile of precision `scalar` (bytes): float 64, double 32 (its 64 would spill).
BPPSA_HD constexpr Idx fused_max_tile(Idx scalar) { return scalar == 4 ? 64 : 32; }
/// Whether the kernels exist for `tile` rows × `nc` columns per thread in precision `scalar`
/// (bytes) and a Step whose largest 4-column tile is `max_tile4` (FusedStepInfo::max_tile4): every
/// tile up to fused_max_tile with 1 column; 4 columns for float up to max_tile4. Each reads W
/// from shared or global memory.
BPPSA_HD inline bool fused_combo_compiled(Idx tile, Idx nc, Idx scalar, Idx max_tile4) {
  bool known = false;
  for (int i = 0; i < kFusedTileCount; ++i) known = known || kFusedTiles[i] == tile;
  if (!known || tile > fused_max_tile(scalar)) return false;
  if (nc == 1) return true;
  return nc == 4 && scalar == 4 && tile <= max_tile4;
}

/// Calls f(std::integral_constant<int, tile>, std::integral_constant<int, nc>) for a compiled
/// pair (host code: picks the kernel, or the phase functions the host tests replay); false when
/// the pair is not compiled for T.
template <class T, class Step, class F>
bool fused_with_combo(Idx tile, Idx nc, F&& f) {
  bool done = false;
  auto one = [&](auto tw) {
    constexpr int TW = decltype(tw)::value;
    if constexpr (TW <= fused_max_tile(sizeof(T))) {
      if (tile == TW && nc == 1) {
        f(tw, std::integral_constant<int, 1>{});
        done = true;
      }
      if constexpr (sizeof(T) == 4 && TW <= Step::kFusedMaxTile4) {
        if (tile == TW && nc == 4) {
          f(tw, std::integral_constant<int, 4>{});
          done = true;
        }
      }
    }
  };
  one(std::integral_constant<int, 4>{});
  one(std::integral_constant<int, 8>{});
  one(std::integral_constant<int, 16>{});
  one(std::integral_constant<int, 20>{});
  one(std::integral_constant<int, 32>{});
  one(std::integral_constant<int, 64>{});
  return done;
}

enum FusedMode : std::int32_t { kFusedReduce = 0, kFusedPush = 1 };

/// The problem and its chunks: steps 1..T in C chunks; chunk c ≥ 1 covers the L steps
/// (chunk_begin(c), chunk_end(c)], chunk 0 the first len0 = T − (C−1)·L ∈ [1, L] steps.
struct FusedShape {
  std::int32_t variant = 0;  ///< the Step's variant (FusedStep… fused_unit)
  Idx H = 0, G = 1, GH = 0, S = 0, B = 0, steps = 0;
  bool inject = false;  ///< per-step injections on h_1 … h_{T−1}
  Idx L = 1, C = 1, len0 = 0;
  Idx ncols = 0;  ///< columns of a reduce problem: S (M_c), + 1 (v_c) with injections
  Idx ldw = 0;    ///< row length of the padded W copy (≥ every launch's ntile·tile)
};

/// Shape of a Step with `gates` and `parts` (step.hpp) and `variant`, H, T, B, with chunk length L
/// (clamped to [1, T]); ldw left to the planner.
BPPSA_HD inline FusedShape fused_shape(Idx gates, Idx parts, std::int32_t variant, Idx H, Idx steps, Idx B, bool inject,
                                       Idx L) {
  FusedShape s;
  s.variant = variant;
  s.H = H;
  s.G = gates;
  s.GH = s.G * H;
  s.S = parts * H;
  s.B = B;
  s.steps = steps;
  s.inject = inject;
  s.L = L < 1 ? 1 : (L > steps ? steps : L);
  s.C = (steps + s.L - 1) / s.L;
  s.len0 = steps - (s.C - 1) * s.L;
  s.ncols = s.S + (inject ? 1 : 0);
  return s;
}

/// Chunk c covers steps (chunk_begin, chunk_end]: its affine total maps g_{end} to g_{begin}.
BPPSA_HD inline Idx chunk_end(const FusedShape& s, Idx c) { return s.steps - (s.C - 1 - c) * s.L; }
BPPSA_HD inline Idx chunk_begin(const FusedShape& s, Idx c) { return c == 0 ? 0 : chunk_end(s, c) - s.L; }
/// Steps the push runs in chunk c: chunk 0 all of them (down to g_0); a chunk c ≥ 1 stops one
/// short, its g_{begin} being the carry's.
BPPSA_HD inline Idx push_steps(const FusedShape& s, Idx c) { return c == 0 ? s.len0 : s.L - 1; }
/// The most steps any push column runs.
BPPSA_HD inline Idx push_steps_max(const FusedShape& s) {
  return s.C == 1 ? s.len0 : (s.len0 > s.L - 1 ? s.len0 : s.L - 1);
}

// ---------------------------------------------------------------------------------------------
// Launch geometry

/// One column launch (reduce or push). Groups of `nc` columns of one (chunk, sample) share a
/// thread's registers; `ntile` threads split the group's rows in tiles of `tile`; a block holds
/// `gpb` groups (threads = gpb·ntile). A reduce launch covers the columns [col_first, col_end) of
/// every problem: all of [M_c | v_c], or, with the v column apart, the S identity columns in one
/// launch and v_c in another.
struct FusedLaunch {
  std::int32_t mode = kFusedPush;
  Idx tile = 4, nc = 1, ntile = 1, gpb = 1;
  Idx col_first = 0, col_end = 1;  ///< reduce: the columns of [M_c | v_c] it covers
  Idx groups = 0, blocks = 0, threads = 0;
  Idx steps = 0;  ///< loop trips: every column's steps ≤ this
  Idx nbuf = 1;   ///< x buffers: 2 when ntile > 1 (the threads of a group exchange rows)
  bool w_shared = true;
  /// The record's ring (fused_stage_copies): kFusedRecordStages slots a group, each of stage_len
  /// values, or 0 (the steps read the record from global memory, prefetched to L1).
  Idx stages = 0, stage_len = 0;
  Idx smem = 0;  ///< dynamic shared memory in values
};
BPPSA_HD inline Idx launch_hpad(const FusedLaunch& l) { return l.ntile * l.tile; }
/// Column groups per reduce problem: the launch's columns in groups of nc (the last padded).
BPPSA_HD inline Idx reduce_groups_per_problem(const FusedLaunch& l) {
  return (l.col_end - l.col_first + l.nc - 1) / l.nc;
}
/// Groups of a launch: reduce (C−1)·B problems × groups each; push C·B single columns.
BPPSA_HD inline Idx launch_groups(const FusedShape& s, const FusedLaunch& l) {
  return l.mode == kFusedReduce ? (s.C - 1) * s.B * reduce_groups_per_problem(l) : s.C * s.B;
}

/// Shared memory of a column launch, in values: [W: GH × hpad, when shared][x: nbuf × S ×
/// (gpb·nc)][the record's ring: gpb × stages slots of stage_len, from a multiple of 4 values],
/// x row r of buffer b at ((b·S + r)·gpb + group)·nc + column.
BPPSA_HD inline Idx x_offset(const FusedShape& s, const FusedLaunch& l) {
  return l.w_shared ? s.GH * launch_hpad(l) : 0;
}
BPPSA_HD inline Idx x_stride(const FusedLaunch& l) { return l.gpb * l.nc; }
BPPSA_HD inline Idx x_end(const FusedShape& s, const FusedLaunch& l) {
  return x_offset(s, l) + l.nbuf * s.S * x_stride(l);
}
BPPSA_HD inline Idx ring_offset(const FusedShape& s, const FusedLaunch& l) { return (x_end(s, l) + 3) / 4 * 4; }
BPPSA_HD inline Idx launch_smem(const FusedShape& s, const FusedLaunch& l) {
  return l.stages > 0 ? ring_offset(s, l) + l.gpb * l.stages * l.stage_len : x_end(s, l);
}

/// Slots of the record's ring a group: step j reads slot j % stages while the copies of steps
/// j + 1 … j + stages − 1 are in flight.
inline constexpr Idx kFusedRecordStages = 3;
/// Whether a launch's columns take the injection (push; a reduce launch holding the v column).
BPPSA_HD inline bool launch_takes_e(const FusedShape& s, const FusedLaunch& l) {
  return s.inject && (l.mode == kFusedPush || l.col_end > s.S);
}
/// Values of one ring slot: a step's record (`record_values`, the Step's spans) and, where the
/// launch takes it, the injection (H), rounded up to 4 values (16-byte copies stay aligned).
BPPSA_HD inline Idx stage_values(const FusedShape& s, const FusedLaunch& l, Idx record_values) {
  return (record_values + (launch_takes_e(s, l) ? s.H : 0) + 3) / 4 * 4;
}

/// What a thread works on: group (chunk, sample) and its first column; `valid` false for the
/// threads past the last group.
struct FusedGroup {
  Idx chunk = 0, sample = 0, problem = 0, col0 = 0, steps = 0;
  Idx slot = 0;  ///< group within the block
  Idx tile = 0;  ///< row tile of this thread
  bool valid = false;
};
BPPSA_HD inline FusedGroup fused_group(const FusedShape& s, const FusedLaunch& l, Idx block, Idx thread) {
  FusedGroup g;
  g.slot = thread % l.gpb;
  g.tile = thread / l.gpb;
  const Idx gi = block * l.gpb + g.slot;
  g.valid = gi < l.groups && g.tile < l.ntile;
  if (!g.valid) return g;
  if (l.mode == kFusedReduce) {
    const Idx per = reduce_groups_per_problem(l);
    g.problem = gi / per;
    g.col0 = l.col_first + (gi - g.problem * per) * l.nc;
    g.chunk = 1 + g.problem / s.B;
    g.sample = g.problem % s.B;
    g.steps = s.L;
  } else {
    g.problem = gi;
    g.chunk = gi / s.B;
    g.sample = gi % s.B;
    g.steps = push_steps(s, g.chunk);
  }
  return g;
}

/// Stages of the carry's ring of chunk totals in shared memory (FusedCarry::stages when it fits):
/// step n reads stage n while the copies of stages n + 1 … n + kFusedCarryStages − 1 are in flight.
inline constexpr Idx kFusedCarryStages = 4;

/// The carry: one block per sample, `threads` threads over the S rows, two S-vectors of shared
/// memory, then (stages > 0) a ring of `stages` chunk totals of S × ncols values each.
struct FusedCarry {
  Idx threads = 32, blocks = 0, smem = 0;
  Idx stages = 0;  ///< 0: the totals are read from global memory (prefetched to L1); else kFusedCarryStages
};

// ---------------------------------------------------------------------------------------------
// Kernel arguments

template <class T>
struct FusedArgs {
  FusedShape shape;
  FusedLaunch launch;  ///< the column launch these arguments are for
  FusedCarry carry;
  const T* w = nullptr;  ///< W, GH × H row-major
  T* wp = nullptr;       ///< padded copy, GH × ldw, zeros in columns ≥ H
  /// The forward record, as the Step reads it (for the recurrent cells: layer_args.hpp's slots).
  const T* record[kFusedRecordArrays] = {};
  const T* g_last = nullptr;  ///< S × B
  const T* above = nullptr;   ///< H × TB injections (block t − 1: gradient on h_t); null without
  T* g = nullptr;             ///< out: S × (T+1)B
  T* totals = nullptr;        ///< (C−1)·B problems × S × ncols, problem ((c−1)·B + b), column-major
  /// Per-sample lengths, B (non-increasing, each 1 … T); null = every sample runs all T steps.
  /// Step t of sample b is padding when t > len[b] (fused_padded): the identity, without
  /// injection, whose record and injection are never read; g_last then holds the gradient on
  /// s_{len[b]}, and g_t = g_last for len[b] ≤ t ≤ T.
  const Idx* len = nullptr;
  /// Out, where set: the push writes the Step's y of every step t (the G·H values W^T multiplies,
  /// from g_t) at column (t−1)·B + b (gate q's unit k at q·H + k), and the input side's
  /// (fused_yi) to yi_out where the Step has one (kFusedInputSide); zeros at padded steps.
  T* y_out = nullptr;
  T* yi_out = nullptr;
};

/// Whether step t of sample b is padding (past the sample's length): x passes it unchanged.
template <class T>
BPPSA_HD inline bool fused_padded(const FusedArgs<T>& a, Idx t, Idx b) {
  return a.len != nullptr && t > a.len[b];
}

/// Offset of the total [M_c | v_c] of (chunk c ≥ 1, sample b): column j at + j·S.
BPPSA_HD inline Idx total_offset(const FusedShape& s, Idx c, Idx b) { return ((c - 1) * s.B + b) * s.S * s.ncols; }

// ---------------------------------------------------------------------------------------------
// Prepare (flat launch): the padded W copy and g_T into block T of g

BPPSA_HD inline Idx prepare_items(const FusedShape& s) { return s.GH * s.ldw + s.S * s.B; }
template <class T>
BPPSA_HD inline void prepare_item(const FusedArgs<T>& a, Idx item) {
  const FusedShape& s = a.shape;
  const Idx nw = s.GH * s.ldw;
  if (item < nw) {
    const Idx r = item / s.ldw, i = item - r * s.ldw;
    a.wp[item] = i < s.H ? a.w[r * s.H + i] : T(0);
  } else {
    const Idx o = item - nw;  // block T of g is S × B contiguous, as g_last
    a.g[s.steps * s.B * s.S + o] = a.g_last[o];
  }
}

// ---------------------------------------------------------------------------------------------
// Per-unit coefficients: a Step's values of unit k at step t, shared by a thread's columns

template <class T, class Step>
struct FusedUnit {
  T q[Step::kFusedCoefficients];
};

template <class T, class Step>
BPPSA_HD inline FusedUnit<T, Step> fused_unit(const FusedStepRecord<T>& r, Idx H, std::int32_t variant, Idx k) {
  FusedUnit<T, Step> u;
  Step::fused_unit(r, H, variant, k, u.q);
  return u;
}

// ---------------------------------------------------------------------------------------------
// The column kernel's phases: load, then per step j = 0 … launch.steps − 1 one step, a barrier
// after each (skipped by the kernel when ntile == 1: a thread's columns are then its own). The
// kernel computes each thread's FusedGroup once (fused_group) and passes it to every phase.

/// Phase 0: W into shared memory (when w_shared), each thread's rows of its initial columns:
/// reduce [I | 0] (padding columns 0), push g at the chunk's end (written by prepare or carry).
template <class T>
BPPSA_HD inline void fused_load(const FusedArgs<T>& a, T* sm, const FusedGroup& gr, Idx thread) {
  const FusedShape& s = a.shape;
  const FusedLaunch& l = a.launch;
  if (l.w_shared) {
    const Idx hp = launch_hpad(l);
    for (Idx o = thread; o < s.GH * hp; o += l.threads) {
      const Idx r = o / hp, i = o - r * hp;
      sm[o] = a.wp[r * s.ldw + i];
    }
  }
  if (!gr.valid) return;
  T* x = sm + x_offset(s, l) + gr.slot * l.nc;
  const Idx xs = x_stride(l), parts = s.S / s.H;  // 1, or 2 (h rows, c rows)
  const T* from = a.g + (chunk_end(s, gr.chunk) * s.B + gr.sample) * s.S;
  for (Idx ii = 0; ii < l.tile; ++ii) {
    const Idx i = gr.tile * l.tile + ii;
    if (i >= s.H) break;
    for (Idx part = 0; part < parts; ++part) {
      const Idx r = part * s.H + i;
      for (Idx n = 0; n < l.nc; ++n)
        x[r * xs + n] = l.mode == kFusedReduce ? (gr.col0 + n == r ? T(1) : T(0)) : from[r];
    }
  }
}

/// The spans step j of a thread's group reads: the Step's record (fused_record) in spans 0–2, and
/// in span 3 the injection e_{t−1} where the launch takes it (launch_takes_e, t ≥ 2); null spans
/// have length 0. False (and no spans) past the group's steps.
template <class T, class Step>
BPPSA_HD inline bool fused_spans(const FusedArgs<T>& a, const FusedGroup& gr, Idx j, const T* (&span)[4],
                                 Idx (&len)[4]) {
  const FusedShape& s = a.shape;
  if (!gr.valid || j >= gr.steps) return false;
  const Idx t = chunk_end(s, gr.chunk) - j, b = gr.sample;
  const FusedStepRecord<T> rec = Step::template fused_record<T>(a, t, b);
  span[0] = rec.p0, span[1] = rec.p1, span[2] = rec.p2, span[3] = nullptr;
  len[0] = rec.n0, len[1] = rec.n1, len[2] = rec.n2, len[3] = 0;
  if (launch_takes_e(s, a.launch) && a.above != nullptr && t >= 2) {
    span[3] = a.above + ((t - 2) * s.B + b) * s.H;
    len[3] = s.H;
  }
  for (int q = 0; q < 4; ++q)
    if (span[q] == nullptr) len[q] = 0;
  return true;
}

/// The ring slot of step j of a thread's group (a.launch.stages > 0): its spans one after the other.
template <class T>
BPPSA_HD inline T* fused_stage_slot(const FusedArgs<T>& a, T* sm, const FusedGroup& gr, Idx j) {
  const FusedLaunch& l = a.launch;
  return sm + ring_offset(a.shape, l) + (gr.slot * l.stages + j % l.stages) * l.stage_len;
}

/// The copies a thread issues to stage step j's spans into its group's ring slot (none without a
/// ring, past the group's steps or at a padded step): copy(dst, src, std::integral_constant<int, n>)
/// of n values, 16 bytes' worth where the span and its place in the slot are 16-byte aligned and
/// the span is whole pieces, else one value; the group's ntile threads take every ntile-th piece.
template <class T, class Step, class Copy>
BPPSA_HD inline void fused_stage_copies(const FusedArgs<T>& a, T* sm, const FusedGroup& gr, Idx j, Copy&& copy) {
  const T* span[4];
  Idx len[4];
  if (a.launch.stages == 0 || !fused_spans<T, Step>(a, gr, j, span, len)) return;
  if (fused_padded(a, chunk_end(a.shape, gr.chunk) - j, gr.sample)) return;
  constexpr Idx Q = static_cast<Idx>(16 / sizeof(T));
  const Idx nt = a.launch.ntile;
  T* dst = fused_stage_slot(a, sm, gr, j);
  for (int q = 0; q < 4; ++q) {
    const T* src = span[q];
    const Idx n = len[q];
    const bool wide = n % Q == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
                      reinterpret_cast<std::uintptr_t>(dst) % 16 == 0;
    if (wide) {
      for (Idx i = gr.tile * Q; i < n; i += nt * Q) copy(dst + i, src + i, std::integral_constant<int, Q>{});
    } else {
      for (Idx i = gr.tile; i < n; i += nt) copy(dst + i, src + i, std::integral_constant<int, 1>{});
    }
    dst += n;
  }
}

/// The push's outputs (a.y_out) of step t from the column x (rows xc, stride xs): the Step's y of
/// the thread's units k ≡ tile (mod ntile), and the input side's where it has one.
template <class T, class Step>
BPPSA_HD inline void fused_outputs(const FusedArgs<T>& a, const FusedStepRecord<T>& rec, const T* xc, Idx xs,
                                   const FusedGroup& gr, Idx t) {
  constexpr int G = Step::kGates;
  constexpr bool two = Step::kStateParts == 2;
  const FusedShape& s = a.shape;
  const Idx H = s.H, col = (t - 1) * s.B + gr.sample;
  for (Idx k = gr.tile; k < H; k += a.launch.ntile) {
    const FusedUnit<T, Step> u = fused_unit<T, Step>(rec, H, s.variant, k);
    const T xh = xc[k * xs], xcv = two ? xc[(H + k) * xs] : T(0);
    T y[G];
    Step::fused_y(u.q, xh, xcv, y);
    for (int q = 0; q < G; ++q) a.y_out[col * s.GH + q * H + k] = y[q];
    if constexpr (Step::kFusedInputSide) {
      T yi[G];
      Step::fused_yi(u.q, xh, xcv, y, yi);
      for (int q = 0; q < G; ++q) a.yi_out[col * s.GH + q * H + k] = yi[q];
    }
  }
}
/// The push's outputs of a padded step t: zeros.
template <class T>
BPPSA_HD inline void fused_zero_outputs(const FusedArgs<T>& a, const FusedGroup& gr, Idx t) {
  const FusedShape& s = a.shape;
  const Idx col = (t - 1) * s.B + gr.sample;
  for (Idx k = gr.tile; k < s.H; k += a.launch.ntile)
    for (Idx q = 0; q < s.G; ++q) {
      a.y_out[col * s.GH + q * s.H + k] = T(0);
      if (a.yi_out != nullptr) a.yi_out[col * s.GH + q * s.H + k] = T(0);
    }
}

/// A padded step (fused_padded) of the thread's columns: x ← x, no injection, neither record nor
/// W read; the same stores as fused_step's.
template <class T, int TW, int NC, bool Two>
BPPSA_HD inline void fused_identity_step(const FusedArgs<T>& a, const T* xc, T* xn, const FusedGroup& gr, Idx j,
                                         Idx t) {
  const FusedShape& s = a.shape;
  const FusedLaunch& l = a.launch;
  const Idx H = s.H, b = gr.sample, xs = x_stride(l);
  const bool push = l.mode == kFusedPush;
  const bool last = !push && j == gr.steps - 1;
  T* out = push ? a.g + ((t - 1) * s.B + b) * s.S : (last ? a.totals + total_offset(s, gr.chunk, b) : nullptr);
  for (Idx ii = 0; ii < TW; ++ii) {
    const Idx i = gr.tile * TW + ii;
    if (i >= H) break;
    for (Idx n = 0; n < NC; ++n) {
      const Idx col = gr.col0 + n;  // reduce: column of [M_c | v_c] (≥ col_end: padding)
      const bool store = out != nullptr && (push || col < l.col_end);
      for (Idx part = 0; part < (Two ? 2 : 1); ++part) {
        const Idx r = part * H + i;
        const T v = xc[r * xs + n];  // each thread reads and writes its own rows only (nbuf may be 1)
        xn[r * xs + n] = v;
        if (store) (push ? out : out + col * s.S)[r] = v;
      }
    }
  }
}

/// Phase 1, step j of the thread's columns: t = chunk_end − j; x ← J_t^T x, plus the injection
/// e_{t−1} on the columns that take it (push; the reduce's v column); at a padded step
/// (fused_padded) x ← x, without injection (fused_identity_step). Push stores g_{t−1}; the
/// reduce's last step stores its columns of [M_c | v_c]. `w` is the padded W with row
/// stride `ldw` (shared memory or the global copy). Len: a.len may be set; the kernels are
/// compiled with and without, so that a run without lengths compiles as before lengths existed.
template <class T, class Step, int TW, int NC, bool Len>
BPPSA_HD inline void fused_step(const FusedArgs<T>& a, T* sm, const T* w, Idx ldw, const FusedGroup& gr, Idx j) {
  constexpr int G = Step::kGates;
  constexpr bool two = Step::kStateParts == 2;
  if (!gr.valid || j >= gr.steps) return;
  const FusedShape& s = a.shape;
  const FusedLaunch& l = a.launch;
  const Idx H = s.H, t = chunk_end(s, gr.chunk) - j, b = gr.sample, xs = x_stride(l);
  const T* xc = sm + x_offset(s, l) + (j % l.nbuf) * s.S * xs + gr.slot * NC;
  T* xn = sm + x_offset(s, l) + ((j + 1) % l.nbuf) * s.S * xs + gr.slot * NC;
  const bool push = l.mode == kFusedPush;
  if constexpr (Len) {
    if (fused_padded(a, t, b)) {  // past the sample's length: x passes unchanged
      if constexpr (NC == 1)      // a push runs one column a thread
        if (push && a.y_out != nullptr) fused_zero_outputs(a, gr, t);
      fused_identity_step<T, TW, NC, two>(a, xc, xn, gr, j, t);
      return;
    }
  }
  // The step's spans: from the group's ring slot when the launch stages them, else global memory.
  const T* span[4];
  Idx len[4];
  fused_spans<T, Step>(a, gr, j, span, len);
  if (l.stages > 0) {
    const T* at = fused_stage_slot(a, sm, gr, j);
    for (int q = 0; q < 4; ++q) {
      span[q] = span[q] != nullptr ? at : nullptr;
      at += len[q];
    }
  }
  FusedStepRecord<T> rec;
  rec.p0 = span[0], rec.p1 = span[1], rec.p2 = span[2];
  rec.n0 = len[0], rec.n1 = len[1], rec.n2 = len[2];
  const T* e = span[3];  // the injection's rows (null where the step takes none)
  // The push's outputs, from the old rows, before the accumulators below are live (registers);
  // compiled for one column a thread only, as a push runs.
  if constexpr (NC == 1)
    if (push && a.y_out != nullptr) fused_outputs<T, Step>(a, rec, xc, xs, gr, t);
  const Idx gate_stride = H * ldw;  // from W's rows of gate q to those of gate q + 1

  T acc[NC][TW];
  fused_unroll<NC>(
      [&](auto nn) { fused_unroll<TW>([&](auto ii) { acc[decltype(nn)::value][decltype(ii)::value] = T(0); }); });
  const T* wk = w + gr.tile * TW;  // row k of W's gate 0, this thread's tile
  const T* xk = xc;                // row k of the columns
  for (Idx k = 0; k < H; ++k, wk += ldw, xk += xs) {
    const FusedUnit<T, Step> u = fused_unit<T, Step>(rec, H, s.variant, k);
    T y[NC][G];
    fused_unroll<NC>([&](auto nn) {
      constexpr int n = decltype(nn)::value;
      Step::fused_y(u.q, xk[n], two ? xk[H * xs + n] : T(0), y[n]);
    });
    fused_unroll<G>([&](auto gg) {
      constexpr int q = decltype(gg)::value;
      const T* wr = wk + q * gate_stride;
      fused_unroll<TW / 4>([&](auto pp) {
        constexpr int p = decltype(pp)::value;
        const FusedQuad<T> w4 = load_quad(wr + 4 * p);
        fused_unroll<NC>([&](auto nn) {
          constexpr int n = decltype(nn)::value;
          acc[n][4 * p + 0] += w4.v[0] * y[n][q];
          acc[n][4 * p + 1] += w4.v[1] * y[n][q];
          acc[n][4 * p + 2] += w4.v[2] * y[n][q];
          acc[n][4 * p + 3] += w4.v[3] * y[n][q];
        });
      });
    });
  }

  // The thread's rows of the new columns: injection, W^T y, direct terms; then the stores.
  const bool last = !push && j == gr.steps - 1;
  T* out = push ? a.g + ((t - 1) * s.B + b) * s.S : (last ? a.totals + total_offset(s, gr.chunk, b) : nullptr);
  fused_unroll<TW>([&](auto iic) {
    constexpr int ii = decltype(iic)::value;
    const Idx i = gr.tile * TW + ii;
    if (i >= H) return;
    const FusedDirect<T> d = Step::fused_direct(rec, H, i);
    fused_unroll<NC>([&](auto nn) {
      constexpr int n = decltype(nn)::value;
      const Idx col = gr.col0 + n;  // reduce: column of [M_c | v_c] (≥ col_end: padding)
      const bool takes_e = e != nullptr && (push || col == s.S);
      T vh = takes_e ? e[i] : T(0);
      vh += acc[n][ii];
      T vc = T(0);  // the old rows of x are read before this thread writes them (nbuf may be 1)
      Step::fused_rows(d, xc[i * xs + n], two ? xc[(H + i) * xs + n] : T(0), vh, vc);
      if constexpr (two) {
        xn[(H + i) * xs + n] = vc;
        if (out != nullptr && (push || col < l.col_end)) (push ? out : out + col * s.S)[H + i] = vc;
      }
      xn[i * xs + n] = vh;
      if (out != nullptr && (push || col < l.col_end)) (push ? out : out + col * s.S)[i] = vh;
    });
  });
}

/// The push's outputs of step chunk_begin + 1 of a chunk c ≥ 1, whose g_t its last step wrote (a
/// push there stops one step short of the carry's g_begin): after the loop, behind a barrier
/// when ntile > 1; the record read from global memory.
template <class T, class Step>
BPPSA_HD inline void fused_push_tail(const FusedArgs<T>& a, const T* sm, const FusedGroup& gr) {
  const FusedShape& s = a.shape;
  const FusedLaunch& l = a.launch;
  if (l.mode != kFusedPush || a.y_out == nullptr || !gr.valid || gr.chunk == 0) return;
  const Idx t = chunk_begin(s, gr.chunk) + 1;
  if (fused_padded(a, t, gr.sample)) {
    fused_zero_outputs(a, gr, t);
    return;
  }
  const T* xc = sm + x_offset(s, l) + (gr.steps % l.nbuf) * s.S * x_stride(l) + gr.slot * l.nc;
  fused_outputs<T, Step>(a, Step::template fused_record<T>(a, t, gr.sample), xc, x_stride(l), gr, t);
}

/// The 128-byte lines n values from p touch, and the address of the `which`-th (inside the
/// span: p itself for the first), or null past the last.
template <class T>
BPPSA_HD inline Idx fused_lines(const T* p, Idx n) {
  constexpr Idx per = 128 / sizeof(T);
  const Idx off = static_cast<Idx>((reinterpret_cast<std::uintptr_t>(p) % 128) / sizeof(T));
  return n > 0 ? (off + n + per - 1) / per : 0;
}
template <class T>
BPPSA_HD inline const T* fused_line(const T* p, Idx n, Idx which) {
  constexpr Idx per = 128 / sizeof(T);
  if (which < 0 || which >= fused_lines(p, n)) return nullptr;
  const Idx off = static_cast<Idx>((reinterpret_cast<std::uintptr_t>(p) % 128) / sizeof(T));
  return which == 0 ? p : p - off + which * per;
}

/// The record lines step j of a thread's group reads, for the kernel's prefetch some steps ahead:
/// line `which` (the thread takes which = tile, tile + ntile, …) of the step's spans, or null
/// past the last. Spans: fused_spans'. Lines are 128
/// bytes; every address returned lies inside its array.
template <class T, class Step>
BPPSA_HD inline const T* fused_prefetch_line(const FusedArgs<T>& a, const FusedGroup& gr, Idx j, Idx which) {
  const T* span[4];
  Idx len[4];
  if (!fused_spans<T, Step>(a, gr, j, span, len)) return nullptr;
  for (int q = 0; q < 4; ++q) {
    if (span[q] == nullptr) continue;
    const T* line = fused_line(span[q], len[q], which);
    if (line != nullptr) return line;
    which -= fused_lines(span[q], len[q]);
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// The carry: one block per sample, rows over threads; g_T, then for n = 0 … C−2 the boundary
// g_{begin(c)} = M_c g_{end(c)} + v_c of chunk c = C−1−n, one barrier a step. With a ring
// (a.carry.stages > 0) the total of step n is read from shared memory: before the loop each
// thread issues its copies of stages 0 … stages − 2 (carry_stage_copies, asynchronous), and step n
// waits for its own stage's copies, meets the barrier, runs carry_step, then issues stage
// n + stages − 1 into the slot step n − 1 read.

/// Shared-memory offset of the ring slot holding stage n's total.
BPPSA_HD inline Idx carry_slot(const FusedShape& s, const FusedCarry& c, Idx n) {
  return 2 * s.S + (n % c.stages) * s.S * s.ncols;
}
/// The copies thread `thread` issues for stage n (none past the last): copy(dst, src) for its
/// values i = thread, thread + threads, … of the total of chunk C−1−n, into its ring slot.
template <class T, class Copy>
BPPSA_HD inline void carry_stage_copies(const FusedArgs<T>& a, T* sm, Idx block, Idx thread, Idx n, Copy&& copy) {
  const FusedShape& s = a.shape;
  if (n > s.C - 2) return;
  const T* src = a.totals + total_offset(s, s.C - 1 - n, block);
  T* dst = sm + carry_slot(s, a.carry, n);
  for (Idx i = thread; i < s.S * s.ncols; i += a.carry.threads) copy(dst + i, src + i);
}

/// Phase 0: g_T (block T of g, from prepare) into shared buffer 0.
template <class T>
BPPSA_HD inline void carry_load(const FusedArgs<T>& a, T* sm, Idx block, Idx thread) {
  const FusedShape& s = a.shape;
  for (Idx r = thread; r < s.S; r += a.carry.threads) sm[r] = a.g[(s.steps * s.B + block) * s.S + r];
}
/// Step n: chunk c = C−1−n, from buffer n % 2 into the other and into g's block chunk_begin(c);
/// the total from the ring (stages > 0) or from global memory.
template <class T>
BPPSA_HD inline void carry_step(const FusedArgs<T>& a, T* sm, Idx block, Idx thread, Idx n) {
  const FusedShape& s = a.shape;
  const Idx c = s.C - 1 - n, b = block;
  const T* m = a.carry.stages > 0 ? sm + carry_slot(s, a.carry, n) : a.totals + total_offset(s, c, b);
  const T* cur = sm + (n % 2) * s.S;
  T* nxt = sm + ((n + 1) % 2) * s.S;
  T* out = a.g + (chunk_begin(s, c) * s.B + b) * s.S;
  for (Idx r = thread; r < s.S; r += a.carry.threads) {
    T v = s.inject ? m[s.S * s.S + r] : T(0);
    for (Idx k = 0; k < s.S; ++k) v += m[k * s.S + r] * cur[k];
    nxt[r] = v;
    out[r] = v;
  }
}
/// Line `which` of the total the carry's step n reads (prefetch), or null past the last/the end.
template <class T>
BPPSA_HD inline const T* carry_prefetch_line(const FusedArgs<T>& a, Idx block, Idx n, Idx which) {
  const FusedShape& s = a.shape;
  if (n < 0 || n > s.C - 2) return nullptr;
  return fused_line(a.totals + total_offset(s, s.C - 1 - n, block), s.S * s.ncols, which);
}

}  // namespace bppsa::detail::gpu
