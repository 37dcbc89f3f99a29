// bench_cpu_scaling: the CPU scan engine on one random chain at several thread counts, measured
// and predicted by `bppsa simulate`'s model; a plain program (the GPU machine has no Google
// Benchmark). bench/cpu_scaling/run.sh runs it (through bench/cpu_scaling/cpu_scaling.py).
//
//   bench_cpu_scaling --kind diag --dim 256 --n 100000 --batch 1 --algos linear,blelloch,hybrid
//                     --threads 1,2,4,8,16 --reps 5 --warmup 2 [--no-measure] [--predict]
//
// Measured: the chain (random_problem, as bench_scan and `bppsa simulate --validate` build it) is
// generated once; for every algorithm and thread count up to this machine's cores (larger counts
// are skipped and listed): one Scanner, a first run that plans and allocates (untimed, its result
// compared with sequential BP: rel_err), `--warmup` untimed runs, then `--reps` timed runs of
// Scanner::run with the plan reused, as in training (median, min, max and every sample). hybrid
// uses chunks = 0, one per thread, as simulate does by default; input checks off, as simulate's
// own measure().
// --predict: what `bppsa simulate` prints for the same chain, from the same library calls with the
// command's defaults: ONE calibrate(spec, automatic) on this machine (it times the product classes
// of the linear, hybrid and blelloch schedules alike, plus OpenMP's barrier, dispatch and region
// costs), then simulate(spec, algorithm, p) for every algorithm and every --threads value (virtual
// workers: counts above the cores are predicted too). One calibration instead of one per algorithm
// (three `bppsa simulate` runs) keeps the run short.
// One JSON object on stdout; progress on stderr. Exit 0, 1 on an error, 2 on bad flags, 3 when a
// result differs from sequential BP by more than 1e-3.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bppsa/bppsa.hpp"
#include "timing.hpp"

namespace {

using namespace bppsa;
using json = nlohmann::json;
using T = float;
using bppsa_bench::Clock;
using bppsa_bench::seconds_since;
using bppsa_bench::stats;

struct Args {
  std::string kind = "diag";
  Index dim = 256, n = 100000, batch = 1;
  std::vector<std::string> algos{"linear", "blelloch", "hybrid"};
  std::vector<int> threads{1, 2, 4, 8, 16};
  int reps = 5, warmup = 2;
  bool measure = true, predict = false;
  int calibration_repeats = 5;  // simulate's --repeats default
  std::uint64_t seed = 4202;
};

/// A result that disagrees with sequential BP: exit 3, as the CLI's failed gradient checks.
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Largest over k and samples of ||g_k − ref_k|| / ||ref_k|| (NaN propagates).
double max_relative_error(const Gradients<T>& g, const Gradients<T>& ref) {
  if (g.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (Index k = 0; k < ref.size(); ++k)
    for (Index b = 0; b < ref.g(k).cols(); ++b) {
      const double den = ref.g(k).col(b).template cast<double>().norm();
      const double num = (g.g(k).col(b) - ref.g(k).col(b)).template cast<double>().norm();
      const double e = den > 0 ? num / den : num;
      if (!(e <= worst)) worst = e;
    }
  return worst;
}

void measure(const Args& a, const RandomChainSpec& spec, const std::vector<Algorithm>& algos, json& out);
void predict(const Args& a, const RandomChainSpec& spec, const std::vector<Algorithm>& algos, json& out);

int run(const Args& a) {
  RandomChainSpec spec;
  spec.kind = parse_chain_kind(a.kind);
  spec.dim = a.dim;
  spec.n = a.n;
  spec.batch = a.batch;
  spec.seed = a.seed;
  std::vector<Algorithm> algos;
  for (const std::string& s : a.algos) algos.push_back(parse_algorithm(s));
  if (a.measure)
    check_memory("bench_cpu_scaling",
                 "a " + a.kind + " chain of N = " + std::to_string(a.n) + ", d = " + std::to_string(a.dim) +
                     ", batch " + std::to_string(a.batch),
                 // The chain and one scan's gradients and workspace; the reference's gradients again.
                 {{"Jacobians, gradients and workspace", 1.5 * random_problem_bytes<T>(spec)}},
                 "use a smaller --n, --dim or --batch");
  const int cores = omp_get_num_procs();
  json out = {{"kind", a.kind}, {"dim", a.dim},      {"n", a.n},           {"batch", a.batch},
              {"seed", a.seed}, {"cores", cores},    {"cpu", cpu_model()}, {"precision", "float"},
              {"reps", a.reps}, {"warmup", a.warmup}};
  if (a.measure) measure(a, spec, algos, out);
  if (a.predict) predict(a, spec, algos, out);
  std::cout << out.dump() << "\n";
  return 0;
}

void measure(const Args& a, const RandomChainSpec& spec, const std::vector<Algorithm>& algos, json& out) {
  const int cores = omp_get_num_procs();
  auto t0 = Clock::now();
  const RandomProblem<T> p = random_problem<T>(spec);
  const double generate_s = seconds_since(t0);

  // The reference: sequential BP on one thread.
  ScanOptions ref_options;
  ref_options.algorithm = Algorithm::linear;
  ref_options.threads = 1;
  ref_options.check_inputs = false;
  Gradients<T> reference;
  Scanner<T>(ref_options).run(p.chain, p.g_last, reference);

  json records = json::array();
  std::vector<int> skipped;
  for (int threads : a.threads) {
    if (threads > cores) {
      skipped.push_back(threads);
      continue;
    }
    for (Algorithm algo : algos) {
      ScanOptions o;
      o.algorithm = algo;
      o.threads = threads;
      o.chunks = 0;  // hybrid: one chunk per thread
      o.check_inputs = false;
      Scanner<T> scanner(o);
      Gradients<T> out;
      const ScanStats first = scanner.run(p.chain, p.g_last, out);  // plans, allocates
      const double rel_err = max_relative_error(out, reference);
      if (!(rel_err <= 1e-3))
        throw CheckFailed(std::string(to_string(algo)) + " with " + std::to_string(threads) +
                          " threads differs from sequential BP: max rel err " + std::to_string(rel_err));
      for (int r = 0; r < a.warmup; ++r) scanner.run(p.chain, p.g_last, out);
      std::vector<double> times;
      for (int r = 0; r < a.reps; ++r) {
        t0 = Clock::now();
        scanner.run(p.chain, p.g_last, out);
        times.push_back(seconds_since(t0));
      }
      const ScanStats& st = scanner.stats();
      if (!st.plan_reused)
        detail::raise<InvalidArgument>("bench_cpu_scaling", "the plan was not reused by the timed runs");
      json rec = {{"algorithm", to_string(algo)},
                  {"threads", threads},
                  {"chunks", st.chunks},
                  {"levels", st.levels},
                  {"mm", st.mm},
                  {"mv", st.mv},
                  {"flops", st.flops},
                  {"workspace_bytes", st.workspace_bytes},
                  {"plan_s", first.plan_seconds},
                  {"rel_err", rel_err},
                  {"time", stats(times)}};
      std::cerr << "[bench_cpu_scaling] " << a.kind << " d" << a.dim << " n" << a.n << " b" << a.batch << " "
                << to_string(algo) << " threads " << threads << ": " << 1e3 * rec["time"]["median"].get<double>()
                << " ms\n";
      records.push_back(std::move(rec));
    }
  }
  out["generate_s"] = generate_s;
  out["skipped_threads"] = skipped;
  out["records"] = std::move(records);
}

void predict(const Args& a, const RandomChainSpec& spec, const std::vector<Algorithm>& algos, json& out) {
  CalibrationOptions options;  // `bppsa simulate`'s defaults, but --repeats
  options.repeats = a.calibration_repeats;
  const auto t0 = Clock::now();
  const CostTable table = calibrate<T>(spec, Algorithm::automatic, 0, options);
  const double calibrate_s = seconds_since(t0);
  json rows = json::array();
  for (Algorithm algo : algos)
    for (int p : a.threads) {
      const SimulationResult r = simulate<T>(spec, algo, p, 0, table);
      rows.push_back({{"algorithm", to_string(r.algorithm)},
                      {"threads", p},
                      {"chunks", r.chunks},
                      {"levels", r.levels},
                      {"predicted_s", r.seconds},
                      {"scan_s", r.scan_seconds},
                      {"overhead_s", r.overhead_seconds},
                      {"bp_predicted_s", r.bp_seconds},
                      {"speedup_over_bp", r.speedup},
                      {"barrier_s", r.barrier_seconds},
                      {"cold_weight", r.cold_weight},
                      {"working_set_bytes", r.working_set_bytes},
                      {"extrapolated_ops", r.extrapolated_ops}});
    }
  out["calibration"] = {{"seconds", calibrate_s},
                        {"repeats", options.repeats},
                        {"n", table.calibration_n},
                        {"cache_bytes", table.cache_bytes},
                        {"barrier_s", table.barrier_seconds},
                        {"barrier_threads", table.barrier_threads},
                        {"dispatch_s", table.dispatch_seconds},
                        {"region_s", table.region_seconds},
                        {"summary", table.summary()}};
  out["predictions"] = std::move(rows);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cpu_scaling: the CPU scan engine on one random chain at several thread counts (JSON on stdout)"};
  Args a;
  app.add_option("--kind", a.kind, "dense | diag | csr | sdd (shared dense × per-sample diagonal: the RNN's)")
      ->check(CLI::IsMember({"dense", "diag", "csr", "sdd"}));
  app.add_option("--dim", a.dim)->check(CLI::Range(Index{1}, Index{100000}));
  app.add_option("--n", a.n)->check(CLI::Range(Index{1}, Index{10000000}));
  app.add_option("--batch", a.batch)->check(CLI::Range(Index{1}, Index{100000}));
  app.add_option("--algos", a.algos, "comma-separated: linear, blelloch, hybrid")
      ->delimiter(',')
      ->check(CLI::IsMember({"linear", "blelloch", "hybrid"}));
  app.add_option("--threads", a.threads, "comma-separated thread counts (above the cores: skipped)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--reps", a.reps, "timed runs per (algorithm, threads)")->check(CLI::Range(1, 1000));
  app.add_option("--warmup", a.warmup, "untimed runs after the first (planning) one")->check(CLI::Range(0, 1000));
  app.add_flag("!--no-measure", a.measure, "only predict");
  app.add_flag("--predict", a.predict, "calibrate on this machine and predict every (algorithm, threads)");
  app.add_option("--calibration-repeats", a.calibration_repeats, "simulate's --repeats (5)")->check(CLI::Range(1, 100));
  app.add_option("--seed", a.seed);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(a);
  } catch (const CheckFailed& e) {
    std::cerr << "bench_cpu_scaling: check failed: " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "bench_cpu_scaling: error: " << e.what() << "\n";
    return 1;
  }
}
