// The forward recurrence for a W_hh too large for one multiprocessor's shared memory (H 128–256
// and up, by cell): a thread-block cluster per group of samples, W_hh's rows split over the
// cluster's blocks in their shared memory, h_t exchanged through distributed shared memory, one
// block barrier and one cluster barrier a step. Written once as a program over a context (the
// kernel's, in recurrent_kernels.cu; the host replay's, tests/nn/cuda/test_recurrent_host.cpp).
// No CUDA headers.
//
// Block r of a cluster of N owns the units j = r·U … r·U + U − 1 (U = ⌈H / N⌉) of the cluster's
// spb samples: their G gate rows of W_hh (G·U × H) sit in its shared memory, and a full copy of
// h_{t−1} of every sample (two buffers). A unit's G dot products are split over P threads, slice p
// summing k ≡ p (mod P) as unit_dots does (the tail k ≥ H − H mod P into slice 0), and added
// pairwise by the unit's owner (slice 0) in unit_dots' order: the same bits as the block kernel's
// ForwardUnit. Per step: slices → block barrier → the owner evaluates the cell, writes h_t to the
// record and into the next buffer of every block of the cluster → cluster barrier.
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

/// How the cluster forward is launched: blocks per cluster, units per block, samples per cluster,
/// threads per block, dynamic shared memory; fits false where no cluster size holds W_hh.
struct ClusterLaunch {
  Idx ctas = 0, units = 0, spb = 1;
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
/// Threads of a block: P per (unit, sample), rounded to warps.
BPPSA_HD inline Idx cluster_threads(Idx G, Idx units, Idx spb) {
  return (cluster_slices(G) * units * spb + 31) / 32 * 32;
}

/// The launch for G gates, hidden H, `batch` samples, on `sms` multiprocessors with `smem_limit`
/// bytes of shared memory a block and clusters of at most `max_ctas` blocks: the fewest blocks a
/// cluster (2, 4, 8, …; `min_ctas` and up) whose share of W_hh fits, then samples per cluster so
/// that the clusters fill the multiprocessors (spb = ⌈batch / (sms / ctas)⌉), fewer where their
/// buffers or threads do not fit.
inline ClusterLaunch cluster_launch(Idx G, Idx H, Idx batch, std::size_t scalar, Idx sms, std::size_t smem_limit,
                                    Idx max_ctas, Idx min_ctas = 2) {
  ClusterLaunch c;
  auto fits = [&](Idx ctas, Idx spb) {
    const Idx u = (H + ctas - 1) / ctas;
    return static_cast<std::size_t>(cluster_smem(G, H, u, spb).total) * scalar <= smem_limit &&
           cluster_threads(G, u, spb) <= kClusterMaxThreads;
  };
  for (Idx ctas = min_ctas < 1 ? 1 : min_ctas; ctas <= max_ctas && !c.fits; ctas *= 2) {
    if (!fits(ctas, 1)) continue;
    const Idx clusters = sms / ctas > 0 ? sms / ctas : 1;
    Idx spb = (batch + clusters - 1) / clusters;
    if (spb < 1) spb = 1;
    while (spb > 1 && !fits(ctas, spb)) --spb;
    c.ctas = ctas;
    c.spb = spb;
    c.fits = true;
  }
  if (!c.fits) return c;
  c.units = (H + c.ctas - 1) / c.ctas;
  c.threads = static_cast<unsigned>(cluster_threads(G, c.units, c.spb));
  c.smem_bytes = static_cast<std::size_t>(cluster_smem(G, H, c.units, c.spb).total) * scalar;
  return c;
}
/// Clusters of a launch.
BPPSA_HD inline Idx cluster_count(Idx batch, Idx spb) { return (batch + spb - 1) / spb; }

/// One thread of the cluster forward: slice p of unit u (global unit j = rank·U + u) of the
/// cluster's sample s; slice 0 (the owner) keeps what ForwardUnit keeps in registers.
template <class Cell, bool Len, class T>
struct ClusterUnit : UnitRegisters<Cell, T> {
  using R = UnitRegisters<Cell, T>;
  using R::ax_next, R::b, R::bh, R::bi, R::c, R::h_out, R::j;
  static constexpr int G = Cell::kGates;
  static constexpr Idx P = cluster_slices(G);
  bool active = false;  ///< a thread of a unit of a sample
  Idx s = 0, u = 0, p = 0;
  T next[G] = {};
  T acc[G] = {};

  BPPSA_HD void init(const LayerArgs<T>& a, const ClusterLaunch& l, Idx cluster, Idx rank, Idx thread) {
    const Idx per = l.units * l.spb;  // threads a slice
    p = thread / per;
    s = (thread - p * per) / l.units;
    u = thread - p * per - s * l.units;
    j = rank * l.units + u;
    b = cluster * l.spb + s;
    active = p < P && j < a.H && b < a.B;
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

}  // namespace bppsa::detail::gpu
