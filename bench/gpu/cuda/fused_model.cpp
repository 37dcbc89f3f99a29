// bench_fused_model: the fused scan's cost model (src/scan/cuda/fused/plan.hpp) on the plans a
// `bench_fused_scan --sweep` timed, for fitting its constants (bench/gpu/fit_fused_model.py). Plain
// host code: no GPU is needed.
//
//   bench_fused_model --sweep SWEEP.jsonl
//
// Each timed record is planned again with every choice it ran forced (chunk length, reduce tile
// and columns, push tile, W in shared memory or not, the record's ring or not) on the device it
// ran on (its multiprocessor count; the H100's shared memory). A record the planner no longer
// makes (a pair no longer compiled, or a mapping that differs from the one that ran) is listed
// with the reason and gets no estimate.
// Output: one JSON line describing the records ({"records": [{id, cell, measured_us, recorded_us,
// constants, model, plan, used, why}]}: `recorded_us` the estimate bench_fused_scan recorded with
// `constants` (its model_constants, or "defaults" for records before it wrote them), `model` true
// for the plan the cost model chose, `plan` its chunk length, tiles and W placement), then, for every line
// of stdin holding a JSON object of FusedModel constants (missing ones: the defaults), one line
// {"estimates": [µs per record, null for those not used], "plans": {id: the plan the cost model
// chooses freely for that configuration: chunk, reduce_tile, reduce_columns, push_tile,
// w_shared, estimate_us}}. Exit 1 on an unreadable sweep or a bad model line, 2 on bad flags.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bppsa/core/error.hpp"
#include "fused_json.hpp"
#include "nn/cuda/fused_cells.hpp"

namespace {

using json = nlohmann::json;
using namespace bppsa::detail::gpu;

struct Record {
  FusedRequest request;
  FusedLimits limits;
  json info;
};

/// A configuration's request with nothing forced, as bench_fused_scan planned its model's plan.
struct Config {
  std::string id;
  FusedRequest request;
  FusedLimits limits;
};

/// The record's plan with its choices forced, or the reason why it cannot be made again.
std::string rebuild(const json& r, Record& out) {
  const std::int32_t cell = bppsa_bench::fused_cell_code(r.at("cell").get<std::string>(), "bench_fused_model");
  FusedRequest q =
      fused_cell_request(cell, r.at("hidden").get<Idx>(), r.at("steps").get<Idx>(), r.at("batch").get<Idx>(), false, 4);
  const Idx chunks = r.at("chunks").get<Idx>();
  q.chunk_length = r.at("chunk").get<Idx>();
  q.push_tile = r.at("push_tile").get<Idx>();
  if (chunks > 1) {
    q.reduce_tile = r.at("reduce_tile").get<Idx>();
    q.reduce_nc = r.at("reduce_columns").get<Idx>();
  }
  q.w_shared = r.at("w_shared").get<bool>() ? 1 : 0;
  // The record's ring as it ran (records from before the ring read the record from global memory).
  q.record_ring = r.value("reduce_stages", 0) > 0 || r.value("push_stages", 0) > 0 ? -1 : 0;
  FusedLimits lim;
  lim.sms = r.at("device").at("multiprocessors").get<Idx>();
  const FusedChoice p = fused_plan(q, lim);
  if (p.error == kPlanBadColumns) return "its tile × columns pair is no longer compiled";
  if (p.error != kPlanOk) return "refused by today's planner (error " + std::to_string(p.error) + ")";
  if (p.shape.C != chunks) return "other chunk count";
  if (p.push.ntile != r.at("push_threads_per_column").get<Idx>()) return "other push mapping";
  if (chunks > 1 && p.reduce.ntile != r.at("reduce_threads_per_column").get<Idx>()) return "other reduce mapping";
  out.request = q;
  out.limits = lim;
  return "";
}

int run(const std::string& sweep) {
  std::ifstream in(sweep);
  if (!in) throw bppsa::IoError("[bench_fused_model] cannot read the sweep " + sweep);
  std::vector<Record> records;
  std::vector<Config> configs;
  std::vector<bool> used;
  json described = json::array();
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    json r;
    try {
      r = json::parse(line);
    } catch (const json::exception& e) {
      throw bppsa::FormatError("[bench_fused_model] " + sweep + " line " + std::to_string(n) + ": " + e.what());
    }
    if (r.contains("error") || !r.contains("time")) continue;  // refused plans: nothing was timed
    Record rec;
    std::string why;
    try {
      why = rebuild(r, rec);
      rec.info = {{"id", r.at("id")},
                  {"cell", r.at("cell")},
                  {"measured_us", 1e6 * r.at("time").at("median").get<double>()},
                  {"recorded_us", r.at("estimate_us")},
                  {"constants", r.contains("model_constants") ? r.at("model_constants") : json("defaults")},
                  {"model", r.at("forced").empty()},
                  {"plan",
                   {{"chunk", r.at("chunk")},
                    {"reduce_tile", r.at("chunks").get<Idx>() > 1 ? r.at("reduce_tile").get<Idx>() : 0},
                    {"reduce_columns", r.at("chunks").get<Idx>() > 1 ? r.at("reduce_columns").get<Idx>() : 0},
                    {"push_tile", r.at("push_tile")},
                    {"w_shared", r.at("w_shared")}}},
                  {"used", why.empty()},
                  {"why", why}};
    } catch (const std::exception& e) {  // a missing field, a wrong type, an unknown cell
      throw bppsa::FormatError("[bench_fused_model] " + sweep + " line " + std::to_string(n) +
                               " is not a bench_fused_scan --sweep record: " + e.what());
    }
    described.push_back(rec.info);
    if (r.at("forced").empty()) {
      Config c{
          r.at("id").get<std::string>(),
          fused_cell_request(bppsa_bench::fused_cell_code(r.at("cell").get<std::string>(), "bench_fused_model"),
                             r.at("hidden").get<Idx>(), r.at("steps").get<Idx>(), r.at("batch").get<Idx>(), false, 4),
          FusedLimits{}};
      c.limits.sms = r.at("device").at("multiprocessors").get<Idx>();
      configs.push_back(c);
    }
    used.push_back(why.empty());
    records.push_back(rec);
  }
  std::cout << json{{"records", described}}.dump() << std::endl;
  while (std::getline(std::cin, line)) {
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw bppsa::FormatError(std::string("[bench_fused_model] a model line is not JSON: ") + e.what());
    }
    const FusedModel m = bppsa_bench::fused_model_from_json(j, "bench_fused_model");
    json out = json::array();
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (!used[i]) {
        out.push_back(nullptr);
        continue;
      }
      FusedLimits lim = records[i].limits;
      lim.model = m;
      const FusedChoice p = fused_plan(records[i].request, lim);
      out.push_back(p.cycles / kFusedCyclesPerMicro);
    }
    json plans = json::object();
    for (const Config& c : configs) {
      FusedLimits lim = c.limits;
      lim.model = m;
      const FusedChoice p = fused_plan(c.request, lim);
      if (p.error != kPlanOk) continue;
      const bool scan = p.shape.C > 1;
      plans[c.id] = {{"chunk", p.shape.L},
                     {"reduce_tile", scan ? p.reduce.tile : 0},
                     {"reduce_columns", scan ? p.reduce.nc : 0},
                     {"push_tile", p.push.tile},
                     {"w_shared", p.push.w_shared && (!scan || p.reduce.w_shared)},
                     {"estimate_us", p.cycles / kFusedCyclesPerMicro}};
    }
    std::cout << json{{"estimates", out}, {"plans", plans}}.dump() << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_fused_model: the fused scan's cost model on a sweep's timed plans (JSON lines)"};
  std::string sweep;
  app.add_option("--sweep", sweep, "JSON lines of bench_fused_scan --sweep")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(sweep);
  } catch (const std::exception& e) {
    std::cerr << "bench_fused_model: error: " << e.what() << "\n";
    return 1;
  }
}
