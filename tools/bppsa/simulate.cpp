// `bppsa simulate`: predicted scan times on P virtual workers from per-product costs calibrated on
// this machine, the speedup over BP, and (--validate) the prediction against measured runs at
// every P this machine has. The model is documented in docs/simulate.md.
#include "bppsa/analysis/simulate.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "bppsa/bppsa.hpp"
#include "commands.hpp"
#include "progress.hpp"

namespace bppsa::cli {
namespace {

struct Args {
  std::string algo = "auto";
  std::vector<Index> n{1000, 10000, 100000};
  std::vector<int> p{1, 2, 4, 16, 64, 256, 1024};
  Index dim = 20;
  std::string kind = "dense";
  Index batch = 1;
  int chunks = 0;
  std::string precision = "float";
  bool shared = false;
  bool affine = false;
  Index calibration_n = 4096;
  int repeats = 5;
  bool validate = false;
  std::string json;
  std::uint64_t seed = 1;
  bool no_progress = false;
};

constexpr Index kMaxN = 10000000;                  // the schedule alone takes a few hundred bytes per element
constexpr double kScheduleBytes = 350;             // measured: 3.0–3.4 GB planning n = 10^7 (linear–blelloch)
constexpr double kMeasureLimit = 2.0 * (1 << 30);  // the real chain --validate builds

/// Rethrows an InvalidArgument from a parser with the flag's name in front.
template <class F>
auto parse_flag(const char* flag, F&& parse) {
  try {
    return parse();
  } catch (const InvalidArgument& e) {
    detail::raise<InvalidArgument>("simulate", std::string(flag) + ": " + e.what());
  }
}

void check_args(const Args& a) {
  const char* op = "simulate";
  if (a.n.empty()) detail::raise<InvalidArgument>(op, "--n: give at least one chain length, e.g. --n 1000,10000");
  for (Index n : a.n)
    if (n < 1 || n > kMaxN)
      detail::raise<InvalidArgument>(op, "--n: every chain length must be in [1, " + std::to_string(kMaxN) + "], got " +
                                             std::to_string(n) + "; e.g. --n 1000,10000,100000");
  if (a.p.empty()) detail::raise<InvalidArgument>(op, "--p: give at least one worker count, e.g. --p 1,2,64");
  for (int p : a.p)
    if (p < 1 || p > (1 << 20))
      detail::raise<InvalidArgument>(
          op, "--p: every worker count must be in [1, 1048576], got " + std::to_string(p) + "; e.g. --p 1,2,16,256");
  if (a.dim < 1) detail::raise<InvalidArgument>(op, "--dim must be ≥ 1, got " + std::to_string(a.dim));
  if (a.batch < 1) detail::raise<InvalidArgument>(op, "--batch must be ≥ 1, got " + std::to_string(a.batch));
  if (a.chunks < 0)
    detail::raise<InvalidArgument>(op, "--chunks must be ≥ 0 (0 = one per worker), got " + std::to_string(a.chunks));
  if (a.calibration_n < 1)
    detail::raise<InvalidArgument>(op, "--calibration-n must be ≥ 1, got " + std::to_string(a.calibration_n));
  if (a.repeats < 1) detail::raise<InvalidArgument>(op, "--repeats must be ≥ 1, got " + std::to_string(a.repeats));
  if (a.precision != "float" && a.precision != "double")
    detail::raise<InvalidArgument>(op, "--precision: expected float or double, got '" + a.precision + "'");
}

/// What simulate allocates whatever the chain's values: the element layout (a CSR band pattern,
/// sdd's d × d stand-in for S), the calibration chain (a real one, as calibrate() sizes it)
/// and the planned schedules; refused before any of it is built.
template <class T>
void check_memory_needs(const Args& a, const RandomChainSpec& largest, const CalibrationOptions& options) {
  const double d = static_cast<double>(a.dim);
  const Index n_max = largest.n;
  double layout = 0;
  if (largest.kind == ChainKind::csr) layout = (4 * d + 1) * sizeof(std::int32_t);
  if (largest.kind == ChainKind::shared_dense_diag) layout = d * d * sizeof(T);
  const RandomChainSpec cal = calibration_spec<T>(largest, options);
  check_memory("simulate",
               "simulating a " + a.kind + " chain of up to n = " + std::to_string(n_max) + ", d = " +
                   std::to_string(a.dim) + ", batch " + std::to_string(a.batch),
               {{"the calibration chain (" + std::to_string(cal.n) + " elements)", random_problem_bytes<T>(cal)},
                {"the element layout", layout},
                {"the schedule (about 350 bytes per element)", kScheduleBytes * static_cast<double>(n_max)},
                {"the real chains (--validate, mixed)",
                 a.validate || largest.kind == ChainKind::mixed ? random_problem_bytes<T>(largest) : 0}},
               "use a smaller --dim, --batch or --n");
}

struct Row {
  SimulationResult sim;
  std::optional<double> measured, bp_measured;
};

nlohmann::json calibration_json(const CostTable& t, int repeats) {
  nlohmann::json classes = nlohmann::json::array();
  for (const CostEntry& e : t.entries)
    classes.push_back({{"class", e.product.describe()},
                       {"type", to_string(e.product.type)},
                       {"a", to_string(e.product.a)},
                       {"b", to_string(e.product.b)},
                       {"out", to_string(e.product.out)},
                       {"affine", e.product.affine},
                       {"flops", e.product.flops},
                       {"warm_s", e.warm_seconds},
                       {"cold_s", e.cold_seconds},
                       {"instances", e.instances}});
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& [bytes, share] : t.miss_curve) curve.push_back({bytes, share});
  return {{"chain", t.chain},
          {"n", t.calibration_n},
          {"batch", t.calibration_batch},
          {"precision", t.precision},
          {"repeats", repeats},
          {"timer_s", t.timer_seconds},
          {"barrier_s", t.barrier_seconds},
          {"barrier_threads", t.barrier_threads},
          {"dispatch_s", t.dispatch_seconds},
          {"dispatch_single_s", t.dispatch_single_seconds},
          {"region_s", t.region_seconds},
          {"element_s", t.element_seconds},
          {"check_warm_s", t.check_warm_seconds},
          {"check_cold_s", t.check_cold_seconds},
          {"flop_s", t.flop_seconds},
          {"cache_bytes", t.cache_bytes},
          {"miss_curve", curve},
          {"classes", classes}};
}

template <class T>
int run(const Args& a) {
  check_args(a);
  RandomChainSpec spec;
  spec.kind = parse_flag("--kind", [&] { return parse_chain_kind(a.kind); });
  const Algorithm algorithm = parse_flag("--algo", [&] { return parse_algorithm(a.algo); });
  spec.dim = a.dim;
  spec.batch = a.batch;
  spec.shared = a.shared && spec.kind != ChainKind::mixed;
  spec.affine = a.affine;
  spec.seed = a.seed;
  const int cores = omp_get_num_procs();
  const Index n_max = *std::max_element(a.n.begin(), a.n.end());
  // The calibration chain is sized from the longest chain asked for.
  RandomChainSpec largest = spec;
  largest.n = n_max;
  CalibrationOptions options;
  options.max_n = a.calibration_n;
  options.repeats = a.repeats;
  check_memory_needs<T>(a, largest, options);

  // Refuse up front what cannot be built: the real chains of --validate and mixed layouts.
  for (Index n : a.n) {
    RandomChainSpec s = spec;
    s.n = n;
    const double bytes = random_problem_bytes<T>(s);
    if (bytes <= kMeasureLimit) continue;
    const std::string need = std::to_string(static_cast<long long>(bytes / (1 << 20))) + " MiB";
    if (a.validate)
      detail::raise<InvalidArgument>("simulate", "--validate: the real chain for n = " + std::to_string(n) +
                                                     " would need about " + need +
                                                     " (limit 2 GiB); validate smaller n or drop --validate");
    if (spec.kind == ChainKind::mixed)
      detail::raise<InvalidArgument>(
          "simulate", "--kind mixed: the layouts come from the real generator, which for n = " + std::to_string(n) +
                          " would need about " + need + " (limit 2 GiB); use a smaller n or dense, diag, csr or sdd");
  }

  ProgressBar calibrating("calibrating", "step", !a.no_progress);
  options.progress = [&](int done, int total) { calibrating.update(done, total); };
  const CostTable table = calibrate<T>(largest, algorithm, a.chunks, options);
  calibrating.finish();

  std::vector<Row> rows;
  ProgressBar simulating(a.validate ? "simulating and measuring" : "simulating", "row", !a.no_progress);
  const auto row_count = static_cast<long>(a.n.size() * a.p.size());
  for (Index n : a.n) {
    RandomChainSpec s = spec;
    s.n = n;
    std::optional<RandomProblem<T>> problem;
    if (a.validate && std::any_of(a.p.begin(), a.p.end(), [&](int p) { return p <= cores; }))
      problem.emplace(random_problem<T>(s));
    for (int p : a.p) {
      Row row{simulate<T>(s, algorithm, p, a.chunks, table), {}, {}};
      if (problem && p <= cores) {
        row.measured = measure(*problem, algorithm, p, a.chunks, a.repeats);
        row.bp_measured =
            algorithm == Algorithm::linear ? *row.measured : measure(*problem, Algorithm::linear, p, 1, a.repeats);
      }
      rows.push_back(row);
      simulating.update(static_cast<long>(rows.size()), row_count);
    }
  }
  simulating.finish();

  // Validation summary: relative errors (predicted − measured) / measured.
  double sum = 0, worst = 0, bp_sum = 0, bp_worst = 0;
  std::size_t validated = 0;
  const Row* worst_row = nullptr;
  for (const Row& r : rows) {
    if (!r.measured) continue;
    const double e = std::abs(r.sim.seconds - *r.measured) / *r.measured;
    const double be = std::abs(r.sim.bp_seconds - *r.bp_measured) / *r.bp_measured;
    sum += e;
    bp_sum += be;
    bp_worst = std::max(bp_worst, be);
    if (!worst_row || e > worst) {
      worst = e;
      worst_row = &r;
    }
    ++validated;
  }

  const std::string cpu = cpu_model();
  std::ostringstream o;
  o << "bppsa simulate: " << a.kind << (spec.shared ? " shared" : "") << (spec.affine ? " affine" : "")
    << " chain, d = " << a.dim << ", batch " << a.batch << ", " << a.precision << ", algorithm " << a.algo
    << (a.chunks ? ", " + std::to_string(a.chunks) + " chunks" : "") << ", seed " << a.seed << "\n";
  o << "machine: " << cores << " core" << (cores == 1 ? "" : "s") << ", " << cpu << "\n";
  o << table.summary();
  o << "\n"
    << std::right << std::setw(9) << "n" << std::setw(7) << "p"
    << "  " << std::left << std::setw(9) << "algo" << std::right << std::setw(7) << "chunks" << std::setw(8) << "levels"
    << std::setw(13) << "predicted ms" << std::setw(11) << "BP ms" << std::setw(9) << "speedup";
  if (a.validate) o << std::setw(13) << "measured ms" << std::setw(9) << "error %" << std::setw(14) << "BP measured";
  o << "\n";
  Index extrapolated = 0;
  for (const Row& r : rows) {
    const SimulationResult& s = r.sim;
    extrapolated += s.extrapolated_ops;
    o << std::right << std::setw(9) << s.n << std::setw(7) << s.workers << "  " << std::left << std::setw(9)
      << to_string(s.algorithm) << std::right << std::setw(7) << s.chunks << std::setw(8) << s.levels << std::fixed
      << std::setprecision(3) << std::setw(13) << 1e3 * s.seconds << std::setw(11) << 1e3 * s.bp_seconds
      << std::setprecision(2) << std::setw(9) << s.speedup;
    if (r.measured)
      o << std::setprecision(3) << std::setw(13) << 1e3 * *r.measured << std::showpos << std::setprecision(1)
        << std::setw(9) << 100 * (s.seconds - *r.measured) / *r.measured << std::noshowpos << std::setprecision(3)
        << std::setw(14) << 1e3 * *r.bp_measured;
    else if (a.validate)
      o << std::setw(13) << "-" << std::setw(9) << "-" << std::setw(14) << "-";
    o << std::defaultfloat << "\n";
  }
  if (extrapolated)
    o << "note: " << extrapolated << " ops (over all rows) had a product class not seen in calibration and were "
      << "costed from the nearest calibrated class, scaled by flops (docs/simulate.md)\n";
  if (a.validate) {
    o << std::fixed << std::setprecision(1);
    if (validated)
      o << "validation: " << validated << " runs at p ≤ " << cores << ": mean |error| " << 100 * sum / validated
        << " %, max " << 100 * worst << " % (n = " << worst_row->sim.n << ", p = " << worst_row->sim.workers
        << "); BP predictions: mean |error| " << 100 * bp_sum / validated << " %, max " << 100 * bp_worst << " %\n";
    else
      o << "validation: no --p is at most this machine's " << cores << " cores: nothing measured\n";
  }
  std::cout << o.str() << std::flush;

  if (!a.json.empty()) {
    nlohmann::json jrows = nlohmann::json::array();
    for (const Row& r : rows) {
      const SimulationResult& s = r.sim;
      nlohmann::json j = {{"n", s.n},
                          {"p", s.workers},
                          {"algorithm", to_string(s.algorithm)},
                          {"chunks", s.chunks},
                          {"batch", s.batch},
                          {"phases", s.phases},
                          {"levels", s.levels},
                          {"mm", s.mm},
                          {"mv", s.mv},
                          {"predicted_s", s.seconds},
                          {"scan_s", s.scan_seconds},
                          {"overhead_s", s.overhead_seconds},
                          {"bp_predicted_s", s.bp_seconds},
                          {"bp_scan_s", s.bp_scan_seconds},
                          {"speedup", s.speedup},
                          {"work_s", s.work_seconds},
                          {"barrier_s", s.barrier_seconds},
                          {"cold_weight", s.cold_weight},
                          {"working_set_bytes", s.working_set_bytes},
                          {"extrapolated_ops", s.extrapolated_ops}};
      if (r.measured) {
        j["measured_s"] = *r.measured;
        j["bp_measured_s"] = *r.bp_measured;
        j["measured_speedup"] = *r.bp_measured / *r.measured;
        j["error"] = (s.seconds - *r.measured) / *r.measured;
        j["bp_error"] = (s.bp_seconds - *r.bp_measured) / *r.bp_measured;
      }
      jrows.push_back(j);
    }
    nlohmann::json doc = {{"command", "simulate"},
                          {"machine", {{"cores", cores}, {"cpu", cpu}, {"cache_bytes", table.cache_bytes}}},
                          {"chain",
                           {{"kind", a.kind},
                            {"dim", a.dim},
                            {"batch", a.batch},
                            {"shared", spec.shared},
                            {"affine", spec.affine},
                            {"precision", a.precision},
                            {"seed", a.seed}}},
                          {"requested_algorithm", a.algo},
                          {"chunks", a.chunks},
                          {"calibration", calibration_json(table, a.repeats)},
                          {"rows", jrows}};
    if (a.validate)
      doc["validation"] = {{"runs", validated},
                           {"mean_abs_error", validated ? sum / validated : 0.0},
                           {"max_abs_error", worst},
                           {"bp_mean_abs_error", validated ? bp_sum / validated : 0.0},
                           {"bp_max_abs_error", bp_worst}};
    write_file_atomic(a.json, doc.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

Command add_simulate(CLI::App& app) {
  auto args = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "simulate",
      "Predict the scan's time on P virtual workers: calibrate the cost of every product class on this machine "
      "(a real chain of --calibration-n elements replayed on one thread, plus OpenMP barrier, dispatch and region "
      "costs), plan the schedule the scanner would run from layouts alone (no values, so n = 10^6 is cheap), run it "
      "on P virtual workers as the OpenMP executor would, and print the predicted time and the speedup over BP "
      "(linear on the same P). --validate also measures the real scanner at every P up to this machine's cores "
      "and prints the error. Kinds dense, diag, csr and sdd need no values at any n; mixed takes its layouts from "
      "the real generator, so it is limited to chains that fit in 2 GiB. See docs/simulate.md.");
  c->add_option("--algo", args->algo, "linear | blelloch | hybrid | auto (resolved per P by the cost model)")
      ->check(CLI::IsMember({"linear", "blelloch", "hybrid", "auto"}))
      ->capture_default_str();
  c->add_option("--n", args->n, "chain lengths N, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(Index{1}, kMaxN))
      ->capture_default_str();
  c->add_option("--p", args->p, "virtual worker counts P, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  c->add_option("--dim", args->dim, "dimension d of every g_k")
      ->check(CLI::Range(Index{1}, Index{1000000}))
      ->capture_default_str();
  c->add_option("--kind", args->kind,
                "Jacobian kind: dense | diag | csr | sdd (shared dense × per-sample diagonal) | mixed (n limited)")
      ->check(CLI::IsMember({"dense", "diag", "csr", "sdd", "mixed"}))
      ->capture_default_str();
  c->add_option("--batch", args->batch, "batch size B")
      ->check(CLI::Range(Index{1}, Index{1000000}))
      ->capture_default_str();
  c->add_option("--chunks", args->chunks, "hybrid: chunks per chain (0 = P)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  c->add_option("--precision", args->precision, "float | double")
      ->check(CLI::IsMember({"float", "double"}))
      ->capture_default_str();
  c->add_flag("--shared", args->shared, "one Jacobian per element shared by the batch (Linear-like)");
  c->add_flag("--affine", args->affine, "per-step gradient injections e_k (per-step losses)");
  c->add_option("--calibration-n", args->calibration_n, "length of the chain the costs are calibrated on")
      ->check(CLI::Range(Index{1}, kMaxN))
      ->capture_default_str();
  c->add_option("--repeats", args->repeats, "timed passes per calibration regime and runs per measurement")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  c->add_flag("--validate", args->validate,
              "measure the real scanner at every P ≤ this machine's cores and print the prediction's error");
  c->add_option("--json", args->json, "write every row, the calibration and the machine to this JSON file");
  c->add_option("--seed", args->seed, "random seed")->capture_default_str();
  c->add_flag("--no-progress", args->no_progress, "no progress on stderr (calibration and rows)");
  return [args] { return args->precision == "double" ? run<double>(*args) : run<float>(*args); };
}

}  // namespace bppsa::cli
