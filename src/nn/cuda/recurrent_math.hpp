// Per-thread arithmetic and indexing of the recurrent layer kernels (forward recurrence, BP
// through time, pre-activation gradients, Jacobian generation), as __host__ __device__
// functions over device arrays laid out exactly as the CPU's LayerRecord (src/nn/cell.hpp):
// column-major, time-major blocks of B columns. recurrent_kernels.cu is loops over these; the
// g++ tests (tests/test_cuda_recurrent_host.cpp) replay them phase by phase over every
// (block, thread) against the CPU engine. No Eigen, no CUDA headers.
//
// The persistent kernels (forward, BP) give each block a fixed group of samples for all T
// steps: samples are independent in the recurrence, so blocks never wait for each other and
// the only barriers are __syncthreads() between the phases of a step (two per step). W_hh sits
// in shared memory when it fits, otherwise it is read from global memory (L2). Every formula
// follows the CPU cell's association order (src/nn/cpu/<cell>_cell.cpp), so the two engines
// differ only by fused multiply-adds and the order inside dot products.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/cuda/grid.hpp"
#include "core/cuda/hd.hpp"

namespace bppsa::detail::gpu {

/// The cell of a layer as the kernels see it (the plain RNN's two activations apart).
enum CellCode : std::int32_t { kRnnTanh = 0, kRnnRelu = 1, kGru = 2, kLstm = 3 };

BPPSA_HD inline Idx cell_gates(std::int32_t cell) { return cell == kGru ? 3 : cell == kLstm ? 4 : 1; }
BPPSA_HD inline Idx cell_state(std::int32_t cell, Idx hidden) { return cell == kLstm ? 2 * hidden : hidden; }

BPPSA_HD inline float hd_exp(float v) { return expf(v); }
BPPSA_HD inline double hd_exp(double v) { return exp(v); }
BPPSA_HD inline float hd_tanh(float v) { return tanhf(v); }
BPPSA_HD inline double hd_tanh(double v) { return tanh(v); }
BPPSA_HD inline float hd_sqrt(float v) { return sqrtf(v); }
BPPSA_HD inline double hd_sqrt(double v) { return sqrt(v); }
/// As the CPU's detail::sigmoid: 1 / (1 + e^−v).
template <class T>
BPPSA_HD inline T hd_sigmoid(T v) {
  return T(1) / (T(1) + hd_exp(-v));
}
/// False for NaN and ±Inf (v − v is NaN for both), without <cmath>'s host-only overloads.
template <class T>
BPPSA_HD inline bool hd_finite(T v) {
  return v - v == T(0);
}

/// Everything a layer's kernels read and write. Device pointers; the record's layout is the
/// LayerRecord's: h, c: H × (T+1)B (block 0 = s_0); gates: GH × TB after their nonlinearity;
/// aux: GRU's M = W_hn h + b_hn, LSTM's tanh(c_t) (H × TB). Column t·B + b of a (T+1)B array is
/// step t of sample b; column (t−1)·B + b of a TB array belongs to step t.
template <class T>
struct LayerArgs {
  std::int32_t cell = kRnnTanh;
  Idx H = 0;              ///< hidden size
  Idx GH = 0;             ///< gates × H
  Idx S = 0;              ///< state size (2H for LSTM)
  Idx B = 0;              ///< batch
  Idx steps = 0;          ///< T
  Idx spb = 1;            ///< samples per block of the persistent kernels
  bool w_shared = false;  ///< W_hh copied into shared memory (else read from global memory)
  /// W_hh: the forward reads it column-major (GH × H: (r, k) at k·GH + r, a transposed copy),
  /// the backward row-major (PyTorch's layout: (r, k) at r·H + k).
  const T* w = nullptr;
  const T* b_ih = nullptr;
  const T* b_hh = nullptr;
  const T* ax = nullptr;  ///< W_ih x for every step, GH × TB, without b_ih
  T* h = nullptr;
  T* c = nullptr;
  T* gates = nullptr;
  T* aux = nullptr;
  T* g = nullptr;            ///< backward: state gradients S × (T+1)B (block t = ∂ℓ/∂s_t)
  const T* above = nullptr;  ///< backward: injections H × TB (block t−1: gradient on h_t); null = none
  T* dx = nullptr;           ///< GH × TB pre-activation gradients on the input side (W_ih, b_ih)
  T* dh = nullptr;           ///< GRU: on the recurrent side (W_hh, b_hh); others use dx
};

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
/// shared memory)][state buffer 0][state buffer 1][gate vector]. Forward: the buffers hold
/// h_{t−1} and h_t (H × spb), the vector W_hh h_{t−1} (GH × spb). Backward: g_t and g_{t−1}
/// (S × spb), the vector the recurrent-side pre-activation gradients (GH × spb).
struct SmemLayout {
  Idx w = 0, buf0 = 0, buf1 = 0, vec = 0, total = 0;
};
BPPSA_HD inline SmemLayout smem_layout(Idx GH, Idx H, Idx rows, Idx spb, bool w_shared) {
  SmemLayout s;
  s.buf0 = w_shared ? GH * H : 0;
  s.buf1 = s.buf0 + rows * spb;
  s.vec = s.buf1 + rows * spb;
  s.total = s.vec + GH * spb;
  return s;
}
/// The launch for GH gate rows, hidden H, `rows` state rows per sample (forward H, backward
/// S), `batch` samples, on a GPU with `sms` multiprocessors and `smem_limit` bytes of shared
/// memory per block. Samples per block: enough blocks for every multiprocessor (spb =
/// ⌈batch / sms⌉); W_hh goes on chip when it fits, with fewer samples per block if need be,
/// otherwise it is read from global memory (L2). Threads: one per gate row of the block's
/// samples, rounded to warps, at most max_threads (the loops stride beyond).
inline PersistentLaunch persistent_launch(Idx GH, Idx H, Idx rows, Idx batch, std::size_t scalar, Idx sms,
                                          std::size_t smem_limit, Idx max_threads) {
  auto bytes = [&](Idx spb, bool shared) {
    return static_cast<std::size_t>(smem_layout(GH, H, rows, spb, shared).total) * scalar;
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
  return smem_layout(a.GH, a.H, a.H, a.spb, a.w_shared);
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
// Forward: load, then per step t = 1..T a mat-vec phase and a cell phase, a barrier after each

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

/// Phase 1 of step t: vec = W_hh h_{t−1} (GH × ns). Thread o-stride over (row, sample), row
/// fastest: consecutive threads read consecutive values of the column-major W.
template <class T>
BPPSA_HD inline void forward_matvec(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads, Idx t) {
  const SmemLayout L = forward_smem(a);
  const T* w = a.w_shared ? sm + L.w : a.w;
  const T* hp = sm + state_buffer(L, t - 1, 0);
  const Idx ns = block_samples(block, a.spb, a.B);
  for (Idx o = thread; o < a.GH * ns; o += nthreads) {
    const Idx s = o / a.GH, r = o - s * a.GH;
    T acc = T(0);
    for (Idx k = 0; k < a.H; ++k) acc += w[k * a.GH + r] * hp[s * a.H + k];
    sm[L.vec + s * a.GH + r] = acc;
  }
}

/// The cell of unit j of sample b at step t from W_hh h_{t−1} (wh, GH values of this sample),
/// writing the record (h_t, gates, aux, c_t) and returning h_t[j]. hp = h_{t−1}[j].
template <class T>
BPPSA_HD inline T cell_unit(const LayerArgs<T>& a, const T* wh, T hp, Idx t, Idx b, Idx j) {
  const Idx H = a.H, col = (t - 1) * a.B + b;
  const T* ax = a.ax + col * a.GH;
  T h;
  switch (a.cell) {
    case kGru: {
      // CPU: ah = W_hh h + b_hh; r = σ(ax_r + ah_r) with ax = W_ih x + b_ih; …
      const T ahr = wh[j] + a.b_hh[j], ahz = wh[H + j] + a.b_hh[H + j], ahn = wh[2 * H + j] + a.b_hh[2 * H + j];
      const T r = hd_sigmoid((ax[j] + a.b_ih[j]) + ahr);
      const T z = hd_sigmoid((ax[H + j] + a.b_ih[H + j]) + ahz);
      const T n = hd_tanh((ax[2 * H + j] + a.b_ih[2 * H + j]) + r * ahn);
      h = (T(1) - z) * n + z * hp;
      T* g = a.gates + col * a.GH;
      g[j] = r;
      g[H + j] = z;
      g[2 * H + j] = n;
      a.aux[col * H + j] = ahn;
      break;
    }
    case kLstm: {
      // CPU: a = W_hh h; a += ax; a += b_hh.
      T v[4];
      for (Idx q = 0; q < 4; ++q) v[q] = (wh[q * H + j] + (ax[q * H + j] + a.b_ih[q * H + j])) + a.b_hh[q * H + j];
      const T i = hd_sigmoid(v[0]), f = hd_sigmoid(v[1]), gg = hd_tanh(v[2]), o = hd_sigmoid(v[3]);
      const T cp = a.c[((t - 1) * a.B + b) * H + j];
      const T c = f * cp + i * gg;
      const T tc = hd_tanh(c);
      h = o * tc;
      T* g = a.gates + col * a.GH;
      g[j] = i;
      g[H + j] = f;
      g[2 * H + j] = gg;
      g[3 * H + j] = o;
      a.c[(t * a.B + b) * H + j] = c;
      a.aux[col * H + j] = tc;
      break;
    }
    default: {
      // CPU: h = W_hh h_{t−1}; h += ax; h += b_hh; act.
      const T pre = (wh[j] + (ax[j] + a.b_ih[j])) + a.b_hh[j];
      h = a.cell == kRnnRelu ? (pre > T(0) ? pre : T(0)) : hd_tanh(pre);
      break;
    }
  }
  a.h[(t * a.B + b) * H + j] = h;
  return h;
}

/// Phase 2 of step t: the cell for every (unit, sample) of the block; h_t into the record and
/// into the other state buffer for the next step.
template <class T>
BPPSA_HD inline void forward_cell(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads, Idx t) {
  const SmemLayout L = forward_smem(a);
  const T* hp = sm + state_buffer(L, t - 1, 0);
  T* hn = sm + state_buffer(L, t - 1, 1);
  const Idx s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B);
  for (Idx o = thread; o < a.H * ns; o += nthreads) {
    const Idx s = o / a.H, j = o - s * a.H;
    hn[s * a.H + j] = cell_unit(a, sm + L.vec + s * a.GH, hp[s * a.H + j], t, s0 + s, j);
  }
}

// ---------------------------------------------------------------------------------------------
// Pre-activation gradients (shared by BP and the scan path)

/// Pre-activation gradients of unit j of sample b at step t from the state gradient on h_t[j]
/// (gh) and, LSTM, on c_t[j] (gc): dx[q] for gate q (input side), dh[q] (recurrent side; GRU
/// only differs, in its n gate). Formulas and association as src/nn/cpu/<cell>_cell.cpp.
template <class T>
BPPSA_HD inline void preact_unit(const LayerArgs<T>& a, Idx t, Idx b, Idx j, T gh, T gc, T* dx, T* dh) {
  const Idx H = a.H, col = (t - 1) * a.B + b;
  const T* g = a.gates + col * a.GH;
  switch (a.cell) {
    case kGru: {
      const T r = g[j], z = g[H + j], n = g[2 * H + j];
      const T m = a.aux[col * H + j];
      const T hp = a.h[((t - 1) * a.B + b) * H + j];
      const T dn = (T(1) - n * n) * (T(1) - z) * gh;
      dx[2] = dn;
      dx[0] = r * (T(1) - r) * m * dn;
      dx[1] = z * (T(1) - z) * (hp - n) * gh;
      dh[0] = dx[0];
      dh[1] = dx[1];
      dh[2] = r * dn;
      break;
    }
    case kLstm: {
      const T i = g[j], f = g[H + j], gg = g[2 * H + j], o = g[3 * H + j];
      const T tc = a.aux[col * H + j];
      const T cp = a.c[((t - 1) * a.B + b) * H + j];
      const T dc = gc + o * (T(1) - tc * tc) * gh;
      dx[0] = gg * i * (T(1) - i) * dc;
      dx[2] = i * (T(1) - gg * gg) * dc;
      dx[3] = tc * o * (T(1) - o) * gh;
      dx[1] = dc * (cp * f * (T(1) - f));
      break;
    }
    default: {
      const T h = a.h[(t * a.B + b) * H + j];
      dx[0] = a.cell == kRnnRelu ? (h > T(0) ? T(1) : T(0)) * gh : (T(1) - h * h) * gh;
      break;
    }
  }
}

/// The pre-activation gradients of unit j, sample b, step t written to dx (and dh), reading the
/// state gradient g_t from g (S × (T+1)B): one work item of the scan path's flat launch
/// (item = ((t−1)·B + b)·H + j).
template <class T>
BPPSA_HD inline void preact_item(const LayerArgs<T>& a, Idx item) {
  const Idx j = item % a.H, col = item / a.H, t = col / a.B + 1, b = col % a.B;
  const T* gt = a.g + (t * a.B + b) * a.S;
  T dx[4], dh[3];
  preact_unit(a, t, b, j, gt[j], a.cell == kLstm ? gt[a.H + j] : T(0), dx, dh);
  const Idx G = cell_gates(a.cell);
  for (Idx q = 0; q < G; ++q) a.dx[col * a.GH + q * a.H + j] = dx[q];
  if (a.cell == kGru)
    for (Idx q = 0; q < G; ++q) a.dh[col * a.GH + q * a.H + j] = dh[q];
}

// ---------------------------------------------------------------------------------------------
// BP through time: load, then per step t = T..1 a pre-activation phase and a transposed
// mat-vec phase, a barrier after each

/// g_T of sample b, row k (S × B block T of g): the gradient on h_T from the head or the layer
/// above (`last`, H × B, may be null) plus the extra final-state gradient (`final_grad`, S × B,
/// may be null); as the CPU: top rows = last, then += final.
template <class T>
BPPSA_HD inline T final_state_grad(Idx H, Idx S, const T* last, const T* final_grad, Idx b, Idx k) {
  T v = (last != nullptr && k < H) ? last[b * H + k] : T(0);
  if (final_grad != nullptr) v += final_grad[b * S + k];
  return v;
}

/// Load phase: W_hh (row-major) into shared memory when w_shared, g_T of the block's samples.
template <class T>
BPPSA_HD inline void backward_load(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads) {
  load_phase(a, backward_smem(a), a.g + a.steps * a.B * a.S, a.S, sm, block, thread, nthreads);
}

/// Phase 1 of step t: the pre-activation gradients of step t from g_t, into dx (and dh) and,
/// the recurrent-side ones, into the shared vector for phase 2.
template <class T>
BPPSA_HD inline void backward_preact(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads, Idx t) {
  const SmemLayout L = backward_smem(a);
  const T* gc = sm + state_buffer(L, a.steps - t, 0);
  const Idx s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B);
  const Idx G = cell_gates(a.cell);
  for (Idx o = thread; o < a.H * ns; o += nthreads) {
    const Idx s = o / a.H, j = o - s * a.H, b = s0 + s, col = (t - 1) * a.B + b;
    T dx[4], dh[3];
    preact_unit(a, t, b, j, gc[s * a.S + j], a.cell == kLstm ? gc[s * a.S + a.H + j] : T(0), dx, dh);
    for (Idx q = 0; q < G; ++q) {
      a.dx[col * a.GH + q * a.H + j] = dx[q];
      if (a.cell == kGru) a.dh[col * a.GH + q * a.H + j] = dh[q];
      sm[L.vec + s * a.GH + q * a.H + j] = a.cell == kGru ? dh[q] : dx[q];
    }
  }
}

/// Phase 2 of step t: g_{t−1} = (injection) + W_hh^T · (recurrent-side gradients) + the direct
/// terms (GRU: z ⊙ g_t; LSTM c rows: f ⊙ δc), into the record's g and the other buffer.
/// Threads stride over (row k, sample), k fastest: consecutive threads read consecutive values
/// of the row-major W_hh.
template <class T>
BPPSA_HD inline void backward_transpose(const LayerArgs<T>& a, T* sm, Idx block, Idx thread, Idx nthreads, Idx t) {
  const SmemLayout L = backward_smem(a);
  const T* w = a.w_shared ? sm + L.w : a.w;
  const T* gc = sm + state_buffer(L, a.steps - t, 0);
  T* gn = sm + state_buffer(L, a.steps - t, 1);
  const Idx s0 = block_first(block, a.spb), ns = block_samples(block, a.spb, a.B);
  const Idx H = a.H;
  for (Idx o = thread; o < a.S * ns; o += nthreads) {
    const Idx s = o / a.S, k = o - s * a.S, b = s0 + s, col = (t - 1) * a.B + b;
    const T* d = sm + L.vec + s * a.GH;
    T v;
    if (k < H) {
      T acc = T(0);
      for (Idx r = 0; r < a.GH; ++r) acc += w[r * H + k] * d[r];
      v = (a.above != nullptr && t >= 2) ? a.above[((t - 2) * a.B + b) * H + k] : T(0);
      v = v + acc;
      if (a.cell == kGru) v += a.gates[col * a.GH + H + k] * gc[s * a.S + k];
    } else {  // LSTM c rows: (∂c'/∂c)^T δc = f ⊙ (g_c + o(1 − tanh²c') g_h)
      const Idx j = k - H;
      const T f = a.gates[col * a.GH + H + j], o = a.gates[col * a.GH + 3 * H + j];
      const T tc = a.aux[col * H + j];
      v = f * (gc[s * a.S + k] + o * (T(1) - tc * tc) * gc[s * a.S + j]);
    }
    a.g[((t - 1) * a.B + b) * a.S + k] = v;
    gn[s * a.S + k] = v;
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
  const Idx H = a.H, col = (t - 1) * a.B + b;
  const T* g = a.gates + col * a.GH;
  const T* w = a.w;
  switch (a.cell) {
    case kGru: {
      const Idx i = item % H, j = item / H;  // row i (input h_{t−1}), column j (output h_t)
      const T r = g[j], z = g[H + j], n = g[2 * H + j], m = a.aux[col * H + j];
      const T hp = a.h[((t - 1) * a.B + b) * H + j];
      const T beta = r * (T(1) - n * n) * (T(1) - z);
      const T alpha = (T(1) - r) * m * beta;
      const T gamma = z * (T(1) - z) * (hp - n);
      T v = w[j * H + i] * alpha;
      v += w[(H + j) * H + i] * gamma;
      v += w[(2 * H + j) * H + i] * beta;
      if (i == j) v += z;
      return v;
    }
    case kLstm: {
      const Idx S = 2 * H, i = item % S, jc = item / S, j = jc < H ? jc : jc - H;
      const T ig = g[j], f = g[H + j], gg = g[2 * H + j], o = g[3 * H + j];
      const T tc = a.aux[col * H + j], cp = a.c[((t - 1) * a.B + b) * H + j];
      const T kappa = o * (T(1) - tc * tc);
      if (i >= H) {  // bottom blocks: D(κ f) left, D(f) right
        if (i - H != j) return T(0);
        return jc < H ? kappa * f : f;
      }
      const T ai = gg * ig * (T(1) - ig), af = cp * f * (T(1) - f), ag = ig * (T(1) - gg * gg);
      T tr = w[j * H + i] * ai;
      tr += w[(H + j) * H + i] * af;
      tr += w[(2 * H + j) * H + i] * ag;
      if (jc >= H) return tr;  // (∂c'/∂h)^T
      const T ao = tc * o * (T(1) - o);
      T tl = tr * kappa;
      tl += w[(3 * H + j) * H + i] * ao;
      return tl;  // (∂h'/∂h)^T
    }
    default: {
      const T h = a.h[(t * a.B + b) * H + item];
      return a.cell == kRnnRelu ? (h > T(0) ? T(1) : T(0)) : T(1) - h * h;
    }
  }
}

/// Row `row` of sample b of the generic scan's affine part e_k (1 ≤ k ≤ T − 1): the gradient
/// on h_k from above (block k − 1 of the H × TB `above`), zeros on LSTM's c rows.
template <class T>
BPPSA_HD inline T injection_value(const T* above, Idx H, Idx B, Idx k, Idx b, Idx row) {
  return row < H ? above[((k - 1) * B + b) * H + row] : T(0);
}

/// The column-major copy of a row-major rows × cols matrix: value `item` of the output.
BPPSA_HD inline Idx transpose_source(Idx rows, Idx cols, Idx item) {
  const Idx k = item / rows, r = item - k * rows;  // output (r, k) at k·rows + r
  (void)cols;
  return r * cols + k;
}

/// Gathering a batch: value `item` of x (I × steps·batch, column t·batch + b) comes from sample
/// order[first + b] (first + b when order is null) of a [samples][steps][I] float array.
BPPSA_HD inline Idx gather_source(Idx I, Idx steps, Idx batch, const std::int64_t* order, Idx first, Idx item) {
  const Idx i = item % I, col = item / I, t = col / batch, b = col - t * batch;
  const Idx sample = order != nullptr ? order[first + b] : first + b;
  return (sample * steps + t) * I + i;
}

}  // namespace bppsa::detail::gpu
