// The fused scan's cost model: chooses the chunk length L and each launch's mapping (row tile,
// columns per thread, groups per block, W on chip or not) from the Step's constants
// (FusedStepInfo), H, T, B and the device's SM count and shared memory, by estimating every
// candidate's cycles. __host__ __device__ plain arithmetic, tested by g++
// (tests/scan/cuda/test_fused_host.cpp). Its timing constants (FusedModel, options.hpp) are
// H100-class guesses from the instruction mix; a fit to an H100 sweep exists but is not adopted
// (docs/cost_model.md, "The fused scan on the GPU").
#pragma once

#include "scan/cuda/fused/math.hpp"
#include "scan/cuda/fused/options.hpp"

namespace bppsa::detail::gpu {

/// Threads per block of the column kernels at most (their __launch_bounds__).
inline constexpr Idx kFusedMaxThreads = 256;
/// Threads per block of the carry at most.
inline constexpr Idx kFusedCarryThreads = 256;
/// Clock the estimates are reported at (cycles per µs).
inline constexpr double kFusedCyclesPerMicro = 1755;
/// Memory of BP's order: a chunk length the model chooses keeps the chunk totals ((C − 1)·B·S·(S+1)
/// values, ≈ T·B·S²/L) within this many times the layer's gradient buffer (S·(T+1)·B values, what
/// BP itself holds), i.e. L ≳ S/2, or within kFusedTotalsFloor bytes where that is more. (The
/// reduce's work does not depend on L; short chunks only shorten the critical path a little.)
/// A forced chunk length is held to the device's limit alone.
inline constexpr double kFusedTotalsPerGradient = 2;
inline constexpr double kFusedTotalsFloor = 16.0 * 1024 * 1024;

/// What the planner knows of the device.
struct FusedLimits {
  Idx sms = 132;                ///< multiprocessors
  Idx smem_block = 227 * 1024;  ///< dynamic shared memory a block may opt in to, bytes
  Idx smem_sm = 228 * 1024;     ///< shared memory per multiprocessor, bytes
  double totals_bytes = 1e18;   ///< most device memory the chunk totals may take (plans beyond are skipped)
  FusedModel model;             ///< its timing constants
};

/// A planning request: the problem and the overrides (0 / −1: the model chooses).
struct FusedRequest {
  FusedStepInfo step;        ///< the Step's constants (fused_step_info)
  std::int32_t variant = 0;  ///< passed to the Step as it is
  Idx H = 0, steps = 0, B = 0;
  bool inject = false;
  Idx scalar = 4;  ///< sizeof(T)
  Idx chunk_length = 0, reduce_tile = 0, reduce_nc = 0, push_tile = 0;
  int w_shared = -1;
  int carry_ring = -1;
  int v_apart = -1;
  int record_ring = -1;
};

/// The request for a Step (with `variant`) and a problem, with the overrides of `options`.
inline FusedRequest fused_request(const FusedStepInfo& step, std::int32_t variant, Idx H, Idx steps, Idx B, Idx scalar,
                                  const FusedScanOptions& options = {}) {
  FusedRequest q;
  q.step = step;
  q.variant = variant;
  q.H = H;
  q.steps = steps;
  q.B = B;
  q.inject = options.injections;
  q.scalar = scalar;
  q.chunk_length = options.chunk_length;
  q.reduce_tile = options.reduce_tile;
  q.reduce_nc = options.reduce_columns;
  q.push_tile = options.push_tile;
  q.w_shared = options.w_shared;
  q.carry_ring = options.carry_ring;
  q.v_apart = options.v_apart;
  q.record_ring = options.record_ring;
  return q;
}

enum FusedPlanError : std::int32_t {
  kPlanOk = 0,
  kPlanBadSize,     ///< H, T or B < 1, or a chunk length < 0
  kPlanBadStep,     ///< no Step (gates < 1), or parts not 1 or 2
  kPlanBadTile,     ///< a forced tile the kernels are not compiled for
  kPlanBadColumns,  ///< forced columns per thread not compiled (with that tile and precision)
  kPlanTooLarge,    ///< no mapping fits the shared memory or the thread limit
};

struct FusedChoice {
  FusedShape shape;
  FusedLaunch reduce, push;  ///< reduce unused when shape.C == 1
  /// The v column's reduce launch when it runs apart from the identity columns' (`reduce`
  /// then covers columns 0 … S−1), concurrently; groups 0 when v is in `reduce` or there is none.
  FusedLaunch reduce_v;
  FusedCarry carry;  ///< unused when shape.C == 1
  double reduce_cycles = 0, carry_cycles = 0, push_cycles = 0, cycles = 0;
  std::int32_t error = kPlanOk;
};

BPPSA_HD inline Idx fused_ceil_div(Idx a, Idx b) { return (a + b - 1) / b; }
/// Bytes of the chunk totals [M_c | v_c] of chunks 1 … C−1 (chunk 0's is never needed).
BPPSA_HD inline double fused_totals_bytes(const FusedShape& s, Idx scalar) {
  return static_cast<double>(s.C - 1) * static_cast<double>(s.B) * static_cast<double>(s.S) *
         static_cast<double>(s.ncols) * static_cast<double>(scalar);
}
BPPSA_HD inline Idx fused_min(Idx a, Idx b) { return a < b ? a : b; }
BPPSA_HD inline Idx fused_max(Idx a, Idx b) { return a > b ? a : b; }

/// Maps one column launch of `s` with `tile` rows × `nc` columns per thread: threads per group,
/// groups per block (enough blocks for every SM when the groups allow, ≤ kFusedMaxThreads
/// threads, within shared memory), W shared or global (w_pref −1: shared when it fits), the
/// record's ring of a step's `record_values` (stage_pref −1: where it fits beside W, with fewer
/// groups a block if need be; 1: always; 0: never). A reduce launch covers columns
/// [col_first, col_end) of each problem (col_end 0: all ncols). False when nothing fits.
BPPSA_HD inline bool fused_configure(FusedLaunch& l, const FusedShape& s, std::int32_t mode, Idx tile, Idx nc,
                                     int w_pref, const FusedLimits& lim, Idx scalar, Idx col_first = 0, Idx col_end = 0,
                                     int stage_pref = 0, Idx record_values = 0) {
  l = FusedLaunch{};
  l.mode = mode;
  l.tile = tile;
  l.nc = nc;
  l.col_first = mode == kFusedReduce ? col_first : 0;
  l.col_end = mode == kFusedReduce ? (col_end > 0 ? col_end : s.ncols) : 1;
  if (l.col_end <= l.col_first) return false;
  l.ntile = fused_ceil_div(s.H, tile);
  if (l.ntile > kFusedMaxThreads) return false;
  l.nbuf = l.ntile > 1 ? 2 : 1;
  l.groups = launch_groups(s, l);
  l.steps = mode == kFusedReduce ? s.L : push_steps_max(s);
  if (l.groups < 1) return false;
  const Idx gpb_max = kFusedMaxThreads / l.ntile;
  Idx gpb = fused_min(fused_max(fused_ceil_div(l.groups, lim.sms), 1), gpb_max);
  // Even shares: as many blocks per multiprocessor as the largest share needs, each as small as
  // that allows (156 blocks of 256 on 132 SMs would leave most SMs half as busy as 24 others).
  const Idx per_sm = fused_ceil_div(fused_ceil_div(l.groups, gpb), lim.sms);
  gpb = fused_max(fused_ceil_div(l.groups, per_sm * lim.sms), 1);
  if (32 % l.ntile == 0) {  // whole warps when the groups allow
    const Idx per_warp = 32 / l.ntile;
    gpb = fused_min(fused_ceil_div(gpb, per_warp) * per_warp, gpb_max);
  }
  gpb = fused_min(gpb, l.groups);
  const Idx budget = lim.smem_block / scalar, per_group = l.nbuf * s.S * nc, w_values = s.GH * l.ntile * tile;
  bool shared = w_pref != 0 && budget - w_values >= per_group;
  if (w_pref == 1 && !shared) return false;
  Idx fit = (budget - (shared ? w_values : 0)) / per_group;
  if (fit < 1) return false;
  const Idx slot = stage_values(s, l, record_values);
  const Idx fit_ring = (budget - (shared ? w_values : 0) - 3) / (per_group + kFusedRecordStages * slot);
  const bool ring = stage_pref != 0 && record_values > 0 && fit_ring >= 1;
  if (stage_pref == 1 && !ring) return false;
  if (ring) {
    fit = fit_ring;
    l.stages = kFusedRecordStages;
    l.stage_len = slot;
  }
  l.w_shared = shared;
  l.gpb = fused_min(gpb, fit);
  l.threads = l.gpb * l.ntile;
  l.blocks = fused_ceil_div(l.groups, l.gpb);
  l.smem = launch_smem(s, l);
  return true;
}

/// The bounds of a launch's estimate (cycles): issue rate, latency, L2 traffic, W's load.
struct FusedBounds {
  double throughput = 0, latency = 0, l2 = 0, w_load = 0;
};
/// The estimate of launches running at once: their issue and L2 bounds add up, the latency is
/// the longest one's.
BPPSA_HD inline double fused_cycles(const FusedBounds* b, int n) {
  double thr = 0, lat = 0, l2 = 0, w = 0;
  for (int i = 0; i < n; ++i) {
    thr += b[i].throughput;
    l2 += b[i].l2;
    lat = b[i].latency > lat ? b[i].latency : lat;
    w = b[i].w_load > w ? b[i].w_load : w;
  }
  double cycles = thr > lat ? thr : lat;
  if (l2 > cycles) cycles = l2;
  return cycles + w;
}

/// The bounds of a configured column launch: the issue-rate bound (all the warps' instructions
/// over the schedulers in use), the latency bound (one warp's steps one after the other, per wave
/// of resident blocks) and, with W in global memory, its L2 traffic.
BPPSA_HD inline FusedBounds fused_launch_bounds(const FusedLaunch& l, const FusedShape& s, const FusedStepCost& cost,
                                                const FusedLimits& lim, Idx scalar) {
  const double G = static_cast<double>(s.G), tile = static_cast<double>(l.tile), nc = static_cast<double>(l.nc);
  const double parts = static_cast<double>(s.S / s.H);
  const double fma = scalar == 8 ? 2 : 1;  // FP64 at half the FP32 rate (sm_90)
  const FusedModel& m = lim.model;
  const double per_k =
      m.unit * (nc * parts + cost.unit + nc * cost.column + G * (tile / 4 * (scalar == 8 ? 2 : 1) + nc * tile * fma));
  const double post = m.row * tile * (3 + nc * (4 + cost.row_column) + cost.row);
  const double step = static_cast<double>(s.H) * per_k + post + m.step + (l.ntile > 1 ? m.step_sync : 0);
  const double lat = m.latency + (l.ntile > 1 ? m.latency_sync : 0);
  const Idx warps = fused_ceil_div(l.threads, 32);
  const Idx regs = l.threads * (l.nc * l.tile * (scalar / 4) + 40);
  Idx res = fused_min(2048 / l.threads, 32);
  res = fused_min(res, lim.smem_sm / (l.smem * scalar + 1024));
  res = fused_min(res, 65536 / regs);
  res = fused_max(res, 1);
  const Idx active = fused_min(lim.sms, l.blocks);
  const Idx per_sm = fused_ceil_div(l.blocks, active);
  const Idx waves = fused_ceil_div(per_sm, res);
  const double resident_warps = static_cast<double>(fused_min(per_sm, res) * warps);
  const double issue = (resident_warps < 4 ? resident_warps : 4) * m.issue;
  const double steps = static_cast<double>(l.steps);
  const double throughput = static_cast<double>(per_sm * warps) * steps * step / issue;
  const double latency = static_cast<double>(waves) * steps * (step + lat);
  const double w_load =
      l.w_shared ? static_cast<double>(waves) * (m.w_load + G * s.H * l.ntile * l.tile / l.threads) : 0;
  // W from global memory: every group reads all of it every step, through L2 at m.l2_bytes per
  // cycle and multiprocessor (L1 keeps little of it: it is what did not fit in shared memory).
  const double l2 = l.w_shared ? 0
                               : static_cast<double>(per_sm * l.gpb) * steps * G * static_cast<double>(s.H) *
                                     static_cast<double>(launch_hpad(l) * scalar) / m.l2_bytes;
  FusedBounds b;
  b.throughput = throughput;
  b.latency = latency;
  b.l2 = l2;
  b.w_load = w_load;
  return b;
}
/// Estimated cycles of a configured column launch running alone: its largest bound, plus W's load.
BPPSA_HD inline double fused_launch_cycles(const FusedLaunch& l, const FusedShape& s, const FusedStepCost& cost,
                                           const FusedLimits& lim, Idx scalar) {
  const FusedBounds b = fused_launch_bounds(l, s, cost, lim, scalar);
  return fused_cycles(&b, 1);
}

/// The carry's cycles: C − 1 sequential mat-vecs of S × S per sample (one block each).
BPPSA_HD inline double fused_carry_cycles(const FusedShape& s, const FusedCarry& c, const FusedModel& m, Idx scalar) {
  const double rows = static_cast<double>(fused_ceil_div(s.S, c.threads));
  const double step = rows * static_cast<double>(s.S) * (scalar == 8 ? 3 : 2) + m.carry_step;
  return static_cast<double>(s.C - 1) * step;
}

/// The best launch of one mode over the compiled (tile, columns) pairs (or the forced ones); a
/// reduce launch over columns [col_first, col_end) (col_end 0: all); the record's ring as
/// fused_configure's stage_pref.
BPPSA_HD inline bool fused_best_launch(FusedLaunch& best, double& best_cycles, const FusedShape& s,
                                       const FusedStepInfo& step, std::int32_t mode, Idx force_tile, Idx force_nc,
                                       int w_pref, const FusedLimits& lim, Idx scalar, Idx col_first = 0,
                                       Idx col_end = 0, int stage_pref = 0) {
  const Idx record_values = static_cast<Idx>(step.record_per_unit * static_cast<double>(s.H) + 0.5);
  bool found = false;
  for (int ti = 0; ti < kFusedTileCount; ++ti) {
    const Idx tile = kFusedTiles[ti];
    if (force_tile != 0 && tile != force_tile) continue;
    for (Idx nc = 1; nc <= 4; nc += 3) {
      if (mode == kFusedPush && nc != 1) continue;
      if (force_nc != 0 && nc != force_nc) continue;
      if (!fused_combo_compiled(tile, nc, scalar, step.max_tile4)) continue;
      FusedLaunch l;
      if (!fused_configure(l, s, mode, tile, nc, w_pref, lim, scalar, col_first, col_end, stage_pref, record_values))
        continue;
      const double cycles = fused_launch_cycles(l, s, step.cost, lim, scalar);
      if (!found || cycles < best_cycles) {
        best = l;
        best_cycles = cycles;
        found = true;
      }
    }
  }
  return found;
}

/// Validates the request and returns the cheapest plan over the chunk lengths L (1 … 16, then
/// steps of ×1.25, and T), or the forced one; plan.error says why there is none.
BPPSA_HD inline FusedChoice fused_plan(const FusedRequest& q, const FusedLimits& lim) {
  FusedChoice best;
  if (q.H < 1 || q.steps < 1 || q.B < 1 || q.chunk_length < 0) {
    best.error = kPlanBadSize;
    return best;
  }
  if (q.step.gates < 1 || (q.step.parts != 1 && q.step.parts != 2)) {
    best.error = kPlanBadStep;
    return best;
  }
  bool known_r = q.reduce_tile == 0, known_p = q.push_tile == 0;
  for (int i = 0; i < kFusedTileCount; ++i) {
    if (kFusedTiles[i] > fused_max_tile(q.scalar)) continue;
    known_r = known_r || kFusedTiles[i] == q.reduce_tile;
    known_p = known_p || kFusedTiles[i] == q.push_tile;
  }
  if (!known_r || !known_p) {
    best.error = kPlanBadTile;
    return best;
  }
  if (q.reduce_nc != 0 &&
      !fused_combo_compiled(q.reduce_tile != 0 ? q.reduce_tile : 4, q.reduce_nc, q.scalar, q.step.max_tile4)) {
    best.error = kPlanBadColumns;
    return best;
  }
  bool found = false;
  Idx L = q.chunk_length > 0 ? q.chunk_length : 1;
  const double gradient_bytes = static_cast<double>(q.step.parts * q.H) * static_cast<double>(q.steps + 1) *
                                static_cast<double>(q.B) * static_cast<double>(q.scalar);
  double max_totals = lim.totals_bytes;
  if (q.chunk_length == 0) {
    const double bp_order = kFusedTotalsPerGradient * gradient_bytes;
    const double budget = bp_order > kFusedTotalsFloor ? bp_order : kFusedTotalsFloor;
    if (budget < max_totals) max_totals = budget;
  }
  while (true) {
    const FusedShape s = fused_shape(q.step.gates, q.step.parts, q.variant, q.H, q.steps, q.B, q.inject, L);
    FusedChoice p;
    p.shape = s;
    const double totals = fused_totals_bytes(s, q.scalar);
    bool ok = totals <= max_totals && fused_best_launch(p.push, p.push_cycles, s, q.step, kFusedPush, q.push_tile, 0,
                                                        q.w_shared, lim, q.scalar, 0, 0, q.record_ring);
    if (ok && s.C > 1) {
      ok = fused_best_launch(p.reduce, p.reduce_cycles, s, q.step, kFusedReduce, q.reduce_tile, q.reduce_nc, q.w_shared,
                             lim, q.scalar, 0, 0, q.record_ring);
      // The v column apart (with injections): the S identity columns in one launch and v_c in a
      // second, one column a thread, both at once; where the model finds it faster, or forced.
      FusedLaunch ident, v;
      double ident_cycles = 0, v_cycles = 0;
      if (ok && s.inject && q.v_apart != 0 &&
          fused_best_launch(ident, ident_cycles, s, q.step, kFusedReduce, q.reduce_tile, q.reduce_nc, q.w_shared, lim,
                            q.scalar, 0, s.S, q.record_ring) &&
          fused_best_launch(v, v_cycles, s, q.step, kFusedReduce, q.reduce_tile, 1, q.w_shared, lim, q.scalar, s.S,
                            s.S + 1, q.record_ring)) {
        const FusedBounds both[2] = {fused_launch_bounds(ident, s, q.step.cost, lim, q.scalar),
                                     fused_launch_bounds(v, s, q.step.cost, lim, q.scalar)};
        const double apart = fused_cycles(both, 2) + lim.model.launch;
        if (q.v_apart == 1 || apart < p.reduce_cycles) {
          p.reduce = ident;
          p.reduce_v = v;
          p.reduce_cycles = apart;
        }
      }
      ok = ok && (p.reduce_v.groups > 0 || !s.inject || q.v_apart != 1);  // forced apart: no fallback
      p.carry.threads = fused_min(fused_ceil_div(s.S, 32) * 32, kFusedCarryThreads);
      p.carry.blocks = s.B;
      // The ring of totals where it fits half a multiprocessor's shared memory (two samples a
      // multiprocessor when B exceeds the SMs).
      const Idx ring = kFusedCarryStages * s.S * s.ncols;
      const bool fits = (2 * s.S + ring) * q.scalar <= fused_min(lim.smem_block, lim.smem_sm / 2);
      const bool use = fits && q.carry_ring != 0;
      ok = ok && (fits || q.carry_ring != 1);
      p.carry.stages = use ? kFusedCarryStages : 0;
      p.carry.smem = 2 * s.S + (use ? ring : 0);
      p.carry_cycles = fused_carry_cycles(s, p.carry, lim.model, q.scalar);
      ok = ok && p.carry.smem * q.scalar <= lim.smem_block;
    }
    if (ok) {
      const Idx launches = s.C > 1 ? 4 : 2;  // the v column's launch is in reduce_cycles
      p.cycles = p.reduce_cycles + p.carry_cycles + p.push_cycles + static_cast<double>(launches) * lim.model.launch;
      p.shape.ldw = fused_max(launch_hpad(p.push), s.C > 1 ? launch_hpad(p.reduce) : 0);
      if (p.reduce_v.groups > 0) p.shape.ldw = fused_max(p.shape.ldw, launch_hpad(p.reduce_v));
      if (!found || p.cycles < best.cycles) {
        best = p;
        found = true;
      }
    }
    if (q.chunk_length > 0 || L >= q.steps) break;
    L = L < 16 ? L + 1 : L + L / 4;
    if (L > q.steps) L = q.steps;
  }
  if (!found) best.error = kPlanTooLarge;
  return best;
}

}  // namespace bppsa::detail::gpu
