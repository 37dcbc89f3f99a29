// `bppsa scan-check`: runs an algorithm and sequential BP on a random chain and reports the
// largest relative error of any gradient, with the run's statistics.
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bppsa/bppsa.hpp"
#include "commands.hpp"
#include "options.hpp"

namespace bppsa::cli {
namespace {

struct Args {
  Index n = 2000;
  Index dim = 20;
  Index batch = 16;
  std::string kind = "dense";
  std::string algo = "blelloch";
  int threads = 0;
  int chunks = 0;
  bool use_double = false;
  bool shared = false;
  bool affine = false;
  std::uint64_t seed = 4202;
  bool json = false;
  double tolerance = -1;
};

/// Largest over k and samples of ||g_k − ref_k|| / ||ref_k|| (column-wise).
template <class T>
double max_relative_error(const Gradients<T>& g, const Gradients<T>& ref, Index* worst_k) {
  double worst = 0;
  for (Index k = 0; k < ref.size(); ++k)
    for (Index b = 0; b < ref.g(k).cols(); ++b) {
      const double den = ref.g(k).col(b).template cast<double>().norm();
      const double num = (g.g(k).col(b) - ref.g(k).col(b)).template cast<double>().norm();
      const double e = den > 0 ? num / den : num;
      if (e > worst) {
        worst = e;
        *worst_k = k;
      }
    }
  return worst;
}

nlohmann::json by_kind(const ScanStats& s) {
  nlohmann::json mm = nlohmann::json::object(), mv = nlohmann::json::object();
  for (int a = 0; a < kKindCount; ++a) {
    for (int b = 0; b < kKindCount; ++b)
      if (s.mm_by_kind[a][b])
        mm[std::string(to_string(static_cast<Kind>(a))) + "*" + to_string(static_cast<Kind>(b))] = s.mm_by_kind[a][b];
    if (s.mv_by_kind[a]) mv[to_string(static_cast<Kind>(a))] = s.mv_by_kind[a];
  }
  return {{"mm", mm}, {"mv", mv}};
}

template <class T>
int run(const Args& a) {
  RandomChainSpec spec;
  spec.n = a.n;
  spec.dim = a.dim;
  spec.batch = a.batch;
  spec.kind = parse_chain_kind(a.kind);
  spec.shared = a.shared;
  spec.affine = a.affine;
  spec.seed = a.seed;
  // The chain (generated in double, then cast) and the scans' gradients and workspace, before
  // any of it is allocated; Scanner::run checks its own part again once planned.
  const bool dense = spec.kind == ChainKind::dense || spec.kind == ChainKind::mixed;
  check_memory("scan-check",
               "a " + a.kind + " chain of N = " + std::to_string(a.n) + " Jacobians, d = " + std::to_string(a.dim) +
                   ", batch " + std::to_string(a.batch) + (spec.shared ? " (shared)" : ""),
               {{"Jacobians, gradients and workspace", random_problem_bytes<T>(spec)}},
               std::string("use a smaller --n, --dim or --batch") + (dense ? " (dense elements hold d² values)" : ""));
  const auto t0 = std::chrono::steady_clock::now();
  const RandomProblem<T> p = random_problem<T>(spec);
  const double gen_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  ScanOptions opt;
  opt.algorithm = parse_algorithm(a.algo);
  opt.threads = a.threads;
  opt.chunks = a.chunks;
  Scanner<T> scanner(opt);
  Gradients<T> out;
  const double plan_ms = 1e3 * scanner.run(p.chain, p.g_last, out).plan_seconds;  // cold: plans, allocates
  const ScanStats st = scanner.run(p.chain, p.g_last, out);                       // warm: plan reused

  ScanOptions lin = opt;
  lin.algorithm = Algorithm::linear;
  Scanner<T> reference(lin);
  Gradients<T> ref;
  reference.run(p.chain, p.g_last, ref);
  const ScanStats lst = reference.run(p.chain, p.g_last, ref);

  Index worst_k = 0;
  const double err = max_relative_error(out, ref, &worst_k);
  const double tol = a.tolerance >= 0 ? a.tolerance : (std::is_same_v<T, float> ? 1e-4 : 1e-10);
  const bool ok = std::isfinite(err) && err <= tol;
  const int expected_levels = 2 * static_cast<int>(std::ceil(std::log2(static_cast<double>(a.n) + 1))) - 1;

  if (a.json) {
    nlohmann::json j = {{"kind", a.kind},
                        {"n", a.n},
                        {"dim", a.dim},
                        {"batch", a.batch},
                        {"shared", a.shared},
                        {"affine", a.affine},
                        {"precision", std::is_same_v<T, float> ? "float" : "double"},
                        {"seed", a.seed},
                        {"algorithm", to_string(st.algorithm)},
                        {"requested", a.algo},
                        {"threads", st.threads},
                        {"chunks", st.chunks},
                        {"max_rel_err", err},
                        {"worst_k", worst_k},
                        {"tolerance", tol},
                        {"ok", ok},
                        {"levels", st.levels},
                        {"depth", st.depth},
                        {"mm", st.mm},
                        {"mv", st.mv},
                        {"flops", st.flops},
                        {"ms", 1e3 * st.seconds},
                        {"plan_ms", plan_ms},
                        {"linear_ms", 1e3 * lst.seconds},
                        {"linear_levels", lst.levels},
                        {"generate_ms", gen_ms},
                        {"workspace_bytes", st.workspace_bytes},
                        {"products_by_kind", by_kind(st)}};
    std::cout << j.dump() << "\n";
  } else {
    std::ostringstream o;
    o << std::setprecision(3);
    o << "bppsa scan-check: " << a.kind << (a.shared ? " shared" : "") << (a.affine ? " affine" : "")
      << " chain, N = " << a.n << ", d = " << a.dim << ", batch " << a.batch << ", "
      << (std::is_same_v<T, float> ? "float" : "double") << ", " << st.threads << " thread"
      << (st.threads == 1 ? "" : "s") << ", seed " << a.seed << "\n";
    o << "  algorithm     " << to_string(st.algorithm);
    if (st.algorithm == Algorithm::hybrid) o << " (" << st.chunks << " chunks per chain)";
    if (opt.algorithm == Algorithm::automatic) o << " (chosen by auto)";
    o << "\n";
    o << "  max_rel_err   " << std::scientific << err << " at g_" << worst_k << " against linear (tolerance " << tol
      << ") " << (ok ? "OK" : "FAILED") << std::defaultfloat << "\n";
    o << "  levels        " << st.levels << " on the critical path (linear: " << lst.levels
      << "; 2⌈log2(N+1)⌉−1 = " << expected_levels << "); dependency depth " << st.depth << "\n";
    o << "  products      " << st.mm << " matrix-matrix, " << st.mv << " matrix-vector per chain; " << std::scientific
      << st.flops << std::defaultfloat << " flops in all\n";
    for (int x = 0; x < kKindCount; ++x)
      for (int y = 0; y < kKindCount; ++y)
        if (st.mm_by_kind[x][y])
          o << "                  mm " << to_string(static_cast<Kind>(x)) << " · " << to_string(static_cast<Kind>(y))
            << ": " << st.mm_by_kind[x][y] << "\n";
    for (int x = 0; x < kKindCount; ++x)
      if (st.mv_by_kind[x])
        o << "                  mv " << to_string(static_cast<Kind>(x)) << ": " << st.mv_by_kind[x] << "\n";
    o << std::fixed << std::setprecision(2);
    o << "  time          " << 1e3 * st.seconds << " ms (linear " << 1e3 * lst.seconds << " ms; planning " << plan_ms
      << " ms once; chain generated in " << gen_ms << " ms)\n";
    o << "  workspace     " << static_cast<double>(st.workspace_bytes) / (1 << 20) << " MiB\n";
    std::cout << o.str();
  }
  if (!ok) {
    std::cerr << "bppsa: scan-check FAILED: max_rel_err " << err << " exceeds " << tol << "\n";
    return 3;
  }
  return 0;
}

}  // namespace

Command add_scan_check(CLI::App& app) {
  auto args = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "scan-check",
      "Build a random chain of N transposed Jacobians (spectral norm near 1), run an algorithm and sequential BP, "
      "and print the largest relative error of any g_k against BP with the run's statistics.");
  c->add_option("--n", args->n, "number of Jacobians N")
      ->check(CLI::Range(Index{1}, Index{100000000}))
      ->capture_default_str();
  c->add_option("--dim", args->dim, "dimension d of every g_k (base dimension for mixed)")
      ->check(CLI::Range(Index{1}, Index{1000000}))
      ->capture_default_str();
  c->add_option("--batch", args->batch, "batch size B (independent chains)")
      ->check(CLI::Range(Index{1}, Index{1000000}))
      ->capture_default_str();
  c->add_option("--kind", args->kind,
                "Jacobian kind: dense | diag | csr | sdd (shared dense × per-sample diagonal) | mixed")
      ->check(CLI::IsMember({"dense", "diag", "csr", "sdd", "mixed"}))
      ->capture_default_str();
  c->add_option("--algo", args->algo, "linear | blelloch | hybrid | auto")
      ->check(CLI::IsMember({"linear", "blelloch", "hybrid", "auto"}))
      ->capture_default_str();
  c->add_option("--threads", args->threads, "worker threads (0 = all cores)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  c->add_option("--chunks", args->chunks, "hybrid: chunks per chain (0 = one per thread)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  c->add_flag("--double", args->use_double, "double precision (default float)");
  c->add_flag("--shared", args->shared, "one Jacobian per element shared by the batch (Linear-like)");
  c->add_flag("--affine", args->affine, "per-step gradient injections e_k (per-step losses)");
  c->add_option("--seed", args->seed, "random seed")->capture_default_str();
  c->add_flag("--json", args->json, "print one JSON object");
  c->add_option("--tolerance", args->tolerance,
                "fail (exit 3) above this max_rel_err (default 1e-4 float, 1e-10 double)")
      ->check(non_negative());
  return [args] { return args->use_double ? run<double>(*args) : run<float>(*args); };
}

}  // namespace bppsa::cli
