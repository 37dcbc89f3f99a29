// The schedule planner shared by the Scanner and the simulator.
#include "scan/plan.hpp"

#include <algorithm>

#include "scan/cost_model.hpp"

namespace bppsa::detail {

template <class T>
PlannedSchedule<T> plan_schedule(std::vector<ElementInfo<T>> elements, Index batch, Algorithm requested, int threads,
                                 int chunks, int cores) {
  const CostModel model;
  const std::vector<ElementCost> costs = element_costs(elements, model);
  Algorithm algorithm = requested;
  chunks = chunks > 0 ? chunks : threads;
  if (algorithm == Algorithm::automatic) {
    const Choice choice = choose_algorithm(costs, batch, std::max(1, cores), model);
    algorithm = choice.algorithm;
    chunks = choice.chunks;
  }
  Builder<T> builder(std::move(elements), batch);
  PlannedSchedule<T> planned;
  planned.algorithm = algorithm;
  planned.chunks = algorithm == Algorithm::linear ? 1 : 0;
  switch (algorithm) {
    case Algorithm::linear:
      build_linear(builder);
      break;
    case Algorithm::blelloch:
      build_blelloch(builder);
      break;
    case Algorithm::hybrid: {
      const std::vector<Index> ends = hybrid_partition(costs, chunks);
      planned.chunks = static_cast<int>(ends.size());
      build_hybrid(builder, ends);
      break;
    }
    case Algorithm::automatic:
      break;
  }
  planned.schedule = builder.finish();
  return planned;
}

template PlannedSchedule<float> plan_schedule(std::vector<ElementInfo<float>>, Index, Algorithm, int, int, int);
template PlannedSchedule<double> plan_schedule(std::vector<ElementInfo<double>>, Index, Algorithm, int, int, int);

}  // namespace bppsa::detail
