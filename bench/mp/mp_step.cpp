// bench_mp: backward latency of a model-parallel step against the number of ranks K, for
// the bp pipeline (K − 1 hops) and bppsa's scan across ranks (doubling: ⌈log2 K⌉ rounds,
// Blelloch: 2⌈log2 K⌉ − 1). One MPI job measures all three modes, interleaved rep by rep,
// on the same ranks and links. Run through bench/mp/run.sh (loopback and emulated hosts).
//
// Timing: every rank starts its backward at the same instant of the host's monotonic clock
// (rank 0 announces it; all ranks sleep until then), and the backward ends when the last
// rank has its gradients: latency = max over ranks of (end) − start. This needs ranks that
// share one clock — one machine, as here (network namespaces share the host's clock); across
// real hosts the figure would include their clock offsets.
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bppsa/mpi/pipeline.hpp"

using namespace bppsa;

namespace {

std::int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void sleep_until(std::int64_t t_ns) {
  timespec ts{static_cast<time_t>(t_ns / 1000000000), static_cast<long>(t_ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_mp: model-parallel backward latency, bp pipeline vs bppsa scan across ranks"};
  std::string cell = "rnn", link = "loopback";
  Index hidden = 16, steps = 256, batch = 4;
  int reps = 15, warmup = 2;
  double start_margin = 0.05, timeout = 120;
  app.add_option("--cell", cell, "rnn, gru or lstm")->capture_default_str();
  app.add_option("--hidden", hidden)->capture_default_str();
  app.add_option("--steps", steps, "sequence length, split over the ranks")->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--reps", reps, "timed backward passes per mode")->capture_default_str();
  app.add_option("--warmup", warmup)->capture_default_str();
  app.add_option("--start-margin", start_margin, "seconds between the start announcement and the start")
      ->capture_default_str();
  app.add_option("--link", link, "label of the network the ranks run on (recorded in the output)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  mpi::Environment env(&argc, &argv);
  try {
    mpi::Comm world = mpi::Comm::world(timeout);
    const int K = world.size();
    ModelConfig config;
    config.rnn.cell = parse_cell(cell);
    config.rnn.input = 4;
    config.rnn.hidden = hidden;
    config.classes = 10;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::vector<float> x(static_cast<std::size_t>(batch * steps * config.rnn.input));
    for (float& v : x) v = normal(rng);
    std::vector<std::int64_t> y(static_cast<std::size_t>(batch));
    for (Index b = 0; b < batch; ++b) y[static_cast<std::size_t>(b)] = b % 10;

    struct Mode {
      std::string name;
      mpi::PipelineOptions options;
      std::unique_ptr<mpi::ModelParallel<float>> model;
      std::vector<double> ms;
      int rounds = 0;
      std::int64_t bytes = 0;
    };
    std::vector<Mode> modes;
    for (const char* m : {"bp", "doubling", "blelloch"}) {
      Mode mode;
      mode.name = m;
      mode.options.backward = mode.name == "bp" ? mpi::PipelineBackward::bp : mpi::PipelineBackward::bppsa;
      mode.options.scan = mode.name == "blelloch" ? mpi::RankScan::blelloch : mpi::RankScan::doubling;
      mode.model = std::make_unique<mpi::ModelParallel<float>>(world, config, steps, mode.options);
      mode.model->reset_parameters(11);
      modes.push_back(std::move(mode));
    }
    for (int r = -warmup; r < reps; ++r) {
      for (Mode& mode : modes) {
        mode.model->forward_loss(x, batch, y);
        std::int64_t start[1] = {world.rank() == 0 ? now_ns() + static_cast<std::int64_t>(start_margin * 1e9) : 0};
        world.allreduce_max(start, "the start time");
        if (now_ns() > start[0]) throw std::runtime_error("the start announcement arrived late: raise --start-margin");
        sleep_until(start[0]);
        mpi::PipelineStats st;
        mode.model->backward(&st);
        std::int64_t end[2] = {now_ns(), st.rounds};
        world.allreduce_max(end, "the end time");
        std::int64_t bytes[1] = {st.bytes_sent};
        world.allreduce_max(bytes, "the traffic");
        if (r >= 0) {
          mode.ms.push_back(static_cast<double>(end[0] - start[0]) / 1e6);
          mode.rounds = static_cast<int>(end[1]);
          mode.bytes = bytes[0];
        }
      }
    }
    if (world.rank() == 0) {
      const double bp = median(modes[0].ms);
      for (const Mode& m : modes) {
        const double med = median(m.ms);
        nlohmann::json j{{"ranks", K},
                         {"link", link},
                         {"mode", m.name},
                         {"cell", cell},
                         {"hidden", hidden},
                         {"steps", steps},
                         {"batch", batch},
                         {"max_waits_per_rank", m.rounds},
                         {"rounds_theory", m.name == "bp" ? K - 1
                                                          : mpi::scan_rounds(m.options.scan, K)},
                         {"max_bytes_sent_per_rank", m.bytes},
                         {"median_ms", med},
                         {"p10_ms", quantile(m.ms, 0.1)},
                         {"p90_ms", quantile(m.ms, 0.9)},
                         {"speedup_vs_bp", bp / med},
                         {"reps", m.ms.size()}};
        std::cout << j.dump() << std::endl;
      }
    }
    world.barrier("the end of the benchmark");
  } catch (const std::exception& e) {
    std::cerr << "bench_mp: error: " << e.what() << std::endl;
    mpi::Environment::abort(1);
  }
  return 0;
}
