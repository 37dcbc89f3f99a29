// What the recurrent layer kernels share: the cell codes, the __host__ __device__ math helpers
// and LayerArgs, the device arrays of one layer (the CPU's LayerRecord layout, src/nn/cell.hpp).
// Each cell's own arithmetic is in its file (rnn_cell.hpp, gru_cell.hpp, lstm_cell.hpp), for the
// layer kernels (recurrent_math.hpp) and the fused scan (a Step of scan/cuda/fused/step.hpp) alike.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/cuda/grid.hpp"
#include "core/cuda/hd.hpp"
#include "core/cuda/hd_math.hpp"
#include "scan/cuda/fused/step.hpp"

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
  /// Per-sample lengths (B, non-increasing, each 1 … T); null = every sample runs all T steps.
  /// Step t of sample b is padding when t > len[b]: the forward writes zeros there, the
  /// backward passes its state gradient through unchanged, without injection (docs/gpu.md).
  const Idx* len = nullptr;
};

/// Whether step t of sample b is padding (past the sample's length).
template <class T>
BPPSA_HD inline bool padded(const LayerArgs<T>& a, Idx t, Idx b) {
  return a.len != nullptr && t > a.len[b];
}
/// padded() in the persistent kernels, instantiated twice (Len = a.len != nullptr) so that a run
/// without lengths compiles as it did before lengths existed: never padded when Len is false.
template <bool Len, class T>
BPPSA_HD_FORCEINLINE bool padded_if(const LayerArgs<T>& a, Idx t, Idx b) {
  if constexpr (Len) return t > a.len[b];
  (void)a, (void)t, (void)b;
  return false;
}

/// What one unit's forward step reads of the record besides W_hh h_{t−1} (gate q at [q]): the
/// input projection plus b_ih (xb), b_hh (bh) and, LSTM, c_{t−1} (cp; the cell leaves c_t there).
template <class T>
struct UnitInput {
  T xb[4] = {}, bh[4] = {};
  T cp = T(0);
};

/// Where a layer's record sits in the fused scan's record arrays (FusedArgs::record): h, LSTM's
/// c, the gates and aux, as LayerArgs holds them.
enum LayerRecordSlot : int { kRecordH = 0, kRecordC = 1, kRecordGates = 2, kRecordAux = 3 };

}  // namespace bppsa::detail::gpu
