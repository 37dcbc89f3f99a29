// The scan engine's front end: validation, plan cache, statistics. Each plan runs on its half
// (scan/scan_half.hpp): the CPU executor or the GPU's.
#include "bppsa/scan/scanner.hpp"

#include <omp.h>

#include <chrono>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "core/denormals.hpp"
#include "core/finite.hpp"
#include "scan/plan.hpp"
#include "scan/scan_half.hpp"

namespace bppsa {

const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::linear:
      return "linear";
    case Algorithm::blelloch:
      return "blelloch";
    case Algorithm::hybrid:
      return "hybrid";
    case Algorithm::automatic:
      return "auto";
    case Algorithm::fused:
      return "fused";
  }
  return "unknown";
}

Algorithm parse_algorithm(std::string_view name) {
  for (Algorithm a : {Algorithm::linear, Algorithm::blelloch, Algorithm::hybrid, Algorithm::automatic})
    if (name == to_string(a)) return a;
  detail::raise<InvalidArgument>(
      "parse_algorithm", "unknown algorithm '" + std::string(name) + "'; expected linear, blelloch, hybrid or auto");
}

template <class T>
void Gradients<T>::resize(const std::vector<Index>& dims, Index batch, int threads) {
  g_.resize(dims.size());
  const auto n = static_cast<Index>(dims.size());
#pragma omp parallel for num_threads(threads > 0 ? threads : omp_get_max_threads()) \
    schedule(static) if (n >= kParallelElements)
  for (Index k = 0; k < n; ++k) {
    const auto i = static_cast<std::size_t>(k);
    if (g_[i].rows() != dims[i] || g_[i].cols() != batch) g_[i].resize(dims[i], batch);
  }
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// What a plan depends on, per element. Holding the shared pointers keeps their addresses
/// from being recycled by a different pattern while the plan is cached.
template <class T>
struct ElementSignature {
  Kind kind;
  Index rows, cols, count;
  CsrPatternPtr pattern;
  std::shared_ptr<const Matrix<T>> shared_dense;
  bool has_v;

  static ElementSignature of(const Layout<T>& l, bool has_v) {
    return {l.kind, l.rows, l.cols, l.count, l.pattern, l.shared_dense, has_v};
  }
  /// Compares without copying the shared pointers (no reference-count traffic per run).
  bool matches(const Layout<T>& l, bool v) const {
    return kind == l.kind && rows == l.rows && cols == l.cols && count == l.count && pattern.get() == l.pattern.get() &&
           shared_dense.get() == l.shared_dense.get() && has_v == v;
  }
};

using detail::all_finite;

template <class T>
bool all_finite(const Matrix<T>& m) {
  return all_finite(m.data(), m.size());
}

template <class T>
void check_inputs(const Chain<T>& chain, const Matrix<T>& g_last, int threads) {
  const char* op = "scan";
  const std::string hint =
      "; find the layer that produced it (or set ScanOptions::check_inputs = false to skip "
      "this check and let non-finite values surface in the gradients)";
  if (!all_finite(g_last)) detail::raise<NonFiniteError>(op, "g_N (the loss gradient) contains NaN or Inf" + hint);
  const Index n = chain.size();
  Index bad = n + 1;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 64) reduction(min : bad) if (n >= kParallelElements)
  for (Index k = 1; k <= n; ++k) {
    const Jacobian<T>& j = chain.jacobian(k);
    bool ok = all_finite(j.values().data(), static_cast<Index>(j.values().size()));
    if (j.kind() == Kind::shared_dense_diag) ok = ok && all_finite(*j.layout().shared_dense);
    if (const Matrix<T>* e = chain.injection(k - 1)) ok = ok && all_finite(*e);
    if (!ok) bad = std::min(bad, k);
  }
  if (bad > n) return;
  const Jacobian<T>& j = chain.jacobian(bad);
  std::string where = "J_" + std::to_string(bad) + "^T (" + j.layout().describe() + ")";
  for (Index s = 0; s < j.count(); ++s)
    if (!all_finite(j.sample(s).data(), j.layout().values_per_sample())) {
      detail::raise<NonFiniteError>(op, where + " contains NaN or Inf in sample " + std::to_string(s) + hint);
    }
  if (j.kind() == Kind::shared_dense_diag && !all_finite(*j.layout().shared_dense))
    detail::raise<NonFiniteError>(op, "the shared matrix S of " + where + " contains NaN or Inf" + hint);
  detail::raise<NonFiniteError>(op, "injection e_" + std::to_string(bad - 1) + " contains NaN or Inf" + hint);
}

}  // namespace

template <class T>
struct Scanner<T>::Plan {
  std::vector<ElementSignature<T>> signature;
  Index batch = 0;
  Algorithm requested = Algorithm::automatic;
  int threads = 0;
  int chunks = 0;
  detail::Schedule<T> schedule;
  Algorithm algorithm = Algorithm::linear;
  int used_chunks = 1;
  Device device = Device::cpu;
  std::unique_ptr<detail::ScanHalf<T>> half;  ///< runs the schedule: its workspace, on the CPU or the GPU
};

template <class T>
Scanner<T>::Scanner(ScanOptions options) : options_(options) {
  set_options(options);
}
template <class T>
Scanner<T>::~Scanner() = default;
template <class T>
Scanner<T>::Scanner(Scanner&&) noexcept = default;
template <class T>
Scanner<T>& Scanner<T>::operator=(Scanner&&) noexcept = default;

template <class T>
void Scanner<T>::set_options(const ScanOptions& options) {
  detail::check_options(options, "Scanner");
  options_ = options;
}

template <class T>
const ScanStats& Scanner<T>::run(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out) {
  detail::FlushDenormals flush;  // this thread; the executor's threads set their own
  const auto t0 = Clock::now();
  const char* op = "scan";
  const int threads = detail::run_threads(options_);
  chain.validate(op, threads);
  const Index n = chain.size(), batch = chain.batch();
  if (g_last.rows() != chain.dim(n) || g_last.cols() != batch)
    detail::raise<ShapeError>(op, "g_N is " + shape_string(g_last.rows(), g_last.cols()) + " but J_" +
                                      std::to_string(n) + "^T has " + std::to_string(chain.dim(n)) +
                                      " columns and the batch is " + std::to_string(batch) + ": expected " +
                                      shape_string(chain.dim(n), batch));
  if (options_.check_inputs) check_inputs(chain, g_last, threads);

  bool reuse = plan_ && static_cast<Index>(plan_->signature.size()) == n + 1 && plan_->batch == batch &&
               plan_->requested == options_.algorithm && plan_->threads == threads &&
               plan_->chunks == options_.chunks && plan_->device == options_.device;
  // The per-element bookkeeping is spread over the threads for long chains (see
  // kParallelElements): serial, it would bound the scan's speedup.
  if (reuse) {
    bool same = true;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(&& : same) if (n >= kParallelElements)
    for (Index i = 1; i <= n; ++i)  // position i holds J_{N−i+1}^T and e_{N−i} (detail::scan_elements)
      same = same && plan_->signature[static_cast<std::size_t>(i)].matches(chain.jacobian(n - i + 1).layout(),
                                                                           chain.injection(n - i) != nullptr);
    reuse = same;
  }

  stats_ = ScanStats{};
  if (!reuse) {
    const auto tp = Clock::now();
    auto plan = std::make_unique<Plan>();
    std::vector<detail::ElementInfo<T>> elements = detail::scan_elements(chain);
    plan->signature.resize(static_cast<std::size_t>(n) + 1);
    for (std::size_t i = 1; i < elements.size(); ++i)
      plan->signature[i] = ElementSignature<T>::of(*elements[i].layout, elements[i].has_v);
    plan->batch = batch;
    plan->requested = options_.algorithm;
    plan->threads = threads;
    plan->chunks = options_.chunks;
    // Threads beyond the cores add no arithmetic: automatic plans for the parallelism that exists.
    detail::PlannedSchedule<T> planned = detail::plan_run(std::move(elements), batch, options_, threads);
    plan->algorithm = planned.algorithm;
    plan->used_chunks = planned.chunks;
    plan->schedule = std::move(planned.schedule);
    // Refuse, before the workspace and the gradients are allocated, a run that cannot fit.
    const auto check_host = [&](const std::vector<MemoryItem>& host) {
      check_memory(op,
                   std::string("the ") + to_string(plan->algorithm) + " scan of " + std::to_string(n) +
                       " Jacobians × batch " + std::to_string(batch),
                   host,
                   "use a smaller batch or shorter chain, or the linear algorithm (sequential BP: no intermediate "
                   "products; bppsa: --backward bp, scan-check --algo linear) or hybrid, which keeps few");
    };
    plan->device = options_.device;
    plan->half = options_.device == Device::cuda ? detail::make_scan_cuda(plan->schedule, chain, check_host)
                                                 : detail::make_scan_cpu(plan->schedule, chain, threads, check_host);
    plan_ = std::move(plan);
    stats_.plan_seconds = since(tp);
  }
  stats_.plan_reused = reuse;
  plan_->half->run(chain, g_last, out, threads);

  if (options_.check_outputs && !options_.check_inputs && !all_finite(g_last))
    detail::raise<NonFiniteError>(op, "g_N (the loss gradient) contains NaN or Inf; check the loss");
  Index bad = -1;  // the highest k with a non-finite g_k: where the trouble entered, going backwards
  if (options_.check_outputs) {
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : bad) if (n >= kParallelElements)
    for (Index k = 0; k < n; ++k)
      if (!all_finite(out.g(k))) bad = std::max(bad, k);
  }
  if (bad >= 0)
    detail::raise<NonFiniteError>(op, "g_" + std::to_string(bad) + " is NaN or Inf although g_" +
                                          std::to_string(bad + 1) + " is finite: " +
                                          (options_.check_inputs ? "the products overflowed; use double precision or "
                                                                   "rescale the loss"
                                                                 : "an input holds NaN/Inf (check_inputs is off) or "
                                                                   "the products overflowed"));

  const ScanStats& planned = plan_->schedule.stats;
  stats_.algorithm = plan_->algorithm;
  stats_.threads = threads;
  stats_.chunks = plan_->used_chunks;
  stats_.levels = planned.levels;
  stats_.depth = planned.depth;
  stats_.mm = planned.mm;
  stats_.mv = planned.mv;
  stats_.mm_by_kind = planned.mm_by_kind;
  stats_.mv_by_kind = planned.mv_by_kind;
  stats_.flops = planned.flops;
  stats_.workspace_bytes = plan_->half->workspace_bytes();
  stats_.launches = plan_->half->launches();
  stats_.device = plan_->device;
  stats_.seconds = since(t0);
  return stats_;
}

template <class T>
Gradients<T> backward(const Chain<T>& chain, const Matrix<T>& g_last, ScanOptions options, ScanStats* stats) {
  Scanner<T> scanner(options);
  Gradients<T> out;
  const ScanStats& s = scanner.run(chain, g_last, out);
  if (stats) *stats = s;
  return out;
}

template class Gradients<float>;
template class Gradients<double>;
template class Scanner<float>;
template class Scanner<double>;
template Gradients<float> backward(const Chain<float>&, const Matrix<float>&, ScanOptions, ScanStats*);
template Gradients<double> backward(const Chain<double>&, const Matrix<double>&, ScanOptions, ScanStats*);

}  // namespace bppsa
