// The schedule planner shared by the Scanner and the simulator.
#include "scan/plan.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "bppsa/core/error.hpp"
#include "scan/cost_model.hpp"
#include "scan/link_check.hpp"

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
    case Algorithm::fused:
      refuse_fused("scan");
  }
  planned.schedule = builder.finish();
  return planned;
}

[[noreturn]] void refuse_fused(const char* op) {
  raise<InvalidArgument>(op,
                         "algorithm 'fused' is the recurrent layers' scan on the GPU (--backward fused), not a "
                         "schedule of the scan engine; use linear, blelloch, hybrid or auto");
}

void check_options(const ScanOptions& options, const char* op) {
  if (options.algorithm == Algorithm::fused) refuse_fused(op);
  if (options.threads < 0)
    raise<InvalidArgument>(op, "threads must be ≥ 0 (0 = OpenMP's default), got " + std::to_string(options.threads));
  if (options.chunks < 0)
    raise<InvalidArgument>(op, "chunks must be ≥ 0 (0 = one per thread), got " + std::to_string(options.chunks));
}

int run_threads(const ScanOptions& options) { return options.threads > 0 ? options.threads : omp_get_max_threads(); }

template <class T>
PlannedSchedule<T> plan_run(std::vector<ElementInfo<T>> elements, Index batch, const ScanOptions& options,
                            int threads) {
  const int cores = std::max(1, std::min(threads, omp_get_num_procs()));
  return plan_schedule(std::move(elements), batch, options.algorithm, threads, options.chunks, cores);
}

template <class T>
std::vector<ElementInfo<T>> scan_elements(const Chain<T>& chain) {
  const Index n = chain.size();
  std::vector<ElementInfo<T>> elements(static_cast<std::size_t>(n) + 1);
  for (Index i = 1; i <= n; ++i)
    elements[static_cast<std::size_t>(i)] = {&chain.jacobian(n - i + 1).layout(), chain.injection(n - i) != nullptr};
  return elements;
}

template <class T>
std::vector<MemoryItem> run_memory(const Schedule<T>& schedule, const Chain<T>& chain) {
  const Index n = chain.size(), batch = chain.batch();
  const auto scalar = static_cast<double>(sizeof(T));
  double grads = 0;
  for (Index k = 0; k <= n; ++k) grads += static_cast<double>(chain.dim(k));
  // Patterns the plan made: those of products, not already held by the chain's elements.
  std::unordered_set<const CsrPattern*> held;
  for (Index k = 1; k <= n; ++k)
    if (const CsrPatternPtr& p = chain.jacobian(k).layout().pattern) held.insert(p.get());
  double patterns = 0;
  std::size_t ops = 0;
  for (const Node<T>& node : schedule.nodes) {
    const CsrPatternPtr& p = node.plan.out.pattern;
    if (p && held.insert(p.get()).second)
      patterns += (static_cast<double>(p->nnz()) + static_cast<double>(p->rows()) + 1) * sizeof(std::int32_t);
  }
  for (const Phase& phase : schedule.phases)
    for (const Task& task : phase.tasks) ops += task.ops.size();
  // Workspace::reserve's sizes (workspace_values), summed in double: they cannot overflow here.
  const auto b = static_cast<double>(batch);
  double workspace = 0;
  for (std::size_t i = 0; i < schedule.slot_values.size(); ++i)
    workspace += static_cast<double>(schedule.slot_values[i]) * (schedule.slot_shared[i] ? 1 : b);
  for (const Index v : schedule.v_slot_values) workspace += static_cast<double>(v) * b;
  return {{"workspace of intermediate products", workspace * scalar},  // first: Scanner::run drops it on the GPU
          {"gradients g_0 … g_N", grads * b * scalar},
          {"SpGEMM fill-in patterns", patterns},
          {"schedule", static_cast<double>(schedule.nodes.size() * sizeof(Node<T>) + ops * sizeof(Op))}};
}

template <class T>
void bind_operands(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out, Operands<T>& operands,
                   std::vector<Index>& dims, int threads) {
  const Index n = chain.size();
  const bool parallel_elements = n >= kParallelElements;
  operands.element.resize(static_cast<std::size_t>(n) + 1);
  operands.element_v.assign(static_cast<std::size_t>(n) + 1, nullptr);
  operands.prefix.resize(static_cast<std::size_t>(n) + 1);
  operands.prefix_rows.resize(static_cast<std::size_t>(n) + 1);
  dims.resize(static_cast<std::size_t>(n) + 1);
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel_elements)
  for (Index k = 0; k <= n; ++k) dims[static_cast<std::size_t>(k)] = chain.dim(k);
  out.resize(dims, chain.batch(), threads);
  out.g(n) = g_last;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel_elements)
  for (Index i = 0; i <= n; ++i) {
    operands.prefix[static_cast<std::size_t>(i)] = out.g(n - i).data();
    operands.prefix_rows[static_cast<std::size_t>(i)] = dims[static_cast<std::size_t>(n - i)];
    if (i == 0) continue;
    operands.element[static_cast<std::size_t>(i)] = view(chain.jacobian(n - i + 1));
    if (const Matrix<T>* e = chain.injection(n - i)) operands.element_v[static_cast<std::size_t>(i)] = e->data();
  }
}

template PlannedSchedule<float> plan_schedule(std::vector<ElementInfo<float>>, Index, Algorithm, int, int, int);
template PlannedSchedule<double> plan_schedule(std::vector<ElementInfo<double>>, Index, Algorithm, int, int, int);
template PlannedSchedule<float> plan_run(std::vector<ElementInfo<float>>, Index, const ScanOptions&, int);
template PlannedSchedule<double> plan_run(std::vector<ElementInfo<double>>, Index, const ScanOptions&, int);
template <class T>
std::vector<ElementInfo<T>> resident_elements(const ResidentChain<T>& chain, const char* op) {
  const Index n = static_cast<Index>(chain.jacobian.size());
  if (chain.batch < 1) raise<InvalidArgument>(op, "batch size must be ≥ 1, got " + std::to_string(chain.batch));
  if (n == 0) raise<InvalidArgument>(op, "the chain is empty: give at least one layout (J_1^T)");
  if (!chain.injection.empty() && static_cast<Index>(chain.injection.size()) != n)
    raise<ShapeError>(op, std::to_string(chain.injection.size()) + " injection flags for " + std::to_string(n) +
                              " elements: give one per e_k, k = 0 … N − 1, or none");
  for (Index k = 1; k <= n; ++k) {
    const Layout<T>* l = chain.jacobian[static_cast<std::size_t>(k - 1)];
    const std::string name =
        element_name(k) + " (chain element " + std::to_string(k) + " of " + std::to_string(n) + ")";
    if (!l) raise<InvalidArgument>(op, name + " has no layout (null)");
    l->check((std::string(op) + ": " + name).c_str());  // the layout itself, as Jacobian's constructor checks it
    check_link(*l, k > 1 ? chain.jacobian[static_cast<std::size_t>(k - 2)] : nullptr, k, n, chain.batch, op);
  }
  std::vector<ElementInfo<T>> elements(static_cast<std::size_t>(n) + 1);
  for (Index i = 1; i <= n; ++i)
    elements[static_cast<std::size_t>(i)] = {
        chain.jacobian[static_cast<std::size_t>(n - i)],
        !chain.injection.empty() && chain.injection[static_cast<std::size_t>(n - i)]};
  return elements;
}

int resident_chunks(const ScanOptions& options, Index n, const char* op) {
  switch (options.algorithm) {
    case Algorithm::linear:
    case Algorithm::blelloch:
      return 1;
    case Algorithm::hybrid:
      if (options.chunks < 0)
        raise<InvalidArgument>(op, "chunks must be ≥ 0 (0 = ⌈√N⌉), got " + std::to_string(options.chunks));
      return options.chunks > 0 ? options.chunks : static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))));
    case Algorithm::automatic:
    case Algorithm::fused:
      break;
  }
  raise<InvalidArgument>(
      op, std::string("a resident scan runs linear, blelloch or hybrid; ") + to_string(options.algorithm) +
              (options.algorithm == Algorithm::automatic ? " chooses by the host's cost model: name the algorithm"
                                                         : " is the recurrent layers' own scan, not a schedule"));
}

template std::vector<ElementInfo<float>> resident_elements(const ResidentChain<float>&, const char*);
template std::vector<ElementInfo<double>> resident_elements(const ResidentChain<double>&, const char*);
template std::vector<ElementInfo<float>> scan_elements(const Chain<float>&);
template std::vector<ElementInfo<double>> scan_elements(const Chain<double>&);
template std::vector<MemoryItem> run_memory(const Schedule<float>&, const Chain<float>&);
template std::vector<MemoryItem> run_memory(const Schedule<double>&, const Chain<double>&);
template void bind_operands(const Chain<float>&, const Matrix<float>&, Gradients<float>&, Operands<float>&,
                            std::vector<Index>&, int);
template void bind_operands(const Chain<double>&, const Matrix<double>&, Gradients<double>&, Operands<double>&,
                            std::vector<Index>&, int);

}  // namespace bppsa::detail
