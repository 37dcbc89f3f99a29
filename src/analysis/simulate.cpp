// Calibrated simulation of the scan on P virtual workers (docs/simulate.md): calibration by
// replaying schedules op by op on one thread, the virtual-worker model of the executor, and
// the measurement the predictions are validated against.
#include "bppsa/analysis/simulate.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "core/finite.hpp"
#include "scan/cpu/executor.hpp"
#include "scan/plan.hpp"

namespace bppsa {

const char* to_string(ProductClass::Type t) {
  switch (t) {
    case ProductClass::Type::mv:
      return "mv";
    case ProductClass::Type::mm:
      return "mm";
    case ProductClass::Type::shared_mm:
      return "shared_mm";
    case ProductClass::Type::shared_rest:
      return "shared_rest";
  }
  return "unknown";
}

std::string ProductClass::describe() const {
  std::ostringstream o;
  o << to_string(type) << " " << to_string(a);
  if (type != Type::mv) o << "·" << to_string(b) << "→" << to_string(out);
  o << " " << std::fixed << std::setprecision(0) << flops << " flop";
  if (affine) o << " +affine";
  return o.str();
}

bool operator<(const ProductClass& x, const ProductClass& y) {
  return std::tie(x.type, x.a, x.b, x.out, x.affine, x.flops) < std::tie(y.type, y.a, y.b, y.out, y.affine, y.flops);
}

// ---------------------------------------------------------------------------------------
// CostTable

namespace {

/// cost(P) of a tree of P threads from one of `measured` threads: · log2(P) / log2(measured).
double tree_scaled(double seconds, int measured, int workers) {
  if (workers <= 1) return 0;
  return seconds * std::log2(static_cast<double>(workers)) / std::log2(static_cast<double>(std::max(2, measured)));
}

}  // namespace

double CostTable::barrier(int workers) const { return tree_scaled(barrier_seconds, barrier_threads, workers); }
double CostTable::dispatch(int workers) const { return workers <= 1 ? dispatch_single_seconds : dispatch_seconds; }
double CostTable::region(int workers) const { return tree_scaled(region_seconds, barrier_threads, workers); }

double CostTable::cold_weight(double bytes) const {
  if (miss_curve.empty()) {
    if (cache_bytes == 0 || bytes <= static_cast<double>(cache_bytes)) return 0;
    return 1 - static_cast<double>(cache_bytes) / bytes;
  }
  if (bytes <= miss_curve.front().first) return miss_curve.front().second;
  for (std::size_t i = 1; i < miss_curve.size(); ++i) {
    const auto& [x1, y1] = miss_curve[i];
    if (bytes > x1) continue;
    const auto& [x0, y0] = miss_curve[i - 1];
    const double f = std::log(bytes / x0) / std::log(x1 / x0);
    return y0 + f * (y1 - y0);
  }
  return miss_curve.back().second;
}

double CostTable::cost(const ProductClass& c, double cold, bool* extrapolated) const {
  auto mix = [cold](const CostEntry& e) { return (1 - cold) * e.warm_seconds + cold * e.cold_seconds; };
  if (extrapolated) *extrapolated = false;
  const auto it = std::lower_bound(entries.begin(), entries.end(), c,
                                   [](const CostEntry& e, const ProductClass& k) { return e.product < k; });
  if (it != entries.end() && it->product == c) return mix(*it);
  if (extrapolated) *extrapolated = true;
  // Nearest flops among entries alike in (type, A, B, result, affine), then (type, A, result,
  // affine), then (type, A, result); scaled proportionally to flops.
  for (int level = 0; level < 3; ++level) {
    const CostEntry* best = nullptr;
    for (const CostEntry& e : entries) {
      const ProductClass& p = e.product;
      if (p.type != c.type || p.a != c.a || p.out != c.out) continue;
      if (level < 2 && p.affine != c.affine) continue;
      if (level < 1 && p.b != c.b) continue;
      if (!best || std::abs(p.flops - c.flops) < std::abs(best->product.flops - c.flops)) best = &e;
    }
    if (best) return best->product.flops > 0 ? mix(*best) * c.flops / best->product.flops : mix(*best);
  }
  return c.flops * flop_seconds;
}

std::string CostTable::summary() const {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3);
  o << "calibrated on " << chain << ", n = " << calibration_n << ", " << precision << "; " << cores << " core"
    << (cores == 1 ? "" : "s") << ", last-level cache " << static_cast<double>(cache_bytes) / (1 << 20) << " MiB\n";
  o << "  clock read " << 1e6 * timer_seconds << " µs; barrier (" << barrier_threads << " threads) "
    << 1e6 * barrier_seconds << " µs; dispatch " << 1e6 * dispatch_seconds << " µs per unit (alone "
    << 1e6 * dispatch_single_seconds << "); parallel region " << 1e6 * region_seconds << " µs\n";
  o << "  Scanner::run outside the products: " << 1e6 * element_seconds << " µs per element + output check "
    << 1e9 * check_warm_seconds << " / " << 1e9 * check_cold_seconds << " ns per value (warm / cold)\n";
  o << "  cold share of a re-read working set:";
  for (const auto& [bytes, share] : miss_curve)
    if (share > 0.02 && share < 0.98)
      o << " " << std::setprecision(1) << bytes / (1 << 20) << " MiB " << std::setprecision(2) << share;
  o << std::setprecision(3) << " (0 below, 1 above)\n";
  o << "  fallback " << std::setprecision(2) << (flop_seconds > 0 ? 1e-9 / flop_seconds : 0.0)
    << " Gflop/s for classes with no calibrated neighbour\n";
  o << "  " << std::left << std::setw(52) << "product class" << std::right << std::setw(10) << "instances"
    << std::setw(11) << "warm µs" << std::setw(11) << "cold µs"
    << "\n";
  o << std::setprecision(4);
  for (const CostEntry& e : entries)
    o << "  " << std::left << std::setw(52) << e.product.describe() << std::right << std::setw(10) << e.instances
      << std::setw(11) << 1e6 * e.warm_seconds << std::setw(11) << 1e6 * e.cold_seconds << "\n";
  return o.str();
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class T>
const char* precision_name() {
  return std::is_same_v<T, float> ? "float" : "double";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

/// A timing of `weight` instances at `seconds` each.
struct Sample {
  double seconds = 0;
  double weight = 0;
};

double weighted_median(std::vector<Sample> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end(), [](const Sample& a, const Sample& b) { return a.seconds < b.seconds; });
  double total = 0;
  for (const Sample& s : v) total += s.weight;
  double acc = 0;
  for (const Sample& s : v) {
    acc += s.weight;
    if (acc >= 0.5 * total) return s.seconds;
  }
  return v.back().seconds;
}

/// Bytes a scan touches: the elements' values, the gradients (and injections), the workspace.
template <class T>
double working_set_bytes(const std::vector<detail::ElementInfo<T>>& elements, const detail::Schedule<T>& s,
                         Index batch) {
  double values = 0;
  for (std::size_t i = 1; i < elements.size(); ++i) {
    const Layout<T>& l = *elements[i].layout;
    values += static_cast<double>(l.values_per_sample() * l.count);
    values += static_cast<double>(l.rows * batch) * (elements[i].has_v ? 2 : 1);  // g and e
  }
  if (elements.size() > 1) values += static_cast<double>(elements[1].layout->cols * batch);  // g_N
  for (std::size_t i = 0; i < s.slot_values.size(); ++i)
    values += static_cast<double>(s.slot_values[i] * (s.slot_shared[i] ? 1 : batch));
  for (const Index v : s.v_slot_values) values += static_cast<double>(v * batch);
  return values * static_cast<double>(sizeof(T));
}

/// The class of each part of an op, from the schedule's layouts.
template <class T>
class Classifier {
 public:
  Classifier(const detail::Schedule<T>& s, const std::vector<detail::ElementInfo<T>>& e) : s_(s), e_(e) {}

  /// Whether the op has a batch-independent part (the executor's pre-pass).
  bool shared_product(const detail::Op& op) const {
    return op.type == detail::Op::Type::mm && node(op).plan.out.shared();
  }
  ProductClass shared_part(const detail::Op& op) const {
    const detail::Node<T>& n = node(op);
    return {ProductClass::Type::shared_mm, layout(op.a).kind, layout(op.b).kind, n.plan.out.kind, false,
            n.plan.flops_per_sample};
  }
  ProductClass sample_part(const detail::Op& op) const {
    const Layout<T>& a = layout(op.a);
    if (op.type == detail::Op::Type::mv)
      return {ProductClass::Type::mv, a.kind, Kind::identity, Kind::identity, has_v(op.a), apply_flops(a)};
    const detail::Node<T>& n = node(op);
    if (!n.plan.out.shared())
      return {ProductClass::Type::mm, a.kind, layout(op.b).kind, n.plan.out.kind, n.has_v, n.plan.flops_per_sample};
    return {ProductClass::Type::shared_rest, a.kind, layout(op.b).kind, n.plan.out.kind, n.has_v,
            n.has_v ? apply_flops(a) : 0.0};
  }

 private:
  const detail::Node<T>& node(const detail::Op& op) const { return s_.nodes[static_cast<std::size_t>(op.out)]; }
  const Layout<T>& layout(detail::MatRef m) const {
    return m.node ? s_.nodes[static_cast<std::size_t>(m.index)].plan.out
                  : *e_[static_cast<std::size_t>(m.index)].layout;
  }
  bool has_v(detail::MatRef m) const {
    return m.node ? s_.nodes[static_cast<std::size_t>(m.index)].has_v : e_[static_cast<std::size_t>(m.index)].has_v;
  }

  const detail::Schedule<T>& s_;
  const std::vector<detail::ElementInfo<T>>& e_;
};

// ---------------------------------------------------------------------------------------
// Machine figures

/// The largest cache of cpu0 (sysfs), else what sysconf knows, else 0 (unknown: always warm).
std::size_t last_level_cache_bytes() {
  std::size_t best = 0;
  int best_level = -1;
  for (int i = 0; i < 16; ++i) {
    const std::filesystem::path dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream level_file(dir / "level"), size_file(dir / "size"), type_file(dir / "type");
    int level = 0;
    std::string size, type;
    if (!(level_file >> level) || !(size_file >> size)) continue;
    if ((type_file >> type) && type == "Instruction") continue;
    std::size_t bytes = std::strtoull(size.c_str(), nullptr, 10);
    if (!size.empty() && (size.back() == 'K' || size.back() == 'k')) bytes <<= 10;
    if (!size.empty() && size.back() == 'M') bytes <<= 20;
    if (level > best_level) {
      best_level = level;
      best = bytes;
    }
  }
  if (best > 0) return best;
#ifdef _SC_LEVEL3_CACHE_SIZE
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return static_cast<std::size_t>(l3);
#endif
  return 0;
}

/// The buffers that stand in for the cache: twice it (at least 8 MiB) to evict it, four times
/// it (at least 64 MiB) for the miss curve.
std::size_t flusher_bytes(std::size_t cache) { return std::max<std::size_t>(2 * cache, 8 << 20); }
std::size_t miss_curve_bytes(std::size_t cache) { return std::max<std::size_t>(4 * cache, std::size_t{64} << 20); }

/// Evicts the caches by touching a buffer twice the last-level cache.
class CacheFlusher {
 public:
  explicit CacheFlusher(std::size_t cache) : buffer_(flusher_bytes(cache), 1) {}
  void operator()() {
    unsigned sum = 0;
    for (std::size_t i = 0; i < buffer_.size(); i += 64) sum += ++buffer_[i];
    sink_ = sum;
  }

 private:
  std::vector<unsigned char> buffer_;
  volatile unsigned sink_ = 0;
};

/// The miss curve (CostTable::miss_curve): seconds per byte of re-reading buffers of growing
/// size, from 128 KiB to 4× the last-level cache (at least 64 MiB), mapped linearly onto
/// [0, 1] between the fastest and the largest size and made non-decreasing.
std::vector<std::pair<double, double>> measure_miss_curve(std::size_t cache) {
  const auto largest = static_cast<double>(miss_curve_bytes(cache));
  std::vector<float> buffer(static_cast<std::size_t>(largest / sizeof(float)), 1.0f);
  volatile float sink = 0;
  std::vector<std::pair<double, double>> curve;
  for (double bytes = 128.0 * 1024; bytes <= largest * 1.0001; bytes *= std::sqrt(2.0)) {
    const Index count = static_cast<Index>(bytes / sizeof(float));
    auto pass = [&] {
      float acc = 0;
#pragma omp simd reduction(+ : acc)
      for (Index i = 0; i < count; ++i) acc += buffer[static_cast<std::size_t>(i)];
      sink = acc;
    };
    pass();  // brings in what fits
    std::vector<double> times;
    const auto t_start = Clock::now();
    while (times.size() < 5 || (since(t_start) < 0.02 && times.size() < 500)) {
      const auto t0 = Clock::now();
      pass();
      times.push_back(since(t0));
    }
    curve.emplace_back(bytes, median(std::move(times)) / bytes);
  }
  (void)sink;
  // Fast: the median of the sizes up to 1 MiB (cached whatever the machine); slow: the largest.
  std::vector<double> small;
  for (const auto& point : curve)
    if (point.first <= (1 << 20)) small.push_back(point.second);
  const double fast = median(small), slow = curve.back().second;
  // Shares, made non-decreasing from the largest size down (a noisy small size cannot raise
  // every larger one); below 5% is noise.
  double share = 1;
  for (auto it = curve.rbegin(); it != curve.rend(); ++it) {
    const double s = slow > fast ? std::clamp((it->second - fast) / (slow - fast), 0.0, 1.0) : 0.0;
    share = std::min(share, s < 0.05 ? 0.0 : s);
    it->second = share;
  }
  curve.back().second = 1;
  return curve;
}

/// Runs `f` for at least 20 ms (at least once): the clock speed and the caches settle.
template <class F>
void settle(F&& f) {
  const auto t0 = Clock::now();
  do f();
  while (since(t0) < 0.02);
}

template <class F>
double seconds_of(F&& f) {
  const auto t0 = Clock::now();
  f();
  return since(t0);
}

/// One clock read: the median gap between consecutive reads.
double timer_overhead() {
  std::vector<double> gaps(2001);
  for (double& g : gaps) {
    const auto a = Clock::now();
    const auto b = Clock::now();
    g = std::chrono::duration<double>(b - a).count();
  }
  return median(std::move(gaps));
}

/// The dispatch measurement's unit of work: about 0.2 µs of dependent arithmetic (summed into a
/// result that is used, and not inlined, so it stays). With an empty body one thread takes unit
/// after unit while it holds the loop counter's cache line, and dispatch looks far cheaper than
/// between real units.
[[gnu::noinline]] double opaque_unit(Index u) {
  double x = static_cast<double>(u);
  for (int i = 0; i < 200; ++i) x = x * 0.999999 + 1e-3;
  return x;
}

/// Barrier, dynamic dispatch (with `threads` threads and with one) and parallel region of
/// `threads` OpenMP threads: medians of 9 trials (the cost of moving a cache line between cores
/// varies from moment to moment on a shared machine).
void measure_openmp(CostTable& t, int threads) {
  t.barrier_threads = threads;
  constexpr int kRegions = 200, kBarriers = 2000;
  constexpr Index kUnits = 50000;
  std::vector<double> region, barrier, dispatch, dispatch_single;
  volatile int sink = 0;
  for (int trial = 0; trial < 9; ++trial) {
    auto t0 = Clock::now();
    for (int r = 0; r < kRegions; ++r) {
#pragma omp parallel num_threads(threads)
      {
        if (omp_get_thread_num() == 0) sink = r;
      }
    }
    region.push_back(since(t0) / kRegions);
    t0 = Clock::now();
#pragma omp parallel num_threads(threads)
    {
      for (int r = 0; r < kBarriers; ++r) {
#pragma omp barrier
      }
    }
    barrier.push_back(std::max(0.0, since(t0) - region.back()) / kBarriers);
    // Dispatch: what a worker pays per unit beyond the unit itself (timed on one thread).
    t0 = Clock::now();
    double acc = 0;
    for (Index u = 0; u < kUnits; ++u) acc += opaque_unit(u);
    const double alone = since(t0);
    t0 = Clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : acc)
    {
#pragma omp for schedule(dynamic, 1)
      for (Index u = 0; u < kUnits; ++u) acc += opaque_unit(u);
    }
    const double together = since(t0) - region.back() - barrier.back();
    dispatch.push_back(std::max(0.0, together * threads - alone) / kUnits);
    t0 = Clock::now();
#pragma omp parallel num_threads(1) reduction(+ : acc)
    {
#pragma omp for schedule(dynamic, 1)
      for (Index u = 0; u < kUnits; ++u) acc += opaque_unit(u);
    }
    dispatch_single.push_back(std::max(0.0, since(t0) - alone) / kUnits);
    if (acc < 0) sink = 1;
  }
  (void)sink;
  t.region_seconds = median(region);
  t.barrier_seconds = median(barrier);
  t.dispatch_seconds = median(dispatch);
  t.dispatch_single_seconds = median(dispatch_single);
}

// ---------------------------------------------------------------------------------------
// Calibration replay

/// A schedule planned on the calibration chain, with its buffers and operands (as Scanner::run
/// sets them up).
template <class T>
struct Replay {
  std::vector<detail::ElementInfo<T>> elements;
  Algorithm algorithm;
  detail::Schedule<T> schedule;
  detail::Workspace<T> ws;
  detail::Operands<T> operands;
  Gradients<T> out;
  Index batch = 1;

  /// Plans (the fill-in patterns are made here, under the planner's guard).
  Replay(const RandomProblem<T>& p, Algorithm a, int chunks)
      : elements(detail::scan_elements(p.chain)), algorithm(a), batch(p.chain.batch()) {
    schedule = detail::plan_schedule(elements, batch, algorithm, 1, chunks, 1).schedule;
  }
  /// What bind() allocates, and the patterns and schedule planning made (detail::run_memory).
  MemoryItem memory(const RandomProblem<T>& p) const {
    double bytes = 0;
    for (const MemoryItem& m : detail::run_memory(schedule, p.chain)) bytes += m.bytes;
    return {std::string("the ") + to_string(algorithm) + " schedule's workspace, gradients and fill-in", bytes};
  }
  void bind(const RandomProblem<T>& p) {
    ws.reserve(schedule, batch, 1);
    std::vector<Index> dims;
    detail::bind_operands(p.chain, p.g_last, out, operands, dims, 1);
  }
};

/// One part of one op for one sample, in the order one executor thread runs them.
struct Item {
  const detail::Op* op = nullptr;
  bool shared = false;
  Index sample = 0;
  int cls = 0;
  bool phase_start = false;  ///< first item of a phase (the cold regime flushes here)
};

/// Class ids shared by all the calibrated schedules.
class ClassIds {
 public:
  int operator()(const ProductClass& c) {
    const auto [it, added] = ids_.emplace(c, static_cast<int>(classes_.size()));
    if (added) classes_.push_back(c);
    return it->second;
  }
  const std::vector<ProductClass>& classes() const { return classes_; }

 private:
  std::map<ProductClass, int> ids_;
  std::vector<ProductClass> classes_;
};

/// The executor's order on one thread: the shared products of the pre-pass, then every phase's
/// per-sample parts (one item per sample: costs are per sample).
template <class T>
std::vector<Item> replay_items(const Replay<T>& r, ClassIds& ids) {
  const Classifier<T> c(r.schedule, r.elements);
  std::vector<Item> items;
  for (const detail::Phase& phase : r.schedule.phases) {
    if (!phase.has_shared_product) continue;
    const std::size_t first = items.size();
    for (const detail::Task& task : phase.tasks)
      for (const detail::Op& op : task.ops)
        if (c.shared_product(op)) items.push_back({&op, true, 0, ids(c.shared_part(op)), false});
    if (items.size() > first) items[first].phase_start = true;
  }
  for (const detail::Phase& phase : r.schedule.phases) {
    const std::size_t first = items.size();
    for (const detail::Task& task : phase.tasks)
      for (const detail::Op& op : task.ops) {
        const int cls = ids(c.sample_part(op));
        for (Index s = 0; s < r.batch; ++s) items.push_back({&op, false, s, cls, false});
      }
    if (items.size() > first) items[first].phase_start = true;
  }
  return items;
}

/// Runs every item once, timing runs of up to run_length[class] consecutive items of one class
/// together (one clock read per run, subtracted); flushes the caches at each phase when `flush`.
template <class T>
void replay_pass(Replay<T>& r, const std::vector<Item>& items, const std::vector<Index>& run_length, double timer,
                 CacheFlusher* flush, Scratch<T>& scratch, std::vector<std::vector<Sample>>& samples) {
  std::size_t i = 0;
  while (i < items.size()) {
    if (flush && items[i].phase_start) (*flush)();
    const int cls = items[i].cls;
    const Index most = run_length[static_cast<std::size_t>(cls)];
    std::size_t j = i;
    const auto t0 = Clock::now();
    do {
      const Item& it = items[j];
      detail::execute_op(r.schedule, r.operands, r.ws, r.batch, *it.op, it.shared, it.sample, it.sample + 1, scratch);
      ++j;
    } while (j < items.size() && items[j].cls == cls && !items[j].phase_start && static_cast<Index>(j - i) < most);
    const double count = static_cast<double>(j - i);
    samples[static_cast<std::size_t>(cls)].push_back({std::max(0.0, since(t0) - timer) / count, count});
    i = j;
  }
}

}  // namespace

template <class T>
double random_problem_bytes(const RandomChainSpec& spec) {
  const double d = static_cast<double>(spec.dim) * (spec.kind == ChainKind::mixed ? 1.5 : 1.0);
  double per_sample = d;  // diag, sdd (S is shared)
  if (spec.kind == ChainKind::dense || spec.kind == ChainKind::mixed) per_sample = d * d;
  if (spec.kind == ChainKind::csr) per_sample = 3 * d;
  const double n = static_cast<double>(spec.n), batch = static_cast<double>(spec.batch);
  const double values = n * per_sample * (spec.shared ? 1 : batch);
  const double vectors = (n + 1) * d * batch * (spec.affine ? 2 : 1);
  // Generated in double then cast (both held at the end); the scan's workspace can hold about
  // one more copy of the values (Blelloch's up-sweep nodes); ~200 bytes of bookkeeping each.
  return values * (8.0 + 2.0 * sizeof(T)) + vectors * (8.0 + 2.0 * sizeof(T)) + n * 200.0;
}

template <class T>
RandomChainSpec calibration_spec(const RandomChainSpec& spec, const CalibrationOptions& options) {
  RandomChainSpec cal = spec;
  cal.n = std::min(spec.n, options.max_n);
  // A power of two is a perfect Blelloch tree: without a clamped right edge (an element times
  // a subtree's product) that class would go uncalibrated. 4096 → 3072.
  if (cal.n > 4 && std::has_single_bit(static_cast<std::uint64_t>(cal.n))) cal.n -= cal.n / 4;
  // Per-sample costs: a larger batch only repeats the samples (batch 1 stays 1: its mm are shared).
  cal.batch = std::min(spec.batch, std::max<Index>(options.max_batch, spec.batch > 1 ? 2 : 1));
  // Keep the calibration chain's memory bounded (a long chain only repeats the classes).
  const double bytes = random_problem_bytes<T>(cal);
  if (bytes > options.max_bytes && cal.n > 64)
    cal.n = std::max<Index>(64, static_cast<Index>(static_cast<double>(cal.n) * options.max_bytes / bytes));
  return cal;
}

template <class T>
CostTable calibrate(const RandomChainSpec& spec, Algorithm algorithm, int chunks, const CalibrationOptions& options) {
  const char* op = "calibrate";
  if (options.max_n < 1)
    detail::raise<InvalidArgument>(op,
                                   "max_n (the calibration length) must be ≥ 1, got " + std::to_string(options.max_n));
  if (options.repeats < 1)
    detail::raise<InvalidArgument>(op, "repeats must be ≥ 1, got " + std::to_string(options.repeats));
  if (chunks < 0) detail::raise<InvalidArgument>(op, "chunks must be ≥ 0 (0 = one per worker)");
  if (options.max_batch < 1)
    detail::raise<InvalidArgument>(op, "max_batch must be ≥ 1, got " + std::to_string(options.max_batch));
  const RandomChainSpec cal = calibration_spec<T>(spec, options);
  CostTable table;
  table.cache_bytes = last_level_cache_bytes();
  // Everything calibration holds at once, checked before the chain is built and again, with the
  // schedules' workspaces, before those are allocated.
  const std::string what = std::string("calibrating on a ") + to_string(cal.kind) + " chain of n = " +
                           std::to_string(cal.n) + ", d = " + std::to_string(cal.dim) + ", batch " +
                           std::to_string(cal.batch);
  const std::string fix =
      "use a smaller --dim, --batch or --calibration-n (CalibrationOptions::max_n); the two cache buffers follow the "
      "last-level cache this machine reports (" + format_bytes(static_cast<double>(table.cache_bytes)) +
      ") and need that memory whatever the chain";
  std::vector<MemoryItem> need = {
      {"the calibration chain", random_problem_bytes<T>(cal)},
      {"the cache flusher (2 × the last-level cache)", static_cast<double>(flusher_bytes(table.cache_bytes))},
      {"the miss-curve buffer (4 × the last-level cache)", static_cast<double>(miss_curve_bytes(table.cache_bytes))}};
  check_memory(op, what, need, fix);
  const RandomProblem<T> problem = random_problem<T>(cal);
  // Progress: the OpenMP costs, the rough pass, the warm passes, the scanner's own work, the
  // cold passes and the miss curve.
  const int steps = 4 + 2 * options.repeats;
  int step = 0;
  const auto advance = [&] {
    if (options.progress) options.progress(++step, steps);
  };

  table.cores = omp_get_num_procs();
  table.calibration_n = cal.n;
  table.calibration_batch = cal.batch;
  table.precision = precision_name<T>();
  table.chain = std::string(to_string(spec.kind)) + (spec.shared ? " shared" : "") + (spec.affine ? " affine" : "") +
                " d=" + std::to_string(spec.dim) + " batch " + std::to_string(spec.batch);
  table.timer_seconds = timer_overhead();
  measure_openmp(table, std::max(2, table.cores));
  advance();

  // The schedules to calibrate: the requested one(s) and linear (BP, the reference).
  std::vector<Algorithm> algorithms{Algorithm::linear};
  if (algorithm == Algorithm::automatic)
    algorithms.insert(algorithms.end(), {Algorithm::hybrid, Algorithm::blelloch});
  else if (algorithm != Algorithm::linear)
    algorithms.push_back(algorithm);
  const int hybrid_chunks = chunks > 0 ? chunks : std::max(2, options.hybrid_chunks);
  std::vector<std::unique_ptr<Replay<T>>> replays;
  std::vector<std::vector<Item>> items;
  ClassIds ids;
  for (Algorithm a : algorithms) {
    replays.push_back(std::make_unique<Replay<T>>(problem, a, hybrid_chunks));
    need.push_back(replays.back()->memory(problem));
  }
  check_memory(op, what, need, fix);
  for (const auto& r : replays) {
    r->bind(problem);
    items.push_back(replay_items(*r, ids));
  }
  const std::size_t classes = ids.classes().size();

  // 1. Settle (a machine that was idle times slow for some milliseconds), then one pass timing
  //    every item alone: rough costs decide how many same-class products are timed together
  //    (about 2 µs per timing, so that the clock read is a small part of it).
  Scratch<T> scratch;
  std::vector<Index> run_length(classes, 1);
  std::vector<std::vector<Sample>> rough(classes), warm(classes), cold(classes);
  auto passes = [&](std::vector<std::vector<Sample>>& into, CacheFlusher* flush) {
    for (std::size_t r = 0; r < replays.size(); ++r)
      replay_pass(*replays[r], items[r], run_length, table.timer_seconds, flush, scratch, into);
  };
  settle([&] { passes(rough, nullptr); });
  rough.assign(classes, {});
  passes(rough, nullptr);
  advance();
  for (std::size_t c = 0; c < classes; ++c)
    run_length[c] =
        std::clamp<Index>(static_cast<Index>(std::ceil(2e-6 / std::max(weighted_median(rough[c]), 1e-9))), 1, 256);

  // 2. Warm: repeated passes over data that stays cached.
  for (int rep = 0; rep < options.repeats; ++rep) {
    passes(warm, nullptr);
    advance();
  }

  // 3. Scanner::run's own work: its time on one thread (linear, plan reused) minus the
  //    executor's and minus the output check, each timed alone on the same chain.
  Replay<T>& linear = *replays.front();
  double values = 0;
  for (Index k = 0; k < linear.out.size(); ++k) values += static_cast<double>(linear.out.g(k).size());
  volatile Index sink = 0;
  auto check_outputs = [&] {
    Index bad = -1;
    for (Index k = 0; k < linear.out.size(); ++k)
      if (!detail::all_finite(linear.out.g(k).data(), linear.out.g(k).size())) bad = k;
    sink = bad;
  };
  ScanOptions lin;
  lin.algorithm = Algorithm::linear;
  lin.threads = 1;
  lin.check_inputs = false;
  Scanner<T> scanner(lin);
  Gradients<T> out;
  auto run_scanner = [&] { scanner.run(problem.chain, problem.g_last, out); };
  settle(run_scanner);
  std::vector<double> run, execute, check_warm, check_cold;
  const int repeats = std::max(options.repeats, 9);
  for (int rep = 0; rep < repeats; ++rep) {
    run.push_back(seconds_of(run_scanner));
    execute.push_back(
        seconds_of([&] { detail::execute(linear.schedule, linear.operands, linear.ws, linear.batch, 1); }));
    check_warm.push_back(seconds_of(check_outputs));
  }
  table.check_warm_seconds = median(check_warm) / values;
  table.element_seconds =
      std::max(0.0, median(run) - median(execute) - median(check_warm)) / static_cast<double>(cal.n);
  advance();

  // 4. Cold: the caches flushed before every phase (and before the output check).
  CacheFlusher flush(table.cache_bytes);
  for (int rep = 0; rep < options.repeats; ++rep) {
    passes(cold, &flush);
    advance();
  }
  for (int rep = 0; rep < repeats; ++rep) {
    flush();
    check_cold.push_back(seconds_of(check_outputs));
  }
  table.check_cold_seconds = median(check_cold) / values;

  double timed_seconds = 0, timed_flops = 0;
  for (std::size_t c = 0; c < classes; ++c) {
    CostEntry e;
    e.product = ids.classes()[c];
    e.warm_seconds = weighted_median(warm[c]);
    e.cold_seconds = weighted_median(cold[c]);
    for (const Sample& s : warm[c]) e.instances += static_cast<Index>(s.weight);
    for (const Sample& s : cold[c]) e.instances += static_cast<Index>(s.weight);
    if (e.product.flops > 0) {
      timed_seconds += e.warm_seconds * static_cast<double>(e.instances);
      timed_flops += e.product.flops * static_cast<double>(e.instances);
    }
    table.entries.push_back(e);
  }
  std::sort(table.entries.begin(), table.entries.end(),
            [](const CostEntry& a, const CostEntry& b) { return a.product < b.product; });
  table.flop_seconds = timed_flops > 0 ? timed_seconds / timed_flops : 1e-9;

  // 5. Last, as streaming buffers larger than the cache unsettles the timings after it.
  table.miss_curve = measure_miss_curve(table.cache_bytes);
  advance();
  return table;
}

// ---------------------------------------------------------------------------------------
// The virtual-worker model

namespace {

/// Deals `units` in order to the earliest free of `workers` workers (all free at 0), as
/// `omp for schedule(dynamic, 1)` does; returns the time the last one finishes.
template <class Cost>
double makespan(Index units, int workers, Cost&& cost) {
  double end = 0;
  if (units <= 0) return 0;
  if (workers == 1) {
    for (Index u = 0; u < units; ++u) end += cost(u);
    return end;
  }
  if (units <= workers) {
    for (Index u = 0; u < units; ++u) end = std::max(end, cost(u));
    return end;
  }
  std::priority_queue<double, std::vector<double>, std::greater<>> free_at;
  for (int w = 0; w < workers; ++w) free_at.push(0.0);
  for (Index u = 0; u < units; ++u) {
    const double t = free_at.top() + cost(u);
    free_at.pop();
    free_at.push(t);
    end = std::max(end, t);
  }
  return end;
}

struct Prediction {
  Algorithm algorithm = Algorithm::linear;
  int chunks = 1;
  double scan = 0, overhead = 0, work = 0, barriers = 0, cold = 0, bytes = 0;
  Index phases = 0, levels = 0, mm = 0, mv = 0, extrapolated = 0;
  double seconds() const { return scan + overhead; }
};

template <class T>
Prediction predict(const std::vector<detail::ElementInfo<T>>& elements, Index batch, Algorithm algorithm, int workers,
                   int chunks, const CostTable& table) {
  const detail::PlannedSchedule<T> planned =
      detail::plan_schedule(elements, batch, algorithm, workers, chunks, workers);
  const detail::Schedule<T>& s = planned.schedule;
  Prediction p;
  p.algorithm = planned.algorithm;
  p.chunks = planned.chunks;
  p.phases = static_cast<Index>(s.phases.size());
  p.levels = s.stats.levels;
  p.mm = s.stats.mm;
  p.mv = s.stats.mv;
  p.bytes = working_set_bytes(elements, s, batch);
  p.cold = table.cold_weight(p.bytes);

  // Cost of each task's batch-independent part (pre-pass) and of one sample of it.
  const Classifier<T> classify(s, elements);
  std::map<ProductClass, std::pair<double, bool>> memo;
  auto cost = [&](const ProductClass& c) {
    auto it = memo.find(c);
    if (it == memo.end()) {
      bool extrapolated = false;
      const double seconds = table.cost(c, p.cold, &extrapolated);
      it = memo.emplace(c, std::make_pair(seconds, extrapolated)).first;
    }
    return it->second;
  };
  std::vector<std::vector<double>> shared_cost(s.phases.size()), sample_cost(s.phases.size());
  double per_sample_work = 0, shared_work = 0;
  for (std::size_t ph = 0; ph < s.phases.size(); ++ph) {
    for (const detail::Task& task : s.phases[ph].tasks) {
      double shared = 0, sample = 0;
      for (const detail::Op& op : task.ops) {
        bool extrapolated = false;
        if (classify.shared_product(op)) {
          const auto [c, e] = cost(classify.shared_part(op));
          shared += c;
          extrapolated = e;
        }
        const auto [c, e] = cost(classify.sample_part(op));
        sample += c;
        if (extrapolated || e) ++p.extrapolated;
      }
      shared_cost[ph].push_back(shared);
      sample_cost[ph].push_back(sample);
      shared_work += shared;
      per_sample_work += sample;
    }
  }
  p.work = shared_work + per_sample_work * static_cast<double>(batch);

  // The executor with `workers` threads (scan/cpu/executor.cpp).
  const double barrier = table.barrier(workers), dispatch = table.dispatch(workers);
  for (std::size_t ph = 0; ph < s.phases.size(); ++ph) {
    if (!s.phases[ph].has_shared_product) continue;
    const auto& c = shared_cost[ph];
    p.scan += makespan(static_cast<Index>(c.size()), workers,
                       [&](Index u) { return c[static_cast<std::size_t>(u)] + dispatch; }) +
              barrier;
    p.barriers += barrier;
  }
  if (detail::runs_sample_major(batch, workers)) {
    Index block = 0;  // the largest block of samples a worker runs
    for (int w = 0; w < workers; ++w) block = std::max(block, batch * (w + 1) / workers - batch * w / workers);
    p.scan += static_cast<double>(block) * per_sample_work;
  } else {
    for (std::size_t ph = 0; ph < s.phases.size(); ++ph) {
      const auto& c = sample_cost[ph];
      p.scan += makespan(static_cast<Index>(c.size()) * batch, workers,
                         [&](Index u) { return c[static_cast<std::size_t>(u / batch)] + dispatch; }) +
                barrier;
      p.barriers += barrier;
    }
  }
  p.scan += table.region(workers);

  // Scanner::run around the executor: per-element bookkeeping (validation, plan-reuse check,
  // operand set-up) — sequential below kParallelElements, else spread over the workers in five
  // parallel regions — and the output check spread over the workers in its own region.
  const Index n = static_cast<Index>(elements.size()) - 1;
  double values = static_cast<double>(elements[1].layout->cols * batch);
  for (Index i = 1; i <= n; ++i)
    values += static_cast<double>(elements[static_cast<std::size_t>(i)].layout->rows * batch);
  const double check = (1 - p.cold) * table.check_warm_seconds + p.cold * table.check_cold_seconds;
  const bool parallel_elements = n >= kParallelElements;
  p.overhead = table.element_seconds * static_cast<double>(n) / (parallel_elements ? workers : 1) +
               values * check / workers + table.region(workers) * (parallel_elements ? 6 : 1);
  return p;
}

}  // namespace

template <class T>
SimulationResult simulate(const RandomChainSpec& spec, Algorithm algorithm, int workers, int chunks,
                          const CostTable& table) {
  const char* op = "simulate";
  if (workers < 1) detail::raise<InvalidArgument>(op, "workers must be ≥ 1, got " + std::to_string(workers));
  if (chunks < 0)
    detail::raise<InvalidArgument>(op, "chunks must be ≥ 0 (0 = one per worker), got " + std::to_string(chunks));
  if (!table.precision.empty() && table.precision != precision_name<T>())
    detail::raise<InvalidArgument>(op, "the cost table was calibrated in " + table.precision +
                                           " but the simulation is " + precision_name<T>() +
                                           "; calibrate with the same precision");
  // Layouts only: every position points at one layout, unless the chain is mixed.
  std::vector<detail::ElementInfo<T>> elements;
  std::optional<Layout<T>> layout;
  std::optional<RandomProblem<T>> problem;
  if (spec.kind == ChainKind::mixed) {
    constexpr double kLimit = 2.0 * (1 << 30);
    const std::string fix = "use a smaller n or a homogeneous kind (dense, diag, csr, sdd)";
    if (random_problem_bytes<T>(spec) > kLimit)
      detail::raise<InvalidArgument>(
          op, "a mixed chain's layouts come from the real generator, which would need about " +
                  std::to_string(static_cast<long long>(random_problem_bytes<T>(spec) / (1 << 20))) +
                  " MiB for n = " + std::to_string(spec.n) + " (limit 2 GiB); " + fix);
    check_memory(op, "a mixed chain's layouts from the real generator (n = " + std::to_string(spec.n) + ")",
                 {{"the real chain", random_problem_bytes<T>(spec)}}, fix);
    problem.emplace(random_problem<T>(spec));
    elements = detail::scan_elements(problem->chain);
  } else {
    layout.emplace(random_chain_layout<T>(spec));
    elements.assign(static_cast<std::size_t>(spec.n) + 1, {&*layout, spec.affine});
    elements[0] = {};
  }

  const Prediction scan = predict(elements, spec.batch, algorithm, workers, chunks, table);
  const Prediction bp =
      scan.algorithm == Algorithm::linear ? scan : predict(elements, spec.batch, Algorithm::linear, workers, 1, table);
  SimulationResult r;
  r.algorithm = scan.algorithm;
  r.workers = workers;
  r.chunks = scan.chunks;
  r.n = spec.n;
  r.batch = spec.batch;
  r.seconds = scan.seconds();
  r.scan_seconds = scan.scan;
  r.overhead_seconds = scan.overhead;
  r.bp_seconds = bp.seconds();
  r.bp_scan_seconds = bp.scan;
  r.speedup = r.seconds > 0 ? r.bp_seconds / r.seconds : 0;
  r.phases = scan.phases;
  r.levels = scan.levels;
  r.mm = scan.mm;
  r.mv = scan.mv;
  r.work_seconds = scan.work;
  r.barrier_seconds = scan.barriers;
  r.cold_weight = scan.cold;
  r.working_set_bytes = scan.bytes;
  r.extrapolated_ops = scan.extrapolated + (scan.algorithm == Algorithm::linear ? 0 : bp.extrapolated);
  return r;
}

template <class T>
double measure(const RandomProblem<T>& problem, Algorithm algorithm, int threads, int chunks, int repeats) {
  const char* op = "measure";
  if (threads < 1) detail::raise<InvalidArgument>(op, "threads must be ≥ 1, got " + std::to_string(threads));
  if (repeats < 1) detail::raise<InvalidArgument>(op, "repeats must be ≥ 1, got " + std::to_string(repeats));
  ScanOptions options;
  options.algorithm = algorithm;
  options.threads = threads;
  options.chunks = chunks;
  options.check_inputs = false;
  Scanner<T> scanner(options);
  Gradients<T> out;
  // Warm-up: plans, allocates, and runs for at least 20 ms (the clock and the caches settle).
  const auto warm_up = Clock::now();
  for (int r = 0; r < 3 || (since(warm_up) < 0.02 && r < 1000); ++r) scanner.run(problem.chain, problem.g_last, out);
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    scanner.run(problem.chain, problem.g_last, out);
    times.push_back(since(t0));
  }
  return median(std::move(times));
}

template <class T>
double measure(const RandomChainSpec& spec, Algorithm algorithm, int threads, int chunks, int repeats) {
  return measure(random_problem<T>(spec), algorithm, threads, chunks, repeats);
}

#define BPPSA_SIMULATE_INSTANTIATE(T)                                                                   \
  template double random_problem_bytes<T>(const RandomChainSpec&);                                      \
  template CostTable calibrate<T>(const RandomChainSpec&, Algorithm, int, const CalibrationOptions&);   \
  template RandomChainSpec calibration_spec<T>(const RandomChainSpec&, const CalibrationOptions&);      \
  template SimulationResult simulate<T>(const RandomChainSpec&, Algorithm, int, int, const CostTable&); \
  template double measure<T>(const RandomProblem<T>&, Algorithm, int, int, int);                        \
  template double measure<T>(const RandomChainSpec&, Algorithm, int, int, int);
BPPSA_SIMULATE_INSTANTIATE(float)
BPPSA_SIMULATE_INSTANTIATE(double)
#undef BPPSA_SIMULATE_INSTANTIATE

}  // namespace bppsa
