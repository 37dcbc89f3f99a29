// The optimizer's GPU step (src/train/cuda/optimizer_kernels.cu) replayed on the CPU: its norm
// blocks, final block and per-value update, through the same __host__ __device__ functions
// (src/train/cuda/optimizer_math.hpp), thread by thread in the kernels' order.
#pragma once

#include <limits>
#include <vector>

#include "nn/cuda/head_math.hpp"
#include "train/cuda/optimizer_math.hpp"
#include "train/cuda/step_constants.hpp"

namespace testutil {

/// One step on `seg` with the state m, v (flat, the segments' order): the norm's kNormBlocks
/// blocks and final block, then every update; the status as the kernels leave it.
template <class T>
void replay_optimizer(const bppsa::detail::gpu::Segments<T>& seg, std::vector<T>& m, std::vector<T>& v,
                      const bppsa::detail::gpu::StepConstants<T>& k, bppsa::detail::gpu::DeviceStatus* st) {
  namespace gpu = bppsa::detail::gpu;
  using gpu::Idx;
  constexpr Idx n = gpu::kReduceThreads;
  const Idx total = gpu::total_size(seg);
  std::vector<double> partials(gpu::kNormBlocks);
  for (Idx blk = 0; blk < gpu::kNormBlocks; ++blk) {
    std::vector<double> sum(n);
    for (Idx th = 0; th < n; ++th)
      sum[static_cast<std::size_t>(th)] = gpu::grad_square_sum(
          seg, total, gpu::work_start(static_cast<unsigned>(blk), static_cast<unsigned>(n), static_cast<unsigned>(th)),
          gpu::work_stride(static_cast<unsigned>(gpu::kNormBlocks), static_cast<unsigned>(n)));
    for (Idx width = n; width > 1; width /= 2)
      for (Idx th = 0; th < n; ++th) gpu::block_tree_step(sum.data(), width, th);
    partials[static_cast<std::size_t>(blk)] = sum[0];
  }
  std::vector<double> sum(n);
  for (Idx th = 0; th < n; ++th)
    sum[static_cast<std::size_t>(th)] = gpu::strided_sum(partials.data(), gpu::kNormBlocks, th, n);
  for (Idx width = n; width > 1; width /= 2)
    for (Idx th = 0; th < n; ++th) gpu::block_tree_step(sum.data(), width, th);
  T clip = std::numeric_limits<T>::quiet_NaN();  // the finish block must write it
  gpu::norm_finish_status(sum[0], k.clip_max, &clip, st);
  for (Idx i = 0; i < total; ++i)
    if (!gpu::update_item(seg, i, m.data(), v.data(), clip, k)) st->flags |= gpu::kParamNotFinite;
}

}  // namespace testutil
