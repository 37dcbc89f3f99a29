// The one schedule planner: picks the algorithm (Algorithm::automatic through the cost model),
// partitions hybrid chunks and builds the schedule. Scanner<T>::run plans with it and so does
// the simulator (bppsa/scan/simulate.hpp), so what is simulated is what runs.
#pragma once

#include <vector>

#include "scan/schedule.hpp"

namespace bppsa::detail {

template <class T>
struct PlannedSchedule {
  Schedule<T> schedule;
  Algorithm algorithm = Algorithm::linear;  ///< the algorithm built (automatic resolved)
  int chunks = 1;                           ///< hybrid chunks per chain (1 for linear, 0 for blelloch)
};

/// Plans a scan over `elements` (positions 0..n; position 0, g_N, needs no layout) for a batch
/// of `batch` samples. `chunks` is the hybrid chunk count, 0 = `threads`. `cores` is the
/// parallelism Algorithm::automatic plans for: the Scanner passes min(threads, cores of the
/// machine) (oversubscribed threads add no arithmetic), the simulator its virtual workers.
/// Only layouts are read, never values, so chains far larger than memory can be planned.
template <class T>
PlannedSchedule<T> plan_schedule(std::vector<ElementInfo<T>> elements, Index batch, Algorithm requested, int threads,
                                 int chunks, int cores);

}  // namespace bppsa::detail
