// What the fused scan's benchmark programs (bench_fused_scan, bench_fused_model) read from JSON:
// a cell's name, and the cost model's constants (FusedModel, src/scan/cuda/fused/options.hpp) as a
// flat object or the file bench/gpu/fit_fused_model.py --json writes (its "fitted" object).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "bppsa/core/error.hpp"
#include "nn/cuda/layer_args.hpp"
#include "scan/cuda/fused/options.hpp"

namespace bppsa_bench {

/// The cell code of a plan's cell name (the benchmarks' RNN is nn.RNN's default, tanh);
/// FormatError naming `where` otherwise.
inline std::int32_t fused_cell_code(const std::string& cell, const std::string& where) {
  using namespace bppsa::detail::gpu;
  if (cell == "rnn") return kRnnTanh;
  if (cell == "gru") return kGru;
  if (cell == "lstm") return kLstm;
  throw bppsa::FormatError("[" + where + "] unknown cell '" + cell + "' (rnn, gru, lstm)");
}

/// The constants in `in` over FusedModel's defaults; missing ones keep their defaults, an unknown
/// or non-positive one is a FormatError naming `where`.
/// FusedModel's fields by name, for reading and writing them.
template <class M, class F>
void fused_model_fields(M& m, F&& f) {
  f("launch", m.launch);
  f("issue", m.issue);
  f("step", m.step);
  f("step_sync", m.step_sync);
  f("latency", m.latency);
  f("latency_sync", m.latency_sync);
  f("unit", m.unit);
  f("row", m.row);
  f("w_load", m.w_load);
  f("l2_bytes", m.l2_bytes);
  f("carry_step", m.carry_step);
}

inline bppsa::detail::gpu::FusedModel fused_model_from_json(const nlohmann::json& in, const std::string& where) {
  const nlohmann::json& j = in.contains("fitted") ? in.at("fitted") : in;
  if (!j.is_object()) throw bppsa::FormatError("[" + where + "] the model constants are not a JSON object");
  bppsa::detail::gpu::FusedModel m;
  std::string names;
  fused_model_fields(m, [&](const char* name, double&) { names += (names.empty() ? "" : ", ") + std::string(name); });
  for (auto it = j.begin(); it != j.end(); ++it) {
    double* field = nullptr;
    fused_model_fields(m, [&](const char* name, double& f) {
      if (it.key() == name) field = &f;
    });
    if (field == nullptr || !it.value().is_number() || !(it.value().get<double>() > 0))
      throw bppsa::FormatError("[" + where + "] model constant '" + it.key() +
                               "': unknown or not a positive number (FusedModel's fields: " + names + ")");
    *field = it.value().get<double>();
  }
  return m;
}

/// Every constant of `m`, as fused_model_from_json reads them.
inline nlohmann::json fused_model_json(const bppsa::detail::gpu::FusedModel& m) {
  nlohmann::json j = nlohmann::json::object();
  fused_model_fields(m, [&](const char* name, const double& f) { j[name] = f; });
  return j;
}

}  // namespace bppsa_bench
