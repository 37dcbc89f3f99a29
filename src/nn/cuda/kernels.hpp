// The launches of the recurrent model's kernels (recurrent_kernels.cu, head_kernels.cu): thin
// __global__ loops over the __host__ __device__ functions of recurrent_math.hpp and head_math.hpp. Every launch is
// checked (BPPSA_CUDA_CHECK_LAUNCH) and runs on the given stream; pointers are device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "nn/cuda/cluster_recurrence.hpp"
#include "nn/cuda/head_math.hpp"
#include "nn/cuda/recurrent_math.hpp"

namespace bppsa::detail::gpu {

/// Threads of the persistent kernels' blocks at most (their __launch_bounds__).
inline constexpr int kPersistentThreads = 512;

/// Enables dynamic shared memory beyond 48 KiB for the persistent and cluster kernels of T (once
/// per process; `bytes` is the device's opt-in limit).
template <class T>
void allow_persistent_smem(int bytes);

// --- recurrent layers (recurrent_kernels.cu) ---------------------------------------------------
/// out (rows × cols, column-major) = in (rows × cols, row-major).
template <class T>
void launch_transpose(const T* in, Idx rows, Idx cols, T* out, cudaStream_t s);
/// The forward recurrence of one layer over all steps: persistent_blocks(B, spb) blocks of
/// `threads`, `smem` bytes of dynamic shared memory (forward_smem(a).total values).
template <class T>
void launch_forward(const LayerArgs<T>& a, unsigned threads, std::size_t smem, cudaStream_t s);
/// The warp-per-sample forward of one layer (a.H ≤ warp_forward_max_hidden, a.spb samples a
/// block: warp_forward_spb): persistent_blocks(B, spb) blocks of 32·spb threads.
template <class T>
void launch_forward_warp(const LayerArgs<T>& a, cudaStream_t s);
/// The cluster forward (backward false; a.w column-major as launch_forward's) or BP (a.w row-major
/// as launch_backward_bp's; g_T already in a.g) of one layer (cluster_recurrence.hpp):
/// cluster_count(B, l.spb) clusters of l.ctas blocks, l planned by cluster_launch for that direction.
template <class T>
void launch_cluster(const LayerArgs<T>& a, const ClusterLaunch& l, bool backward, cudaStream_t s);
/// How many clusters of launch l the cluster kernel of `cell` and direction can hold at once on the
/// current device (cudaOccupancyMaxActiveClusters; 0: it cannot launch them).
template <class T>
int cluster_capacity(std::int32_t cell, const ClusterLaunch& l, bool backward);
/// The warp-per-sample BP of one layer (as launch_forward_warp; g_T already in a.g).
template <class T>
void launch_backward_warp(const LayerArgs<T>& a, cudaStream_t s);
/// BP through time of one layer (g_T already in a.g): every g_t, dx (and dh).
template <class T>
void launch_backward_bp(const LayerArgs<T>& a, unsigned threads, std::size_t smem, cudaStream_t s);
/// g_T (S × B, at g_last) = last (H × B, may be null) on the h rows + final_grad (S × B, may be
/// null); with `len`, each sample's column of `last` at its length (final_state_grad).
template <class T>
void launch_final_grad(Idx H, Idx S, Idx B, Idx steps, const T* last, const Idx* len, const T* final_grad, T* g_last,
                       cudaStream_t s);
/// Pre-activation gradients of every step from a.g (the scan path).
template <class T>
void launch_preact(const LayerArgs<T>& a, cudaStream_t s);
/// J_t^T of every step and sample into element[t − 1] (device table of T device pointers).
template <class T>
void launch_jacobians(const LayerArgs<T>& a, T* const* element, cudaStream_t s);
/// dst[e][i] = src[e·per + i] for e < count, i < per (table of device pointers).
template <class T>
void launch_scatter_blocks(T* const* dst, const T* src, Idx count, Idx per, cudaStream_t s);
/// dst[e·per + i] = src[e][i].
template <class T>
void launch_gather_blocks(const T* const* src, T* dst, Idx count, Idx per, cudaStream_t s);
/// The affine parts of the generic scan: inj[k − 1] (S × B) = the h rows of above's block k − 1,
/// zeros below (LSTM's c rows), for k = 1..count.
template <class T>
void launch_injections(T* const* inj, const T* above, Idx H, Idx S, Idx B, Idx count, cudaStream_t s);
/// With lengths: the generic scan's affine parts inj[k − 1] (S × B, k = 1 … steps − 1) and its
/// g_T (`top`, S × B) from above (H × TB, may be null), g_last and len (injection_by_length).
template <class T>
void launch_injections_by_length(T* const* inj, T* top, const T* above, const T* g_last, const Idx* len, Idx H, Idx S,
                                 Idx B, Idx steps, cudaStream_t s);
/// Zeros in the columns of padded steps of x (I × steps·B, time-major).
template <class T>
void launch_zero_padding(T* x, Idx I, Idx B, Idx steps, const Idx* len, cudaStream_t s);
/// out (column b at b·pitch, H values) = h (H × (steps+1)B) at sample b's last step (len[b], or
/// steps when len is null).
template <class T>
void launch_final_state(const T* h, const Idx* len, Idx H, Idx B, Idx steps, T* out, Idx pitch, cudaStream_t s);
/// x (I × steps·batch, type T) and labels (batch) gathered from a [samples][steps][I] float
/// array and its labels: samples order[first + b] (first + b when order is null).
template <class T>
void launch_gather(const float* data, const std::int64_t* data_labels, Idx I, Idx steps, Idx batch,
                   const std::int64_t* order, Idx first, T* x, std::int64_t* labels, cudaStream_t s);
/// Sets `flag` in the status when a value of x[0, n) is not finite.
template <class T>
void launch_check_finite(const T* x, Idx n, std::int32_t flag, DeviceStatus* status, cudaStream_t s);
/// x[0, n) = value.
template <class T>
void launch_fill(T* x, Idx n, T value, cudaStream_t s);

// --- head and loss (head_kernels.cu) -------------------------------------------------------------
/// Per column j < N: logits += bias, col_loss[j] = its loss share, dlogits (null: not wanted).
template <class T>
void launch_loss_columns(bool mse, Idx C, Idx N, Idx B, T* logits, const T* bias, const std::int64_t* labels,
                         T* dlogits, double* col_loss, cudaStream_t s);
/// One block: the batch's loss from col_loss (mean over N columns, MSE also over C), the
/// last-step predictions (written when predictions is not null) and their correct count; sets
/// status.loss, adds to loss_sum, correct and samples; kLossNotFinite when the loss is not finite.
template <class T>
void launch_loss_finish(bool mse, Idx C, Idx N, Idx B, const double* col_loss, const T* logits,
                        const std::int64_t* labels, std::int64_t* predictions, DeviceStatus* status, cudaStream_t s);

/// With lengths: the head's input (H × N) from the output columns cols (H × T·B) and each chosen
/// column's label (col_labels, N) from the batch's labels (B).
template <class T>
void launch_head_columns(const T* out, const Idx* cols, Idx H, Idx N, const std::int64_t* labels, Idx B, T* head_in,
                         std::int64_t* col_labels, cudaStream_t s);
/// full (full_values, H × T·B) = zeros with the head input's gradient d (H × N) at columns cols.
template <class T>
void launch_scatter_head_grad(const T* d, const Idx* cols, Idx H, Idx N, T* full, Idx full_values, cudaStream_t s);

}  // namespace bppsa::detail::gpu
