// The recurrent layer kernels: persistent forward and BP-through-time kernels (one block per
// group of samples for all T steps, one __syncthreads() per forward step and two per BP step,
// W_hh on chip when it fits),
// cluster forward and BP kernels for a W_hh larger than one block's shared memory (cluster_recurrence.hpp),
// and flat grid-stride kernels (pre-activation gradients, Jacobian generation, copies). Bodies
// are the __host__ __device__ phases of recurrent_math.hpp, tested on the host.
#include <cooperative_groups.h>

#include <algorithm>

#include "core/cuda/check.hpp"
#include "nn/cuda/cluster_recurrence.hpp"
#include "nn/cuda/kernels.hpp"

namespace bppsa::detail::gpu {
namespace {

/// A persistent kernel's dynamic shared memory, as T values.
template <class T>
__device__ T* persistent_smem() {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  return reinterpret_cast<T*>(smem_raw);
}

/// The persistent programs' context in the kernel (forward_program, backward_program): this
/// thread, __syncthreads(), registers.
struct ThisThread {
  Idx thread;
  template <class U>
  struct Local {
    U u;
    __device__ U& operator()(Idx) { return u; }
  };
  template <class F>
  __device__ void each(F&& f) {
    f(thread);
  }
  __device__ void barrier() { __syncthreads(); }
  __device__ void warp_barrier() { __syncwarp(); }
  template <class U>
  __device__ Local<U> per_thread() {
    return {};
  }
};

// Clusters exist from sm_90: below it the cluster kernels are a trap, never launched
// (cluster_capacity is 0 there).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define BPPSA_HAS_CLUSTERS 1
#else
#define BPPSA_HAS_CLUSTERS 0
#endif
#if BPPSA_HAS_CLUSTERS
/// The cluster programs' context in the kernel (forward_cluster_program, backward_cluster_program): this thread of
/// block `rank` of its cluster, the blocks' shared memories through distributed shared memory.
template <class T>
struct ThisClusterThread {
  cooperative_groups::cluster_group cluster;
  T* sm;
  Idx thread, rank;
  template <class U>
  struct Local {
    U u;
    __device__ U& operator()(Idx, Idx) { return u; }
  };
  template <class F>
  __device__ void each(F&& f) {
    f(rank, thread);
  }
  __device__ T* smem(Idx r) { return r == rank ? sm : cluster.map_shared_rank(sm, static_cast<unsigned>(r)); }
  __device__ void block_barrier() { __syncthreads(); }
  __device__ void cluster_barrier() { cluster.sync(); }
  template <class U>
  __device__ Local<U> per_thread() {
    return {};
  }
};
#endif

/// The cluster forward (forward_cluster_program) and BP (backward_cluster_program), one kernel per
/// cell and direction; cluster c is blocks c·l.ctas … c·l.ctas + l.ctas − 1 (launched with that
/// cluster dimension).
template <class T, bool Len, class Cell, bool Backward>
__global__ void __launch_bounds__(kClusterMaxThreads) cluster_kernel(LayerArgs<T> a, ClusterLaunch l) {
#if BPPSA_HAS_CLUSTERS
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  ThisClusterThread<T> ctx{cluster, persistent_smem<T>(), static_cast<Idx>(threadIdx.x),
                           static_cast<Idx>(cluster.block_rank())};
  const Idx c = static_cast<Idx>(blockIdx.x) / l.ctas;
  if constexpr (Backward)
    backward_cluster_program<Cell, Len>(a, l, c, ctx);
  else
    forward_cluster_program<Cell, Len>(a, l, c, ctx);
#else
  __trap();
#endif
}

/// Len: the batch has per-sample lengths (a.len); each persistent kernel is compiled with and without.
template <class T, bool Len>
__global__ void __launch_bounds__(kPersistentThreads) forward_kernel(LayerArgs<T> a) {
  ThisThread ctx{threadIdx.x};
  forward_program<Len>(a, persistent_smem<T>(), blockIdx.x, blockDim.x, ctx);
}

/// The warp-per-sample forward (forward_warp_program), one kernel per cell: its registers are its own.
template <class T, bool Len, class Cell>
__global__ void __launch_bounds__(32 * kWarpForwardSamples) forward_kernel_warp(LayerArgs<T> a) {
  if (static_cast<Idx>(threadIdx.x / 32) >= block_samples(blockIdx.x, a.spb, a.B))
    return;  // no sample: __syncwarp is per warp
  ThisThread ctx{threadIdx.x};
  forward_warp_program<Cell, Len>(a, persistent_smem<T>(), blockIdx.x, ctx);
}

/// The warp-per-sample BP (backward_warp_program), one kernel per cell.
template <class T, bool Len, class Cell>
__global__ void __launch_bounds__(32 * kWarpForwardSamples) backward_kernel_warp(LayerArgs<T> a) {
  if (static_cast<Idx>(threadIdx.x / 32) >= block_samples(blockIdx.x, a.spb, a.B))
    return;  // no sample: __syncwarp is per warp
  ThisThread ctx{threadIdx.x};
  backward_warp_program<Cell, Len>(a, persistent_smem<T>(), blockIdx.x, ctx);
}

template <class T, bool Len>
__global__ void __launch_bounds__(kPersistentThreads) backward_kernel(LayerArgs<T> a) {
  ThisThread ctx{threadIdx.x};
  backward_program<Len>(a, persistent_smem<T>(), blockIdx.x, blockDim.x, ctx);
}

template <class T>
__global__ void __launch_bounds__(kBlock) transpose_kernel(const T* in, Idx rows, Idx cols, T* out) {
  BPPSA_FLAT_LOOP(rows * cols, i) out[i] = in[transpose_source(rows, cols, i)];
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    final_grad_kernel(Idx H, Idx S, Idx B, Idx steps, const T* last, const Idx* len, const T* final_grad, T* g_last) {
  BPPSA_FLAT_LOOP(S * B, i) g_last[i] = final_state_grad(H, S, B, steps, last, len, final_grad, i / S, i % S);
}

template <class T>
__global__ void __launch_bounds__(kBlock) preact_kernel(LayerArgs<T> a) {
  BPPSA_FLAT_LOOP(a.steps * a.B * a.H, i) preact_item(a, i);
}

template <class T>
__global__ void __launch_bounds__(kBlock) jacobian_kernel(LayerArgs<T> a, T* const* element, Idx per) {
  BPPSA_FLAT_LOOP(a.steps * a.B * per, i) {
    const Idx item = i % per, pair = i / per, b = pair % a.B, t = pair / a.B + 1;
    element[t - 1][b * per + item] = jacobian_value(a, t, b, item);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock) scatter_kernel(T* const* dst, const T* src, Idx count, Idx per) {
  BPPSA_FLAT_LOOP(count * per, i) dst[i / per][i % per] = src[i];
}

template <class T>
__global__ void __launch_bounds__(kBlock) gather_blocks_kernel(const T* const* src, T* dst, Idx count, Idx per) {
  BPPSA_FLAT_LOOP(count * per, i) dst[i] = src[i / per][i % per];
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    injection_kernel(T* const* inj, const T* above, Idx H, Idx S, Idx B, Idx count) {
  BPPSA_FLAT_LOOP(count * S * B, i) {
    const Idx row = i % S, col = i / S, b = col % B, k = col / B;  // e_{k+1}, sample b
    inj[k][b * S + row] = injection_value(above, H, B, k + 1, b, row);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    injection_by_length_kernel(T* const* inj, T* top, const T* above, const T* g_last, const Idx* len, Idx H, Idx S,
                               Idx B, Idx steps) {
  BPPSA_FLAT_LOOP((steps - 1) * S * B, i) {
    const Idx row = i % S, col = i / S, b = col % B, k = col / B;  // e_{k+1}, sample b
    inj[k][b * S + row] = injection_by_length(above, g_last, len, H, S, B, k + 1, b, row);
  }
  BPPSA_FLAT_LOOP(S * B, i) top[i] = scan_top_by_length(g_last, len, S, steps, i / S, i % S);
}

template <class T>
__global__ void __launch_bounds__(kBlock) zero_padding_kernel(T* x, Idx I, Idx B, Idx steps, const Idx* len) {
  BPPSA_FLAT_LOOP(I * steps * B, i) x[i] = unpadded_value(len, I, B, i, x[i]);
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    final_state_kernel(const T* h, const Idx* len, Idx H, Idx B, Idx steps, T* out, Idx pitch) {
  BPPSA_FLAT_LOOP(H * B, i) out[(i / H) * pitch + i % H] = final_state_value(h, len, H, B, steps, i / H, i % H);
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    gather_kernel(const float* data, const std::int64_t* data_labels, Idx I, Idx steps, Idx batch,
                  const std::int64_t* order, Idx first, T* x, std::int64_t* labels) {
  BPPSA_FLAT_LOOP(I * steps * batch, i) x[i] = static_cast<T>(data[gather_source(I, steps, batch, order, first, i)]);
  BPPSA_FLAT_LOOP(batch, b) labels[b] = data_labels[order != nullptr ? order[first + b] : first + b];
}

template <class T>
__global__ void __launch_bounds__(kBlock) check_finite_kernel(const T* x, Idx n, std::int32_t flag, DeviceStatus* st) {
  BPPSA_FLAT_LOOP(n, i) {
    if (!hd_finite(x[i])) atomicOr(&st->flags, flag);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock) fill_kernel(T* x, Idx n, T value) {
  BPPSA_FLAT_LOOP(n, i) x[i] = value;
}

/// The cluster kernel for a cell and direction, with or without lengths.
template <class T, bool Backward>
auto cluster_kernel_for(std::int32_t cell, bool len) -> void (*)(LayerArgs<T>, ClusterLaunch) {
  if (cell == kGru)
    return len ? cluster_kernel<T, true, GruCell, Backward> : cluster_kernel<T, false, GruCell, Backward>;
  if (cell == kLstm)
    return len ? cluster_kernel<T, true, LstmCell, Backward> : cluster_kernel<T, false, LstmCell, Backward>;
  return len ? cluster_kernel<T, true, RnnCell, Backward> : cluster_kernel<T, false, RnnCell, Backward>;
}
template <class T>
auto cluster_kernel_for(std::int32_t cell, bool len, bool backward) -> void (*)(LayerArgs<T>, ClusterLaunch) {
  return backward ? cluster_kernel_for<T, true>(cell, len) : cluster_kernel_for<T, false>(cell, len);
}

/// A launch configuration of a cluster kernel (attr: its one attribute, the cluster dimension).
template <class T>
cudaLaunchConfig_t cluster_config(const LayerArgs<T>& a, const ClusterLaunch& l, cudaLaunchAttribute* attr,
                                  cudaStream_t s) {
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(l.ctas);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster_count(a.B, l.spb) * l.ctas));
  cfg.blockDim = dim3(l.threads);
  cfg.dynamicSmemBytes = l.smem_bytes;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

}  // namespace

template <class T>
void allow_persistent_smem(int bytes) {
  // The attribute belongs to the current device: set on every call (each stack's construction; cheap).
  for (const void* k :
       {reinterpret_cast<const void*>(forward_kernel<T, false>), reinterpret_cast<const void*>(forward_kernel<T, true>),
        reinterpret_cast<const void*>(backward_kernel<T, false>),
        reinterpret_cast<const void*>(backward_kernel<T, true>)})
    BPPSA_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  for (const std::int32_t cell : {kRnnTanh, kGru, kLstm})
    for (const bool len : {false, true})
      for (const bool backward : {false, true})
        BPPSA_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(cluster_kernel_for<T>(cell, len, backward)),
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <class T>
int cluster_capacity(std::int32_t cell, const ClusterLaunch& l, bool backward) {
  LayerArgs<T> a;
  a.B = l.spb;  // one cluster
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(a, l, &attr, nullptr);
  // A query, no stream work: relaxed for this thread while it runs, so that a forward captured
  // into a CUDA graph may ask it (restored however it ends).
  struct RelaxedCapture {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    RelaxedCapture() { BPPSA_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode)); }
    ~RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode); }
  } relaxed;
  int least = -1;
  for (const bool len : {false, true}) {  // the two kernels' registers may differ
    const void* k = reinterpret_cast<const void*>(cluster_kernel_for<T>(cell, len, backward));
    cudaFuncAttributes fa{};
    BPPSA_CUDA_CHECK(cudaFuncGetAttributes(&fa, k));
    if (fa.ptxVersion < 90) return 0;  // built for an older architecture: the trap, never launched
    int n = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
    if (e == cudaErrorInvalidValue || e == cudaErrorInvalidClusterSize || e == cudaErrorNotSupported ||
        e == cudaErrorInvalidConfiguration) {
      (void)cudaGetLastError();  // a configuration this device refuses (not sticky)
      n = 0;
    } else {
      BPPSA_CUDA_CHECK(e);  // an earlier launch's error, say: never taken for "no cluster fits"
    }
    least = least < 0 || n < least ? n : least;
  }
  return least;
}

template <class T>
void launch_cluster(const LayerArgs<T>& a, const ClusterLaunch& l, bool backward, cudaStream_t s) {
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(a, l, &attr, s);
  BPPSA_CUDA_CHECK(cudaLaunchKernelEx(&cfg, cluster_kernel_for<T>(a.cell, a.len != nullptr, backward), a, l));
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_transpose(const T* in, Idx rows, Idx cols, T* out, cudaStream_t s) {
  if (rows * cols <= 0) return;
  transpose_kernel<T><<<grid_blocks(rows * cols), kBlock, 0, s>>>(in, rows, cols, out);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_forward(const LayerArgs<T>& a, unsigned threads, std::size_t smem, cudaStream_t s) {
  const auto blocks = static_cast<unsigned>(persistent_blocks(a.B, a.spb));
  if (a.len != nullptr)
    forward_kernel<T, true><<<blocks, threads, smem, s>>>(a);
  else
    forward_kernel<T, false><<<blocks, threads, smem, s>>>(a);
  BPPSA_CUDA_CHECK_LAUNCH();
}

/// The warp-per-sample forward (backward = false) or BP of a.cell's Cell.
template <class T, class Cell>
void launch_warp_cell(const LayerArgs<T>& a, bool backward, cudaStream_t s) {
  const bool len = a.len != nullptr;
  void (*kernel)(LayerArgs<T>) =
      backward ? (len ? backward_kernel_warp<T, true, Cell> : backward_kernel_warp<T, false, Cell>)
               : (len ? forward_kernel_warp<T, true, Cell> : forward_kernel_warp<T, false, Cell>);
  const Idx values = backward ? warp_backward_smem<T>(a.cell, a.spb) : warp_forward_smem<T>(a.cell, a.spb);
  kernel<<<static_cast<unsigned>(persistent_blocks(a.B, a.spb)), static_cast<unsigned>(32 * a.spb),
           static_cast<std::size_t>(values) * sizeof(T), s>>>(a);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_warp(const LayerArgs<T>& a, bool backward, cudaStream_t s) {
  if (a.cell == kGru)
    launch_warp_cell<T, GruCell>(a, backward, s);
  else if (a.cell == kLstm)
    launch_warp_cell<T, LstmCell>(a, backward, s);
  else
    launch_warp_cell<T, RnnCell>(a, backward, s);
}

template <class T>
void launch_forward_warp(const LayerArgs<T>& a, cudaStream_t s) {
  launch_warp(a, false, s);
}

template <class T>
void launch_backward_warp(const LayerArgs<T>& a, cudaStream_t s) {
  launch_warp(a, true, s);
}

template <class T>
void launch_backward_bp(const LayerArgs<T>& a, unsigned threads, std::size_t smem, cudaStream_t s) {
  const auto blocks = static_cast<unsigned>(persistent_blocks(a.B, a.spb));
  if (a.len != nullptr)
    backward_kernel<T, true><<<blocks, threads, smem, s>>>(a);
  else
    backward_kernel<T, false><<<blocks, threads, smem, s>>>(a);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_final_grad(Idx H, Idx S, Idx B, Idx steps, const T* last, const Idx* len, const T* final_grad, T* g_last,
                       cudaStream_t s) {
  final_grad_kernel<T><<<grid_blocks(S * B), kBlock, 0, s>>>(H, S, B, steps, last, len, final_grad, g_last);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_preact(const LayerArgs<T>& a, cudaStream_t s) {
  preact_kernel<T><<<grid_blocks(a.steps * a.B * a.H), kBlock, 0, s>>>(a);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_jacobians(const LayerArgs<T>& a, T* const* element, cudaStream_t s) {
  const Idx per = jacobian_values(a.cell, a.H);
  jacobian_kernel<T><<<grid_blocks(a.steps * a.B * per), kBlock, 0, s>>>(a, element, per);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_scatter_blocks(T* const* dst, const T* src, Idx count, Idx per, cudaStream_t s) {
  if (count * per <= 0) return;
  scatter_kernel<T><<<grid_blocks(count * per), kBlock, 0, s>>>(dst, src, count, per);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gather_blocks(const T* const* src, T* dst, Idx count, Idx per, cudaStream_t s) {
  if (count * per <= 0) return;
  gather_blocks_kernel<T><<<grid_blocks(count * per), kBlock, 0, s>>>(src, dst, count, per);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_injections(T* const* inj, const T* above, Idx H, Idx S, Idx B, Idx count, cudaStream_t s) {
  if (count * S * B <= 0) return;
  injection_kernel<T><<<grid_blocks(count * S * B), kBlock, 0, s>>>(inj, above, H, S, B, count);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_injections_by_length(T* const* inj, T* top, const T* above, const T* g_last, const Idx* len, Idx H, Idx S,
                                 Idx B, Idx steps, cudaStream_t s) {
  injection_by_length_kernel<T><<<grid_blocks(std::max<Idx>(steps - 1, 1) * S * B), kBlock, 0, s>>>(
      inj, top, above, g_last, len, H, S, B, steps);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_zero_padding(T* x, Idx I, Idx B, Idx steps, const Idx* len, cudaStream_t s) {
  if (I * steps * B <= 0) return;
  zero_padding_kernel<T><<<grid_blocks(I * steps * B), kBlock, 0, s>>>(x, I, B, steps, len);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_final_state(const T* h, const Idx* len, Idx H, Idx B, Idx steps, T* out, Idx pitch, cudaStream_t s) {
  if (H * B <= 0) return;
  final_state_kernel<T><<<grid_blocks(H * B), kBlock, 0, s>>>(h, len, H, B, steps, out, pitch);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gather(const float* data, const std::int64_t* data_labels, Idx I, Idx steps, Idx batch,
                   const std::int64_t* order, Idx first, T* x, std::int64_t* labels, cudaStream_t s) {
  gather_kernel<T>
      <<<grid_blocks(I * steps * batch), kBlock, 0, s>>>(data, data_labels, I, steps, batch, order, first, x, labels);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_check_finite(const T* x, Idx n, std::int32_t flag, DeviceStatus* status, cudaStream_t s) {
  if (n <= 0) return;
  check_finite_kernel<T><<<grid_blocks(n), kBlock, 0, s>>>(x, n, flag, status);
  BPPSA_CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_fill(T* x, Idx n, T value, cudaStream_t s) {
  if (n <= 0) return;
  fill_kernel<T><<<grid_blocks(n), kBlock, 0, s>>>(x, n, value);
  BPPSA_CUDA_CHECK_LAUNCH();
}

#define BPPSA_INSTANTIATE(T)                                                                                      \
  template void allow_persistent_smem<T>(int);                                                                    \
  template void launch_transpose<T>(const T*, Idx, Idx, T*, cudaStream_t);                                        \
  template void launch_forward<T>(const LayerArgs<T>&, unsigned, std::size_t, cudaStream_t);                      \
  template void launch_forward_warp<T>(const LayerArgs<T>&, cudaStream_t);                                        \
  template int cluster_capacity<T>(std::int32_t, const ClusterLaunch&, bool);                                     \
  template void launch_cluster<T>(const LayerArgs<T>&, const ClusterLaunch&, bool, cudaStream_t);                 \
  template void launch_backward_warp<T>(const LayerArgs<T>&, cudaStream_t);                                       \
  template void launch_backward_bp<T>(const LayerArgs<T>&, unsigned, std::size_t, cudaStream_t);                  \
  template void launch_final_grad<T>(Idx, Idx, Idx, Idx, const T*, const Idx*, const T*, T*, cudaStream_t);       \
  template void launch_injections_by_length<T>(T* const*, T*, const T*, const T*, const Idx*, Idx, Idx, Idx, Idx, \
                                               cudaStream_t);                                                     \
  template void launch_zero_padding<T>(T*, Idx, Idx, Idx, const Idx*, cudaStream_t);                              \
  template void launch_final_state<T>(const T*, const Idx*, Idx, Idx, Idx, T*, Idx, cudaStream_t);                \
  template void launch_preact<T>(const LayerArgs<T>&, cudaStream_t);                                              \
  template void launch_jacobians<T>(const LayerArgs<T>&, T* const*, cudaStream_t);                                \
  template void launch_scatter_blocks<T>(T* const*, const T*, Idx, Idx, cudaStream_t);                            \
  template void launch_gather_blocks<T>(const T* const*, T*, Idx, Idx, cudaStream_t);                             \
  template void launch_injections<T>(T* const*, const T*, Idx, Idx, Idx, Idx, cudaStream_t);                      \
  template void launch_gather<T>(const float*, const std::int64_t*, Idx, Idx, Idx, const std::int64_t*, Idx, T*,  \
                                 std::int64_t*, cudaStream_t);                                                    \
  template void launch_check_finite<T>(const T*, Idx, std::int32_t, DeviceStatus*, cudaStream_t);                 \
  template void launch_fill<T>(T*, Idx, T, cudaStream_t);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::detail::gpu
