// The cost model behind `auto` (bppsa/nn/cost_model.hpp): predictions from hand-written models
// against their closed forms, the thread-count fallback, auto's choices (the backward's method, the
// forward's method and its iterations), and bad files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/nn/cost_model.hpp"
#include "bppsa/nn/recurrent.hpp"
#include "expect_error.hpp"
#include "no_cost_model.hpp"
#include "temp_dir.hpp"

namespace {

using namespace bppsa;

std::string model_json(const std::string& groups) { return testutil::cost_model_json(groups); }

std::string group(const std::string& cell, const std::string& candidate, int threads, const std::string& coef) {
  return R"({"cell": ")" + cell + R"(", "candidate": ")" + candidate + R"(", "threads": )" + std::to_string(threads) +
         R"(, "coef": [)" + coef + "]}";
}

/// A model of bp, blelloch and hybrid for one cell at one thread count (each method's coefficients).
std::string methods_json(const std::string& cell, int threads, const std::string& bp, const std::string& blelloch,
                         const std::string& hybrid) {
  return model_json(group(cell, "bp", threads, bp) + "," + group(cell, "blelloch", threads, blelloch) + "," +
                    group(cell, "hybrid", threads, hybrid));
}

/// `auto` at `threads` threads.
BackwardOptions auto_options(int threads) {
  BackwardOptions o;
  o.method = BackwardMethod::automatic;
  o.threads = threads;
  return o;
}

std::string write(const testutil::TempDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir.path / name;
  std::ofstream(path) << text;
  return path.string();
}

StepShape shape(CellType cell, Index hidden, Index steps, Index batch, int threads, Index input = 3, Index proj = 0) {
  StepShape s;
  s.cell = cell;
  s.input = input;
  s.hidden = hidden;
  s.proj = proj;
  s.steps = steps;
  s.batch = batch;
  s.threads = threads;
  return s;
}

// Each test loads its own model and leaves the process's default in place for the other suites.
class CostModel : public ::testing::Test {
 protected:
  void TearDown() override { load_cost_model(""); }
  testutil::TempDir dir;
};

TEST_F(CostModel, PredictsEachFeatureAsItsClosedForm) {
  // one coefficient per group, each on another feature
  load_cost_model(write(dir, "m.json",
                        model_json(group("rnn", "bp", 2, "2, 0, 0, 0, 0, 0, 0") + "," +
                                   group("rnn", "blelloch", 2, "0, 0.5, 0, 0, 0, 0, 0") + "," +
                                   group("rnn", "hybrid", 2, "0, 0, 1e-3, 0, 0, 0, 0") + "," +
                                   group("gru", "bp", 2, "0, 0, 0, 1e-4, 0, 0, 0") + "," +
                                   group("lstm", "bp", 2, "0, 0, 0, 0, 1e-6, 0, 0") + "," +
                                   group("lstm", "hybrid", 2, "0, 0, 0, 0, 0, 1e-5, 0") + "," +
                                   group("lstm", "torch.nn", 2, "0, 0, 0, 0, 0, 0, 1e-3"))));
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::rnn, 20, 1000, 16, 2), StepCandidate::bp), 2.0);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::rnn, 20, 1000, 16, 2), StepCandidate::blelloch), 500.0);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::rnn, 20, 1000, 16, 2), StepCandidate::hybrid),
                   1e-3 * 1000 * 16 * 20);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::gru, 64, 100, 4, 2), StepCandidate::bp), 1e-4 * 100 * 4 * 64 * 64);
  // LSTM: S = 2H, or P + H with a projection
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::lstm, 32, 10, 2, 2), StepCandidate::bp),
                   1e-6 * 10 * 2 * 64.0 * 64 * 64);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::lstm, 32, 10, 2, 2, 7, 8), StepCandidate::bp),
                   1e-6 * 10 * 2 * 40.0 * 40 * 40);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::lstm, 32, 10, 2, 2, 7), StepCandidate::hybrid),
                   1e-5 * 10 * 2 * 64 * 7);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::lstm, 32, 10, 2, 2), StepCandidate::torch_nn), 1e-3 * 10 * 64 * 64);
  // no fit: NaN
  EXPECT_TRUE(std::isnan(predict_step_ms(shape(CellType::gru, 64, 100, 4, 2), StepCandidate::blelloch)));
  EXPECT_NE(cost_model_source().find("m.json"), std::string::npos);
}

TEST_F(CostModel, ServesTheNearestFittedThreadCount) {
  load_cost_model(write(
      dir, "m.json",
      model_json(group("gru", "bp", 1, "1, 0, 0, 0, 0, 0, 0") + "," + group("gru", "bp", 4, "4, 0, 0, 0, 0, 0, 0") +
                 "," + group("rnn", "bp", 4, "40, 0, 0, 0, 0, 0, 0"))));
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::gru, 8, 10, 1, 1), StepCandidate::bp), 1.0);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::gru, 8, 10, 1, 3), StepCandidate::bp), 1.0);  // largest below
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::gru, 8, 10, 1, 4), StepCandidate::bp), 4.0);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::gru, 8, 10, 1, 16), StepCandidate::bp), 4.0);
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::rnn, 8, 10, 1, 1), StepCandidate::bp), 40.0);  // smallest above
}

TEST_F(CostModel, SpansTheShapesItsFitMeasured) {
  // torch.nn's group measured T 30..3000, B 1..64, H 16..256; bp's records no span (every shape).
  load_cost_model(
      write(dir, "m.json",
            model_json(group("lstm", "bp", 1, "1, 0, 0, 0, 0, 0, 0") + "," +
                       R"({"cell": "lstm", "candidate": "torch.nn", "threads": 1, "coef": [1, 0, 0, 0, 0, 0, 0], )"
                       R"("span": {"steps": [30, 3000], "batch": [1, 64], "hidden": [16, 256]}})")));
  const auto spans = [](Index hidden, Index steps, Index batch, StepCandidate c) {
    return cost_model_spans(shape(CellType::lstm, hidden, steps, batch, 2), c);
  };
  EXPECT_TRUE(spans(16, 30, 1, StepCandidate::torch_nn));  // the corners are inside
  EXPECT_TRUE(spans(256, 3000, 64, StepCandidate::torch_nn));
  EXPECT_FALSE(spans(256, 1, 1, StepCandidate::torch_nn));  // a decoder's T 1 step
  EXPECT_FALSE(spans(64, 3001, 16, StepCandidate::torch_nn));
  EXPECT_FALSE(spans(64, 300, 65, StepCandidate::torch_nn));
  EXPECT_FALSE(spans(512, 300, 16, StepCandidate::torch_nn));
  EXPECT_FALSE(spans(8, 300, 16, StepCandidate::torch_nn));
  EXPECT_TRUE(spans(4096, 1, 1000, StepCandidate::bp));     // no span recorded: every shape
  EXPECT_FALSE(spans(64, 300, 16, StepCandidate::hybrid));  // no fit
  EXPECT_FALSE(cost_model_spans(shape(CellType::gru, 64, 300, 16, 2), StepCandidate::torch_nn));
  // the prediction itself is the fit's, inside its span or not
  EXPECT_DOUBLE_EQ(predict_step_ms(shape(CellType::lstm, 256, 1, 1, 2), StepCandidate::torch_nn), 1.0);
}

TEST_F(CostModel, AutoPicksTheLeastPredictedMethod) {
  // bp: 0.01 ms a step; blelloch: 5 ms fixed + 1e-3 a step; hybrid: 2 ms fixed + 4e-3 a step.
  // Least: bp up to T 333, hybrid up to T 1000, blelloch beyond.
  load_cost_model(
      write(dir, "m.json",
            methods_json("rnn", 2, "0, 0.01, 0, 0, 0, 0, 0", "5, 1e-3, 0, 0, 0, 0, 0", "2, 4e-3, 0, 0, 0, 0, 0")));
  BackwardOptions o = auto_options(2);
  EXPECT_EQ(resolve_backward(o, shape(CellType::rnn, 20, 100, 1, 2)), BackwardMethod::bp);
  EXPECT_EQ(resolve_backward(o, shape(CellType::rnn, 20, 800, 1, 2)), BackwardMethod::hybrid);
  EXPECT_EQ(resolve_backward(o, shape(CellType::rnn, 20, 5000, 1, 2)), BackwardMethod::blelloch);
  // an explicit method is itself
  o.method = BackwardMethod::blelloch;
  EXPECT_EQ(resolve_backward(o, shape(CellType::rnn, 20, 100, 1, 2)), BackwardMethod::blelloch);
  // a cell without a fit: the batch rule (threads < 2·batch: bp, else the scan's own choice)
  o.method = BackwardMethod::automatic;
  EXPECT_EQ(resolve_backward(o, shape(CellType::gru, 20, 100, 16, 2)), BackwardMethod::bp);
  EXPECT_EQ(resolve_backward(o, shape(CellType::gru, 20, 100, 1, 2)), BackwardMethod::automatic);
}

TEST_F(CostModel, AutoRunsBpAtOneStep) {
  // blelloch predicted 10× cheaper than bp at every T: auto takes it from T 2, but a chain of one
  // step has nothing to scan (and a scan would generate its Jacobian besides): bp, fit or no fit.
  load_cost_model(write(dir, "m.json",
                        methods_json("lstm", 1, "10, 0, 0, 0, 0, 0, 0", "1, 0, 0, 0, 0, 0, 0", "5, 0, 0, 0, 0, 0, 0")));
  BackwardOptions o = auto_options(1);
  EXPECT_EQ(resolve_backward(o, shape(CellType::lstm, 16, 1, 4, 1)), BackwardMethod::bp);
  EXPECT_EQ(resolve_backward(o, shape(CellType::lstm, 16, 2, 4, 1)), BackwardMethod::blelloch);
  o.threads = 4;  // no fit for the GRU, and the batch rule alone would give the scan's own choice here
  EXPECT_EQ(resolve_backward(o, shape(CellType::gru, 16, 2, 1, 4)), BackwardMethod::automatic);
  EXPECT_EQ(resolve_backward(o, shape(CellType::gru, 16, 1, 1, 4)), BackwardMethod::bp);
  o.method = BackwardMethod::hybrid;  // an explicit method is itself, at T 1 too
  EXPECT_EQ(resolve_backward(o, shape(CellType::lstm, 16, 1, 4, 1)), BackwardMethod::hybrid);
}

/// A forward model for one cell at one thread count: the sequential forward's and one Newton
/// iteration's coefficients, and the iterations Newton is expected to take.
std::string forward_json(const std::string& cell, int threads, const std::string& sequential,
                         const std::string& iteration, int iterations) {
  return model_json(group(cell, "sequential forward", threads, sequential) + "," + R"({"cell": ")" + cell +
                    R"(", "candidate": "newton iteration", "threads": )" + std::to_string(threads) +
                    R"(, "iterations": )" + std::to_string(iterations) + R"(, "coef": [)" + iteration + "]}");
}

ForwardOptions forward_auto(int threads) {
  ForwardOptions o;
  o.method = ForwardMethod::automatic;
  o.threads = threads;
  return o;
}

TEST_F(CostModel, AutoForwardRunsNewtonWhereItsExpectedIterationsArePredictedFaster) {
  // sequential: 0.01 ms a step; a Newton iteration: 1 ms; 4 iterations expected. Newton is
  // allowed floor(0.01 T / 1) iterations and runs where that exceeds 4: from T 500 on.
  load_cost_model(write(dir, "f.json", forward_json("gru", 2, "0, 0.01, 0, 0, 0, 0, 0", "1, 0, 0, 0, 0, 0, 0", 4)));
  const ForwardOptions o = forward_auto(2);
  EXPECT_DOUBLE_EQ(predict_forward_ms(shape(CellType::gru, 20, 300, 16, 2), ForwardCandidate::sequential), 3.0);
  EXPECT_DOUBLE_EQ(predict_forward_ms(shape(CellType::gru, 20, 300, 16, 2), ForwardCandidate::newton_iteration), 1.0);
  EXPECT_EQ(expected_newton_iterations(shape(CellType::gru, 20, 300, 16, 2)), 4);
  EXPECT_EQ(expected_newton_iterations(shape(CellType::rnn, 20, 300, 16, 2)), 0);  // no fit
  const auto plan = [&](Index steps, const ForwardOptions& opt = forward_auto(2), CellType cell = CellType::gru,
                        Device device = Device::cpu) {
    return resolve_forward(opt, shape(cell, 20, steps, 16, 2), device);
  };
  EXPECT_EQ(plan(400).method, ForwardMethod::sequential);  // 4 affordable: not more than expected
  EXPECT_EQ(plan(499).method, ForwardMethod::sequential);
  const ForwardPlan p = plan(500);
  EXPECT_EQ(p.method, ForwardMethod::newton);
  EXPECT_EQ(p.max_iterations, 5);
  EXPECT_DOUBLE_EQ(p.sequential_ms, 5.0);
  EXPECT_DOUBLE_EQ(p.iteration_ms, 1.0);
  EXPECT_EQ(plan(2000).max_iterations, 20);
  EXPECT_EQ(plan(100000).max_iterations, o.max_iterations);  // at most the option's (30)
  ForwardOptions capped = o;
  capped.max_iterations = 7;
  EXPECT_EQ(plan(2000, capped).max_iterations, 7);
  capped.max_iterations = 3;  // fewer than expected: Newton would not be given its chance
  EXPECT_EQ(plan(2000, capped).method, ForwardMethod::newton);
  EXPECT_EQ(plan(2000, capped).max_iterations, 3);
  // no fit for the cell, one step, CUDA: sequential
  EXPECT_EQ(plan(2000, o, CellType::rnn).method, ForwardMethod::sequential);
  EXPECT_EQ(plan(1, o).method, ForwardMethod::sequential);
  EXPECT_EQ(plan(2000, o, CellType::gru, Device::cuda).method, ForwardMethod::sequential);
  EXPECT_EQ(plan(2000, o, CellType::gru, Device::cuda).max_iterations, 0);
  // an asked method is itself, with the option's iterations
  ForwardOptions asked = o;
  asked.method = ForwardMethod::newton;
  EXPECT_EQ(plan(10, asked).method, ForwardMethod::newton);
  EXPECT_EQ(plan(10, asked).max_iterations, 30);
  asked.method = ForwardMethod::sequential;
  EXPECT_EQ(plan(2000, asked).method, ForwardMethod::sequential);
  EXPECT_EQ(plan(2000, asked).max_iterations, 0);
  // a fit is trusted only on the shapes it spans: Newton's measured at T 100-1000 only
  load_cost_model(
      write(dir, "span.json",
            model_json(group("gru", "sequential forward", 2, "0, 0.01, 0, 0, 0, 0, 0") +
                       R"(, {"cell": "gru", "candidate": "newton iteration", "threads": 2, )"
                       R"("iterations": 4, "coef": [1, 0, 0, 0, 0, 0, 0], "span": {"steps": [100, 1000]}})")));
  EXPECT_EQ(plan(1000).method, ForwardMethod::newton);
  EXPECT_EQ(plan(1001).method, ForwardMethod::sequential);
  EXPECT_EQ(plan(100000).method, ForwardMethod::sequential);
  // the step model's candidates are not the forward's: a model of steps only predicts no forward
  load_cost_model(write(dir, "steps.json",
                        methods_json("gru", 2, "1, 0, 0, 0, 0, 0, 0", "1, 0, 0, 0, 0, 0, 0", "1, 0, 0, 0, 0, 0, 0")));
  EXPECT_TRUE(std::isnan(predict_forward_ms(shape(CellType::gru, 20, 300, 16, 2), ForwardCandidate::sequential)));
  EXPECT_EQ(plan(100000).method, ForwardMethod::sequential);
}

TEST_F(CostModel, RecurrentAutoForwardRunsWhatTheModelPicks) {
  // A two-layer GRU, T 200: where the model says Newton, both layers run it with the iterations the
  // model allows, and give the sequential forward's outputs (the oracle, run on its own).
  const Index steps = 200, batch = 3;
  Recurrent<double> rnn(RecurrentConfig{CellType::gru, /*input=*/3, /*hidden=*/5, /*layers=*/2});
  rnn.reset_parameters(11);
  const Matrix<double> x = Matrix<double>::Random(3, steps * batch);
  ForwardOptions o;
  o.method = ForwardMethod::sequential;
  o.threads = 1;
  rnn.set_forward_options(o);
  rnn.forward(x, steps, batch);
  const Matrix<double> sequential = rnn.output();
  EXPECT_EQ(rnn.forward_report().ran,
            (std::vector<ForwardMethod>{ForwardMethod::sequential, ForwardMethod::sequential}));
  o = forward_auto(1);
  rnn.set_forward_options(o);
  // sequential 0.1 ms a step (20 ms), an iteration 2 ms, 4 expected: 10 allowed
  load_cost_model(write(dir, "n.json", forward_json("gru", 1, "0, 0.1, 0, 0, 0, 0, 0", "2, 0, 0, 0, 0, 0, 0", 4)));
  rnn.forward(x, steps, batch);
  const ForwardReport& r = rnn.forward_report();
  EXPECT_EQ(r.method, ForwardMethod::automatic);
  EXPECT_EQ(r.ran, (std::vector<ForwardMethod>{ForwardMethod::newton, ForwardMethod::newton}));
  EXPECT_EQ(r.max_iterations, (std::vector<int>{10, 10}));
  for (std::size_t l = 0; l < 2; ++l) {
    EXPECT_GE(r.iterations[l], 2) << l;
    EXPECT_LE(r.iterations[l], 10) << l;
    EXPECT_FALSE(r.fell_back[l]) << l;
  }
  EXPECT_LE((rnn.output() - sequential).cwiseAbs().maxCoeff(), 1e-10);
  // Allowed 2 iterations (an iteration 0.9 ms, 1 expected): not enough to certify 200 steps from the
  // first iterate, so each layer falls back after 2, to the same outputs.
  load_cost_model(write(dir, "two.json", forward_json("gru", 1, "0, 0.01, 0, 0, 0, 0, 0", "0.9, 0, 0, 0, 0, 0, 0", 1)));
  rnn.forward(x, steps, batch);
  EXPECT_EQ(r.max_iterations, (std::vector<int>{2, 2}));
  EXPECT_EQ(r.iterations, (std::vector<int>{2, 2}));
  EXPECT_EQ(r.fallbacks(), 2);
  EXPECT_LE((rnn.output() - sequential).cwiseAbs().maxCoeff(), 1e-10);
  // Newton predicted slower: the sequential forward, its bits
  load_cost_model(write(dir, "slow.json", forward_json("gru", 1, "0, 0.01, 0, 0, 0, 0, 0", "5, 0, 0, 0, 0, 0, 0", 4)));
  rnn.forward(x, steps, batch);
  EXPECT_EQ(r.ran, (std::vector<ForwardMethod>{ForwardMethod::sequential, ForwardMethod::sequential}));
  EXPECT_EQ(r.iterations, (std::vector<int>{0, 0}));
  EXPECT_EQ(rnn.output(), sequential);
}

TEST_F(CostModel, RefusesBadFilesAndKeepsTheModelInUse) {
  const std::string good = write(dir, "good.json", model_json(group("rnn", "bp", 2, "7, 0, 0, 0, 0, 0, 0")));
  load_cost_model(good);
  const StepShape s = shape(CellType::rnn, 20, 10, 1, 2);
  testutil::expect_error<IoError>([&] { load_cost_model((dir.path / "missing.json").string()); }, {"missing.json"});
  testutil::expect_error<IoError>([&] { load_cost_model(dir.path.string()); }, {dir.path.string()});
  struct Case {
    const char* name;
    std::string text;
    const char* says;
  };
  const Case cases[] = {
      {"not_json.json", "{\"format\": ", "not JSON"},
      {"format.json", R"({"format": "something else"})", "\"format\""},
      {"features.json", R"({"format": "bppsa-cost-model/1", "features": ["1", "T"], "groups": []})", "\"features\""},
      {"cell.json", model_json(group("tcn", "bp", 2, "1, 0, 0, 0, 0, 0, 0")), "unknown cell 'tcn'"},
      {"candidate.json", model_json(group("rnn", "jax", 2, "1, 0, 0, 0, 0, 0, 0")), "unknown candidate 'jax'"},
      {"iterations.json", model_json(group("rnn", "newton iteration", 2, "1, 0, 0, 0, 0, 0, 0")),
       "needs \"iterations\""},
      {"iterations_zero.json",
       model_json(R"({"cell": "rnn", "candidate": "newton iteration", "threads": 2, "iterations": 0, )"
                  R"("coef": [1, 0, 0, 0, 0, 0, 0]})"),
       "an integer ≥ 1"},
      {"threads.json", model_json(group("rnn", "bp", 0, "1, 0, 0, 0, 0, 0, 0")), "threads must be"},
      {"count.json", model_json(group("rnn", "bp", 2, "1, 0, 0")), "7 numbers"},
      {"negative.json", model_json(group("rnn", "bp", 2, "1, -1, 0, 0, 0, 0, 0")), "≥ 0"},
      {"span.json",
       model_json(R"({"cell": "rnn", "candidate": "bp", "threads": 2, "coef": [1, 0, 0, 0, 0, 0, 0], "span": [1, 2]})"),
       "\"span\" must be an object"},
      {"span_order.json",
       model_json(R"({"cell": "rnn", "candidate": "bp", "threads": 2, "coef": [1, 0, 0, 0, 0, 0, 0], )"
                  R"("span": {"steps": [300, 30]}})"),
       "span \"steps\" must be [smallest, largest]"},
      {"span_zero.json",
       model_json(R"({"cell": "rnn", "candidate": "bp", "threads": 2, "coef": [1, 0, 0, 0, 0, 0, 0], )"
                  R"("span": {"batch": [0, 4]}})"),
       "span \"batch\" must be"},
      {"repeat.json",
       model_json(group("rnn", "bp", 2, "1, 0, 0, 0, 0, 0, 0") + "," + group("rnn", "bp", 2, "2, 0, 0, 0, 0, 0, 0")),
       "repeats"},
  };
  for (const Case& c : cases) {
    const std::string path = write(dir, c.name, c.text);
    testutil::expect_error<FormatError>([&] { load_cost_model(path); }, {path, c.says, "bench/auto/fit_auto.py"});
    EXPECT_DOUBLE_EQ(predict_step_ms(s, StepCandidate::bp), 7.0) << c.name;  // unchanged
  }
  EXPECT_NE(cost_model_source().find("good.json"), std::string::npos);
  load_cost_model("");  // back to the model of first use
  EXPECT_EQ(cost_model_source().find("good.json"), std::string::npos);
}

TEST_F(CostModel, RecurrentAutoRunsThePredictedMethod) {
  // Each method in turn predicted fastest for the GRU: a two-layer stack's `auto` backward runs it
  // (the last scan's algorithm says which; BP runs none) with the same gradients as asking for it.
  RecurrentConfig cfg;
  cfg.cell = CellType::gru;
  cfg.input = 3;
  cfg.hidden = 4;
  cfg.layers = 2;
  const Index steps = 6, batch = 2;
  Recurrent<double> rnn(cfg);
  rnn.reset_parameters(5);
  const Matrix<double> x = Matrix<double>::Random(3, steps * batch);
  const Matrix<double> grad = Matrix<double>::Random(4, steps * batch);
  const auto grads_with = [&](BackwardMethod m, BackwardTimes* times) {
    rnn.forward(x, steps, batch);
    BackwardOptions o;
    o.method = m;
    o.threads = 2;
    rnn.backward(grad, true, o, times);
    return std::vector<RecurrentLayerParams<double>>{rnn.grads(0), rnn.grads(1)};
  };
  for (const auto& [name, method] :
       {std::pair{"bp", BackwardMethod::bp}, std::pair{"blelloch", BackwardMethod::blelloch},
        std::pair{"hybrid", BackwardMethod::hybrid}}) {
    SCOPED_TRACE(name);
    const std::string slow = "9, 0, 0, 0, 0, 0, 0", fast = "1, 0, 0, 0, 0, 0, 0";
    std::string groups;
    for (const char* c : {"bp", "blelloch", "hybrid"})
      groups += (groups.empty() ? "" : ",") + group("gru", c, 1, std::string(c) == name ? fast : slow);
    load_cost_model(write(dir, std::string(name) + ".json", model_json(groups)));
    BackwardTimes times;
    const auto automatic = grads_with(BackwardMethod::automatic, &times);
    if (method == BackwardMethod::bp) {
      EXPECT_EQ(times.jacobians, 0.0);  // BP forms no Jacobians
    } else {
      EXPECT_GT(times.jacobians, 0.0);
      EXPECT_EQ(times.last_scan.algorithm, scan_algorithm(method));
    }
    const auto asked = grads_with(method, nullptr);
    ASSERT_EQ(automatic.size(), asked.size());
    for (std::size_t l = 0; l < asked.size(); ++l) {
      EXPECT_EQ(automatic[l].w_hh, asked[l].w_hh);
      EXPECT_EQ(automatic[l].w_ih, asked[l].w_ih);
    }
  }
}

TEST_F(CostModel, TheBuiltInFitPredictsEveryCandidateOfEveryCell) {
  // The process's default without BPPSA_COST_MODEL: the fit bench/auto/run.sh --builtin wrote into
  // src/nn/cost_model_fit.inc, with a positive prediction for each candidate at 1 and 2 threads.
  if (const char* env = std::getenv("BPPSA_COST_MODEL"); env != nullptr && *env != '\0')
    GTEST_SKIP() << "BPPSA_COST_MODEL is set: the built-in fit is not the default here";
  load_cost_model("");
  EXPECT_EQ(cost_model_source().rfind("built-in (", 0), 0u) << cost_model_source();
  for (const CellType cell : {CellType::rnn, CellType::gru, CellType::lstm})
    for (const int threads : {1, 2})
      for (const StepCandidate c :
           {StepCandidate::bp, StepCandidate::blelloch, StepCandidate::hybrid, StepCandidate::torch_nn}) {
        const double ms = predict_step_ms(shape(cell, 64, 300, 16, threads, 64), c);
        EXPECT_TRUE(std::isfinite(ms) && ms > 0) << to_string(c) << " at " << threads << " threads: " << ms;
      }
  // and the forward's: the sequential forward, a Newton iteration and the iterations expected
  for (const CellType cell : {CellType::rnn, CellType::gru, CellType::lstm})
    for (const int threads : {1, 2}) {
      const StepShape s = shape(cell, 64, 300, 16, threads, 8);
      for (const ForwardCandidate c : {ForwardCandidate::sequential, ForwardCandidate::newton_iteration}) {
        const double ms = predict_forward_ms(s, c);
        EXPECT_TRUE(std::isfinite(ms) && ms > 0) << to_string(c) << " at " << threads << " threads: " << ms;
      }
      EXPECT_GE(expected_newton_iterations(s), 1);
    }
}

}  // namespace
