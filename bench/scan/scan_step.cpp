// bench_scan: the scan engine on random chains (docs/method.md §2), Google Benchmark.
//
// Benchmarks are named  <case>/<algorithm>/threads:<t>,  e.g.
//   dense_d20_n60000_b16/blelloch/threads:2
// with <case> one of (N = number of Jacobians, d = dimension, b = batch):
//   dense_d20_n2000_b16     dense 20×20 per-sample Jacobians
//   dense_d20_n60000_b16    the same, RNN T = 30000 scale (~1.5 GB of float inputs)
//   diag_d256_n100000_b1    diagonal 256 (elementwise recurrences), one sample
//   diag_d256_n100000_b16   the same, batch 16
//   sdd_d20_n2000_b16       shared dense × per-sample diagonal (RNN W_hh^T·diag(1−h²))
//   csr_d256_n2000_b4       banded CSR (3 per row), fills in under Blelloch
// and <algorithm> linear | blelloch | hybrid, <t> = 1 | 2 (ScanOptions::threads; hybrid uses
// one chunk per thread; input checks off).
//
// Each problem is generated once (cached) when its first benchmark runs. Each benchmark
// builds one Scanner, runs it once untimed (planning, allocation), compares that result with
// sequential BP (counter rel_err; a benchmark whose error exceeds 1e-3 is reported as an
// error) and then times Scanner::run with the plan reused, as in training.
//
// Usage:
//   bench_scan [--bppsa_tiny] [Google Benchmark flags]
//   --benchmark_filter=REGEX     selects benchmarks, e.g. 'dense_d20_n2000' or '/hybrid/'
//                                or 'diag.*threads:2'; --benchmark_list_tests lists them.
//   --benchmark_repetitions=K    default 5 (medians and stddev of K repetitions are reported;
//                                --benchmark_report_aggregates_only=false shows each one).
//   --benchmark_min_time=S       default 0.5 s per repetition.
//   --bppsa_tiny                 smoke mode: the same cases with N / 100, 1 repetition,
//                                min time 0.01 s; runs in seconds. Names carry the real N.
// Counters (medians over repetitions): levels (critical path as executed), depth (longest
// dependency chain), mm, mv (per chain), chunks, GFLOP/s
// (ScanStats::flops over the measured wall time), workspace_MB, plan_ms (first, untimed
// run), rel_err (vs linear), others_cpu (share of the machine's CPU time used by OTHER
// processes while the benchmark ran, from /proc/stat: > 0.05 means the timing is suspect). Speedups over linear are
// computed by bench/scan/summarize_scan.py.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bppsa/bppsa.hpp"

namespace {

using namespace bppsa;
using T = float;

struct Case {
  std::string name;
  RandomChainSpec spec;
  double min_time;  // seconds per repetition (0: the flag's value)
};

/// A case's problem and its sequential-BP reference, generated on first use.
struct Problem {
  RandomProblem<T> p;
  Gradients<T> reference;
};

std::map<std::string, std::unique_ptr<Problem>>& problems() {
  static std::map<std::string, std::unique_ptr<Problem>> cache;
  return cache;
}

const Problem& problem(const Case& c) {
  auto& slot = problems()[c.name];
  if (!slot) {
    const auto t0 = std::chrono::steady_clock::now();
    auto pr = std::make_unique<Problem>(Problem{random_problem<T>(c.spec), {}});
    const auto t1 = std::chrono::steady_clock::now();
    ScanOptions lin;
    lin.algorithm = Algorithm::linear;
    lin.threads = 1;
    lin.check_inputs = false;
    Scanner<T>(lin).run(pr->p.chain, pr->p.g_last, pr->reference);
    const auto t2 = std::chrono::steady_clock::now();
    std::fprintf(stderr, "[bench_scan] %s: generated in %.2f s, reference BP in %.3f s\n", c.name.c_str(),
                 std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
    slot = std::move(pr);
  }
  return *slot;
}

/// Largest over k and samples of ||g_k − ref_k|| / ||ref_k||.
double max_relative_error(const Gradients<T>& g, const Gradients<T>& ref) {
  if (g.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (Index k = 0; k < ref.size(); ++k) {
    if (g.g(k).rows() != ref.g(k).rows() || g.g(k).cols() != ref.g(k).cols()) return INFINITY;
    for (Index b = 0; b < ref.g(k).cols(); ++b) {
      const double den = ref.g(k).col(b).template cast<double>().norm();
      const double num = (g.g(k).col(b) - ref.g(k).col(b)).template cast<double>().norm();
      const double e = den > 0 ? num / den : num;
      if (!(e <= worst)) worst = e;  // NaN propagates
    }
  }
  return worst;
}

/// The Scanner of the benchmark that ran last, kept across its repetitions so the plan is
/// made (and the result checked) once per benchmark; replaced when the next one starts.
struct Live {
  std::string name;
  Scanner<T> scanner;
  Gradients<T> out;
  double plan_ms = 0;
  double rel_err = 0;
  std::string error;
};
std::unique_ptr<Live> live;

/// CPU time of the whole machine (busy and total, in clock ticks, all CPUs) and of this
/// process: what other processes used while a benchmark ran (interference on a shared box).
struct CpuSample {
  double busy = 0, total = 0, self = 0;
  static CpuSample now() {
    CpuSample c;
    std::ifstream st("/proc/stat");
    std::string cpu;
    double v[10] = {};
    st >> cpu;
    for (double& x : v) st >> x;
    for (int i = 0; i < 8; ++i) c.total += v[i];  // guest time is already in user/nice
    c.busy = c.total - v[3] - v[4];               // minus idle and iowait
    std::ifstream self("/proc/self/stat");
    std::string line;
    std::getline(self, line);
    const auto p = line.rfind(')');  // fields after the command name; utime, stime are 14, 15
    if (p != std::string::npos) {
      std::istringstream rest(line.substr(p + 2));
      std::string f;
      for (int field = 3; field <= 15 && rest >> f; ++field)
        if (field == 14 || field == 15) c.self += std::stod(f);
    }
    return c;
  }
};

void bm_scan(benchmark::State& state, const Case* c, Algorithm algo, int threads, const std::string& name) {
  const Problem& pr = problem(*c);
  if (!live || live->name != name) {
    live.reset();  // free the previous benchmark's workspace first
    ScanOptions opt;
    opt.algorithm = algo;
    opt.threads = threads;
    opt.chunks = 0;
    opt.check_inputs = false;
    live = std::make_unique<Live>(Live{name, Scanner<T>(opt), {}, 0, 0, {}});
    try {
      const ScanStats& st = live->scanner.run(pr.p.chain, pr.p.g_last, live->out);  // plans, allocates
      live->plan_ms = 1e3 * st.plan_seconds;
      live->rel_err = max_relative_error(live->out, pr.reference);
      if (!(live->rel_err <= 1e-3))
        live->error = "result differs from sequential BP: max rel err " + std::to_string(live->rel_err);
    } catch (const std::exception& e) {
      live->error = std::string("warm-up run threw: ") + e.what();
    }
  }
  if (!live->error.empty()) {
    state.SkipWithError(live->error.c_str());
    return;
  }
  const CpuSample before = CpuSample::now();
  for (auto _ : state) {
    const ScanStats& st = live->scanner.run(pr.p.chain, pr.p.g_last, live->out);
    benchmark::DoNotOptimize(&st);
    benchmark::ClobberMemory();
  }
  const CpuSample after = CpuSample::now();
  const ScanStats& st = live->scanner.stats();
  if (!st.plan_reused) {
    state.SkipWithError("the plan was not reused by the timed runs");
    return;
  }
  state.counters["levels"] = static_cast<double>(st.levels);
  state.counters["depth"] = static_cast<double>(st.depth);
  state.counters["mm"] = static_cast<double>(st.mm);
  state.counters["mv"] = static_cast<double>(st.mv);
  state.counters["chunks"] = st.chunks;
  state.counters["GFLOP/s"] = benchmark::Counter(st.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["workspace_MB"] = static_cast<double>(st.workspace_bytes) / (1 << 20);
  state.counters["plan_ms"] = live->plan_ms;
  state.counters["rel_err"] = live->rel_err;
  if (after.total - before.total >= 50)  // clock ticks are 10 ms: no meaningful share below that
    state.counters["others_cpu"] =
        std::max(0.0, (after.busy - before.busy) - (after.self - before.self)) / (after.total - before.total);
}

std::vector<Case> cases(bool tiny) {
  auto mk = [tiny](const char* kind_name, ChainKind kind, Index dim, Index n, Index batch, double min_time) {
    if (tiny) n = std::max<Index>(10, n / 100);
    Case c;
    c.name =
        std::string(kind_name) + "_d" + std::to_string(dim) + "_n" + std::to_string(n) + "_b" + std::to_string(batch);
    c.spec.n = n;
    c.spec.dim = dim;
    c.spec.batch = batch;
    c.spec.kind = kind;
    c.spec.seed = 4202;
    c.min_time = tiny ? 0 : min_time;
    return c;
  };
  return {
      mk("dense", ChainKind::dense, 20, 2000, 16, 0),           mk("dense", ChainKind::dense, 20, 60000, 16, 0),
      mk("diag", ChainKind::diagonal, 256, 100000, 1, 0),       mk("diag", ChainKind::diagonal, 256, 100000, 16, 0),
      mk("sdd", ChainKind::shared_dense_diag, 20, 2000, 16, 0), mk("csr", ChainKind::csr, 256, 2000, 4, 0),
  };
}

bool has_flag(int argc, char** argv, const char* prefix) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag, then defaults for Google Benchmark's flags unless given.
  std::vector<char*> args;
  bool tiny = false;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strcmp(argv[i], "--bppsa_tiny") == 0) {
      tiny = true;
      continue;
    }
    args.push_back(argv[i]);
  }
  static std::string reps = std::string("--benchmark_repetitions=") + (tiny ? "1" : "5");
  static std::string aggr = "--benchmark_report_aggregates_only=true";
  static std::string min_time = "--benchmark_min_time=0.01";
  if (!has_flag(argc, argv, "--benchmark_repetitions")) args.insert(args.begin() + 1, reps.data());
  if (!has_flag(argc, argv, "--benchmark_report_aggregates_only") &&
      !has_flag(argc, argv, "--benchmark_display_aggregates_only"))
    args.insert(args.begin() + 1, aggr.data());
  if (tiny && !has_flag(argc, argv, "--benchmark_min_time")) args.insert(args.begin() + 1, min_time.data());
  int n_args = static_cast<int>(args.size());
  args.push_back(nullptr);

  static const std::vector<Case> all = cases(tiny);
  for (const Case& c : all)
    for (int threads : {1, 2})
      for (Algorithm algo : {Algorithm::linear, Algorithm::blelloch, Algorithm::hybrid}) {
        const std::string name = c.name + "/" + to_string(algo) + "/threads:" + std::to_string(threads);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), [&c, algo, threads, name](benchmark::State& state) {
          bm_scan(state, &c, algo, threads, name);
        });
        b->UseRealTime()->Unit(benchmark::kMillisecond);
        if (c.min_time > 0) b->MinTime(c.min_time);
      }

  benchmark::Initialize(&n_args, args.data());
  if (benchmark::ReportUnrecognizedArguments(n_args, args.data())) return 1;
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("omp_max_threads", std::to_string(omp_get_max_threads()));
  benchmark::AddCustomContext("precision", "float");
  benchmark::AddCustomContext("bppsa_tiny", tiny ? "true" : "false");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  live.reset();
  problems().clear();
  return 0;
}
