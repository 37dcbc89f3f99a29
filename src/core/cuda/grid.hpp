// How a flat kernel launch maps threads to work: every launch of the GPU scan covers
// (op, sample, item) triples, item fastest (consecutive threads touch consecutive values of
// one product), with a grid-stride loop so that any amount of work fits any grid. Shared by
// the kernels and the g++ tests, which replay every (block, thread) of a launch on the CPU.
#pragma once

#include <cstdint>

#include "core/cuda/hd.hpp"

namespace bppsa::detail::gpu {

using Idx = std::int64_t;

/// Threads per block of every flat launch.
inline constexpr int kBlock = 256;
/// Grid size cap: beyond it threads loop (grid-stride), which keeps launches valid for any
/// amount of work (gridDim.x allows 2^31 − 1 blocks; this stays far below).
inline constexpr Idx kMaxBlocks = Idx{1} << 16;

/// One unit of work: item `item` of operation `op` for sample `sample`.
struct Work {
  Idx op = 0;
  Idx sample = 0;
  Idx item = 0;
};

/// Work number g of a launch with `batch` samples per op and `items` items per (op, sample).
BPPSA_HD inline Work decompose(Idx g, Idx batch, Idx items) {
  const Idx pair = g / items;
  return {pair / batch, pair % batch, g - pair * items};
}

/// Total work of a launch over `ops` operations.
inline Idx total_work(Idx ops, Idx batch, Idx items) { return ops * batch * items; }

/// Blocks of kBlock threads for `total` units of work (at least 1, at most kMaxBlocks).
inline unsigned grid_blocks(Idx total) {
  Idx blocks = (total + kBlock - 1) / kBlock;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

/// The grid-stride loop of a flat kernel: thread `thread` of block `block` (blocks of
/// `block_dim` threads, `grid` blocks) does work g = work_start(…), then every work_stride(…)
/// further, while g < total.
BPPSA_HD inline Idx work_start(unsigned block, unsigned block_dim, unsigned thread) {
  return static_cast<Idx>(block) * static_cast<Idx>(block_dim) + static_cast<Idx>(thread);
}
BPPSA_HD inline Idx work_stride(unsigned grid, unsigned block_dim) {
  return static_cast<Idx>(grid) * static_cast<Idx>(block_dim);
}

/// In a __global__ kernel: the grid-stride loop over item < total (the statement that follows runs
/// once per item).
#define BPPSA_FLAT_LOOP(total, item)                                               \
  for (Idx item = work_start(blockIdx.x, blockDim.x, threadIdx.x); item < (total); \
       item += work_stride(gridDim.x, blockDim.x))

}  // namespace bppsa::detail::gpu
