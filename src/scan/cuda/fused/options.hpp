// Options and statistics of the fused chunked scan (fused_scan.hpp), apart from anything CUDA so
// that plain C++ (benchmarks, the training engineer's host code) can use them.
#pragma once

#include <cstddef>

#include "core/cuda/grid.hpp"

namespace bppsa::detail::gpu {

/// When run() replays a CUDA Graph of its launches instead of issuing them one by one.
/// automatic: when the cost model's estimate of one run is below kFusedGraphMaxMicros (launch
/// latency is then a large share) and from the second run with the same pointers on (a graph
/// bakes pointers in: a run with other pointers updates it). never: for debugging and profiling.
/// The environment variable BPPSA_FUSED_GRAPHS=never|always|auto overrides every plan's choice
/// (e.g. to profile the kernels of a training run one by one).
enum class FusedGraphs { automatic, always, never };
/// automatic graphs below this estimated run time (µs): above it, ≤ 4 launches cost < 2 %.
inline constexpr double kFusedGraphMaxMicros = 1000.0;

/// The cost model's timing constants (plan.hpp's fused_launch_cycles), in cycles at plan.hpp's
/// kFusedCyclesPerMicro. The defaults are guesses made without a GPU: on the H100 sweep their
/// estimates are 4.6× too low (median) and their first-ranked plan runs 1.00–1.44× the fastest
/// (docs/cost_model.md, "The fused scan on the GPU"). A fit (bench/gpu/fit_fused_model.py) brings the median error
/// to 1.17× (90th percentile 1.57×) but chooses plans the sweep did not time; bench/gpu/run.sh times them against the
/// defaults' before a fit replaces these.
struct FusedModel {
  double launch = 2500;      ///< one kernel launch inside a stream or graph
  double issue = 0.7;        ///< instructions issued per cycle by each scheduler in use
  double step = 30;          ///< a column step's fixed instructions
  double step_sync = 20;     ///< … and more with a barrier (ntile > 1)
  double latency = 120;      ///< a step's latency beyond its instructions
  double latency_sync = 40;  ///< … and more with a barrier
  double unit = 1;           ///< scale of the instructions per unit k of W^T y
  double row = 1;            ///< scale of the instructions per row of a thread's tile
  double w_load = 600;       ///< W into shared memory, per wave of blocks (plus its values)
  double l2_bytes = 48;      ///< L2 bytes per cycle and multiprocessor (W in global memory)
  double carry_step = 150;   ///< a carry step's fixed cycles
};

/// Plan options. The overrides replace the cost model's choice (tests, tuning); a value the
/// kernels were not compiled for is refused with InvalidArgument naming the choices.
struct FusedScanOptions {
  /// Per-step gradients on h_1 … h_{T−1} (FusedChainPtrs::above): stacked layers, head=every.
  bool injections = false;
  FusedGraphs graphs = FusedGraphs::automatic;
  Idx chunk_length = 0;    ///< L (0: cost model); L ≥ T means one chunk: BP only
  int reduce_tile = 0;     ///< rows of W^T y per reduce thread: 4, 8, 16, 20, 32, 64 (float) (0: model)
  int reduce_columns = 0;  ///< columns per reduce thread: 1, or 4 (float; tile ≤ the Step's max_tile4) (0: model)
  int push_tile = 0;       ///< rows per push thread, as reduce_tile (0: model)
  int w_shared = -1;       ///< 1: W in shared memory; 0: read from global memory (L1/L2); −1: model
  /// The carry's chunk totals through a ring in shared memory: 1 always (plans whose ring does not
  /// fit are skipped); 0 never (read from global memory); −1 wherever it fits.
  int carry_ring = -1;
  /// With injections: the v column in a reduce launch of its own (one column a thread), run at
  /// once with the S identity columns' on a second stream, so that 4 columns a thread pad S
  /// columns and not S + 1: 1 always, 0 never, −1 where the cost model finds it faster.
  int v_apart = -1;
  /// Each column launch's record (and injection) staged into a ring in shared memory by
  /// asynchronous copies steps ahead (kFusedRecordStages slots a group), instead of read from
  /// global memory with L1 prefetches: 1 always (launches whose ring does not fit are skipped),
  /// 0 never, −1 wherever it fits (with fewer groups a block if need be).
  int record_ring = -1;
  FusedModel model;  ///< the cost model's constants
};

/// What a plan does per run, for benchmarks and memory checks.
struct FusedScanStats {
  Idx chunk_length = 0;        ///< L
  Idx chunks = 0;              ///< C (1: BP only)
  Idx first_chunk_length = 0;  ///< len0 = T − (C−1)·L
  int reduce_tile = 0, reduce_columns = 0, reduce_threads_per_column = 0;
  int push_tile = 0, push_threads_per_column = 0;
  int carry_stages = 0;  ///< the carry's ring of chunk totals in shared memory (0: read from global memory)
  int v_tile = 0;        ///< the v column's launch apart: its tile (0: v in the reduce launch, or none)
  int reduce_stages = 0, push_stages = 0;  ///< the record's ring of each (0: read from global memory)
  bool w_shared = true;                    ///< W in shared memory (reduce and push)
  int launches = 0;                        ///< kernel launches per run
  bool graph = false;                      ///< the last run replayed a CUDA Graph
  std::size_t device_bytes = 0;            ///< what the plan allocated (totals, padded W)
  double flops = 0;                        ///< per run: 2·(multiply-adds of W^T y and of the carry)
  double bytes = 0;        ///< per run: DRAM traffic estimate (record read by reduce and push, g, totals)
  double estimate_us = 0;  ///< the cost model's run time (H100-class constants)
};

}  // namespace bppsa::detail::gpu
