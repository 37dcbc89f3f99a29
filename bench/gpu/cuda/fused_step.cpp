// bench_fused_scan: the fused chunked scan alone (bench/gpu/cuda/fused_bench.hpp, one recurrent
// layer's state gradients from a forward record) on every configuration of the GPU benchmark's
// plan, with its FLOPs and bytes against this GPU's FP32 and bandwidth roofline
// (bench/gpu/cuda/device_peak.hpp). bench/gpu/gpu.py runs it; gpu_report.py computes the ratios.
//
//   bench_fused_scan --plan PLAN.json --out RECORDS.jsonl [--reps 10] [--budget SECONDS] [--sweep]
//                    [--model FIT.json]
//
// --sweep (calibrating the cost model of src/scan/cuda/fused/plan.hpp on a real GPU): per configuration,
// the model's own plan, then every chunk length of a geometric ladder, every compiled reduce
// (tile × columns) and push tile at the model's chunk length, and W_hh forced to global memory; one
// record each, with the forced options under "forced" (a plan the kernels refuse gives a record
// with "error").
//
// --model: the cost model's constants for every plan (bench/gpu/fit_fused_model.py --json writes
// them; bench/gpu/cuda/fused_json.hpp reads them); without it the defaults (src/scan/cuda/fused/
// options.hpp, FusedModel). Every record holds all the constants its plans used ("model_constants").
//
// Per configuration (cell, H, T, B; the features of the input do not enter the scan): bench_fused
// plans, fills a random record in a real forward's ranges, warms up twice (capturing its CUDA
// Graph when the plan uses one), then times --reps runs one by one with CUDA events. One JSON line
// per configuration, appended and flushed; a configuration that throws gives a line with "error".
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bppsa/bppsa.hpp"
#include "device_peak.hpp"
#include "fused_bench.hpp"
#include "fused_json.hpp"
#include "nn/cuda/recurrent_math.hpp"
#include "scan/cuda/fused/math.hpp"

namespace {

using json = nlohmann::json;
using namespace bppsa::detail::gpu;

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

/// The option sets of a sweep for one configuration (the first: the model's own plan).
std::vector<std::pair<json, FusedScanOptions>> sweep_options(long steps, const FusedScanStats& model) {
  std::vector<std::pair<json, FusedScanOptions>> v{{json::object(), FusedScanOptions{}}};
  for (long L = 2; L < 2 * steps; L *= 2) {
    FusedScanOptions o;
    o.chunk_length = std::min(L, steps);
    v.push_back({{{"chunk_length", o.chunk_length}}, o});
    if (L >= steps) break;
  }
  for (const int tile : kFusedTiles)
    for (const int nc : {1, 4}) {
      if (model.chunks < 2) break;  // BP only: no reduce
      FusedScanOptions o;
      o.chunk_length = model.chunk_length;
      o.reduce_tile = tile;
      o.reduce_columns = nc;
      v.push_back({{{"chunk_length", o.chunk_length}, {"reduce_tile", tile}, {"reduce_columns", nc}}, o});
    }
  for (const int tile : kFusedTiles) {
    FusedScanOptions o;
    o.chunk_length = model.chunk_length;
    o.push_tile = tile;
    v.push_back({{{"chunk_length", o.chunk_length}, {"push_tile", tile}}, o});
  }
  FusedScanOptions g;
  g.chunk_length = model.chunk_length;
  g.w_shared = 0;
  v.push_back({{{"chunk_length", g.chunk_length}, {"w_shared", 0}}, g});
  if (model.chunks > 1) {  // the carry's totals from global memory instead of the ring (or the reverse)
    FusedScanOptions r;
    r.chunk_length = model.chunk_length;
    r.carry_ring = model.carry_stages > 0 ? 0 : 1;
    v.push_back({{{"chunk_length", r.chunk_length}, {"carry_ring", r.carry_ring}}, r});
  }
  FusedScanOptions rec;  // the record from global memory instead of the ring (or the reverse)
  rec.chunk_length = model.chunk_length;
  rec.record_ring = model.push_stages > 0 || model.reduce_stages > 0 ? 0 : 1;
  v.push_back({{{"chunk_length", rec.chunk_length}, {"record_ring", rec.record_ring}}, rec});
  return v;
}

json stats_json(const FusedScanStats& s) {
  return {{"flops", s.flops},
          {"bytes", s.bytes},
          {"launches", s.launches},
          {"graph", s.graph},
          {"chunk", s.chunk_length},
          {"chunks", s.chunks},
          {"first_chunk", s.first_chunk_length},
          {"reduce_tile", s.reduce_tile},
          {"reduce_columns", s.reduce_columns},
          {"reduce_threads_per_column", s.reduce_threads_per_column},
          {"push_tile", s.push_tile},
          {"push_threads_per_column", s.push_threads_per_column},
          {"w_shared", s.w_shared},
          {"carry_stages", s.carry_stages},
          {"v_tile", s.v_tile},
          {"reduce_stages", s.reduce_stages},
          {"push_stages", s.push_stages},
          {"device_bytes", s.device_bytes},
          {"estimate_us", s.estimate_us}};
}

/// A timed run's medians and the plan's statistics, as one record's fields.
json timed_json(const FusedBenchResult& r) {
  json j = stats_json(r.stats);
  j["time"] = {{"median", 1e-3 * r.median_ms}, {"min", 1e-3 * r.min_ms}, {"max", 1e-3 * r.max_ms}};
  return j;
}

int run(const std::string& plan_path, const std::string& out_path, int reps, double budget, bool sweep,
        const std::string& model_path) {
  FusedScanOptions base;  // every plan's options start here: the cost model's constants
  if (!model_path.empty()) {
    std::ifstream m(model_path);
    if (!m) throw bppsa::IoError("[bench_fused_scan] cannot read the model constants " + model_path);
    json j;
    try {
      j = json::parse(m);
    } catch (const json::exception& e) {
      throw bppsa::FormatError("[bench_fused_scan] " + model_path + " is not JSON: " + e.what());
    }
    base.model = bppsa_bench::fused_model_from_json(j, "bench_fused_scan --model " + model_path);
  }
  const json constants = bppsa_bench::fused_model_json(base.model);  // every value the plans use
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
    rec["model_constants"] = constants;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget) {
      std::cout << "bench_fused_scan: skipped " << c.at("id").get<std::string>() << ": time budget spent" << std::endl;
      continue;
    }
    if (sweep) {
      FusedScanStats model;
      bool first = true;
      std::vector<std::pair<json, FusedScanOptions>> sets{{json::object(), base}};
      for (std::size_t i = 0; i < sets.size(); ++i) {
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget) break;
        json r2 = rec;
        r2["forced"] = sets[i].first;
        try {
          const FusedBenchResult r = bench_fused<float>(bppsa_bench::fused_cell_code(cell, "bench_fused_scan"), hidden,
                                                        steps, batch, reps, sets[i].second);
          r2.update(timed_json(r));
          if (first) {
            model = r.stats;
            auto more = sweep_options(steps, model);
            for (auto& m : more) m.second.model = base.model;
            sets.insert(sets.end(), more.begin() + 1, more.end());
          }
        } catch (const std::exception& e) {
          r2["error"] = e.what();
          if (first) ++failed;  // the model's own plan failed; a refused forced one is data
        }
        first = false;
        out << r2.dump() << "\n" << std::flush;
      }
      std::cout << "  sweep " << c.at("id").get<std::string>() << ": " << sets.size() << " plans" << std::endl;
      continue;
    }
    try {
      const FusedBenchResult r =
          bench_fused<float>(bppsa_bench::fused_cell_code(cell, "bench_fused_scan"), hidden, steps, batch, reps, base);
      const FusedScanStats& s = r.stats;
      rec.update(timed_json(r));
      rec["device_summary"] = r.device;
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
  bool sweep = false;
  std::string model;
  app.add_option("--plan", plan, "the configurations (JSON, bench/gpu/gpu.py writes it)")->required();
  app.add_option("--out", out, "JSON lines, appended: one record per distinct (cell, H, T, B)")->required();
  app.add_option("--reps", reps, "timed runs per configuration")->check(CLI::Range(1, 10000));
  app.add_option("--budget", budget, "seconds; configurations after it are skipped")->check(CLI::PositiveNumber);
  app.add_flag("--sweep", sweep, "time the model's plan and forced alternatives (calibration), one record each");
  app.add_option("--model", model, "the cost model's constants (JSON: fit_fused_model.py --json), default: built in");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(plan, out, reps, budget, sweep, model);
  } catch (const std::exception& e) {
    std::cerr << "bench_fused_scan: error: " << e.what() << "\n";
    return 1;
  }
}
