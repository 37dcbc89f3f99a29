// The cost model (bppsa/nn/cost_model.hpp): per (cell, candidate, threads) a non-negative
// combination of the features below, fitted by bench/auto/fit_auto.py to measured times: a
// training step's (the step candidates) or a forward's (the forward candidates).
#include "bppsa/nn/cost_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/io/file.hpp"

namespace bppsa {

namespace {

constexpr const char* kOp = "cost model";
constexpr const char* kFormat = "bppsa-cost-model/1";
// The features, in the file's order: fixed cost, per step, and per step and sample the
// elementwise work (S), the matrix-vector products (S²), the scan's dense products (S³) and the
// input projection (S·I); per step S² for reading the recurrent weights once a step at any batch.
constexpr const char* kFeatures[] = {"1", "T", "T*B*S", "T*B*S^2", "T*B*S^3", "T*B*S*I", "T*S^2"};
constexpr std::size_t kFeatureCount = std::size(kFeatures);

// The dimensions of a group's span, in the file's order.
constexpr const char* kSpanDims[] = {"steps", "batch", "hidden"};

// Every candidate a group can model: the step candidates (StepCandidate's values), then the forward ones.
enum class Candidate { bp, blelloch, hybrid, torch_nn, sequential_forward, newton_iteration };
Candidate candidate_of(StepCandidate c) { return static_cast<Candidate>(static_cast<int>(c)); }
Candidate candidate_of(ForwardCandidate c) {
  return c == ForwardCandidate::sequential ? Candidate::sequential_forward : Candidate::newton_iteration;
}

struct Group {
  CellType cell;
  Candidate candidate;
  int threads;
  int iterations = 0;        // newton iteration: the median iterations of the runs it was fitted to
  std::vector<double> coef;  // ms per unit of each feature
  // The smallest and largest T, B and H its fit measured; a file without a span: every shape.
  std::array<std::array<Index, 2>, std::size(kSpanDims)> span{};
};

struct Model {
  std::string source;
  std::string fitted_on;  // the file's "fitted_on": the machine and versions of its sweeps
  std::vector<Group> groups;
};

// The built-in fit: the JSON text bench/auto/fit_auto.py writes into cost_model_fit.inc.
constexpr const char* kBuiltIn =
#include "nn/cost_model_fit.inc"
    ;

[[noreturn]] void bad_model(const std::string& where, const std::string& what);

Candidate parse_candidate(const std::string& name, const std::string& where) {
  if (name == "bp") return Candidate::bp;
  if (name == "blelloch") return Candidate::blelloch;
  if (name == "hybrid") return Candidate::hybrid;
  if (name == "torch.nn") return Candidate::torch_nn;
  if (name == "sequential forward") return Candidate::sequential_forward;
  if (name == "newton iteration") return Candidate::newton_iteration;
  bad_model(where, "unknown candidate '" + name +
                       "' (expected bp, blelloch, hybrid, torch.nn, sequential forward or newton iteration)");
}

[[noreturn]] void bad_model(const std::string& where, const std::string& what) {
  detail::raise<FormatError>(kOp, where + ": " + what + "; write it with bench/auto/fit_auto.py");
}

/// The model in `text`; FormatError naming `where` (a file, or the built-in fit) on any fault.
Model parse_model(const std::string& text, const std::string& where, std::string source) {
  auto bad = [&](const std::string& what) { bad_model(where, what); };
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("not JSON (") + e.what() + ")");
  }
  if (!doc.is_object() || doc.value("format", std::string()) != kFormat)
    bad(std::string("not a cost model (its \"format\" must be \"") + kFormat + "\")");
  const auto features = doc.find("features");
  if (features == doc.end() || !features->is_array() || features->size() != kFeatureCount)
    bad("\"features\" must list the " + std::to_string(kFeatureCount) + " features this bppsa uses");
  for (std::size_t k = 0; k < kFeatureCount; ++k)
    if (!(*features)[k].is_string() || (*features)[k].get<std::string>() != kFeatures[k])
      bad(std::string("feature ") + std::to_string(k) + " must be \"" + kFeatures[k] + "\"");
  const auto groups = doc.find("groups");
  if (groups == doc.end() || !groups->is_array()) bad("\"groups\" must be an array");
  Model m;
  m.source = std::move(source);
  const auto fitted_on = doc.find("fitted_on");
  m.fitted_on = fitted_on != doc.end() && fitted_on->is_string() ? fitted_on->get<std::string>() : "?";
  for (std::size_t i = 0; i < groups->size(); ++i) {
    const auto& g = (*groups)[i];
    const std::string at = "group " + std::to_string(i);
    if (!g.is_object() || !g.contains("cell") || !g.contains("candidate") || !g.contains("threads") ||
        !g.contains("coef") || !g["cell"].is_string() || !g["candidate"].is_string() ||
        !g["threads"].is_number_integer() || !g["coef"].is_array())
      bad(at + " needs \"cell\", \"candidate\", \"threads\" (an integer) and \"coef\" (an array)");
    Group out;
    const std::string cell = g["cell"].get<std::string>();
    if (cell != "rnn" && cell != "gru" && cell != "lstm") bad(at + ": unknown cell '" + cell + "'");
    out.cell = parse_cell(cell);
    out.candidate = parse_candidate(g["candidate"].get<std::string>(), where + ": " + at);
    out.threads = g["threads"].get<int>();
    if (out.threads < 1) bad(at + ": threads must be ≥ 1");
    if (out.candidate == Candidate::newton_iteration) {
      const auto it = g.find("iterations");
      if (it == g.end() || !it->is_number_integer() || it->get<int>() < 1)
        bad(at + ": a \"newton iteration\" group needs \"iterations\", an integer ≥ 1 (the median its runs took)");
      out.iterations = it->get<int>();
    }
    if (g["coef"].size() != kFeatureCount)
      bad(at + ": \"coef\" must have " + std::to_string(kFeatureCount) + " numbers");
    for (const auto& c : g["coef"]) {
      if (!c.is_number() || !std::isfinite(c.get<double>()) || c.get<double>() < 0)
        bad(at + ": every coefficient must be a finite number ≥ 0");
      out.coef.push_back(c.get<double>());
    }
    for (std::size_t d = 0; d < std::size(kSpanDims); ++d) out.span[d] = {1, std::numeric_limits<Index>::max()};
    if (const auto span = g.find("span"); span != g.end()) {
      if (!span->is_object()) bad(at + ": \"span\" must be an object of [smallest, largest] pairs");
      for (std::size_t d = 0; d < std::size(kSpanDims); ++d) {
        const auto r = span->find(kSpanDims[d]);
        if (r == span->end()) continue;
        if (!r->is_array() || r->size() != 2 || !(*r)[0].is_number_integer() || !(*r)[1].is_number_integer() ||
            (*r)[0].get<Index>() < 1 || (*r)[0].get<Index>() > (*r)[1].get<Index>())
          bad(at + ": span \"" + kSpanDims[d] +
              "\" must be [smallest, largest], integers with 1 <= smallest <= largest");
        out.span[d] = {(*r)[0].get<Index>(), (*r)[1].get<Index>()};
      }
    }
    for (const Group& seen : m.groups)
      if (seen.cell == out.cell && seen.candidate == out.candidate && seen.threads == out.threads)
        bad(at + " repeats an earlier group's cell, candidate and threads");
    m.groups.push_back(std::move(out));
  }
  return m;
}

Model read_model(const std::string& path, std::string source) {
  const std::vector<unsigned char> bytes = read_file(path);  // IoError naming the path
  return parse_model(std::string(bytes.begin(), bytes.end()), path, std::move(source));
}

std::mutex g_mutex;
std::shared_ptr<const Model> g_model;  // set at first use

std::shared_ptr<const Model> model_in_use() {
  std::lock_guard lock(g_mutex);
  if (!g_model) {
    if (const char* env = std::getenv("BPPSA_COST_MODEL"); env != nullptr && *env != '\0') {
      g_model = std::make_shared<const Model>(read_model(env, std::string("BPPSA_COST_MODEL=") + env));
    } else {
      Model m = parse_model(kBuiltIn, "the built-in cost model (src/nn/cost_model_fit.inc)", "");
      m.source = m.groups.empty() ? "none" : "built-in (" + m.fitted_on + ")";
      g_model = std::make_shared<const Model>(std::move(m));
    }
  }
  return g_model;
}

std::vector<double> features(const StepShape& s) {
  const double S =
      static_cast<double>(s.cell == CellType::lstm ? (s.proj > 0 ? s.proj : s.hidden) + s.hidden : s.hidden);
  const double T = static_cast<double>(s.steps), TB = T * static_cast<double>(s.batch);
  const double I = static_cast<double>(s.input);
  return {1.0, T, TB * S, TB * S * S, TB * S * S * S, TB * S * I, T * S * S};
}

}  // namespace

const char* to_string(StepCandidate c) {
  switch (c) {
    case StepCandidate::bp:
      return "bp";
    case StepCandidate::blelloch:
      return "blelloch";
    case StepCandidate::hybrid:
      return "hybrid";
    case StepCandidate::torch_nn:
      return "torch.nn";
  }
  return "?";
}

namespace {

/// The group that serves a shape and candidate (the thread-count rule of predict_step_ms), or null.
const Group* group_for(const Model& model, const StepShape& shape, Candidate candidate) {
  const int threads = resolve_threads(shape.threads);
  const Group* best = nullptr;
  for (const Group& g : model.groups) {
    if (g.cell != shape.cell || g.candidate != candidate) continue;
    // the largest fitted count at or below the request, else the smallest above it
    const auto rank = [&](const Group* x) {
      return x->threads <= threads ? std::make_pair(0, threads - x->threads) : std::make_pair(1, x->threads - threads);
    };
    if (best == nullptr || rank(&g) < rank(best)) best = &g;
  }
  return best;
}

/// Whether group g (null: none) was fitted on T, B and H spanning the shape.
bool spans(const Group* g, const StepShape& shape) {
  if (g == nullptr) return false;
  const Index at[] = {shape.steps, shape.batch, shape.hidden};
  for (std::size_t d = 0; d < std::size(kSpanDims); ++d)
    if (at[d] < g->span[d][0] || at[d] > g->span[d][1]) return false;
  return true;
}

/// Group g's prediction for the shape in milliseconds; NaN when g is null.
double predict(const Group* g, const StepShape& shape) {
  if (g == nullptr) return std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> f = features(shape);
  double ms = 0;
  for (std::size_t k = 0; k < kFeatureCount; ++k) ms += g->coef[k] * f[k];
  return ms;
}

double predict_ms(const StepShape& shape, Candidate candidate) {
  return predict(group_for(*model_in_use(), shape, candidate), shape);
}

}  // namespace

double predict_step_ms(const StepShape& shape, StepCandidate candidate) {
  return predict_ms(shape, candidate_of(candidate));
}

const char* to_string(ForwardCandidate c) {
  return c == ForwardCandidate::sequential ? "sequential forward" : "newton iteration";
}

double predict_forward_ms(const StepShape& shape, ForwardCandidate candidate) {
  return predict_ms(shape, candidate_of(candidate));
}

int expected_newton_iterations(const StepShape& shape) {
  const auto model = model_in_use();
  const Group* g = group_for(*model, shape, Candidate::newton_iteration);
  return g == nullptr ? 0 : g->iterations;
}

ForwardPlan resolve_forward(const ForwardOptions& options, const StepShape& shape, Device device) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  ForwardPlan plan{options.method, options.method == ForwardMethod::sequential ? 0 : options.max_iterations, kNaN,
                   kNaN};
  if (options.method != ForwardMethod::automatic) return plan;
  plan.method = ForwardMethod::sequential;
  plan.max_iterations = 0;
  if (shape.steps <= 1 || device != Device::cpu) return plan;  // one step: the first is exact; no CUDA Newton yet
  const auto model = model_in_use();                           // one model for the whole decision
  const Group* seq = group_for(*model, shape, Candidate::sequential_forward);
  const Group* it = group_for(*model, shape, Candidate::newton_iteration);
  plan.sequential_ms = predict(seq, shape);
  plan.iteration_ms = predict(it, shape);
  const int expected = it == nullptr ? 0 : it->iterations;
  if (!(plan.iteration_ms > 0) || !(plan.sequential_ms > 0) || expected < 1) return plan;  // no fit (NaN)
  // Outside the shapes the fits measured a prediction is extrapolated: at T 2 and H 1, say, a fit
  // whose Newton iteration has no fixed term would predict Newton nearly free.
  if (!spans(seq, shape) || !spans(it, shape)) return plan;
  const double affordable = std::floor(plan.sequential_ms / plan.iteration_ms);
  if (affordable <= expected) return plan;  // Newton's expected iterations take at least as long
  plan.method = ForwardMethod::newton;
  plan.max_iterations = static_cast<int>(std::min<double>(affordable, options.max_iterations));
  return plan;
}

bool cost_model_spans(const StepShape& shape, StepCandidate candidate) {
  return spans(group_for(*model_in_use(), shape, candidate_of(candidate)), shape);
}

BackwardMethod resolve_backward(const BackwardOptions& options, const StepShape& shape) {
  if (options.method != BackwardMethod::automatic) return options.method;
  if (shape.steps <= 1) return BackwardMethod::bp;  // one step: nothing to scan, and a scan's Jacobian is extra work
  BackwardMethod pick = BackwardMethod::automatic;
  double least = std::numeric_limits<double>::infinity();
  for (const auto& [c, m] :
       {std::pair{StepCandidate::bp, BackwardMethod::bp}, std::pair{StepCandidate::hybrid, BackwardMethod::hybrid},
        std::pair{StepCandidate::blelloch, BackwardMethod::blelloch}}) {
    const double ms = predict_step_ms(shape, c);
    if (ms < least) {  // NaN (no fit) never wins
      least = ms;
      pick = m;
    }
  }
  return pick != BackwardMethod::automatic ? pick : resolve_backward(options, shape.batch);
}

std::string cost_model_source() { return model_in_use()->source; }

void load_cost_model(const std::string& path) {
  if (path.empty()) {
    std::lock_guard lock(g_mutex);
    g_model.reset();  // the next use reads BPPSA_COST_MODEL or the built-in fit again
    return;
  }
  auto m = std::make_shared<const Model>(read_model(path, path));
  std::lock_guard lock(g_mutex);
  g_model = std::move(m);
}

}  // namespace bppsa
