// For the tests of auto's batch rule: a scope in which the step cost model has no fit (the rule
// decides), whatever is built in; the process's default (BPPSA_COST_MODEL or the built-in fit) after.
#pragma once

#include <fstream>
#include <string>

#include "bppsa/nn/cost_model.hpp"
#include "temp_dir.hpp"

namespace testutil {

/// A step cost model file's text (bppsa-cost-model/1, the library's features) with these groups.
inline std::string cost_model_json(const std::string& groups) {
  return R"({"format": "bppsa-cost-model/1", "fitted_on": "a test", "features": ["1", "T", "T*B*S", "T*B*S^2", )"
         R"("T*B*S^3", "T*B*S*I", "T*S^2"], "groups": [)" +
         groups + "]}";
}

struct NoCostModel {
  TempDir dir;
  NoCostModel() {
    const auto path = dir.path / "none.json";
    std::ofstream(path) << cost_model_json("");
    bppsa::load_cost_model(path.string());
  }
  ~NoCostModel() { bppsa::load_cost_model(""); }
  NoCostModel(const NoCostModel&) = delete;
  NoCostModel& operator=(const NoCostModel&) = delete;
};

}  // namespace testutil
