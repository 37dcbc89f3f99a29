// bench_fused_scan: the fused chunked scan alone (src/nn/cuda/fused_bench.hpp, one recurrent
// layer's state gradients from a forward record) on every configuration of the GPU benchmark's
// plan, with its FLOPs and bytes against this GPU's FP32 and bandwidth roofline
// (bench/gpu/device_peak.hpp). bench/gpu/bench_gpu.py runs it; report.py computes the ratios.
//
//   bench_fused_scan --plan PLAN.json --out RECORDS.jsonl [--reps 10] [--budget SECONDS]
//
// Per configuration (cell, H, T, B; the features of the input do not enter the scan): bench_fused
// plans, fills a random record in a real forward's ranges, warms up twice (capturing its CUDA
// Graph when the plan uses one), then times --reps runs one by one with CUDA events. One JSON line
// per configuration, appended and flushed; a configuration that throws gives a line with "error".
#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>

#include "bppsa/bppsa.hpp"
#include "device_peak.hpp"
#include "nn/cuda/fused_bench.hpp"
#include "nn/cuda/recurrent_math.hpp"

namespace {

using json = nlohmann::json;
using namespace bppsa::detail::gpu;

std::int32_t cell_code(const std::string& cell) {
  if (cell == "rnn") return kRnnTanh;  // the benchmark's RNN is nn.RNN's default tanh
  if (cell == "gru") return kGru;
  if (cell == "lstm") return kLstm;
  throw bppsa::InvalidArgument("[bench_fused_scan] unknown cell '" + cell + "' in the plan (rnn, gru, lstm)");
}

json device_json(const bppsa_bench::DevicePeak& d) {
  return {{"name", d.name},
          {"multiprocessors", d.multiprocessors},
          {"compute_capability", std::to_string(d.major) + "." + std::to_string(d.minor)},
          {"clock_khz", d.clock_khz},
          {"memory_clock_khz", d.memory_clock_khz},
          {"bus_bits", d.bus_bits},
          {"fp32_lanes_per_sm", d.fp32_lanes_per_sm},
          {"fp32_lanes_source", d.lanes_note},
          {"peak_fp32_flops", d.peak_fp32_flops},
          {"peak_bytes_per_s", d.peak_bytes_per_s}};
}

int run(const std::string& plan_path, const std::string& out_path, int reps, double budget) {
  std::ifstream in(plan_path);
  if (!in) throw bppsa::IoError("[bench_fused_scan] cannot read the plan " + plan_path);
  const json plan = json::parse(in);
  std::ofstream out(out_path, std::ios::app);
  if (!out) throw bppsa::IoError("[bench_fused_scan] cannot append to " + out_path);
  const json device = device_json(bppsa_bench::device_peak(0));
  const auto start = std::chrono::steady_clock::now();
  std::set<std::tuple<std::string, long, long, long>> done;
  int failed = 0;
  for (const json& c : plan.at("configs")) {
    const std::string cell = c.at("cell").get<std::string>();
    const long hidden = c.at("hidden").get<long>(), steps = c.at("steps").get<long>(),
               batch = c.at("batch").get<long>();
    if (!done.insert({cell, hidden, steps, batch}).second) continue;  // same scan as an earlier configuration
    json rec = {{"impl", "fused"}, {"id", c.at("id")}, {"cell", cell}, {"hidden", hidden},
                {"steps", steps},  {"batch", batch},   {"reps", reps}, {"device", device}};
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget) {
      std::cout << "bench_fused_scan: skipped " << c.at("id").get<std::string>() << ": time budget spent" << std::endl;
      continue;
    }
    try {
      const FusedBenchResult r = bench_fused<float>(cell_code(cell), hidden, steps, batch, reps);
      const FusedScanStats& s = r.stats;
      rec["time"] = {{"median", 1e-3 * r.median_ms}, {"min", 1e-3 * r.min_ms}, {"max", 1e-3 * r.max_ms}};
      rec.update({{"flops", s.flops},
                  {"bytes", s.bytes},
                  {"launches", s.launches},
                  {"graph", s.graph},
                  {"chunk", s.chunk_length},
                  {"chunks", s.chunks},
                  {"first_chunk", s.first_chunk_length},
                  {"w_shared", s.w_shared},
                  {"device_bytes", s.device_bytes},
                  {"estimate_us", s.estimate_us},
                  {"device_summary", r.device}});
      std::cout << "  fused " << c.at("id").get<std::string>() << ": " << r.median_ms << " ms, "
                << s.flops / (1e-3 * r.median_ms) / 1e12 << " TFLOP/s" << std::endl;
    } catch (const std::exception& e) {
      rec["error"] = e.what();
      ++failed;
      std::cout << "  fused " << c.at("id").get<std::string>() << " FAILED: " << e.what() << std::endl;
    }
    out << rec.dump() << "\n" << std::flush;
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_fused_scan: the fused chunked scan alone against the GPU's roofline (JSON lines)"};
  std::string plan, out;
  int reps = 10;
  double budget = 1e9;
  app.add_option("--plan", plan, "the configurations (JSON, bench/gpu/bench_gpu.py writes it)")->required();
  app.add_option("--out", out, "JSON lines, appended: one record per distinct (cell, H, T, B)")->required();
  app.add_option("--reps", reps, "timed runs per configuration")->check(CLI::Range(1, 10000));
  app.add_option("--budget", budget, "seconds; configurations after it are skipped")->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(plan, out, reps, budget);
  } catch (const std::exception& e) {
    std::cerr << "bench_fused_scan: error: " << e.what() << "\n";
    return 1;
  }
}
