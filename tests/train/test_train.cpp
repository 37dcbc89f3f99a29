// The training loop: BP and BPPSA runs from the same seed follow the same loss curve, runs
// are reproducible, evaluation counts correctly, and data that does not fit is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "bppsa/bppsa.hpp"
#include "expect_error.hpp"
#include "no_cost_model.hpp"

namespace {

using namespace bppsa;

SequenceDataset toy_data(Index n, Index steps, Index features, std::uint64_t seed) {
  // Label = which of 4 quarters of the features carries the largest mean: learnable.
  SequenceDataset d;
  d.steps = steps;
  d.features = features;
  d.classes = 4;
  d.name = "toy";
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (Index i = 0; i < n; ++i) {
    const std::int64_t label = static_cast<std::int64_t>(rng() % 4);
    for (Index t = 0; t < steps; ++t)
      for (Index f = 0; f < features; ++f) d.x.push_back(nd(rng) + (f % 4 == label ? 1.0f : 0.0f));
    d.y.push_back(label);
  }
  return d;
}

struct Curve {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;
};

Curve train_curve(CellType cell, Index layers, HeadMode head, BackwardMethod method, int threads = 2) {
  const SequenceDataset data = toy_data(96, 9, 4, 11);
  ModelConfig mc;
  mc.rnn = {cell, 4, 6, layers};
  mc.classes = 4;
  mc.head = head;
  SequenceClassifier<float> model(mc);
  model.reset_parameters(4202);
  OptimizerConfig oc;
  oc.lr = 1e-2;
  Optimizer<float> opt(oc);
  TrainConfig tc;
  tc.batch = 10;  // 96 samples: the last batch is partial
  tc.backward.method = method;
  tc.backward.threads = threads;
  Curve c;
  for (Index e = 1; e <= 3; ++e) c.losses.push_back(train_epoch(model, opt, data, e, tc).train_loss);
  for (const auto& p : model.parameters()) c.weights.emplace_back(p.value, p.value + p.size);
  return c;
}

class SameCurve : public ::testing::TestWithParam<std::tuple<CellType, Index, HeadMode>> {};

TEST_P(SameCurve, BpAndBppsaFollowTheSameLossCurve) {
  const auto [cell, layers, head] = GetParam();
  const Curve bp = train_curve(cell, layers, head, BackwardMethod::bp);
  for (BackwardMethod m : {BackwardMethod::blelloch, BackwardMethod::hybrid, BackwardMethod::automatic}) {
    const Curve s = train_curve(cell, layers, head, m);
    for (std::size_t e = 0; e < bp.losses.size(); ++e)
      EXPECT_NEAR(s.losses[e], bp.losses[e], 1e-4 * std::abs(bp.losses[e])) << to_string(m) << " epoch " << e + 1;
    for (std::size_t i = 0; i < bp.weights.size(); ++i)
      for (std::size_t k = 0; k < bp.weights[i].size(); ++k)
        ASSERT_NEAR(s.weights[i][k], bp.weights[i][k], 1e-3 * (1 + std::abs(bp.weights[i][k])))
            << to_string(m) << " parameter " << i << " entry " << k;
  }
  EXPECT_LT(bp.losses.back(), bp.losses.front()) << "the toy task should be learnt";
}

INSTANTIATE_TEST_SUITE_P(Train, SameCurve,
                         ::testing::Combine(::testing::Values(CellType::rnn, CellType::gru, CellType::lstm),
                                            ::testing::Values(Index{1}, Index{2}),
                                            ::testing::Values(HeadMode::last, HeadMode::every)),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_layers" +
                                  std::to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param));
                         });

TEST(Train, ReproducibleAndThreadIndependent) {
  const Curve a = train_curve(CellType::gru, 2, HeadMode::last, BackwardMethod::blelloch, 1);
  const Curve b = train_curve(CellType::gru, 2, HeadMode::last, BackwardMethod::blelloch, 3);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.weights, b.weights);
}

TEST(Train, EvaluateCountsCorrectPredictions) {
  const SequenceDataset data = toy_data(37, 5, 4, 3);
  ModelConfig mc;
  mc.rnn = {CellType::lstm, 4, 5, 1};
  mc.classes = 4;
  SequenceClassifier<float> model(mc);
  model.reset_parameters(1);
  // Oracle: one sample at a time.
  Index correct = 0;
  double loss = 0;
  for (Index i = 0; i < data.size(); ++i) {
    std::vector<std::int64_t> pred;
    const std::vector<std::int64_t> y{data.y[static_cast<std::size_t>(i)]};
    loss += model.evaluate(data.sample(i), 1, data.steps, y, &pred);
    correct += pred[0] == y[0];
  }
  const EvalReport r = evaluate(model, data, 8);
  EXPECT_EQ(r.samples, 37);
  EXPECT_DOUBLE_EQ(r.accuracy, static_cast<double>(correct) / 37);
  EXPECT_NEAR(r.loss, loss / 37, 1e-5);
}

TEST(Train, DataThatDoesNotFitIsRefused) {
  ModelConfig mc;
  mc.rnn = {CellType::rnn, 3, 5, 1};
  mc.classes = 4;
  const SequenceDataset wrong_features = toy_data(4, 3, 4, 1);
  try {
    check_data_fits(mc, wrong_features, "the training data");
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("4 input features"), std::string::npos) << e.what();
  }
  mc.rnn.input = 4;
  mc.classes = 3;
  EXPECT_THROW(check_data_fits(mc, wrong_features, "the training data"), InvalidArgument);
}

TEST(Train, APassChecksItsDataAndReplacesTheModelsStoredBatch) {
  // The library's train_epoch and evaluate (no CLI check before them): a data set the model cannot
  // read is refused before any step, naming what is wrong, and the model is left as it was.
  ModelConfig mc;
  mc.rnn = {CellType::gru, 4, 5, 1};
  mc.classes = 4;
  SequenceClassifier<double> model(mc);
  model.reset_parameters(7);
  const std::vector<double> before(model.parameters()[0].value, model.parameters()[0].value + 12);
  Optimizer<double> opt(OptimizerConfig{});
  TrainConfig tc;
  tc.batch = 4;
  const SequenceDataset three = toy_data(8, 3, 3, 2);  // 3 features for a model of 4
  const std::string m = testutil::message_of<ShapeError>([&] { train_epoch(model, opt, three, 1, tc); });
  EXPECT_NE(m.find("3 features; the model takes 4 features per step"), std::string::npos) << m;
  EXPECT_THROW(evaluate(model, three, 4), ShapeError);
  SequenceDataset lengths = toy_data(8, 3, 4, 2);
  lengths.lengths = {3, 3, 2, 4, 1, 1, 2, 3};  // sample 3 is longer than the data's 3 steps
  const std::string l = testutil::message_of<InvalidArgument>([&] { evaluate(model, lengths, 4); });
  EXPECT_NE(l.find("length 4 of sequence 3"), std::string::npos) << l;
  lengths.lengths.pop_back();
  EXPECT_THROW(evaluate(model, lengths, 4), ShapeError);  // 7 lengths for 8 sequences
  for (std::size_t k = 0; k < before.size(); ++k) EXPECT_EQ(model.parameters()[0].value[k], before[k]);

  // A batch the caller stored is forgotten once a pass has run its own: a backward() or a
  // forward_loss() without a batch is refused rather than run on the pass's last batch.
  const SequenceDataset data = toy_data(8, 3, 4, 2);
  const std::vector<float> x(data.x.begin(), data.x.begin() + 2 * 3 * 4);
  const std::vector<std::int64_t> y(data.y.begin(), data.y.begin() + 2);
  model.forward_loss(x, 2, 3, y);
  evaluate(model, data, 4);
  EXPECT_THROW(model.backward(BackwardOptions{}), InvalidArgument);
  EXPECT_THROW(model.forward_loss(), InvalidArgument);
}

TEST(Train, ScanThatCannotFitIsRefusedBeforeAllocating) {
  // 10^6 steps × 10^3 samples × 1024² values: petabytes. Nothing is allocated to find out.
  Recurrent<float> rnn({CellType::gru, 1, 1024, 1});
  BackwardOptions o;
  o.method = BackwardMethod::blelloch;
  const std::string msg = testutil::message_of<ResourceError>([&] { rnn.check_backward_memory(1000000, 1000, o); });
  EXPECT_NE(msg.find("--batch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("PB"), std::string::npos) << msg;
  o.method = BackwardMethod::bp;  // stores no Jacobians, but its own record and gradients are checked too
  EXPECT_THROW(rnn.check_backward_memory(1000000, 1000, o), ResourceError);
  EXPECT_NO_THROW(rnn.check_backward_memory(30000, 1, o));  // ~2 GB; its scan would need 126 GB of Jacobians
  o.method = BackwardMethod::blelloch;
  EXPECT_THROW(rnn.check_backward_memory(30000, 1, o), ResourceError);
  o.method = BackwardMethod::hybrid;  // a small problem fits: 10 × 16 × 1024² floats = 0.67 GB
  EXPECT_NO_THROW(rnn.check_backward_memory(10, 16, o));
}

TEST(Train, AutoIsBpWhenTheBatchKeepsEveryThreadBusy) {
  const testutil::NoCostModel no_fit;  // the batch rule, which decides where the step cost model has no fit
  BackwardOptions o;
  o.method = BackwardMethod::automatic;
  o.threads = 2;
  EXPECT_EQ(resolve_backward(o, 16), BackwardMethod::bp);
  EXPECT_EQ(resolve_backward(o, 2), BackwardMethod::bp);
  EXPECT_EQ(resolve_backward(o, 1), BackwardMethod::automatic);  // a chain per 2 threads: the scan
  o.threads = 8;
  EXPECT_EQ(resolve_backward(o, 4), BackwardMethod::automatic);
  o.method = BackwardMethod::blelloch;
  EXPECT_EQ(resolve_backward(o, 16), BackwardMethod::blelloch);  // explicit methods are kept
  // The scan path of auto (batch 1, 4 threads) gives BP's gradients.
  ModelConfig mc;
  mc.rnn = {CellType::lstm, 3, 5, 2};
  mc.classes = 4;
  SequenceClassifier<double> model(mc);
  model.reset_parameters(9);
  const SequenceDataset d = toy_data(1, 40, 3, 2);
  std::vector<std::vector<double>> grads[2];
  for (int run = 0; run < 2; ++run) {
    BackwardOptions b;
    b.method = run == 0 ? BackwardMethod::bp : BackwardMethod::automatic;
    b.threads = 4;
    StepTimes st;
    model.loss_and_grad(d.sample(0), 1, d.steps, std::span<const std::int64_t>(d.y), b, &st);
    if (run == 1) {
      EXPECT_GT(st.detail.jacobians, 0.0) << "auto with batch 1 and 4 threads should scan";
    }
    for (const auto& p : model.parameters()) grads[run].emplace_back(p.grad, p.grad + p.size);
  }
  for (std::size_t i = 0; i < grads[0].size(); ++i)
    for (std::size_t k = 0; k < grads[0][i].size(); ++k)
      EXPECT_NEAR(grads[1][i][k], grads[0][i][k], 1e-10 * (1 + std::abs(grads[0][i][k])));
}

TEST(Train, GatherBatchCopiesTheRightSamples) {
  const SequenceDataset data = toy_data(10, 3, 2, 5);
  std::vector<float> x;
  std::vector<std::int64_t> y;
  const std::vector<Index> idx{7, 2};
  gather_batch(data, idx, x, y);
  ASSERT_EQ(x.size(), 12u);
  for (std::size_t k = 0; k < idx.size(); ++k) {
    EXPECT_EQ(y[k], data.y[static_cast<std::size_t>(idx[k])]);
    for (std::size_t j = 0; j < 6; ++j) EXPECT_EQ(x[k * 6 + j], data.x[static_cast<std::size_t>(idx[k]) * 6 + j]);
  }
}

}  // namespace
