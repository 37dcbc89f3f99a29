// The forward recurrence and BP through time for a W_hh too large for one multiprocessor's shared
// memory (H 128–256 and up, by cell): a thread-block cluster per group of samples, W_hh split over
// the cluster's blocks in their shared memory, what a step's units share exchanged through
// distributed shared memory, one block barrier and one cluster barrier a step. Each written once
// as a program over a context (the kernel's, in recurrent_kernels.cu; the host replay's,
// tests/nn/cuda/test_recurrent_host.cpp). No CUDA headers.
//
// Block r of a cluster of N owns the units j = r·U … r·U + U − 1 (U = ⌈H / N⌉) of the cluster's
// spb samples, and a unit's work is split over `slices` threads; slice 0 (the owner) keeps the
// unit's state in registers.
// - Forward: the units' G gate rows of W_hh (G·U × H) in shared memory, and a full copy of h_{t−1}
//   of every sample (two buffers). Slice p of a unit sums k ≡ p (mod P) as unit_dots does (the
//   tail k ≥ H − H mod P into slice 0; P = unit_dots' partial sums), and the owner adds them in
//   unit_dots' order: the same bits as the block kernel's ForwardUnit. Per step: slices → block
//   barrier → the owner evaluates the cell, writes h_t to the record and into the next buffer of
//   every block → cluster barrier.
// - BP: the units' columns of W_hh (GH × U) in shared memory, and the recurrent-side
//   pre-activation gradients d_t of every unit (GH a sample, two buffers, step t in buffer t mod 2).
//   Per step: the owner forms its unit's d_t from g_t (its rows, in registers), writes dx (dh) and
//   d_t into every block → cluster barrier → slice p sums r ≡ p (mod slices) of W_hh^T d_t's row j
//   → block barrier → the owner adds the slices in order, the injection and the direct terms
//   (g_{t−1}'s rows of unit j). With one slice the sum is the block kernel's transpose_dot: its bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/cuda/grid.hpp"
#include "core/cuda/hd.hpp"
#include "nn/cuda/recurrent_math.hpp"

namespace bppsa::detail::gpu {

/// Blocks a cluster may have without the non-portable opt-in (every sm_90 device runs 8).
inline constexpr Idx kClusterMaxBlocks = 8;
/// Threads a block of the cluster forward may have (its __launch_bounds__: 128 registers a thread).
inline constexpr Idx kClusterMaxThreads = 512;

/// The partial sums of a unit's dot products (unit_dots' P): 4 for one gate, 2 for several.
BPPSA_HD constexpr Idx cluster_slices(Idx gates) { return gates == 1 ? 4 : 2; }

/// How a cluster kernel is launched: blocks per cluster, units per block, samples per cluster,
/// threads a unit (forward: cluster_slices), threads per block, dynamic shared memory; fits false
/// where no cluster size holds W_hh.
struct ClusterLaunch {
  Idx ctas = 0, units = 0, spb = 1, slices = 1;
  unsigned threads = 32;
  std::size_t smem_bytes = 0;
  bool fits = false;
};

/// Shared memory of one block, in values: [W_hh's rows of its units: G·U × H, (k, q, u) at
/// (k·G + q)·U + u][h buffer 0: spb × H][h buffer 1][slices 1 … P−1 of the dot products:
/// (P − 1) × spb × U × G].
struct ClusterSmem {
  Idx w = 0, buf0 = 0, buf1 = 0, part = 0, total = 0;
};
BPPSA_HD inline ClusterSmem cluster_smem(Idx G, Idx H, Idx units, Idx spb) {
  ClusterSmem s;
  s.buf0 = G * units * H;
  s.buf1 = s.buf0 + spb * H;
  s.part = s.buf1 + spb * H;
  s.total = s.part + (cluster_slices(G) - 1) * spb * units * G;
  return s;
}
/// Threads of a block: `slices` per (unit, sample), rounded to warps.
BPPSA_HD inline Idx cluster_threads(Idx slices, Idx units, Idx spb) { return (slices * units * spb + 31) / 32 * 32; }

/// Shared memory of one block of the cluster BP, in values: [W_hh's columns of its units: GH × U,
/// (r, u) at r·U + u][d buffer 0: spb × GH][d buffer 1][slices 1 … slices−1 of the rows' sums:
/// (slices − 1) × spb × U].
BPPSA_HD inline ClusterSmem cluster_bp_smem(Idx GH, Idx units, Idx spb, Idx slices) {
  ClusterSmem s;
  s.buf0 = GH * units;
  s.buf1 = s.buf0 + spb * GH;
  s.part = s.buf1 + spb * GH;
  s.total = s.part + (slices - 1) * spb * units;
  return s;
}
/// Threads a row of the cluster BP at most (its sums of GH products split as many ways).
inline constexpr Idx kClusterBpMaxSlices = 8;

/// The launch for G gates, hidden H, `batch` samples, on `sms` multiprocessors with `smem_limit`
/// bytes of shared memory a block and clusters of at most `max_ctas` blocks: the fewest blocks a
/// cluster (2, 4, 8, …; `min_ctas` and up) whose share of W_hh fits, then samples per cluster so
/// that the clusters fill the multiprocessors (spb = ⌈batch / (sms / ctas)⌉), fewer where their
/// buffers or threads do not fit; `resident` > 0: at most that many clusters at once (what the
/// device places: a cluster lies within one GPC). Forward (`backward` false): cluster_slices(G)
/// threads a unit. BP: the most threads a unit, up to kClusterBpMaxSlices (a power of two), that fit.
inline ClusterLaunch cluster_launch(Idx G, Idx H, Idx batch, std::size_t scalar, Idx sms, std::size_t smem_limit,
                                    Idx max_ctas, bool backward = false, Idx min_ctas = 2, Idx resident = 0) {
  ClusterLaunch c;
  const auto slices_for = [&](Idx u, Idx spb) {
    if (!backward) return cluster_slices(G);
    Idx n = kClusterBpMaxSlices;
    while (n > 1 && cluster_threads(n, u, spb) > kClusterMaxThreads) n /= 2;
    return n;
  };
  const auto fits = [&](Idx ctas, Idx spb) {
    const Idx u = (H + ctas - 1) / ctas, n = slices_for(u, spb);
    const Idx values = backward ? cluster_bp_smem(G * H, u, spb, n).total : cluster_smem(G, H, u, spb).total;
    return static_cast<std::size_t>(values) * scalar <= smem_limit && cluster_threads(n, u, spb) <= kClusterMaxThreads;
  };
  for (Idx ctas = min_ctas < 1 ? 1 : min_ctas; ctas <= max_ctas && !c.fits; ctas *= 2) {
    if (!fits(ctas, 1)) continue;
    Idx clusters = sms / ctas > 0 ? sms / ctas : 1;
    if (resident > 0 && resident < clusters) clusters = resident;
    Idx spb = (batch + clusters - 1) / clusters;
    if (spb < 1) spb = 1;
    while (spb > 1 && !fits(ctas, spb)) --spb;
    c.ctas = ctas;
    c.spb = spb;
    c.fits = true;
  }
  if (!c.fits) return c;
  c.units = (H + c.ctas - 1) / c.ctas;
  c.slices = slices_for(c.units, c.spb);
  c.threads = static_cast<unsigned>(cluster_threads(c.slices, c.units, c.spb));
  const Idx values =
      backward ? cluster_bp_smem(G * H, c.units, c.spb, c.slices).total : cluster_smem(G, H, c.units, c.spb).total;
  c.smem_bytes = static_cast<std::size_t>(values) * scalar;
  return c;
}
/// Clusters of a launch.
BPPSA_HD inline Idx cluster_count(Idx batch, Idx spb) { return (batch + spb - 1) / spb; }

/// Where thread `thread` of block `rank` of cluster `cluster` works: slice p of unit u (unit j =
/// rank·U + u) of the cluster's sample s (sample b); active false past the slices, units or samples.
struct ClusterPlace {
  Idx s = 0, u = 0, p = 0, j = 0, b = 0;
  bool active = false;
};
BPPSA_HD inline ClusterPlace cluster_place(const ClusterLaunch& l, Idx H, Idx B, Idx cluster, Idx rank, Idx thread) {
  ClusterPlace w;
  const Idx per = l.units * l.spb;  // threads a slice
  w.p = thread / per;
  w.s = (thread - w.p * per) / l.units;
  w.u = thread - w.p * per - w.s * l.units;
  w.j = rank * l.units + w.u;
  w.b = cluster * l.spb + w.s;
  w.active = w.p < l.slices && w.j < H && w.b < B;
  return w;
}

/// One thread of the cluster forward: slice p of unit u (global unit j = rank·U + u) of the
/// cluster's sample s; slice 0 (the owner) keeps what ForwardUnit keeps in registers.
template <class Cell, bool Len, class T>
struct ClusterUnit : UnitRegisters<Cell, T> {
  using R = UnitRegisters<Cell, T>;
  using R::ax_next, R::b, R::bh, R::bi, R::c, R::h_out, R::j;
  static constexpr int G = Cell::kGates;
  static constexpr Idx P = cluster_slices(G);  ///< l.slices
  bool active = false;                         ///< a thread of a unit of a sample
  Idx s = 0, u = 0, p = 0;
  T next[G] = {};
  T acc[G] = {};

  BPPSA_HD void init(const LayerArgs<T>& a, const ClusterLaunch& l, Idx cluster, Idx rank, Idx thread) {
    const ClusterPlace w = cluster_place(l, a.H, a.B, cluster, rank, thread);
    s = w.s, u = w.u, p = w.p, j = w.j, b = w.b, active = w.active;
    if (!active || p != 0) return;
    this->start(a);
    load(a, 1);
  }
  /// The input projection of step t into next (nothing past T).
  BPPSA_HD void load(const LayerArgs<T>& a, Idx t) { R::load(a, t, next); }
  /// Phase 1 of step t: this slice's sums over k of unit u's G rows with h_{t−1} (buffer
  /// (t − 1) mod 2), into acc (the owner) or the block's slice array.
  BPPSA_HD void dots(const LayerArgs<T>& a, const ClusterLaunch& l, T* sm, Idx t) {
    if (!active || padded_if<Len>(a, t, b)) return;
    const ClusterSmem L = cluster_smem(G, a.H, l.units, l.spb);
    const T* h = sm + ((t - 1) % 2 == 0 ? L.buf0 : L.buf1) + s * a.H;
    const Idx H = a.H, whole = H - H % P, GU = G * l.units;
    for (int q = 0; q < G; ++q) acc[q] = T(0);
    const T* w = sm + L.w + u;  // (k, q) at k·GU + q·U
    for (Idx k = p; k < whole; k += P) {
      const T hk = h[k];
      const T* wk = w + k * GU;
      for (int q = 0; q < G; ++q) acc[q] += wk[q * l.units] * hk;
    }
    if (p == 0)
      for (Idx k = whole; k < H; ++k) {
        const T hk = h[k];
        const T* wk = w + k * GU;
        for (int q = 0; q < G; ++q) acc[q] += wk[q * l.units] * hk;
      }
    if (p == 0) return;
    T* part = sm + L.part + (((p - 1) * l.spb + s) * l.units + u) * G;
    for (int q = 0; q < G; ++q) part[q] = acc[q];
  }
  /// Phase 2 of step t (the owner): the slices added in unit_dots' order, the cell, h_t into the
  /// record and into buffer t mod 2 of every block of the cluster (`smem(r)`: block r's memory;
  /// this block is `rank`).
  template <class Smem>
  BPPSA_HD void finish(const LayerArgs<T>& a, const ClusterLaunch& l, T* sm, Idx rank, Smem&& smem, Idx t) {
    if (!active || p != 0) return;
    const ClusterSmem L = cluster_smem(G, a.H, l.units, l.spb);
    const Idx hp_off = ((t - 1) % 2 == 0 ? L.buf0 : L.buf1) + s * a.H;
    const Idx hn_off = ((t - 1) % 2 == 0 ? L.buf1 : L.buf0) + s * a.H;
    T* hn = sm + hn_off;
    if (padded_if<Len>(a, t, b)) {  // past the sample's length (so are the later steps)
      unit_padding<Cell>(a, t, b, j, h_out, hn);
    } else {
      T ax[G];
      for (int q = 0; q < G; ++q) ax[q] = next[q];
      load(a, t + 1);  // in flight during the cluster barrier and the next step's dots
      T parts[G][P];
      for (int q = 0; q < G; ++q) {
        parts[q][0] = acc[q];
        for (Idx pp = 1; pp < P; ++pp) parts[q][pp] = sm[L.part + (((pp - 1) * l.spb + s) * l.units + u) * G + q];
      }
      T wh[G];
      sum_partials<G, static_cast<int>(P)>(parts, wh);
      unit_finish<Cell>(a, ax, bi, bh, wh, sm[hp_off + j], c, t, b, j, h_out, hn);
    }
    const T h = hn[j];
    for (Idx r = 0; r < l.ctas; ++r)
      if (r != rank) smem(r)[hn_off + j] = h;
  }
};

/// The cluster forward's program for one cluster (blocks of l.threads threads), written once for
/// its kernel and the host replay. ctx.each(f) runs f(rank, thread) for the calling thread
/// (kernel) or queues it for every thread of every block (replay); ctx.smem(rank) is block rank's
/// shared memory; ctx.block_barrier() is __syncthreads(), ctx.cluster_barrier() the cluster's
/// barrier (every thread of every block, shared-memory writes of each visible to all);
/// ctx.template per_thread<U>() what a thread keeps in registers, `units(rank, thread)`.
template <class Cell, bool Len, class T, class Ctx>
BPPSA_HD inline void forward_cluster_program(const LayerArgs<T>& a, const ClusterLaunch& l, Idx cluster, Ctx& ctx) {
  using U = ClusterUnit<Cell, Len, T>;
  constexpr int G = Cell::kGates;
  auto units = ctx.template per_thread<U>();
  ctx.each([=, &ctx](Idx rank, Idx th) {  // W_hh's rows of the block's units and h_0 of its samples
    T* sm = ctx.smem(rank);
    const ClusterSmem L = cluster_smem(G, a.H, l.units, l.spb);
    const Idx GU = G * l.units, nt = static_cast<Idx>(l.threads);
    for (Idx o = th; o < GU * a.H; o += nt) {
      const Idx k = o / GU, q = (o - k * GU) / l.units, uu = o - k * GU - q * l.units, jj = rank * l.units + uu;
      sm[L.w + o] = jj < a.H ? a.w[k * a.GH + q * a.H + jj] : T(0);
    }
    for (Idx o = th; o < l.spb * a.H; o += nt) {
      const Idx s = o / a.H, b = cluster * l.spb + s;
      sm[L.buf0 + o] = b < a.B ? a.h[b * a.H + (o - s * a.H)] : T(0);
    }
  });
  ctx.each([=, &units](Idx rank, Idx th) { units(rank, th).init(a, l, cluster, rank, th); });
  // Every block has started (its shared memory may be written by the others) and loaded.
  ctx.cluster_barrier();
  for (Idx t = 1; t <= a.steps; ++t) {
    ctx.each([=, &ctx, &units](Idx rank, Idx th) { units(rank, th).dots(a, l, ctx.smem(rank), t); });
    ctx.block_barrier();
    ctx.each([=, &ctx, &units](Idx rank, Idx th) {
      units(rank, th).finish(
          a, l, ctx.smem(rank), rank, [&ctx](Idx r) { return ctx.smem(r); }, t);
    });
    // h_t in every block, and the slices and buffer t − 1 read: the next step may overwrite them.
    ctx.cluster_barrier();
  }
}

/// One thread of the cluster BP: slice p of unit u (global unit j = rank·U + u) of the cluster's
/// sample s; the owner (slice 0) keeps g_t's rows of unit j (h row j; LSTM c row H + j).
template <class Cell, bool Len, class T>
struct ClusterBpUnit {
  static constexpr int G = Cell::kGates;
  static constexpr bool kTwo = Cell::kStateParts == 2;
  bool active = false;  ///< a thread of a unit of a sample
  Idx s = 0, u = 0, p = 0, j = 0, b = 0;
  T gh = T(0), gc = T(0);  ///< the owner's rows of g_t
  T acc = T(0);

  BPPSA_HD void init(const LayerArgs<T>& a, const ClusterLaunch& l, Idx cluster, Idx rank, Idx thread) {
    const ClusterPlace w = cluster_place(l, a.H, a.B, cluster, rank, thread);
    s = w.s, u = w.u, p = w.p, j = w.j, b = w.b, active = w.active;
    if (!active || p != 0) return;
    const T* g = a.g + (a.steps * a.B + b) * a.S;  // g_T
    gh = g[j];
    if (kTwo) gc = g[a.H + j];
  }
  /// Phase 1 of step t (the owner): unit j's pre-activation gradients from g_t into dx (and dh),
  /// and the recurrent-side ones into d buffer t mod 2 of every block (`smem(r)`: block r's
  /// memory; this block is `rank`); zeros past the sample's length.
  template <class Smem>
  BPPSA_HD void preact(const LayerArgs<T>& a, const ClusterLaunch& l, T* sm, Idx rank, Smem&& smem, Idx t) {
    if (!active || p != 0) return;
    const ClusterSmem L = cluster_bp_smem(a.GH, l.units, l.spb, l.slices);
    const Idx off = (t % 2 == 0 ? L.buf0 : L.buf1) + s * a.GH + j, col = (t - 1) * a.B + b;
    T dx[4] = {}, dh[4] = {};
    if (!padded_if<Len>(a, t, b)) preact_unit(a, t, b, j, gh, gc, dx, dh);
    store_preact(a, G, col, j, dx, dh, sm + off, a.H);
    for (Idx r = 0; r < l.ctas; ++r) {
      if (r == rank) continue;
      T* other = smem(r);
      for (int q = 0; q < G; ++q) other[off + q * a.H] = sm[off + q * a.H];
    }
  }
  /// Phase 2 of step t: this slice's sum over r ≡ p (mod slices) of W_hh[r][j]·d_t[r], into acc
  /// (the owner) or the block's slice array; nothing at a padded step (the identity).
  BPPSA_HD void dots(const LayerArgs<T>& a, const ClusterLaunch& l, T* sm, Idx t) {
    if (!active || padded_if<Len>(a, t, b)) return;
    const ClusterSmem L = cluster_bp_smem(a.GH, l.units, l.spb, l.slices);
    const T* d = sm + (t % 2 == 0 ? L.buf0 : L.buf1) + s * a.GH;
    const T* w = sm + L.w + u;  // (r, u) at r·U + u
    acc = T(0);
    for (Idx r = p; r < a.GH; r += l.slices) acc += w[r * l.units] * d[r];
    if (p > 0) sm[L.part + ((p - 1) * l.spb + s) * l.units + u] = acc;
  }
  /// Phase 3 of step t (the owner): the slices added in order, the injection and the direct terms:
  /// g_{t−1}'s rows of unit j into the record's g and the registers; at a padded step g_t's.
  BPPSA_HD void finish(const LayerArgs<T>& a, const ClusterLaunch& l, const T* sm, Idx t) {
    if (!active || p != 0) return;
    T vh = gh, vc = gc;
    if (!padded_if<Len>(a, t, b)) {
      const ClusterSmem L = cluster_bp_smem(a.GH, l.units, l.spb, l.slices);
      T sum = acc;
      for (Idx pp = 1; pp < l.slices; ++pp) sum = sum + sm[L.part + ((pp - 1) * l.spb + s) * l.units + u];
      vh = grad_h_row(a, t, b, j, sum, gh);
      if (kTwo) vc = grad_c_row(a, (t - 1) * a.B + b, j, gc, gh);
    }
    T* out = a.g + ((t - 1) * a.B + b) * a.S;
    out[j] = vh;
    if (kTwo) out[a.H + j] = vc;
    gh = vh;
    gc = vc;
  }
};

/// The cluster BP's program for one cluster (steps T … 1; g_T already in a.g's block T; a.w
/// row-major, as the block BP's), with ctx as forward_cluster_program's.
template <class Cell, bool Len, class T, class Ctx>
BPPSA_HD inline void backward_cluster_program(const LayerArgs<T>& a, const ClusterLaunch& l, Idx cluster, Ctx& ctx) {
  using U = ClusterBpUnit<Cell, Len, T>;
  auto units = ctx.template per_thread<U>();
  ctx.each([=, &ctx](Idx rank, Idx th) {  // W_hh's columns of the block's units
    T* sm = ctx.smem(rank);
    const ClusterSmem L = cluster_bp_smem(a.GH, l.units, l.spb, l.slices);
    const Idx nt = static_cast<Idx>(l.threads);
    for (Idx o = th; o < a.GH * l.units; o += nt) {
      const Idx r = o / l.units, jj = rank * l.units + (o - r * l.units);
      sm[L.w + o] = jj < a.H ? a.w[r * a.H + jj] : T(0);
    }
  });
  ctx.each([=, &units](Idx rank, Idx th) { units(rank, th).init(a, l, cluster, rank, th); });
  // Every block has started (its shared memory may be written by the others) and loaded.
  ctx.cluster_barrier();
  for (Idx t = a.steps; t >= 1; --t) {
    ctx.each([=, &ctx, &units](Idx rank, Idx th) {
      units(rank, th).preact(
          a, l, ctx.smem(rank), rank, [&ctx](Idx r) { return ctx.smem(r); }, t);
    });
    // d_t in every block. The buffer alternates: step t − 1's writes (after this barrier) never
    // meet a block still reading step t + 1's (before it).
    ctx.cluster_barrier();
    ctx.each([=, &ctx, &units](Idx rank, Idx th) { units(rank, th).dots(a, l, ctx.smem(rank), t); });
    ctx.block_barrier();
    ctx.each([=, &ctx, &units](Idx rank, Idx th) { units(rank, th).finish(a, l, ctx.smem(rank), t); });
  }
  ctx.cluster_barrier();  // the last phase ends at a barrier, as every phase does (one a launch)
}

}  // namespace bppsa::detail::gpu
