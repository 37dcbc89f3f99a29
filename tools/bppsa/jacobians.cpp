// `bppsa jacobians`: the sparsity of CNN Jacobians and what the scan does with them.
//  --table1:       the paper's Table 1 — J^T shapes, nnz and sparsity of the first three ops of
//                  VGG-11 on a 3×32×32 image, and the speedup of direct generation over
//                  building the dense Jacobian one basis vector at a time with PyTorch autograd.
//  --arch SPEC:    every product of the scan over a (pruned) network's Jacobian chain — kinds,
//                  fill-in, flops, critical path — against sequential BP (the paper's Fig. 10).
#include <fcntl.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "bppsa/bppsa.hpp"
#include "bppsa/io/file.hpp"
#include "bppsa/analysis/report.hpp"
#include "commands.hpp"
#include "options.hpp"

#ifndef BPPSA_SOURCE_DIR
#define BPPSA_SOURCE_DIR "."
#endif

namespace bppsa::cli {
namespace {

struct Args {
  bool table1 = false;
  std::string arch, input = "3x32x32", weights, json, python, script;
  double prune = 0;
  Index batch = 1;
  std::string backward = "blelloch";
  int threads = 0, chunks = 0, repeats = 7, vectors = 512;
  bool no_baseline = false;
  std::uint64_t seed = 1;
};

/// Median wall time of f over `repeats` runs after one warm-up.
template <class F>
double median_seconds(int repeats, F&& f) {
  f();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = omp_get_wtime();
    f();
    t.push_back(omp_get_wtime() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// The baseline script: beside the sources, or installed under share/bppsa/python.
std::string baseline_script(const Args& a) {
  if (!a.script.empty()) return a.script;
  const std::filesystem::path source = std::filesystem::path(BPPSA_SOURCE_DIR) / "python" / "table1_torch.py";
  if (std::filesystem::exists(source)) return source.string();
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto installed = exe.parent_path().parent_path() / "share" / "bppsa" / "python" / "table1_torch.py";
  if (!ec && std::filesystem::exists(installed)) return installed.string();
  detail::raise<IoError>("jacobians", "cannot find python/table1_torch.py (the PyTorch baseline); pass "
                                      "--baseline-script PATH, or --no-baseline");
}

/// Runs argv[0] with arguments argv[1..] directly (no shell: any byte in a path is fine) and
/// returns its exit status (as waitpid's) and its stdout and stderr together.
std::pair<int, std::string> run_captured(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    detail::raise<IoError>("jacobians", std::string("cannot create a pipe: ") + std::strerror(errno));
  std::vector<char*> args;
  for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    detail::raise<IoError>("jacobians", std::string("cannot start a process: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execvp(args[0], args.data());
    const std::string msg = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {status, out};
}

/// Runs the PyTorch baseline and returns its JSON, or a JSON with "error" when it fails.
nlohmann::json run_baseline(const Args& a, int threads) {
  const char* env = std::getenv("BPPSA_PYTHON");
  const std::string python = !a.python.empty()         ? a.python
                             : env != nullptr && *env  ? std::string(env)
                                                       : std::string(BPPSA_DEFAULT_PYTHON);
  const std::vector<std::string> argv{python,      baseline_script(a),     "--vectors", std::to_string(a.vectors),
                                      "--threads", std::to_string(threads)};
  std::cerr << "baseline:";
  for (const auto& s : argv) std::cerr << " '" << s << "'";
  std::cerr << "\n";
  const auto [status, out] = run_captured(argv);
  const std::string how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  try {
    const auto start = out.find('{');
    if (start == std::string::npos) throw std::runtime_error("no JSON");
    auto j = nlohmann::json::parse(out.substr(start));
    if (!ok && !j.contains("error")) j["error"] = python + " ended with " + how;
    return j;
  } catch (const std::exception&) {
    return {{"error", utf8_text(python + " ended with " + how + ": " + out.substr(0, 400))}};
  }
}

int run_table1(const Args& a) {
  const int threads = a.threads > 0 ? a.threads : omp_get_max_threads();
  // The first three ops of VGG-11 on one image, as PyTorch would run them.
  const Shape3 image{3, 32, 32};
  const auto specs = parse_arch("conv:64:3:1:1,relu,maxpool:2:2");
  std::vector<std::unique_ptr<Layer<float>>> layers;
  Shape3 shape = image;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    layers.push_back(make_layer<float>(specs[i], shape, false, "layer " + std::to_string(i)));
    shape = layers.back()->out_shape();
  }
  layers[0]->reset_parameters(a.seed);
  std::mt19937_64 rng(a.seed);
  std::normal_distribution<float> normal;
  std::vector<Matrix<float>> act(4);
  act[0].resize(image.size(), 1);
  for (Index i = 0; i < act[0].size(); ++i) act[0].data()[i] = normal(rng);
  for (std::size_t i = 0; i < 3; ++i) layers[i]->forward(act[i], act[i + 1], threads);

  // Reference figures of docs/method.md §4 (the paper's Table 1 structure), for the check column.
  const std::array<Index, 3> ref_nnz{1696512, 65536, 65536};
  const std::array<double, 3> paper_sparsity{0.99157, 0.99998, 0.99994}, paper_speedup{8.3e3, 1.2e6, 1.5e5};
  const std::array<const char*, 3> names{"conv", "relu", "maxpool"};

  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < 3; ++i) {
    Layer<float>& l = *layers[i];
    Jacobian<float> jt = l.make_jacobian(1);
    const double values = median_seconds(a.repeats, [&] { l.fill_jacobian(act[i], act[i + 1], jt, threads); });
    double pattern = 0;
    Index nnz = jt.layout().values_per_sample();
    if (l.type() == LayerType::conv)
      pattern = median_seconds(a.repeats, [&] { conv2d_pattern(l.in_shape(), l.out_shape().c, l.spec().window); });
    if (l.type() == LayerType::maxpool)
      pattern = median_seconds(a.repeats, [&] { pool2d_pattern(l.in_shape(), l.spec().window); });
    if (jt.kind() == Kind::csr) nnz = jt.layout().pattern->nnz();
    const Index rows_ = l.in_shape().size(), cols = l.out_shape().size();
    const double sparsity = 1 - static_cast<double>(nnz) / (static_cast<double>(rows_) * static_cast<double>(cols));
    rows.push_back({{"op", names[i]},
                    {"layer", l.describe()},
                    {"kind", to_string(jt.kind())},
                    {"rows", rows_},
                    {"cols", cols},
                    {"nnz", nnz},
                    {"sparsity", sparsity},
                    {"nnz_matches_spec", nnz == ref_nnz[i]},
                    {"paper_sparsity", paper_sparsity[i]},
                    {"paper_speedup", paper_speedup[i]},
                    {"pattern_seconds", pattern},
                    {"values_seconds", values},
                    {"generation_seconds", pattern + values}});
  }
  nlohmann::json baseline;
  if (!a.no_baseline) {
    // The baseline's dense rows: min(vectors, outputs) × inputs floats per op, the largest
    // for ReLU (65,536 × 65,536 at most: 17 GB), held by the Python process.
    double largest = 0;
    for (std::size_t i = 0; i < 3; ++i)
      largest = std::max(largest, static_cast<double>(std::min<Index>(a.vectors, layers[i]->out_shape().size())) *
                                static_cast<double>(layers[i]->in_shape().size()) * sizeof(float));
    check_memory("jacobians", "the PyTorch baseline with --vectors " + std::to_string(a.vectors),
                 {{"dense Jacobian rows (vectors × inputs, float)", largest}},
                 "use fewer --vectors (512 is the default; the rest is extrapolated) or --no-baseline");
    baseline = run_baseline(a, threads);
    for (auto& r : rows) {
      const std::string op = r["op"];
      if (baseline.contains("ops") && baseline["ops"].contains(op)) {
        const auto& b = baseline["ops"][op];
        r["baseline_seconds"] = b["seconds_extrapolated"];
        r["baseline_measured_vectors"] = b["measured_vectors"];
        r["baseline_extrapolated"] = b["extrapolated"];
        r["speedup"] = b["seconds_extrapolated"].get<double>() / r["generation_seconds"].get<double>();
        r["speedup_values"] = b["seconds_extrapolated"].get<double>() / r["values_seconds"].get<double>();
      }
    }
  }
  nlohmann::json out{{"machine", cpu_model()}, {"threads", threads}, {"repeats", a.repeats}, {"rows", rows},
                     {"baseline", baseline}};
  if (!a.json.empty()) {
    write_file_atomic(a.json, out.dump(1) + "\n");
    std::cerr << "wrote " << a.json << "\n";
  }
  std::printf("Table 1: transposed Jacobians of the first three ops of VGG-11 on a 3×32×32 image (%s, %d threads)\n\n",
              cpu_model().c_str(), threads);
  std::printf("%-8s %-16s %-9s %8s %10s %8s %9s %10s %10s %9s %9s %8s\n", "op", "J^T shape", "kind", "nnz",
              "sparsity", "paper", "pattern", "values", "baseline", "speedup", "per step", "paper");
  for (const auto& r : rows) {
    const std::string shape_s = std::to_string(r["rows"].get<Index>()) + "×" + std::to_string(r["cols"].get<Index>());
    char base[32] = "-", speed[32] = "-", step[32] = "-";
    if (r.contains("speedup")) {
      std::snprintf(base, sizeof base, "%.3g s%s", r["baseline_seconds"].get<double>(),
                    r["baseline_extrapolated"].get<bool>() ? "*" : "");
      std::snprintf(speed, sizeof speed, "%.2g×", r["speedup"].get<double>());
      std::snprintf(step, sizeof step, "%.2g×", r["speedup_values"].get<double>());
    }
    std::printf("%-8s %-16s %-9s %8lld %10.7f %8.5f %7.2g s %8.2g s %10s %9s %9s %7.2g×%s\n",
                r["op"].get<std::string>().c_str(), shape_s.c_str(), r["kind"].get<std::string>().c_str(),
                static_cast<long long>(r["nnz"].get<Index>()), r["sparsity"].get<double>(),
                r["paper_sparsity"].get<double>(), r["pattern_seconds"].get<double>(),
                r["values_seconds"].get<double>(), base, speed, step, r["paper_speedup"].get<double>(),
                r["nnz_matches_spec"].get<bool>() ? "" : "  (nnz differs from docs/method.md §4!)");
  }
  std::printf("\nours: direct generation = structural pattern (built once per architecture) + values (every step), "
              "medians of %d runs; speedup = baseline / (pattern + values); per step = baseline / values.\n",
              a.repeats);
  if (baseline.contains("error"))
    std::printf("baseline: not run (%s)\n", baseline["error"].get<std::string>().c_str());
  else if (!baseline.is_null())
    std::printf("baseline: PyTorch %s autograd, one vector-Jacobian product per output element into a dense matrix; "
                "* = %d basis vectors timed (median of %d) and extrapolated linearly to every output element.\n",
                baseline["torch"].get<std::string>().c_str(), baseline["vectors"].get<int>(),
                baseline["repeats"].get<int>());
  for (const auto& r : rows)
    if (!r["nnz_matches_spec"].get<bool>()) return 3;
  if (baseline.contains("error")) {
    std::cerr << "bppsa: error: the PyTorch baseline failed: " << baseline["error"].get<std::string>()
              << "; pass --python with a Python that has PyTorch, or --no-baseline\n";
    return 1;
  }
  return 0;
}

/// --input CxHxW: three positive integers whose product a layer's input can hold (2^31 − 1
/// elements, the most a Jacobian can index), so that nothing downstream multiplies past Index.
Shape3 parse_input(const std::string& input) {
  const char* op = "jacobians";
  Index v[3] = {0, 0, 0};
  char tail = 0;
  if (std::sscanf(input.c_str(), "%ldx%ldx%ld%c", &v[0], &v[1], &v[2], &tail) != 3 || v[0] < 1 || v[1] < 1 || v[2] < 1)
    detail::raise<InvalidArgument>(op, "--input '" + input + "' is not CxHxW with positive integers (e.g. 3x32x32)");
  constexpr double kMaxElements = 2147483647.0;
  if (static_cast<double>(v[0]) * static_cast<double>(v[1]) * static_cast<double>(v[2]) > kMaxElements)
    detail::raise<InvalidArgument>(op, "--input " + input + " holds more than 2^31 − 1 elements (the most a "
                                       "layer's Jacobian can index); use a smaller input");
  return {v[0], v[1], v[2]};
}

int run_report(const Args& a) {
  const char* op = "jacobians";
  ConvNetConfig config;
  TensorFile w;
  if (!a.weights.empty()) {
    w = read_safetensors(a.weights);
    config = convnet_config_from_state_dict(w);
  } else {
    if (a.arch.empty())
      detail::raise<InvalidArgument>(op, "give --table1, or --arch SPEC (and --input CxHxW), or --weights CKPT");
    config.layers = parse_arch(a.arch);
    config.input = parse_input(a.input);
  }
  ConvNet<float> model(config);
  if (!a.weights.empty()) {
    model.load_state_dict(w);
    if (a.prune <= 0) restore_masks(model, w);
  } else {
    model.reset_parameters(a.seed);
  }
  std::string pruned = "unpruned";
  if (a.prune > 0) pruned = prune_global_magnitude(model, a.prune).str();
  else if (!model.layer(0).mask().empty()) pruned = "masks of " + utf8_text(a.weights);
  BackwardOptions bo{parse_backward(a.backward), a.threads, a.chunks};
  if (bo.method == BackwardMethod::bp) bo.method = BackwardMethod::linear;  // BP's products = the linear scan's
  const double t0 = omp_get_wtime();
  const ScanReport r = scan_report(model.chain(a.batch), scan_options(bo));
  const double plan_seconds = omp_get_wtime() - t0;
  nlohmann::json j = nlohmann::json::parse(to_json(r));
  j["network"] = describe(config);
  j["pruning"] = pruned;
  j["plan_seconds"] = plan_seconds;
  nlohmann::json layers = nlohmann::json::array();
  for (Index k = 1; k <= model.chain(a.batch).size(); ++k) {
    const auto& jt = model.chain(a.batch).jacobian(k);
    layers.push_back({{"element", k},
                      {"layer", model.chain_layer(k)},
                      {"describe", model.layer(model.chain_layer(k)).describe()},
                      {"kind", to_string(jt.kind())},
                      {"nnz", jt.layout().values_per_sample()}});
  }
  j["elements"] = layers;
  if (!a.json.empty()) {
    write_file_atomic(a.json, j.dump(1) + "\n");
    std::cerr << "wrote " << a.json << "\n";
  }
  std::printf("%s\n%s; batch %lld; %s scan, %zu products in %zu phases (planned in %.2f s, symbolic SpGEMM "
              "included)\n\n",
              describe(config).c_str(), pruned.c_str(), static_cast<long long>(a.batch), to_string(r.algorithm),
              r.products.size(), r.phase_flops.size(), plan_seconds);
  std::printf("chain (J_k^T, forward order):\n");
  for (const auto& e : layers)
    std::printf("  J_%lld^T  %-44s %-9s %12lld values\n", static_cast<long long>(e["element"].get<Index>()),
                e["describe"].get<std::string>().c_str(), e["kind"].get<std::string>().c_str(),
                static_cast<long long>(e["nnz"].get<Index>()));
  std::printf("\n%5s %4s %3s %-28s %-28s %-7s %14s %12s\n", "phase", "task", "", "a", "b", "result", "result nnz",
              "flops");
  for (const auto& p : r.products)
    std::printf("%5lld %4lld %3s %-28s %-28s %-7s %14.0f %12.4g%s\n", static_cast<long long>(p.phase),
                static_cast<long long>(p.task), p.mm ? "mm" : "mv", p.a.c_str(), p.b.c_str(), to_string(p.out_kind),
                p.out_nnz, p.flops, p.critical ? "  *" : "");
  std::printf("\n* = critical path (the most expensive task of each phase)\n");
  std::printf("scan: %.4g flops in all, %.4g on the critical path; sequential BP: %.4g flops, all on its critical path "
              "(%zu steps)\n",
              r.total_flops, r.critical_flops, r.bp_flops, r.bp_step_flops.size());
  std::printf("critical path: scan %.3g× BP's flops, over %lld levels instead of %zu steps\n",
              r.critical_flops / std::max(1.0, r.bp_flops), static_cast<long long>(r.levels), r.bp_step_flops.size());
  return 0;
}

}  // namespace

Command add_jacobians(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "jacobians", "sparsity of CNN Jacobians (--table1: the paper's Table 1) and the scan's products on a network's "
                   "chain (--arch: FLOPs and fill-in per product vs BP, the paper's Fig. 10)");
  sub->add_flag("--table1", a->table1,
                "J^T shape, nnz, sparsity and generation speedup over PyTorch autograd for the first three ops of "
                "VGG-11 on 3×32×32");
  sub->add_option("--arch", a->arch, "network SPEC or vgg11, vgg11/N (see bppsa train --help)");
  sub->add_option("--input", a->input, "input C×H×W as CxHxW")->capture_default_str();
  sub->add_option("--weights", a->weights, "a cnn checkpoint (its architecture, weights and pruning masks)")
      ->check(CLI::ExistingFile);
  sub->add_option("--prune", a->prune, "global magnitude pruning of the weights to this sparsity first (e.g. 0.9)")
      ->check(CLI::Range(0.0, 0.999999));
  sub->add_option("--batch", a->batch, "batch size of the chain (per-sample Jacobians: ReLU, max-pool)")
      ->check(CLI::Range(Index{1}, Index{1} << 16))
      ->capture_default_str();
  sub->add_option("--backward", a->backward, "the scan to report: blelloch, hybrid, linear (= BP's order), auto")
      ->check(CLI::IsMember({"blelloch", "hybrid", "linear", "auto", "bp"}))
      ->capture_default_str();
  sub->add_option("--threads", a->threads, "threads (0 = all cores); hybrid plans one chunk per thread")
      ->check(CLI::Range(0, kMaxThreads));
  sub->add_option("--chunks", a->chunks, "hybrid chunks (0 = automatic)")->check(CLI::Range(0, 1 << 20));
  sub->add_option("--repeats", a->repeats, "--table1: timed repetitions (median)")->check(CLI::Range(1, 100));
  sub->add_option("--vectors", a->vectors, "--table1: basis vectors the PyTorch baseline times per op")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  sub->add_flag("--no-baseline", a->no_baseline, "--table1: skip the PyTorch baseline");
  sub->add_option("--python", a->python, "--table1: Python with PyTorch (default: $BPPSA_PYTHON, else " BPPSA_DEFAULT_PYTHON ")");
  sub->add_option("--baseline-script", a->script, "--table1: path of python/table1_torch.py");
  sub->add_option("--json", a->json, "also write everything as JSON to this file (atomically)");
  sub->add_option("--seed", a->seed, "seed of the weights and input")->capture_default_str();
  return [a, sub] {
    // --arch (and --input) describe the network only when neither --table1 nor --weights does.
    for (const char* flag : {"--arch", "--input"})
      if (sub->count(flag) && (a->table1 || !a->weights.empty()))
        detail::raise<InvalidArgument>("jacobians", std::string(flag) + " is ignored with " +
                                                        (a->table1 ? "--table1 (its network is fixed)"
                                                                   : "--weights (the checkpoint gives the network)") +
                                                        "; drop one of them");
    if (a->table1) return run_table1(*a);
    return run_report(*a);
  };
}

}  // namespace bppsa::cli
