// bench_newton: the recurrent forward, sequential against Newton's method on the scan engine
// (docs/method.md §9), on the CPU. For each cell and sequence length: the median forward time of
// each method over --reps runs (after one warm-up), Newton's iterations and certificate residual,
// and whether it fell back; one JSON line per case (--out FILE.jsonl) and a Markdown table on stdout.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bppsa/bppsa.hpp"

using namespace bppsa;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_newton: sequential against Newton forward (CPU)"};
  std::vector<std::string> cells = {"rnn", "gru", "lstm"};
  std::vector<Index> steps = {100, 1000, 10000};
  Index batch = 16, hidden = 20, input = 4;
  int threads = 1, reps = 3;
  double radius = 0;
  std::string out;
  app.add_option("--cells", cells, "rnn gru lstm")->check(CLI::IsMember({"rnn", "gru", "lstm"}));
  app.add_option("--steps", steps, "sequence lengths")->check(CLI::Range(Index{1}, Index{1} << 24));
  app.add_option("--batch", batch)->check(CLI::Range(Index{1}, Index{1} << 16));
  app.add_option("--hidden", hidden)->check(CLI::Range(Index{1}, Index{4096}));
  app.add_option("--input", input, "features of x_t")->check(CLI::Range(Index{1}, Index{4096}));
  app.add_option("--threads", threads, "OpenMP threads of the Newton scan (0 = all)")->check(CLI::Range(0, 1024));
  app.add_option("--reps", reps, "timed runs per method (median)")->check(CLI::Range(1, 1000));
  app.add_option("--spectral-radius", radius,
                 "scale W_hh to this spectral radius estimate (power iteration); 0 = PyTorch's initialisation")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--out", out, "JSON lines file");
  CLI11_PARSE(app, argc, argv);
  try {
    std::ofstream jsonl;
    if (!out.empty()) {
      jsonl.open(out);
      if (!jsonl) throw IoError("[bench_newton] cannot write " + out);
    }
    std::printf(
        "| cell | T | batch | H | threads | sequential ms | newton ms | newton / sequential | iterations | residual | "
        "fell back |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (const std::string& cell : cells) {
      for (const Index T : steps) {
        RecurrentConfig c{parse_cell(cell), input, hidden, 1};
        Recurrent<float> r(c);
        r.reset_parameters(7);
        if (radius > 0) {  // power iteration on W_hh (its recurrent block for gated cells: the whole matrix's rows)
          const RowMatrix<float>& w = r.params(0).w_hh;
          Vector<float> v = Vector<float>::Ones(w.cols());
          float norm = 1;
          for (int k = 0; k < 100; ++k) {
            const Vector<float> u = w.transpose() * (w * v);
            norm = std::sqrt(u.norm() / v.norm());
            v = u.normalized();
          }
          r.params(0).w_hh *= static_cast<float>(radius) / norm;
        }
        const Matrix<float> x = Matrix<float>::Random(input, T * batch);
        nlohmann::json rec{{"cell", cell},   {"steps", T},         {"batch", batch},           {"hidden", hidden},
                           {"input", input}, {"threads", threads}, {"spectral_radius", radius}};
        double ms[2] = {0, 0};
        for (int m = 0; m < 2; ++m) {
          ForwardOptions o;
          o.method = m == 0 ? ForwardMethod::sequential : ForwardMethod::newton;
          o.threads = threads;
          r.set_forward_options(o);
          r.forward(x, T, batch);  // warm-up (and the plan)
          std::vector<double> t;
          for (int k = 0; k < reps; ++k) {
            const auto t0 = std::chrono::steady_clock::now();
            r.forward(x, T, batch);
            t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
          }
          ms[m] = median(t);
        }
        const ForwardReport& rep = r.forward_report();
        rec["sequential_ms"] = ms[0];
        rec["newton_ms"] = ms[1];
        rec["iterations"] = rep.iterations[0];
        rec["residual"] = rep.residual[0];
        rec["fell_back"] = static_cast<bool>(rep.fell_back[0]);
        if (jsonl) jsonl << rec.dump() << "\n";
        std::printf("| %s | %lld | %lld | %lld | %d | %.3f | %.3f | %.1f× | %d | %.3g | %s |\n", cell.c_str(),
                    static_cast<long long>(T), static_cast<long long>(batch), static_cast<long long>(hidden), threads,
                    ms[0], ms[1], ms[1] / ms[0], rep.iterations[0], rep.residual[0], rep.fell_back[0] ? "yes" : "no");
        std::fflush(stdout);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_newton: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
