// Model pieces vs hand-written oracles: losses, Linear, optimizers (PyTorch rules), state_dict, training.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/io/safetensors.hpp"
#include "bppsa/nn/linear.hpp"
#include "bppsa/nn/loss.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/train/optimizer.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"

namespace {

using testutil::expect_error;

using namespace bppsa;
using oracle::Md;
using oracle::Rng;

Md random_matrix(Index rows, Index cols, Rng& rng, double bound = 1.0) {
  std::uniform_real_distribution<double> u(-bound, bound);
  Md m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

// ---------------------------------------------------------------------------------------
// 1. Losses vs closed forms (long double) and finite differences.

/// nn.CrossEntropyLoss by hand: mean_j (log Σ_c exp z_cj − z_yj); gradient (softmax − onehot) / N.
long double ce_closed_form(const Md& z, const std::vector<std::int64_t>& y, Md* grad) {
  const Index C = z.rows(), N = z.cols();
  long double total = 0;
  if (grad) grad->resize(C, N);
  for (Index j = 0; j < N; ++j) {
    long double m = z(0, j);
    for (Index c = 1; c < C; ++c) m = std::max<long double>(m, z(c, j));
    long double sum = 0;
    for (Index c = 0; c < C; ++c) sum += std::exp(static_cast<long double>(z(c, j)) - m);
    const long double lse = m + std::log(sum);
    total += lse - z(y[static_cast<std::size_t>(j)], j);
    if (grad)
      for (Index c = 0; c < C; ++c)
        (*grad)(c, j) = static_cast<double>(
            (std::exp(static_cast<long double>(z(c, j)) - lse) - (c == y[static_cast<std::size_t>(j)] ? 1 : 0)) / N);
  }
  return total / N;
}

/// nn.MSELoss against one-hot targets: mean over C·N of (z − onehot)²; gradient 2(z − onehot)/(C·N).
long double mse_closed_form(const Md& z, const std::vector<std::int64_t>& y, Md* grad) {
  const Index C = z.rows(), N = z.cols();
  long double total = 0;
  if (grad) grad->resize(C, N);
  for (Index j = 0; j < N; ++j)
    for (Index c = 0; c < C; ++c) {
      const long double d = static_cast<long double>(z(c, j)) - (c == y[static_cast<std::size_t>(j)] ? 1 : 0);
      total += d * d;
      if (grad) (*grad)(c, j) = static_cast<double>(2 * d / (C * N));
    }
  return total / (C * N);
}

TEST(Loss, MatchesClosedFormsAndFiniteDifferences) {
  Rng rng(11);
  const Index C = 5, N = 4;
  const std::vector<std::int64_t> y = {0, 4, 2, 2};
  for (double spread : {1.0, 30.0}) {
    const Md z = random_matrix(C, N, rng, spread);
    for (LossType type : {LossType::cross_entropy, LossType::mse}) {
      SCOPED_TRACE(std::string(to_string(type)) + ", logits in ±" + std::to_string(spread));
      Md ref_grad;
      const long double ref =
          type == LossType::cross_entropy ? ce_closed_form(z, y, &ref_grad) : mse_closed_form(z, y, &ref_grad);
      Md grad;
      const double got = loss<double>(type, z, y, &grad);
      EXPECT_NEAR(got, static_cast<double>(ref), 1e-14 * std::max(1.0L, std::abs(ref)));
      EXPECT_EQ(loss<double>(type, z, y, nullptr), got);
      ASSERT_EQ(grad.rows(), C);
      ASSERT_EQ(grad.cols(), N);
      EXPECT_LE((grad - ref_grad).cwiseAbs().maxCoeff(), 1e-14);

      // Central differences (h = 1e-6: truncation ~1e-12, rounding ~1e-10 relative to the loss).
      Md zz = z, fd(C, N);
      for (Index i = 0; i < zz.size(); ++i) {
        const double v0 = zz.data()[i];
        zz.data()[i] = v0 + 1e-6;
        const double lp = loss<double>(type, zz, y, nullptr);
        zz.data()[i] = v0 - 1e-6;
        const double lm = loss<double>(type, zz, y, nullptr);
        zz.data()[i] = v0;
        fd.data()[i] = (lp - lm) / 2e-6;
      }
      EXPECT_LE((grad - fd).cwiseAbs().maxCoeff(), 1e-8 * std::max(1.0, std::abs(got)));

      // float: the same values to float precision.
      Matrix<float> gf;
      const float lf = loss<float>(type, z.cast<float>(), y, &gf);
      EXPECT_NEAR(lf, static_cast<double>(ref), 2e-6 * std::max(1.0L, std::abs(ref)));
      EXPECT_LE((gf.cast<double>() - ref_grad).cwiseAbs().maxCoeff(), 1e-6);
    }
  }
}

TEST(Loss, StableForHugeLogitsAndChecksInputs) {
  Md z(3, 2);
  z << 1000, -1000, 999, 0, -5, 1000;
  const std::vector<std::int64_t> y = {1, 2};
  Md g, ref_g;
  const long double ref = ce_closed_form(z, y, &ref_g);
  EXPECT_NEAR(loss<double>(LossType::cross_entropy, z, y, &g), static_cast<double>(ref), 1e-12);
  EXPECT_LE((g - ref_g).cwiseAbs().maxCoeff(), 1e-12);  // lse ≈ 1000 carries ~1e-13

  expect_error<InvalidArgument>(
      [&] {
        loss<double>(LossType::mse, z, std::vector<std::int64_t>{1, 3}, nullptr);
      },
      {"label 3", "prediction 1", "[0, 3)", "more classes"});
  expect_error<InvalidArgument>(
      [&] {
        loss<double>(LossType::cross_entropy, z, std::vector<std::int64_t>{-1, 0}, nullptr);
      },
      {"label -1", "prediction 0", "negative", "[0, 3)"});
  expect_error<ShapeError>([&] { loss<double>(LossType::mse, z, std::vector<std::int64_t>{1}, nullptr); },
                           {"1 labels for 2 predictions"});
  z(0, 1) = std::numeric_limits<double>::infinity();
  expect_error<NonFiniteError>([&] { loss<double>(LossType::cross_entropy, z, y, nullptr); }, {"not finite"});
  EXPECT_EQ(parse_loss("ce"), LossType::cross_entropy);
  EXPECT_EQ(parse_loss("mse"), LossType::mse);
}

// ---------------------------------------------------------------------------------------
// 2. Linear: forward and backward by hand.

TEST(Linear, ForwardBackwardByHand) {
  Rng rng(5);
  const Index in = 3, out = 2, N = 4;
  Linear<double> lin(in, out);
  lin.reset_parameters(42);
  const double bound = 1 / std::sqrt(3.0);
  for (Index i = 0; i < lin.weight.size(); ++i) EXPECT_LE(std::abs(lin.weight.data()[i]), bound);
  for (Index i = 0; i < lin.bias.size(); ++i) EXPECT_LE(std::abs(lin.bias[i]), bound);
  const Md x = random_matrix(in, N, rng), dy = random_matrix(out, N, rng);
  Md y;
  lin.forward(x, y);
  ASSERT_EQ(y.rows(), out);
  ASSERT_EQ(y.cols(), N);
  for (Index o = 0; o < out; ++o)
    for (Index n = 0; n < N; ++n) {
      double acc = lin.bias[o];
      for (Index i = 0; i < in; ++i) acc += lin.weight(o, i) * x(i, n);
      EXPECT_NEAR(y(o, n), acc, 1e-15);
    }
  Md dx;
  lin.backward(x, dy, dx);
  for (Index o = 0; o < out; ++o) {
    double gb = 0;
    for (Index n = 0; n < N; ++n) gb += dy(o, n);
    EXPECT_NEAR(lin.grad_bias[o], gb, 1e-15);
    for (Index i = 0; i < in; ++i) {
      double gw = 0;
      for (Index n = 0; n < N; ++n) gw += dy(o, n) * x(i, n);
      EXPECT_NEAR(lin.grad_weight(o, i), gw, 1e-15);
    }
  }
  for (Index i = 0; i < in; ++i)
    for (Index n = 0; n < N; ++n) {
      double acc = 0;
      for (Index o = 0; o < out; ++o) acc += lin.weight(o, i) * dy(o, n);
      EXPECT_NEAR(dx(i, n), acc, 1e-15);
    }
  expect_error<ShapeError>([&] { lin.forward(Md::Zero(2, 4), y); }, {"2 rows, expected 3"});
  expect_error<ShapeError>([&] { lin.backward(x, Md::Zero(2, 3), dx); }, {"expected 2×4"});
}

// ---------------------------------------------------------------------------------------
// 3. Optimizers vs torch.optim's rules written out here.

/// Two fake parameters ("a" [2, 3], "b" [4]) over the test's own arrays.
template <class T>
struct FakeParams {
  std::vector<T> a = std::vector<T>(6), b = std::vector<T>(4), ga = std::vector<T>(6), gb = std::vector<T>(4);
  std::vector<NamedParam<T>> list() {
    return {{"a", {2, 3}, a.data(), ga.data(), 6}, {"b", {4}, b.data(), gb.data(), 4}};
  }
  void fill(Rng& rng) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (auto* v : {&a, &b})
      for (T& x : *v) x = static_cast<T>(u(rng));
  }
  void new_grads(Rng& rng) {
    std::uniform_real_distribution<double> u(-2, 2);
    for (auto* v : {&ga, &gb})
      for (T& x : *v) x = static_cast<T>(u(rng));
  }
  /// a then b, and ga then gb: the reference rules below run over one flat list.
  std::vector<T> values() const { return concat(a, b); }
  std::vector<T> grads() const { return concat(ga, gb); }
  static std::vector<T> concat(std::vector<T> x, const std::vector<T>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  }
};

TEST(Optimizer, AdamFollowsPyTorch) {
  OptimizerConfig oc;
  oc.type = OptimizerType::adam;
  oc.lr = 0.05;
  oc.beta1 = 0.8;
  oc.beta2 = 0.95;
  oc.eps = 1e-3;
  oc.weight_decay = 0.1;
  Optimizer<double> opt(oc);
  Rng rng(1);
  FakeParams<double> fp;
  fp.fill(rng);
  std::vector<double> p = fp.values(), m(10, 0.0), v(10, 0.0);  // reference: a then b
  for (int t = 1; t <= 5; ++t) {
    fp.new_grads(rng);
    const std::vector<double> g = fp.grads();
    opt.step(fp.list());
    const double bc1 = 1 - std::pow(oc.beta1, t), bc2 = 1 - std::pow(oc.beta2, t);
    for (std::size_t k = 0; k < p.size(); ++k) {
      const double gk = g[k] + oc.weight_decay * p[k];
      m[k] = oc.beta1 * m[k] + (1 - oc.beta1) * gk;
      v[k] = oc.beta2 * v[k] + (1 - oc.beta2) * gk * gk;
      p[k] -= oc.lr / bc1 * m[k] / (std::sqrt(v[k]) / std::sqrt(bc2) + oc.eps);
    }
    for (std::size_t k = 0; k < 6; ++k) EXPECT_NEAR(fp.a[k], p[k], 1e-14) << "step " << t << ", a[" << k << "]";
    for (std::size_t k = 0; k < 4; ++k) EXPECT_NEAR(fp.b[k], p[6 + k], 1e-14) << "step " << t << ", b[" << k << "]";
  }
  EXPECT_EQ(opt.steps(), 5);
}

TEST(Optimizer, SgdPlainAndMomentumFollowPyTorch) {
  for (double mu : {0.0, 0.9}) {
    SCOPED_TRACE("momentum " + std::to_string(mu));
    OptimizerConfig oc;
    oc.type = OptimizerType::sgd;
    oc.lr = 0.1;
    oc.momentum = mu;
    oc.weight_decay = 0.01;
    Optimizer<double> opt(oc);
    Rng rng(2);
    FakeParams<double> fp;
    fp.fill(rng);
    std::vector<double> p = fp.values(), buf(10, 0.0);
    for (int t = 1; t <= 5; ++t) {
      fp.new_grads(rng);
      const std::vector<double> g = fp.grads();
      opt.step(fp.list());
      for (std::size_t k = 0; k < p.size(); ++k) {
        const double gk = g[k] + oc.weight_decay * p[k];
        if (mu == 0) {
          p[k] -= oc.lr * gk;
        } else {
          buf[k] = t == 1 ? gk : mu * buf[k] + gk;  // torch: the first step's buffer is g itself
          p[k] -= oc.lr * buf[k];
        }
      }
      for (std::size_t k = 0; k < 6; ++k) EXPECT_NEAR(fp.a[k], p[k], 1e-14) << "step " << t;
      for (std::size_t k = 0; k < 4; ++k) EXPECT_NEAR(fp.b[k], p[6 + k], 1e-14) << "step " << t;
    }
  }
}

TEST(Optimizer, CosineScheduleFollowsPyTorchsCosineAnnealingAndResumes) {
  // torch.optim.lr_scheduler.CosineAnnealingLR(SGD(lr=0.1), T_max=4), stepped after every step:
  // the learning rates of steps 1..6 (printed by PyTorch 2.15: past T_max bppsa holds 0, where
  // torch's cosine would rise again).
  const double want[] = {0.1, 0.08535533905932738, 0.05, 0.014644660940672627, 0.0, 0.0};
  OptimizerConfig oc;
  oc.type = OptimizerType::sgd;
  oc.lr = 0.1;
  oc.schedule = LrSchedule::cosine;
  oc.total_steps = 4;
  for (int t = 1; t <= 6; ++t) EXPECT_NEAR(learning_rate(oc, t), want[t - 1], 1e-15) << "step " << t;

  // SGD's step moves a parameter by lr_t · g: the schedule reaches the update, and a run resumed
  // from the optimizer state after step 2 continues it.
  Rng rng(5);
  FakeParams<double> fp;
  fp.fill(rng);
  Optimizer<double> opt(oc);
  TensorFile state;
  for (int t = 1; t <= 4; ++t) {
    fp.new_grads(rng);
    const double before = fp.a[0], g = fp.ga[0];
    opt.step(fp.list());
    EXPECT_NEAR(fp.a[0], before - want[t - 1] * g, 1e-15) << "step " << t;
    if (t == 2) state = parse_safetensors(serialize_safetensors(opt.state(fp.list())), "opt.safetensors");
  }
  FakeParams<double> again = fp;
  Optimizer<double> resumed(oc);
  resumed.load_state(state, again.list());
  again.new_grads(rng);
  const double before = again.a[0], g = again.ga[0];
  resumed.step(again.list());
  EXPECT_NEAR(again.a[0], before - want[2] * g, 1e-15);

  expect_error<InvalidArgument>([] { parse_lr_schedule("step"); }, {"'step'", "constant or cosine"});
  oc.total_steps = 0;
  expect_error<InvalidArgument>([&] { Optimizer<double> o(oc); }, {"cosine", "total steps"});
  oc.total_steps = -3;
  expect_error<InvalidArgument>([&] { learning_rate(oc, 1); }, {"cosine", "total steps"});
}

/// Runs 3 steps, saves the state through a safetensors image, restores it into a fresh optimizer
/// and checks that 2 more steps of both are bit-identical.
template <class T>
void expect_resume_identical(OptimizerConfig oc) {
  Rng rng(3);
  FakeParams<T> fp;
  fp.fill(rng);
  Optimizer<T> first(oc);
  for (int t = 0; t < 3; ++t) {
    fp.new_grads(rng);
    first.step(fp.list());
  }
  const auto bytes = serialize_safetensors(first.state(fp.list()));
  const TensorFile file = parse_safetensors(bytes, "optimizer.safetensors");
  EXPECT_EQ(file.metadata.at("optimizer"), to_string(oc.type));
  EXPECT_EQ(file.metadata.at("step"), "3");
  if (oc.type == OptimizerType::adam) {
    EXPECT_TRUE(file.contains("a.exp_avg") && file.contains("b.exp_avg_sq"));
  } else {
    EXPECT_TRUE(file.contains("a.momentum_buffer") && file.contains("b.momentum_buffer"));
  }
  FakeParams<T> resumed = fp;
  Optimizer<T> second(oc);
  second.load_state(file, resumed.list());
  EXPECT_EQ(second.steps(), 3);
  for (int t = 0; t < 2; ++t) {
    fp.new_grads(rng);
    resumed.ga = fp.ga;
    resumed.gb = fp.gb;
    first.step(fp.list());
    second.step(resumed.list());
  }
  EXPECT_EQ(std::memcmp(fp.a.data(), resumed.a.data(), sizeof(T) * fp.a.size()), 0);
  EXPECT_EQ(std::memcmp(fp.b.data(), resumed.b.data(), sizeof(T) * fp.b.size()), 0);
}

TEST(Optimizer, StateRoundTripResumesBitIdentically) {
  OptimizerConfig adam;
  adam.type = OptimizerType::adam;
  adam.lr = 0.01;
  adam.weight_decay = 0.05;
  OptimizerConfig sgd;
  sgd.type = OptimizerType::sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  expect_resume_identical<double>(adam);
  expect_resume_identical<float>(adam);
  expect_resume_identical<double>(sgd);
  expect_resume_identical<float>(sgd);
}

TEST(Optimizer, BadConfigsAndMismatchedState) {
  auto make = [](auto edit) {
    OptimizerConfig oc;
    edit(oc);
    return [oc] { Optimizer<double> o(oc); };
  };
  expect_error<InvalidArgument>(make([](OptimizerConfig& c) { c.lr = 0; }), {"learning rate"});
  expect_error<InvalidArgument>(make([](OptimizerConfig& c) { c.lr = -1e-3; }), {"learning rate"});
  expect_error<InvalidArgument>(make([](OptimizerConfig& c) { c.lr = std::nan(""); }), {"learning rate"});
  expect_error<InvalidArgument>(make([](OptimizerConfig& c) { c.momentum = 1; }), {"momentum"});
  expect_error<InvalidArgument>(make([](OptimizerConfig& c) { c.momentum = -0.5; }), {"momentum"});
  expect_error<InvalidArgument>(make([](OptimizerConfig& c) { c.beta2 = 1; }), {"betas"});
  expect_error<InvalidArgument>(make([](OptimizerConfig& c) { c.weight_decay = -1; }), {"weight decay"});
  expect_error<InvalidArgument>([] { parse_optimizer("rmsprop"); }, {"'rmsprop'", "sgd or adam"});

  Rng rng(4);
  FakeParams<double> fp;
  fp.fill(rng);
  fp.new_grads(rng);
  OptimizerConfig adam;
  Optimizer<double> a(adam);
  a.step(fp.list());
  const TensorFile state = parse_safetensors(serialize_safetensors(a.state(fp.list())), "opt.safetensors");
  OptimizerConfig sgd;
  sgd.type = OptimizerType::sgd;
  sgd.lr = 0.1;
  Optimizer<double> s(sgd);
  expect_error<FormatError>([&] { s.load_state(state, fp.list()); }, {"adam", "sgd", "--optimizer"});
}

// ---------------------------------------------------------------------------------------
// 4. state_dict: PyTorch's names and shapes, round trips, and loading errors.

ModelConfig gru2() {
  ModelConfig mc;
  mc.rnn = {CellType::gru, 3, 4, 2};
  mc.classes = 5;
  return mc;
}

std::vector<float> ramp_input(Index n) {
  std::vector<float> x;
  for (Index i = 0; i < n; ++i) x.push_back(std::sin(0.7f * static_cast<float>(i)));
  return x;
}

TEST(StateDict, NamesAndShapesArePyTorchs) {
  // nn.GRU(3, 4, num_layers=2, batch_first=True) + nn.Linear(4, 5): G·H = 12.
  const std::vector<std::pair<std::string, std::vector<Index>>> expected = {
      {"rnn.weight_ih_l0", {12, 3}}, {"rnn.weight_hh_l0", {12, 4}},
      {"rnn.bias_ih_l0", {12}},      {"rnn.bias_hh_l0", {12}},
      {"rnn.weight_ih_l1", {12, 4}}, {"rnn.weight_hh_l1", {12, 4}},
      {"rnn.bias_ih_l1", {12}},      {"rnn.bias_hh_l1", {12}},
      {"head.weight", {5, 4}},       {"head.bias", {5}}};
  EXPECT_EQ(expected_state_dict(gru2()), expected);
  SequenceClassifier<float> model(gru2());
  model.reset_parameters(9);
  const auto params = model.parameters();
  ASSERT_EQ(params.size(), expected.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].name, expected[i].first);
    EXPECT_EQ(params[i].shape, expected[i].second);
  }
  const TensorFile sd = model.state_dict();
  ASSERT_EQ(sd.tensors.size(), expected.size());
  for (const auto& [name, shape] : expected) {
    ASSERT_TRUE(sd.contains(name)) << name;
    EXPECT_EQ(sd.tensors.at(name).shape, shape) << name;
    EXPECT_EQ(sd.tensors.at(name).dtype, DType::f32) << name;
  }
  // Row-major [G·H, I] exactly as PyTorch stores weight_ih_l1 (input H = 4).
  const auto w = sd.tensors.at("rnn.weight_ih_l1").to_f32();
  for (Index r = 0; r < 12; ++r)
    for (Index c = 0; c < 4; ++c) EXPECT_EQ(w[static_cast<std::size_t>(r * 4 + c)], model.rnn().params(1).w_ih(r, c));
  const auto hb = sd.tensors.at("head.bias").to_f32();
  for (Index c = 0; c < 5; ++c) EXPECT_EQ(hb[static_cast<std::size_t>(c)], model.head().bias[c]);
}

TEST(StateDict, RoundTripAndConfigInference) {
  SequenceClassifier<float> model(gru2());
  model.reset_parameters(9);
  const std::vector<float> x = ramp_input(2 * 6 * 3);
  const std::vector<std::int64_t> labels = {3, 1};
  const float before = model.evaluate(x, 2, 6, labels);
  const TensorFile file = parse_safetensors(serialize_safetensors(model.state_dict()), "model.safetensors");

  const ModelConfig inferred = config_from_state_dict(file, CellType::gru);
  EXPECT_EQ(inferred.rnn.cell, CellType::gru);
  EXPECT_EQ(inferred.rnn.input, 3);
  EXPECT_EQ(inferred.rnn.hidden, 4);
  EXPECT_EQ(inferred.rnn.layers, 2);
  EXPECT_EQ(inferred.classes, 5);

  SequenceClassifier<float> fresh(inferred);
  fresh.reset_parameters(123);
  EXPECT_NE(fresh.evaluate(x, 2, 6, labels), before);
  fresh.load_state_dict(file);
  EXPECT_EQ(fresh.evaluate(x, 2, 6, labels), before);
}

TEST(StateDict, LoadingErrors) {
  SequenceClassifier<float> model(gru2());
  model.reset_parameters(9);
  const TensorFile good = model.state_dict();
  SequenceClassifier<float> target(gru2());

  TensorFile missing = good;
  missing.tensors.erase("rnn.bias_hh_l1");
  expect_error<FormatError>([&] { target.load_state_dict(missing); },
                            {"'rnn.bias_hh_l1'", "it holds:", "head.bias", "rnn.weight_ih_l0"});

  TensorFile misshaped = good;
  misshaped.tensors["rnn.weight_hh_l0"] = Tensor::from_f32(std::vector<float>(60, 0.f), {12, 5});
  expect_error<ShapeError>([&] { target.load_state_dict(misshaped); },
                           {"rnn.weight_hh_l0", "[12, 5]", "expected [12, 4]"});

  TensorFile extra = good;
  extra.tensors["rnn.weight_ih_l2"] = Tensor::from_f32(std::vector<float>(48, 0.f), {12, 4});
  expect_error<FormatError>([&] { target.load_state_dict(extra); }, {"unexpected tensor 'rnn.weight_ih_l2'"});

  TensorFile nan = good;
  auto hw = nan.tensors.at("head.weight").to_f32();
  hw[7] = std::numeric_limits<float>::quiet_NaN();
  nan.tensors["head.weight"] = Tensor::from_f32(hw, {5, 4});
  expect_error<NonFiniteError>([&] { target.load_state_dict(nan); }, {"head.weight", "NaN"});

  // An RNN checkpoint read as a GRU: weight_ih_l0 has H rows (not a multiple of 3) for H = 4,
  // and for H = 6 the recurrent weight does not fit; both point at --model.
  for (Index hidden : {4, 6}) {
    ModelConfig rc;
    rc.rnn = {CellType::rnn, 3, hidden, 1};
    rc.classes = 5;
    SequenceClassifier<float> rnn_model(rc);
    const TensorFile rnn_file = rnn_model.state_dict();
    expect_error<ShapeError>([&] { config_from_state_dict(rnn_file, CellType::gru); }, {"--model"});
    EXPECT_EQ(config_from_state_dict(rnn_file, CellType::rnn).rnn.hidden, hidden);
  }
  ModelConfig rc;
  rc.rnn = {CellType::rnn, 3, 4, 2};
  rc.classes = 5;
  expect_error<ShapeError>([&] { target.load_state_dict(SequenceClassifier<float>(rc).state_dict()); },
                           {"rnn.weight_ih_l0", "expected [12, 3]"});
  expect_error<FormatError>([&] { config_from_state_dict(TensorFile{}, CellType::gru); },
                            {"rnn.weight_ih_l0", "no tensors"});
}

// ---------------------------------------------------------------------------------------
// 5. Training: BP and BPPSA give the same loss curve, and the loss goes down.

std::vector<float> train_losses(BackwardMethod method) {
  // Learnable toy task: label = whether the sequence's mean input is positive.
  const Index B = 16, T = 10, I = 2;
  Rng rng(8);
  std::normal_distribution<double> n01(0, 1);
  std::vector<float> x;
  std::vector<std::int64_t> labels;
  for (Index b = 0; b < B; ++b) {
    const double shift = 0.5 * n01(rng);
    double sum = 0;
    for (Index i = 0; i < T * I; ++i) {
      x.push_back(static_cast<float>(shift + n01(rng)));
      sum += x.back();
    }
    labels.push_back(sum > 0 ? 1 : 0);
  }
  ModelConfig mc;
  mc.rnn = {CellType::gru, I, 8, 1};
  mc.classes = 2;
  SequenceClassifier<float> model(mc);
  model.reset_parameters(2024);
  OptimizerConfig oc;
  oc.lr = 0.01;
  Optimizer<float> opt(oc);
  const auto params = model.parameters();
  std::vector<float> losses;
  for (int step = 0; step < 20; ++step) {
    losses.push_back(model.loss_and_grad(x, B, T, labels, {method}));
    opt.step(params);
  }
  return losses;
}

TEST(Training, BlellochMatchesBpAndLearns) {
  const auto bp = train_losses(BackwardMethod::bp);
  const auto scan = train_losses(BackwardMethod::blelloch);
  ASSERT_EQ(bp.size(), scan.size());
  for (std::size_t i = 0; i < bp.size(); ++i) EXPECT_NEAR(scan[i], bp[i], 1e-4 * std::abs(bp[i])) << "step " << i;
  EXPECT_LT(bp.back(), 0.8 * bp.front());
}

// forward_loss + backward (the halves bench/ times apart) = loss_and_grad, bit for bit; and
// backward needs a forward_loss since the last evaluate.
TEST(Model, SplitForwardBackwardEqualsLossAndGrad) {
  const Index B = 3, T = 6;
  const std::vector<float> x = ramp_input(B * T * 3);
  const std::vector<std::int64_t> y{0, 4, 2};
  for (BackwardMethod method : {BackwardMethod::bp, BackwardMethod::blelloch}) {
    SequenceClassifier<float> whole(gru2()), split(gru2());
    whole.reset_parameters(5);
    split.reset_parameters(5);
    const float l1 = whole.loss_and_grad(x, B, T, y, {method});
    const float l2 = split.forward_loss(x, B, T, y);
    split.backward({method});
    EXPECT_EQ(l1, l2);
    const auto pw = whole.parameters(), ps = split.parameters();
    for (std::size_t i = 0; i < pw.size(); ++i)
      for (Index k = 0; k < pw[i].size; ++k) ASSERT_EQ(pw[i].grad[k], ps[i].grad[k]) << pw[i].name << " " << k;
  }
  SequenceClassifier<float> fresh(gru2());
  expect_error<InvalidArgument>([&] { fresh.backward({}); }, {"forward_loss"});
  fresh.forward_loss(x, B, T, y);
  fresh.evaluate(x, B, T, y);
  expect_error<InvalidArgument>([&] { fresh.backward({}); }, {"forward_loss"});
}

}  // namespace
