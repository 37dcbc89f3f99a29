// The cost model behind Algorithm::automatic and the hybrid chunk boundaries
// (documented in docs/cost_model.md).
#pragma once

#include <vector>

#include "scan/schedule.hpp"

namespace bppsa::detail {

/// Estimated seconds of the two products an element takes part in (one sample).
struct ElementCost {
  double mv = 0;     ///< a_i · vector
  double mm = 0;     ///< a_i · (running product of its chunk)
  double bytes = 0;  ///< memory one pass over a_i moves (its values, the vector it makes)
};

struct CostModel {
  double flop_seconds = 1.0 / 2.0e9;  ///< one flop on one core (small, cache-resident products)
  double product_seconds = 40e-9;     ///< fixed cost of one product call
  double phase_seconds = 2e-6;        ///< one barrier between phases
  double bytes_per_second = 5e9;      ///< memory bandwidth shared by all threads
};

/// Costs per scan position (index 0, g_N, costs nothing) for one sample.
template <class T>
std::vector<ElementCost> element_costs(const std::vector<ElementInfo<T>>& elements, const CostModel& model);

/// Chunk ends for the hybrid scan. Phase 1 runs chunk 0 (plain BP, mv) beside the reductions
/// of the others (mm); phase 3 runs the others' pushes (mv) in parallel. Balancing chunk 0's
/// mv work against each other chunk's mm work minimises the span: making chunk 0 longer only
/// lengthens phase 1, making it shorter lengthens every push. Returns at most `chunks`
/// non-empty chunks.
std::vector<Index> hybrid_partition(const std::vector<ElementCost>& costs, int chunks);

struct Choice {
  Algorithm algorithm = Algorithm::linear;
  int chunks = 1;
  double predicted_seconds = 0;
};

/// Picks linear, hybrid (with its chunk count) or blelloch for a batch on `threads` workers.
Choice choose_algorithm(const std::vector<ElementCost>& costs, Index batch, int threads, const CostModel& model);

}  // namespace bppsa::detail
