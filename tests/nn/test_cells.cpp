// Recurrent cells and stacks: generated Jacobians and gradients vs finite differences, BPPSA vs BP, errors.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>

#include "bppsa/nn/model.hpp"
#include "bppsa/nn/recurrent.hpp"
#include "core/denormals.hpp"
#include "core/team.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"

namespace {

using testutil::expect_error;

using namespace bppsa;
using oracle::Md;
using oracle::Rng;

constexpr std::array<CellType, 3> kCells = {CellType::rnn, CellType::gru, CellType::lstm};

/// A cell type with its activation: the plain RNN with tanh and with relu, GRU, LSTM, and LSTM
/// with a projection (proj 2 of hidden 4 in every test below).
struct CellVariant {
  CellType cell;
  Nonlinearity nonlinearity = Nonlinearity::tanh;
  Index proj = 0;
  RecurrentConfig config(Index input, Index hidden, Index layers) const {
    return {cell, input, hidden, layers, nonlinearity, Device::cpu, proj};
  }
  /// A seed offset that differs between variants.
  std::uint64_t id() const {
    return static_cast<std::uint64_t>(cell) + 7 * static_cast<std::uint64_t>(nonlinearity) +
           13 * static_cast<std::uint64_t>(proj);
  }
};
constexpr std::array<CellVariant, 5> kVariants = {
    CellVariant{CellType::rnn}, CellVariant{CellType::rnn, Nonlinearity::relu}, CellVariant{CellType::gru},
    CellVariant{CellType::lstm}, CellVariant{CellType::lstm, Nonlinearity::tanh, 2}};

Md random_matrix(Index rows, Index cols, Rng& rng, double bound = 1.0) {
  std::uniform_real_distribution<double> u(-bound, bound);
  Md m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

/// A batch of inputs [batch][steps][input] and labels in [0, classes). Inputs are multiples of
/// 2^-12 in (−1, 1), so x ± 2^-20 is exact in float: finite differences on the float inputs of
/// SequenceClassifier then step by exactly the intended amount.
struct Problem {
  Index batch = 0, steps = 0;
  std::vector<float> x;
  std::vector<std::int64_t> labels;
};

Problem random_problem(Index batch, Index steps, Index input, Index classes, Rng& rng) {
  Problem p{batch, steps, {}, {}};
  std::uniform_int_distribution<int> q(-4095, 4095);
  for (Index i = 0; i < batch * steps * input; ++i) p.x.push_back(static_cast<float>(std::ldexp(q(rng), -12)));
  for (Index b = 0; b < batch; ++b) p.labels.push_back(oracle::uniform_int(rng, 0, classes - 1));
  return p;
}

/// Scales every weight (not the biases) so that the gates leave their near-linear range.
template <class T>
void scale_weights(Recurrent<T>& rnn, double factor) {
  for (Index l = 0; l < rnn.layers(); ++l) {
    rnn.params(l).w_ih *= static_cast<T>(factor);
    rnn.params(l).w_hh *= static_cast<T>(factor);
    rnn.params(l).w_hr *= static_cast<T>(factor);  // empty without a projection
  }
}

/// Central difference of f() with respect to the scalar v (restored afterwards). The step is
/// divided by the exactly representable difference (v + h) − (v − h).
template <class S>
double central_diff(S& v, double h, const std::function<double()>& f) {
  const S v0 = v, up = static_cast<S>(v0 + h), dn = static_cast<S>(v0 - h);
  v = up;
  const double fp = f();
  v = dn;
  const double fm = f();
  v = v0;
  return (fp - fm) / (static_cast<double>(up) - static_cast<double>(dn));
}

/// |got − fd| ≤ rtol·|fd| + atol for every entry.
::testing::AssertionResult fd_close(const std::string& what, const std::vector<double>& got,
                                    const std::vector<double>& fd, double rtol, double atol) {
  if (got.size() != fd.size()) return ::testing::AssertionFailure() << what << ": size mismatch";
  for (std::size_t k = 0; k < got.size(); ++k)
    if (!(std::abs(got[k] - fd[k]) <= rtol * std::abs(fd[k]) + atol))
      return ::testing::AssertionFailure() << what << "[" << k << "]: analytic " << got[k] << ", finite difference "
                                           << fd[k] << " (|diff| " << std::abs(got[k] - fd[k]) << ")";
  return ::testing::AssertionSuccess();
}

std::string cell_name(CellType c) { return to_string(c); }
std::string cell_name(const CellVariant& v) {
  return cell_name(v.cell) + (v.nonlinearity == Nonlinearity::relu ? "_relu" : "") +
         (v.proj > 0 ? "_proj" + std::to_string(v.proj) : "");
}

// ---------------------------------------------------------------------------------------
// 1. Generated transposed state Jacobians J_t^T = (∂s_t/∂s_{t−1})^T vs finite differences.
// tanh and σ are smooth everywhere, so no kinks need handling (unlike ReLU or max-pool).

class CellJacobian : public ::testing::TestWithParam<std::tuple<CellVariant, Index>> {};
INSTANTIATE_TEST_SUITE_P(Cells, CellJacobian,
                         ::testing::Combine(::testing::ValuesIn(kVariants), ::testing::Values(1, 3)),
                         [](const auto& info) {
                           return cell_name(std::get<0>(info.param)) + "_steps" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST_P(CellJacobian, MatchesFiniteDifferences) {
  const auto [variant, steps] = GetParam();
  const CellType cell = variant.cell;
  const RecurrentConfig cfg = variant.config(3, 4, 1);
  const Index I = 3, B = 2, S = state_size(cfg), P = output_size(cfg);
  Rng rng(17 + variant.id() * 10 + static_cast<std::uint64_t>(steps));
  Recurrent<double> rnn(cfg);
  rnn.reset_parameters(rng());
  scale_weights(rnn, 2.5);
  const Md s0 = random_matrix(S, B, rng), x = random_matrix(I, steps * B, rng);
  rnn.set_initial_state(0, s0);
  rnn.forward(x, steps, B);
  rnn.backward(random_matrix(P, steps * B, rng), true, {BackwardMethod::linear});
  const Chain<double>& chain = rnn.chain(0);
  ASSERT_EQ(chain.size(), steps);

  // s_t as a function of s_{t−1}: a one-step model with the same parameters started at s_{t−1}
  // (for t = 1 that is s_0 itself, perturbed through set_initial_state).
  Recurrent<double> one(cfg);
  one.params(0) = rnn.params(0);
  const auto next_state = [&](const Md& prev, const Md& xt) {
    one.set_initial_state(0, prev);
    one.forward(xt, 1, B);
    return one.state(0, 1);
  };
  const double h = 1e-6;
  for (Index t = 1; t <= steps; ++t) {
    SCOPED_TRACE("t = " + std::to_string(t));
    const Jacobian<double>& jt = chain.jacobian(t);
    EXPECT_EQ(jt.kind(), cell == CellType::rnn ? Kind::shared_dense_diag : Kind::dense);
    EXPECT_EQ(jt.count(), B);
    ASSERT_EQ(jt.rows(), S);
    ASSERT_EQ(jt.cols(), S);
    Md prev = rnn.state(0, t - 1);
    const Md xt = x.middleCols((t - 1) * B, B);
    // The one-step model reproduces the recurrence, to rounding: the whole sequence's input projection is
    // one GEMM over T·B columns, blocked otherwise than a one-step call's (central differences below do
    // not read the unperturbed state).
    ASSERT_LE((next_state(prev, xt) - rnn.state(0, t)).cwiseAbs().maxCoeff(), 1e-14);
    for (Index b = 0; b < B; ++b) {
      const Md got = jt.to_dense(b);  // rows: input state index, cols: output state index
      Md fd(S, S);
      for (Index i = 0; i < S; ++i) {
        const double v0 = prev(i, b);
        prev(i, b) = v0 + h;
        const Md up = next_state(prev, xt);
        prev(i, b) = v0 - h;
        const Md dn = next_state(prev, xt);
        prev(i, b) = v0;
        fd.row(i) = ((up.col(b) - dn.col(b)) / (2 * h)).transpose();
      }
      const double err = (got - fd).cwiseAbs().maxCoeff();
      EXPECT_LE(err, 1e-7 * std::max(1.0, fd.cwiseAbs().maxCoeff())) << "sample " << b << "\ngenerated:\n"
                                                                     << got << "\nfinite differences:\n"
                                                                     << fd;
    }
  }
}

// ---------------------------------------------------------------------------------------
// 2. SequenceClassifier<double>: every gradient of loss_and_grad (bp) vs central FD of evaluate().
// With h = 1e-6 the truncation error is O(h²) ≈ 1e-11 and the rounding error of a loss of
// order 1 is ≈ 1e-16 / 1e-6 = 1e-10; |g − fd| ≤ 1e-6·|fd| + 1e-8 leaves a 10–100× margin while a
// wrong term (an error of order |g|) is caught.

constexpr double kFdStep = 1e-6, kFdRtol = 1e-6, kFdAtol = 1e-8;

class ModelGradient : public ::testing::TestWithParam<std::tuple<CellVariant, Index, HeadMode, LossType>> {};
INSTANTIATE_TEST_SUITE_P(Cells, ModelGradient,
                         ::testing::Combine(::testing::ValuesIn(kVariants), ::testing::Values(1, 2),
                                            ::testing::Values(HeadMode::last, HeadMode::every),
                                            ::testing::Values(LossType::cross_entropy, LossType::mse)),
                         [](const auto& info) {
                           return cell_name(std::get<0>(info.param)) + "_layers" +
                                  std::to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param)) +
                                  "_" + to_string(std::get<3>(info.param));
                         });

TEST_P(ModelGradient, MatchesFiniteDifferences) {
  const auto [variant, layers, head, loss_type] = GetParam();
  const Index I = 3, H = 4, C = 5, T = 4, B = 3, S = state_size(variant.config(I, H, 1));
  Rng rng(1000 + variant.id() * 100 + static_cast<std::uint64_t>(layers) * 10 + static_cast<std::uint64_t>(head) * 2 +
          static_cast<std::uint64_t>(loss_type));
  ModelConfig mc;
  mc.rnn = variant.config(I, H, layers);
  mc.classes = C;
  mc.head = head;
  mc.loss = loss_type;
  SequenceClassifier<double> model(mc);
  model.reset_parameters(rng());
  scale_weights(model.rnn(), 2.0);
  std::vector<Md> s0;
  for (Index l = 0; l < layers; ++l) {
    s0.push_back(random_matrix(S, B, rng));
    model.rnn().set_initial_state(l, s0.back());
  }
  Problem pb = random_problem(B, T, I, C, rng);

  model.loss_and_grad(pb.x, B, T, pb.labels, {BackwardMethod::bp});
  auto params = model.parameters();
  std::vector<std::vector<double>> grads;
  for (const auto& p : params) grads.emplace_back(p.grad, p.grad + p.size);
  const Md gx = model.rnn().input_grad();
  std::vector<Md> g0;
  for (Index l = 0; l < layers; ++l) g0.push_back(model.rnn().state0_grad(l));
  ASSERT_EQ(gx.rows(), I);
  ASSERT_EQ(gx.cols(), T * B);

  const std::function<double()> eval = [&] { return model.evaluate(pb.x, B, T, pb.labels); };
  for (std::size_t k = 0; k < params.size(); ++k) {
    std::vector<double> fd;
    for (Index i = 0; i < params[k].size; ++i) fd.push_back(central_diff(params[k].value[i], kFdStep, eval));
    EXPECT_TRUE(fd_close(params[k].name, grads[k], fd, kFdRtol, kFdAtol));
  }

  // ∂ℓ/∂x: column t·B + b of input_grad() ↔ x[b][t][·].
  std::vector<double> got, fd;
  for (Index b = 0; b < B; ++b)
    for (Index t = 0; t < T; ++t)
      for (Index i = 0; i < I; ++i) {
        got.push_back(gx(i, t * B + b));
        fd.push_back(central_diff(pb.x[static_cast<std::size_t>((b * T + t) * I + i)], std::ldexp(1.0, -20), eval));
      }
  EXPECT_TRUE(fd_close("input gradient", got, fd, kFdRtol, kFdAtol));

  // ∂ℓ/∂s_0 per layer, perturbing s_0 through set_initial_state.
  for (Index l = 0; l < layers; ++l) {
    ASSERT_EQ(g0[static_cast<std::size_t>(l)].rows(), S);
    ASSERT_EQ(g0[static_cast<std::size_t>(l)].cols(), B);
    Md s = s0[static_cast<std::size_t>(l)];
    const std::function<double()> eval_s = [&] {
      model.rnn().set_initial_state(l, s);
      return eval();
    };
    std::vector<double> got0, fd0;
    for (Index b = 0; b < B; ++b)
      for (Index i = 0; i < S; ++i) {
        got0.push_back(g0[static_cast<std::size_t>(l)](i, b));
        fd0.push_back(central_diff(s(i, b), kFdStep, eval_s));
      }
    model.rnn().set_initial_state(l, s0[static_cast<std::size_t>(l)]);
    EXPECT_TRUE(fd_close("state0_grad(" + std::to_string(l) + ")", got0, fd0, kFdRtol, kFdAtol));
  }
}

// ---------------------------------------------------------------------------------------
// 3. BPPSA (generated Jacobians + scan) vs sequential BP, in float and double.

/// Every parameter gradient, then the input gradient, of one loss_and_grad.
template <class T>
std::vector<Matrix<T>> model_grads(const ModelConfig& mc, std::uint64_t seed, const Problem& pb,
                                   const BackwardOptions& options) {
  SequenceClassifier<T> model(mc);
  model.reset_parameters(seed);
  model.loss_and_grad(pb.x, pb.batch, pb.steps, pb.labels, options);
  std::vector<Matrix<T>> out;
  for (const auto& p : model.parameters()) out.push_back(Eigen::Map<const Matrix<T>>(p.grad, p.size, 1));
  out.push_back(model.rnn().input_grad());
  return out;
}

/// max|a − b| / max|b| over each tensor (absolute when b is all zero).
template <class T>
::testing::AssertionResult grads_close(const std::vector<Matrix<T>>& got, const std::vector<Matrix<T>>& ref,
                                       double tol) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "different gradient counts";
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (got[k].rows() != ref[k].rows() || got[k].cols() != ref[k].cols())
      return ::testing::AssertionFailure() << "gradient " << k << " has the wrong shape";
    const double diff = (got[k] - ref[k]).template cast<double>().cwiseAbs().maxCoeff();
    const double scale = ref[k].template cast<double>().cwiseAbs().maxCoeff();
    const double err = scale > 0 ? diff / scale : diff;
    if (!(err <= tol))
      return ::testing::AssertionFailure()
             << (k + 1 == got.size() ? "input gradient" : "parameter " + std::to_string(k)) << ": relative error "
             << err << " > " << tol;
  }
  return ::testing::AssertionSuccess();
}

class ScanVsBp : public ::testing::TestWithParam<std::tuple<CellVariant, Index, HeadMode, Index>> {};
INSTANTIATE_TEST_SUITE_P(Cells, ScanVsBp,
                         ::testing::Combine(::testing::ValuesIn(kVariants), ::testing::Values(1, 2, 3),
                                            ::testing::Values(HeadMode::last, HeadMode::every),
                                            ::testing::Values(1, 2, 7, 65)),
                         [](const auto& info) {
                           return cell_name(std::get<0>(info.param)) + "_layers" +
                                  std::to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param)) +
                                  "_steps" + std::to_string(std::get<3>(info.param));
                         });

TEST_P(ScanVsBp, SameGradients) {
  const auto [variant, layers, head, steps] = GetParam();
  ModelConfig mc;
  mc.rnn = variant.config(3, 4, layers);
  mc.classes = 5;
  mc.head = head;
  Rng rng(7 + static_cast<std::uint64_t>(steps) * 31 + static_cast<std::uint64_t>(layers));
  const Problem pb = random_problem(3, steps, 3, 5, rng);
  const std::uint64_t seed = rng();
  const auto ref_f = model_grads<float>(mc, seed, pb, {BackwardMethod::bp});
  const auto ref_d = model_grads<double>(mc, seed, pb, {BackwardMethod::bp});
  struct Case {
    BackwardOptions options;
    std::string name;
  };
  const std::vector<Case> cases = {{{BackwardMethod::linear}, "linear"},
                                   {{BackwardMethod::blelloch}, "blelloch"},
                                   {{BackwardMethod::hybrid}, "hybrid"},
                                   {{BackwardMethod::automatic}, "auto"},
                                   {{BackwardMethod::hybrid, 2, 3}, "hybrid, 3 chunks, 2 threads"}};
  for (const auto& c : cases) {
    EXPECT_TRUE(grads_close(model_grads<float>(mc, seed, pb, c.options), ref_f, 1e-4)) << c.name << " (float)";
    EXPECT_TRUE(grads_close(model_grads<double>(mc, seed, pb, c.options), ref_d, 1e-10)) << c.name << " (double)";
  }
}

/// Gradients of a model's current parameters by sequential BP in a fresh model.
std::vector<Matrix<double>> bp_grads_of(SequenceClassifier<double>& model, const Problem& pb) {
  SequenceClassifier<double> ref(model.config());
  auto src = model.parameters(), dst = ref.parameters();
  for (std::size_t k = 0; k < src.size(); ++k) std::copy(src[k].value, src[k].value + src[k].size, dst[k].value);
  ref.loss_and_grad(pb.x, pb.batch, pb.steps, pb.labels, {BackwardMethod::bp});
  std::vector<Matrix<double>> out;
  for (const auto& p : ref.parameters()) out.push_back(Eigen::Map<const Matrix<double>>(p.grad, p.size, 1));
  out.push_back(ref.rnn().input_grad());
  return out;
}

// A model keeps its generated chain between backward passes of the same shape (values refilled,
// RNN's shared W_hh^T rewritten in place) and rebuilds it when the shape changes.
TEST(ScanReuse, GradientsFollowParameterAndShapeChanges) {
  for (CellType cell : kCells) {
    SCOPED_TRACE(to_string(cell));
    ModelConfig mc;
    mc.rnn = {cell, 3, 4, 2};
    mc.classes = 5;
    mc.head = HeadMode::every;
    SequenceClassifier<double> model(mc);
    model.reset_parameters(77);
    Rng rng(78);
    for (Index steps : {7, 7, 5, 5}) {
      const Problem pb = random_problem(3, steps, 3, 5, rng);
      scale_weights(model.rnn(), 1.2);  // new parameter values every pass
      model.loss_and_grad(pb.x, pb.batch, pb.steps, pb.labels, {BackwardMethod::blelloch});
      std::vector<Matrix<double>> got;
      for (const auto& p : model.parameters()) got.push_back(Eigen::Map<const Matrix<double>>(p.grad, p.size, 1));
      got.push_back(model.rnn().input_grad());
      EXPECT_TRUE(grads_close(got, bp_grads_of(model, pb), 1e-10)) << "steps " << steps;
    }
  }
}

// ---------------------------------------------------------------------------------------
// 3b. Per-sample lengths: a batch whose samples stop at their own lengths gives, sample by
// sample, what a batch of that one sample run for exactly its length gives (the oracle: no
// lengths, BP). Steps past a length hold NaN inputs and random output gradients, which must
// not reach anything.

class Lengths : public ::testing::TestWithParam<std::tuple<CellVariant, Index, BackwardMethod, bool>> {};
INSTANTIATE_TEST_SUITE_P(Cells, Lengths,
                         ::testing::Combine(::testing::ValuesIn(kVariants), ::testing::Values(1, 2),
                                            ::testing::Values(BackwardMethod::bp, BackwardMethod::linear,
                                                              BackwardMethod::blelloch, BackwardMethod::hybrid,
                                                              BackwardMethod::automatic),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return cell_name(std::get<0>(info.param)) + "_layers" +
                                  std::to_string(std::get<1>(info.param)) + "_" + to_string(std::get<2>(info.param)) +
                                  (std::get<3>(info.param) ? "_every" : "_last");
                         });

TEST_P(Lengths, EqualEachSampleRunAlone) {
  const auto [variant, layers, method, every_step] = GetParam();
  const RecurrentConfig cfg = variant.config(3, 4, layers);
  const Index I = 3, T = 7, B = 5, S = state_size(cfg), P = output_size(cfg);
  for (const std::vector<Index>& lengths : {std::vector<Index>{7, 5, 5, 2, 1}, std::vector<Index>{6, 6, 3, 1, 1}}) {
    SCOPED_TRACE("lengths " + std::to_string(lengths[0]) + "," + std::to_string(lengths[1]) + ",…");
    Rng rng(300 + variant.id() * 7 + static_cast<std::uint64_t>(layers) + static_cast<std::uint64_t>(lengths[0]));
    Recurrent<double> rnn(cfg);
    rnn.reset_parameters(rng());
    scale_weights(rnn, 1.5);
    Md x = random_matrix(I, T * B, rng), gout = random_matrix(P, T * B, rng);
    std::vector<Md> s0, gf;
    for (Index l = 0; l < layers; ++l) {
      s0.push_back(random_matrix(S, B, rng));
      gf.push_back(random_matrix(S, B, rng));
      rnn.set_initial_state(l, s0.back());
      rnn.set_final_state_grad(l, gf.back());
    }
    for (Index b = 0; b < B; ++b)
      for (Index t = 1; t <= T; ++t) {
        const Index col = (t - 1) * B + b, len = lengths[static_cast<std::size_t>(b)];
        if (t > len) x.col(col).setConstant(std::numeric_limits<double>::quiet_NaN());
        if (!every_step && t != len) gout.col(col).setZero();  // many-to-one: each sample's last step
      }
    rnn.forward(x, T, B, lengths);
    EXPECT_EQ(rnn.lengths(), lengths);
    const Md out = rnn.output();
    std::vector<Md> fin;
    for (Index l = 0; l < layers; ++l) fin.push_back(rnn.final_state(l));
    rnn.backward(gout, every_step, {method, 2, 2});

    std::vector<RecurrentLayerParams<double>> want(static_cast<std::size_t>(layers));
    for (Index l = 0; l < layers; ++l) {
      const auto& g = rnn.grads(l);
      auto& w = want[static_cast<std::size_t>(l)];
      w.w_ih = RowMatrix<double>::Zero(g.w_ih.rows(), g.w_ih.cols());
      w.w_hh = RowMatrix<double>::Zero(g.w_hh.rows(), g.w_hh.cols());
      w.w_hr = RowMatrix<double>::Zero(g.w_hr.rows(), g.w_hr.cols());
      w.b_ih = Vector<double>::Zero(g.b_ih.size());
      w.b_hh = Vector<double>::Zero(g.b_hh.size());
    }
    for (Index b = 0; b < B; ++b) {
      SCOPED_TRACE("sample " + std::to_string(b));
      const Index len = lengths[static_cast<std::size_t>(b)];
      Recurrent<double> one(cfg);
      for (Index l = 0; l < layers; ++l) {
        one.params(l) = rnn.params(l);
        one.set_initial_state(l, s0[static_cast<std::size_t>(l)].col(b));
        one.set_final_state_grad(l, gf[static_cast<std::size_t>(l)].col(b));
      }
      Md xb(I, len), gb(P, len);
      for (Index t = 0; t < len; ++t) {
        xb.col(t) = x.col(t * B + b);
        gb.col(t) = gout.col(t * B + b);
      }
      one.forward(xb, len, 1);
      one.backward(gb, every_step, {BackwardMethod::bp});
      for (Index t = 0; t < T; ++t) {
        const Md expect = t < len ? Md(one.output().col(t)) : Md(Md::Zero(P, 1));
        EXPECT_LE((out.col(t * B + b) - expect).cwiseAbs().maxCoeff(), 1e-12) << "output at step " << t + 1;
        const Md expect_gx = t < len ? Md(one.input_grad().col(t)) : Md(Md::Zero(I, 1));
        EXPECT_LE((rnn.input_grad().col(t * B + b) - expect_gx).cwiseAbs().maxCoeff(),
                  1e-10 * std::max(1.0, one.input_grad().cwiseAbs().maxCoeff()))
            << "input gradient at step " << t + 1;
      }
      for (Index l = 0; l < layers; ++l) {
        EXPECT_LE((fin[static_cast<std::size_t>(l)].col(b) - one.state(l, len)).cwiseAbs().maxCoeff(), 1e-12);
        const Md g0 = one.state0_grad(l);
        EXPECT_LE((rnn.state0_grad(l).col(b) - g0).cwiseAbs().maxCoeff(),
                  1e-10 * std::max(1.0, g0.cwiseAbs().maxCoeff()))
            << "state0_grad(" << l << ")";
        const auto& g = one.grads(l);
        auto& w = want[static_cast<std::size_t>(l)];
        w.w_ih += g.w_ih;
        w.w_hh += g.w_hh;
        w.b_ih += g.b_ih;
        w.b_hh += g.b_hh;
        if (g.w_hr.size() != 0) w.w_hr += g.w_hr;
      }
    }
    for (Index l = 0; l < layers; ++l) {
      const auto& g = rnn.grads(l);
      const auto& w = want[static_cast<std::size_t>(l)];
      const auto close = [](const auto& a, const auto& e) {
        return a.size() == e.size() &&
               (a.size() == 0 || (a - e).cwiseAbs().maxCoeff() <= 1e-10 * std::max(1.0, e.cwiseAbs().maxCoeff()));
      };
      EXPECT_TRUE(close(g.w_ih, w.w_ih)) << "weight_ih of layer " << l;
      EXPECT_TRUE(close(g.w_hh, w.w_hh)) << "weight_hh of layer " << l;
      EXPECT_TRUE(close(g.b_ih, w.b_ih)) << "bias_ih of layer " << l;
      EXPECT_TRUE(close(g.b_hh, w.b_hh)) << "bias_hh of layer " << l;
      EXPECT_TRUE(close(g.w_hr, w.w_hr)) << "weight_hr of layer " << l;
    }
  }
}

// A classifier's batch with lengths in any order gives what each sample run alone for its
// length gives: the loss and gradients as the mean over the batch (head last) or over the real
// steps (head every), and each sample's prediction.
TEST(ClassifierLengths, EqualEachSampleRunAlone) {
  for (const CellVariant& variant : kVariants)
    for (HeadMode head : {HeadMode::last, HeadMode::every}) {
      SCOPED_TRACE(cell_name(variant) + " head " + to_string(head));
      ModelConfig mc;
      mc.rnn = variant.config(3, 4, 2);
      mc.classes = 5;
      mc.head = head;
      const Index T = 7, B = 5;
      const std::vector<Index> lengths = {2, 7, 5, 7, 1};
      Rng rng(40 + variant.id());
      const Problem pb = random_problem(B, T, 3, 5, rng);
      SequenceClassifier<double> model(mc);
      model.reset_parameters(rng());
      scale_weights(model.rnn(), 1.5);
      std::vector<std::int64_t> pred;
      const double loss =
          model.loss_and_grad(pb.x, B, T, pb.labels, {BackwardMethod::blelloch, 2}, nullptr, &pred, lengths);
      std::vector<Md> got;
      for (const auto& p : model.parameters()) got.push_back(Eigen::Map<const Md>(p.grad, p.size, 1));

      double want_loss = 0, weight_sum = 0;
      std::vector<Md> want;
      for (Index b = 0; b < B; ++b) {
        const Index len = lengths[static_cast<std::size_t>(b)];
        SequenceClassifier<double> one(mc);
        auto src = model.parameters(), dst = one.parameters();
        for (std::size_t k = 0; k < src.size(); ++k) std::copy(src[k].value, src[k].value + src[k].size, dst[k].value);
        std::vector<float> xb;
        for (Index t = 0; t < len; ++t)
          for (Index i = 0; i < 3; ++i) xb.push_back(pb.x[static_cast<std::size_t>((b * T + t) * 3 + i)]);
        std::vector<std::int64_t> pb1;
        const double w = head == HeadMode::every ? static_cast<double>(len) : 1.0;
        want_loss += w * one.loss_and_grad(xb, 1, len, std::span(pb.labels).subspan(static_cast<std::size_t>(b), 1),
                                           {BackwardMethod::bp}, nullptr, &pb1);
        weight_sum += w;
        EXPECT_EQ(pred[static_cast<std::size_t>(b)], pb1[0]) << "prediction of sample " << b;
        const auto params = one.parameters();
        for (std::size_t k = 0; k < params.size(); ++k) {
          const Md g = w * Eigen::Map<const Md>(params[k].grad, params[k].size, 1);
          if (want.size() <= k)
            want.push_back(g);
          else
            want[k] += g;
        }
      }
      EXPECT_NEAR(loss, want_loss / weight_sum, 1e-12);
      for (auto& w : want) w /= weight_sum;
      EXPECT_TRUE(grads_close(got, want, 1e-10));
    }
}

// The scan with lengths generates one Jacobian per running step and none for the steps past a
// length: the chain holds Σ lengths elements plus one cut between samples.
TEST(RecurrentLengths, ChainHoldsOnlyRunningSteps) {
  Recurrent<double> rnn({CellType::gru, 2, 3, 1});
  rnn.reset_parameters(4);
  Rng rng(5);
  const std::vector<Index> lengths = {9, 4, 1};
  rnn.forward(random_matrix(2, 9 * 3, rng), 9, 3, lengths);
  rnn.backward(random_matrix(3, 9 * 3, rng), true, {BackwardMethod::blelloch});
  EXPECT_EQ(rnn.chain(0).size(), 9 + 4 + 1 + 2);
  EXPECT_EQ(rnn.chain(0).batch(), 1);
  // Back to a padded batch: the padded chain again.
  rnn.forward(random_matrix(2, 9 * 3, rng), 9, 3);
  rnn.backward(random_matrix(3, 9 * 3, rng), true, {BackwardMethod::blelloch});
  EXPECT_EQ(rnn.chain(0).size(), 9);
  EXPECT_TRUE(rnn.lengths().empty());
}

TEST(RecurrentErrors, Lengths) {
  Recurrent<double> rnn({CellType::lstm, 2, 3, 1});
  rnn.reset_parameters(4);
  Rng rng(6);
  const Md x = random_matrix(2, 4 * 3, rng);
  expect_error<ShapeError>([&] { rnn.forward(x, 4, 3, std::vector<Index>{4, 2}); }, {"2 lengths", "batch of 3"});
  expect_error<InvalidArgument>(
      [&] {
        rnn.forward(x, 4, 3, std::vector<Index>{5, 2, 1});
      },
      {"length 5 of sample 0", "1..4"});
  expect_error<InvalidArgument>([&] { rnn.forward(x, 4, 3, std::vector<Index>{4, 0, 0}); }, {"length 0"});
  expect_error<InvalidArgument>(
      [&] {
        rnn.forward(x, 4, 3, std::vector<Index>{2, 4, 1});
      },
      {"sorted longest first", "sample 1 has 4 after 2"});
}

// With lengths, layer_transfer's affine map (what a model-parallel stage sends) is each
// sample's own: g_0 = M_b · g_in + v_b, g_in applied at the sample's length, for every method.
TEST(RecurrentLengths, LayerTransferPerSample) {
  for (CellType cell : {CellType::rnn, CellType::gru, CellType::lstm}) {
    SCOPED_TRACE(to_string(cell));
    Recurrent<double> rnn({cell, 2, 3, 1});
    rnn.reset_parameters(4);
    Rng rng(6);
    const Index S = state_size(cell, 3);
    const std::vector<Index> lengths{4, 2, 1};
    rnn.forward(random_matrix(2, 4 * 3, rng), 4, 3, lengths);
    Md grad_out = random_matrix(3, 12, rng);  // head last: each sample's last real step only
    for (Index t = 0; t < 4; ++t)
      for (Index b = 0; b < 3; ++b)
        if (t + 1 != lengths[static_cast<std::size_t>(b)]) grad_out.col(t * 3 + b).setZero();
    rnn.backward_begin(grad_out, false);
    auto [m, v] = rnn.layer_transfer(0, {});
    ASSERT_EQ(m.count(), 3);
    for (BackwardMethod method : {BackwardMethod::bp, BackwardMethod::linear, BackwardMethod::blelloch}) {
      const Md g_in = random_matrix(S, 3, rng);
      rnn.set_final_state_grad(0, g_in);
      rnn.backward(grad_out, false, {method});
      for (Index b = 0; b < 3; ++b) {
        const Md want = m.to_dense(b) * g_in.col(b) + v.col(b);
        EXPECT_LT((rnn.state0_grad(0).col(b) - want).norm(), 1e-10 * (1 + want.norm()))
            << to_string(method) << ", sample " << b;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// 4. The thread count does not change the blelloch result, not even in the last bit.

template <class T>
void expect_thread_independent(CellType cell) {
  ModelConfig mc;
  mc.rnn = {cell, 3, 4, 2};
  mc.classes = 5;
  mc.head = HeadMode::every;
  Rng rng(99);
  const Problem pb = random_problem(3, 33, 3, 5, rng);
  const auto one = model_grads<T>(mc, 5, pb, {BackwardMethod::blelloch, 1});
  for (int threads : {2, 3}) {
    const auto other = model_grads<T>(mc, 5, pb, {BackwardMethod::blelloch, threads});
    ASSERT_EQ(other.size(), one.size());
    for (std::size_t k = 0; k < one.size(); ++k) {
      ASSERT_EQ(other[k].size(), one[k].size());
      EXPECT_EQ(std::memcmp(other[k].data(), one[k].data(), sizeof(T) * static_cast<std::size_t>(one[k].size())), 0)
          << to_string(cell) << ": gradient " << k << " differs with " << threads << " threads";
    }
  }
}

TEST(RecurrentThreads, BlellochBitIdenticalAcrossThreadCounts) {
  for (CellType cell : kCells) {
    expect_thread_independent<float>(cell);
    expect_thread_independent<double>(cell);
  }
}

/// Each of got the same bits as first's; `what` names the run in a failure, then the result's index.
template <class T>
void expect_same_bits(const std::vector<Matrix<T>>& got, const std::vector<Matrix<T>>& first, const std::string& what) {
  ASSERT_EQ(got.size(), first.size()) << what;
  for (std::size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), first[k].size()) << what << " " << k;
    EXPECT_EQ(std::memcmp(got[k].data(), first[k].data(), sizeof(T) * static_cast<std::size_t>(got[k].size())), 0)
        << what << " " << k << " differs";
  }
}

// The forward's GEMMs (the input projection in blocks of columns, each step's W_hh product in
// blocks of rows, Newton's wide step in blocks of columns) shared among 1, 2 or 3 threads, with
// every team full however small the product: the outputs and final states are the same bits,
// for each cell, with a projection, with lengths and under Newton. The shapes give each product
// several blocks (4H ≥ 160 rows, T·B ≥ 600 columns).
template <class T>
void expect_forward_thread_independent(const RecurrentConfig& c, ForwardMethod method, bool lengths) {
  const Index steps = 60, batch = 12;
  Rng rng(7);
  const Matrix<T> x = random_matrix(c.input, steps * batch, rng).template cast<T>();
  std::vector<Index> lens;
  if (lengths)
    for (Index b = 0; b < batch; ++b) lens.push_back(steps - 4 * b);
  const detail::FlopsPerThread full_teams(0);
  std::vector<Matrix<T>> first;
  for (int threads : {1, 2, 3}) {
    Recurrent<T> rnn(c);
    rnn.reset_parameters(5);
    rnn.set_forward_options({.method = method, .threads = threads});
    rnn.forward(x, steps, batch, lens);
    std::vector<Matrix<T>> got{rnn.output()};
    for (Index l = 0; l < c.layers; ++l) got.push_back(rnn.final_state(l));
    if (threads == 1)
      first = got;
    else
      expect_same_bits(got, first,
                       std::string(to_string(c.cell)) + (c.proj ? " with a projection" : "") +
                           (lengths ? ", lengths" : "") + (method == ForwardMethod::newton ? ", newton" : "") + ", " +
                           std::to_string(threads) + " threads: result");
  }
}

TEST(RecurrentThreads, ForwardBitIdenticalAcrossThreadCounts) {
  for (CellType cell : kCells)
    for (bool lengths : {false, true}) {
      const RecurrentConfig c{cell, 24, 40, 2};
      expect_forward_thread_independent<float>(c, ForwardMethod::sequential, lengths);
      expect_forward_thread_independent<double>(c, ForwardMethod::sequential, lengths);
    }
  RecurrentConfig proj{CellType::lstm, 24, 80, 2};
  proj.proj = 70;  // W_hr: 70 rows, two blocks
  expect_forward_thread_independent<float>(proj, ForwardMethod::sequential, false);
  expect_forward_thread_independent<double>(proj, ForwardMethod::sequential, true);
  for (CellType cell : kCells)
    expect_forward_thread_independent<double>({cell, 8, 12, 1}, ForwardMethod::newton, false);
}

// BP through time on 1, 2 or 3 threads, every team full: the gradients (parameters, input, initial
// states) are the same bits. H 16: W_hh^T has 16 rows, one block, so the backward's recurrence shares
// its samples in slices of columns (batch 24: 6 blocks); with lengths the samples join as BP goes
// back (widths that grow; the two longest equal, so every step keeps 2 samples or more), and the
// LSTM's δc is kept between its preact and direct.
template <class T>
void expect_bp_thread_independent(CellType cell, bool lengths) {
  const Index steps = 40, batch = 24;
  RecurrentConfig c{cell, 5, 16, 2};
  Rng rng(11);
  const Matrix<T> x = random_matrix(c.input, steps * batch, rng).template cast<T>();
  const Matrix<T> grad_out = random_matrix(c.hidden, steps * batch, rng).template cast<T>();
  std::vector<Index> lens;
  if (lengths)
    for (Index b = 0; b < batch; ++b) lens.push_back(std::max<Index>(2, steps - std::max<Index>(0, b - 1)));
  const detail::FlopsPerThread full_teams(0);
  std::vector<Matrix<T>> first;
  for (int threads : {1, 2, 3}) {
    Recurrent<T> rnn(c);
    rnn.reset_parameters(5);
    rnn.set_forward_options({.method = ForwardMethod::sequential, .threads = threads});
    rnn.forward(x, steps, batch, lens);
    rnn.backward(grad_out, true, {BackwardMethod::bp, threads});
    std::vector<Matrix<T>> got{rnn.input_grad()};
    for (Index l = 0; l < c.layers; ++l) {
      const auto& g = rnn.grads(l);
      got.insert(got.end(), {g.w_ih, g.w_hh, g.b_ih, g.b_hh, rnn.state0_grad(l)});
    }
    if (threads == 1)
      first = got;
    else
      expect_same_bits(got, first,
                       std::string(to_string(cell)) + (lengths ? ", lengths" : "") + ", " + std::to_string(threads) +
                           " threads: gradient");
  }
}

TEST(RecurrentThreads, BpBitIdenticalAcrossThreadCounts) {
  for (CellType cell : kCells)
    for (bool lengths : {false, true}) {
      expect_bp_thread_independent<float>(cell, lengths);
      expect_bp_thread_independent<double>(cell, lengths);
    }
}

// ---------------------------------------------------------------------------------------
// 4b. Subnormals are flushed while the engine computes, on its own threads only.

float subnormal_product() {
  volatile float a = 1e-30f, b = 1e-10f;  // 1e-40: subnormal in float
  return a * b;
}

TEST(FlushDenormals, GuardFlushesAndRestores) {
  ASSERT_NE(subnormal_product(), 0.0f) << "this test assumes IEEE subnormals by default";
  {
    detail::FlushDenormals outer;
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    EXPECT_EQ(subnormal_product(), 0.0f);
#endif
    { detail::FlushDenormals inner; }
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    EXPECT_EQ(subnormal_product(), 0.0f) << "an inner guard restored too much";
#endif
  }
  EXPECT_NE(subnormal_product(), 0.0f) << "the guard did not restore the caller's mode";
}

// 600 tanh steps with small recurrent weights: the gradient of the first steps decays through
// the subnormal range (where it is flushed) and every method still matches sequential BP in
// double per tensor; the caller's thread keeps IEEE subnormals afterwards.
TEST(FlushDenormals, DecayingGradientsMatchDoubleBp) {
  ModelConfig mc;
  mc.rnn = {CellType::rnn, 2, 6, 1};
  mc.classes = 3;
  mc.head = HeadMode::last;
  Rng rng(2024);
  const Problem pb = random_problem(4, 600, 2, 3, rng);
  const auto ref = model_grads<double>(mc, 11, pb, {BackwardMethod::bp});
  const Matrix<double>& gx = ref.back();  // the input gradient: the first steps' are subnormal in float
  ASSERT_GT((gx.array().abs() < 1.17549435e-38).count(), 0) << "the gradient never reached the subnormal range";
  for (BackwardMethod m : {BackwardMethod::bp, BackwardMethod::blelloch, BackwardMethod::hybrid}) {
    const auto got = model_grads<float>(mc, 11, pb, {m, 2});
    std::vector<Matrix<double>> as_double;
    for (const auto& g : got) as_double.push_back(g.template cast<double>());
    EXPECT_TRUE(grads_close(as_double, ref, 1e-4)) << to_string(m);
  }
  EXPECT_NE(subnormal_product(), 0.0f);
}

// ---------------------------------------------------------------------------------------
// 5. Errors name the problem.

TEST(RecurrentErrors, Shapes) {
  Recurrent<double> rnn({CellType::lstm, 3, 4, 2});
  rnn.reset_parameters(1);
  Rng rng(3);
  expect_error<InvalidArgument>([&] { rnn.backward(Md::Zero(4, 6), false, {}); }, {"forward()"});
  expect_error<ShapeError>([&] { rnn.forward(Md::Zero(2, 6), 3, 2); }, {"2×6", "expected 3×6"});
  expect_error<ShapeError>([&] { rnn.forward(Md::Zero(3, 5), 3, 2); }, {"expected 3×6"});
  rnn.forward(random_matrix(3, 6, rng), 3, 2);
  expect_error<ShapeError>([&] { rnn.backward(Md::Zero(4, 5), false, {}); }, {"4×5", "expected 4×6"});
  expect_error<ShapeError>([&] { rnn.backward(Md::Zero(8, 6), true, {BackwardMethod::bp}); }, {"expected 4×6"});
  expect_error<InvalidArgument>([&] { rnn.set_initial_state(2, Md::Zero(8, 2)); }, {"layer 2"});
  rnn.set_initial_state(1, Md::Zero(4, 2));  // LSTM's state is [h; c]: 2H rows
  expect_error<ShapeError>([&] { rnn.forward(random_matrix(3, 6, rng), 3, 2); }, {"layer 1", "4×2", "expected 8×2"});

  SequenceClassifier<double> model({{CellType::gru, 3, 4, 1}, 5});
  model.reset_parameters(2);
  const std::vector<float> x(2 * 3 * 3, 0.5f);
  const std::vector<std::int64_t> labels = {1, 2};
  expect_error<ShapeError>([&] { model.evaluate(std::span(x).first(17), 2, 3, labels); }, {"17", "[2, 3, 3] = 18"});
}

TEST(RecurrentErrors, NonFiniteAndLabels) {
  SequenceClassifier<float> model({{CellType::rnn, 3, 4, 2}, 5, HeadMode::every});
  model.reset_parameters(2);
  std::vector<float> x(2 * 3 * 3, 0.25f);
  const std::vector<std::int64_t> labels = {1, 4};
  EXPECT_NO_THROW(model.loss_and_grad(x, 2, 3, labels, {}));
  expect_error<InvalidArgument>(
      [&] {
        model.evaluate(x, 2, 3, std::vector<std::int64_t>{1, 5});
      },
      {"label 5", "[0, 5)"});
  expect_error<InvalidArgument>([&] { model.evaluate(x, 2, 3, std::vector<std::int64_t>{-1, 0}); }, {"[0, 5)"});
  x[4] = std::numeric_limits<float>::quiet_NaN();
  expect_error<NonFiniteError>([&] { model.evaluate(x, 2, 3, labels); }, {"not finite"});
  expect_error<NonFiniteError>([&] { model.loss_and_grad(x, 2, 3, labels, {}); }, {"not finite"});

  // Below the loss: a NaN in the output gradient is caught by the scan's input check or by BP.
  for (BackwardMethod m : {BackwardMethod::bp, BackwardMethod::blelloch, BackwardMethod::linear}) {
    Recurrent<double> rnn({CellType::gru, 3, 4, 1});
    rnn.reset_parameters(1);
    Md x2 = Md::Constant(3, 4, 0.5);
    rnn.forward(x2, 2, 2);
    Md g = Md::Ones(4, 4);
    g(1, 3) = std::numeric_limits<double>::quiet_NaN();
    EXPECT_THROW(rnn.backward(g, true, {m}), NonFiniteError) << to_string(m);
  }
}

// An LSTM projection: refused where it does not apply, and its shapes named where they are wrong.
TEST(RecurrentErrors, Projection) {
  expect_error<InvalidArgument>(
      [] {
        Recurrent<float>({CellType::gru, 3, 4, 1, Nonlinearity::tanh, Device::cpu, 2});
      },
      {"projection", "LSTM", "gru"});
  for (Index proj : {Index{4}, Index{9}, Index{-1}})
    expect_error<InvalidArgument>(
        [&] {
          Recurrent<float>({CellType::lstm, 3, 4, 1, Nonlinearity::tanh, Device::cpu, proj});
        },
        {"proj " + std::to_string(proj), "smaller than hidden", "hidden 4"});
  expect_error<UnsupportedError>(
      [] {
        Recurrent<float>({CellType::lstm, 3, 4, 1, Nonlinearity::tanh, Device::cuda, 2});
      },
      {"CPU only"});

  Recurrent<double> rnn({CellType::lstm, 3, 4, 2, Nonlinearity::tanh, Device::cpu, 2});
  EXPECT_EQ(rnn.params(0).w_hr.rows(), 2);
  EXPECT_EQ(rnn.params(0).w_hr.cols(), 4);
  EXPECT_EQ(rnn.params(1).w_ih.cols(), 2);  // the layer above reads the projection
  EXPECT_EQ(rnn.params(1).w_hh.cols(), 2);
  rnn.reset_parameters(1);
  Rng rng(3);
  rnn.set_initial_state(1, Md::Zero(8, 2));
  expect_error<ShapeError>([&] { rnn.forward(random_matrix(3, 6, rng), 3, 2); }, {"layer 1", "expected 6×2"});
  rnn.set_initial_state(1, Md::Zero(6, 2));  // h_0 (proj rows) over c_0 (hidden rows)
  rnn.forward(random_matrix(3, 6, rng), 3, 2);
  EXPECT_EQ(rnn.output().rows(), 2);
  EXPECT_EQ(rnn.state(1, 3).rows(), 6);
  expect_error<ShapeError>([&] { rnn.backward(Md::Zero(4, 6), false, {}); }, {"4×6", "expected 2×6", "proj"});
  expect_error<ShapeError>([&] { rnn.set_final_state_grad(0, Md::Zero(8, 2)); }, {"expected 6 rows"});
}

// A model with a projection saves PyTorch's names and shapes (weight_hr_l<k> after bias_hh_l<k>,
// a head over the projection) and comes back with the same configuration from its file.
TEST(RecurrentProjection, StateDictRoundTrip) {
  ModelConfig mc;
  mc.rnn = {CellType::lstm, 3, 5, 2, Nonlinearity::tanh, Device::cpu, 2};
  mc.classes = 4;
  SequenceClassifier<float> model(mc);
  model.reset_parameters(8);
  const TensorFile f = model.state_dict();
  EXPECT_EQ(f.at("rnn.weight_hr_l1", "test").shape, (std::vector<Index>{2, 5}));
  EXPECT_EQ(f.at("rnn.weight_ih_l1", "test").shape, (std::vector<Index>{20, 2}));
  EXPECT_EQ(f.at("rnn.weight_hh_l0", "test").shape, (std::vector<Index>{20, 2}));
  EXPECT_EQ(f.at("head.weight", "test").shape, (std::vector<Index>{4, 2}));
  const std::vector<std::string> order = {"rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0", "rnn.bias_hh_l0",
                                          "rnn.weight_hr_l0"};
  const auto names = expected_state_dict(mc);
  for (std::size_t k = 0; k < order.size(); ++k) EXPECT_EQ(names[k].first, order[k]);
  const ModelConfig back = config_from_state_dict(f, CellType::lstm, HeadMode::last, LossType::cross_entropy);
  EXPECT_EQ(back.rnn.proj, 2);
  EXPECT_EQ(back.rnn.hidden, 5);
  EXPECT_EQ(back.rnn.layers, 2);
  SequenceClassifier<float> copy(back);
  copy.load_state_dict(f);
  EXPECT_EQ(copy.rnn().params(1).w_hr, model.rnn().params(1).w_hr);
  expect_error<ShapeError>([&] { config_from_state_dict(f, CellType::gru, HeadMode::last, LossType::cross_entropy); },
                           {"weight"});
}

TEST(RecurrentErrors, ParseNames) {
  EXPECT_EQ(parse_cell("lstm"), CellType::lstm);
  EXPECT_EQ(parse_backward("auto"), BackwardMethod::automatic);
  EXPECT_EQ(parse_head("every"), HeadMode::every);
  EXPECT_EQ(parse_loss("cross_entropy"), LossType::cross_entropy);
  for (CellType c : kCells) EXPECT_EQ(parse_cell(to_string(c)), c);
  for (BackwardMethod m : {BackwardMethod::bp, BackwardMethod::linear, BackwardMethod::blelloch, BackwardMethod::hybrid,
                           BackwardMethod::automatic})
    EXPECT_EQ(parse_backward(to_string(m)), m);
  expect_error<InvalidArgument>([] { parse_cell("GRU2"); }, {"'GRU2'", "rnn, gru or lstm"});
  expect_error<InvalidArgument>([] { parse_backward("scan"); }, {"'scan'", "blelloch"});
  expect_error<InvalidArgument>([] { parse_head("first"); }, {"'first'", "last", "every"});
  expect_error<InvalidArgument>([] { parse_loss("nll"); }, {"'nll'", "ce or mse"});
  EXPECT_EQ(parse_nonlinearity("relu"), Nonlinearity::relu);
  EXPECT_EQ(parse_nonlinearity(to_string(Nonlinearity::tanh)), Nonlinearity::tanh);
  expect_error<InvalidArgument>([] { parse_nonlinearity("sigmoid"); }, {"'sigmoid'", "tanh or relu"});
  expect_error<InvalidArgument>(
      [] {
        Recurrent<float>({CellType::gru, 3, 4, 1, Nonlinearity::relu});
      },
      {"relu", "plain RNN", "gru"});
}

// Recurrent::forward_io / backward_io (bppsa.nn's path: the caller's C-order tensors read and
// written in place) against the host API on the same weights, states and gradients: outputs,
// final states and every gradient, for each cell, with lengths and with LSTM's projection.
struct IoCase {
  RecurrentConfig config;
  bool lengths;
};
class RecurrentIo : public ::testing::TestWithParam<IoCase> {};

/// The caller's tensors of forward_io: weights w (w_hr with a projection), x, h0/c0 (null: zeros)
/// and the outputs (c_n for an LSTM).
LayerForwardIo<double> forward_io_of(const RecurrentConfig& c, const RecurrentLayerParams<double>& w, const Md& x,
                                     const double* h0, const double* c0, Md& out, Md& hn, Md& cn) {
  LayerForwardIo<double> f;
  f.x = x.data();
  f.h0 = h0;
  f.c0 = c0;
  f.w_ih = w.w_ih.data();
  f.w_hh = w.w_hh.data();
  f.b_ih = w.b_ih.data();
  f.b_hh = w.b_hh.data();
  f.w_hr = c.proj > 0 ? w.w_hr.data() : nullptr;
  f.out = out.data();
  f.h_n = hn.data();
  f.c_n = c.cell == CellType::lstm ? cn.data() : nullptr;
  return f;
}
/// backward_io's tensors after forward_io f: its weights, the output gradient and every
/// parameter gradient into g (w_hr's with a projection) and the input gradient into gx.
LayerBackwardIo<double> backward_io_of(const RecurrentConfig& c, const LayerForwardIo<double>& f, const Md& gout,
                                       RecurrentLayerParams<double>& g, Md& gx) {
  LayerBackwardIo<double> b;
  b.w_ih = f.w_ih;
  b.w_hh = f.w_hh;
  b.b_ih = f.b_ih;
  b.b_hh = f.b_hh;
  b.w_hr = f.w_hr;
  b.grad_out = gout.data();
  b.grad_x = gx.data();
  b.grad_w_ih = g.w_ih.data();
  b.grad_w_hh = g.w_hh.data();
  b.grad_b_ih = g.b_ih.data();
  b.grad_b_hh = g.b_hh.data();
  b.grad_w_hr = c.proj > 0 ? g.w_hr.data() : nullptr;
  return b;
}

TEST_P(RecurrentIo, OnCallerMemoryEqualsTheHostApi) {
  const RecurrentConfig c = GetParam().config;
  const Index T = 5, B = 3, I = c.input, H = c.hidden, P = output_size(c), S = state_size(c),
              G = gate_count(c.cell) * H;
  const bool lstm = c.cell == CellType::lstm;
  const std::vector<Index> lengths = GetParam().lengths ? std::vector<Index>{5, 4, 2} : std::vector<Index>{};
  Rng rng(11);
  Recurrent<double> host(c);
  host.reset_parameters(4);
  const RecurrentLayerParams<double> p = host.params(0);
  const Md x = random_matrix(I, T * B, rng), s0 = random_matrix(S, B, rng), gout = random_matrix(P, T * B, rng),
           gfin = random_matrix(S, B, rng);
  // The caller's tensors: C-order (B, P) for h, (B, H) for c, i.e. P × B and H × B column-major.
  const Md h0 = s0.topRows(P), c0 = s0.bottomRows(H), ghn = gfin.topRows(P), gcn = gfin.bottomRows(H);

  host.set_initial_state(0, s0);
  host.forward(x, T, B, lengths);
  host.set_final_state_grad(0, lstm ? gfin : Md(gfin.topRows(P)));
  host.backward(gout, true, {BackwardMethod::blelloch});

  Recurrent<double> io_rnn(c);  // zero weights: forward_io reads the caller's
  Md out(P, T * B), hn(P, B), cn(H, B), gx(I, T * B), gh0(P, B), gc0(H, B);
  RecurrentLayerParams<double> gw{RowMatrix<double>(G, I), RowMatrix<double>(G, P), Vector<double>(G),
                                  Vector<double>(G), RowMatrix<double>(P, H)};
  const LayerForwardIo<double> f = forward_io_of(c, p, x, h0.data(), lstm ? c0.data() : nullptr, out, hn, cn);
  io_rnn.forward_io(f, T, B, lengths);
  LayerBackwardIo<double> b = backward_io_of(c, f, gout, gw, gx);
  b.grad_hn = ghn.data();
  b.grad_cn = lstm ? gcn.data() : nullptr;
  b.grad_h0 = gh0.data();
  b.grad_c0 = lstm ? gc0.data() : nullptr;
  EXPECT_EQ(io_rnn.backward_io(b, {BackwardMethod::blelloch}), "blelloch");
  const auto& [gw_ih, gw_hh, gb_ih, gb_hh, gw_hr] = gw;

  const double tol = 1e-12;
  const Md last = host.final_state(0);
  EXPECT_LE((out - host.output()).cwiseAbs().maxCoeff(), tol);
  EXPECT_LE((hn - last.topRows(P)).cwiseAbs().maxCoeff(), tol);
  if (lstm) {
    EXPECT_LE((cn - last.bottomRows(H)).cwiseAbs().maxCoeff(), tol);
  }
  const auto& g = host.grads(0);
  EXPECT_LE((gw_ih - g.w_ih).cwiseAbs().maxCoeff(), tol);
  EXPECT_LE((gw_hh - g.w_hh).cwiseAbs().maxCoeff(), tol);
  EXPECT_LE((gb_ih - g.b_ih).cwiseAbs().maxCoeff(), tol);
  EXPECT_LE((gb_hh - g.b_hh).cwiseAbs().maxCoeff(), tol);
  if (c.proj > 0) {
    EXPECT_LE((gw_hr - g.w_hr).cwiseAbs().maxCoeff(), tol);
  }
  EXPECT_LE((gx - host.input_grad()).cwiseAbs().maxCoeff(), tol);
  EXPECT_LE((gh0 - host.state0_grad(0).topRows(P)).cwiseAbs().maxCoeff(), tol);
  if (lstm) {
    EXPECT_LE((gc0 - host.state0_grad(0).bottomRows(H)).cwiseAbs().maxCoeff(), tol);
  }
  // forward_io computed on the caller's weights in place: the stack's own parameters are untouched.
  EXPECT_TRUE(io_rnn.params(0).w_hh.isZero());
  EXPECT_EQ(io_rnn.lengths(), GetParam().lengths && lengths.back() < T ? lengths : std::vector<Index>{});

  // A record this small stays for the next call (a decoder's steps).
  io_rnn.release_record();
  EXPECT_EQ(io_rnn.steps(), T);
}

/// A one-layer GRU (input 3, hidden 4) and the caller's tensors of a forward_io / backward_io of T
/// steps of batch 2 (the backward asks for W_ih's gradient only).
struct GruIo {
  explicit GruIo(Index steps, std::uint64_t seed) : T(steps), rng(seed) {
    f.x = x.data();
    f.w_ih = w_ih.data();
    f.w_hh = w_hh.data();
    f.out = out.data();
    f.h_n = hn.data();
    b.w_ih = w_ih.data();
    b.w_hh = w_hh.data();
    b.grad_out = gout.data();
    b.grad_w_ih = gw.data();
  }
  Recurrent<double> rnn{{CellType::gru, 3, 4, 1}};
  const Index T, B = 2;
  Rng rng;
  const Md x = random_matrix(3, T*B, rng), w_ih = random_matrix(12, 3, rng), w_hh = random_matrix(12, 4, rng);
  Md out = Md(4, T*B), hn = Md(4, B), gout = Md::Ones(4, T*B), gw = Md(12, 3);
  LayerForwardIo<double> f;
  LayerBackwardIo<double> b;
};

// An inference call the CPU half runs on its recorded path (lengths, or the Newton forward) is
// still one: neither backward_io nor backward() may follow it.
TEST(RecurrentIo, NoBackwardAfterAnInferenceCallThatKeptItsRecord) {
  GruIo io(3, 6);
  io.f.record = false;
  io.rnn.forward_io(io.f, io.T, io.B, std::vector<Index>{3, 2});
  EXPECT_EQ(io.rnn.steps(), io.T);  // (the recorded path ran)
  expect_error<InvalidArgument>([&] { io.rnn.backward_io(io.b, {}); }, {"forward_io()", "record"});
  expect_error<InvalidArgument>([&] { io.rnn.backward(io.gout, true, {}); }, {"forward_io", "backward_io"});
  io.f.record = true;
  io.rnn.forward_io(io.f, io.T, io.B, std::vector<Index>{3, 2});
  EXPECT_EQ(io.rnn.backward_io(io.b, {BackwardMethod::bp}), "bp");
}

/// BPPSA_KEPT_RECORD_MB set for a scope (null: unset), the earlier value restored after.
struct KeptRecordBudget {
  explicit KeptRecordBudget(const char* mb) {
    if (const char* v = std::getenv(kName)) old = v, had = true;
    if (mb)
      ::setenv(kName, mb, 1);
    else
      ::unsetenv(kName);
  }
  ~KeptRecordBudget() {
    if (had)
      ::setenv(kName, old.c_str(), 1);
    else
      ::unsetenv(kName);
  }
  static constexpr const char* kName = "BPPSA_KEPT_RECORD_MB";
  std::string old;
  bool had = false;
};

TEST(RecurrentIo, ReleaseRecordFreesALargeOneAndKeepsTheWeights) {
  KeptRecordBudget none("0");  // only a decoder step's record is kept
  GruIo io(40, 5);             // 80 columns: more than the 64 kept
  Recurrent<double>& rnn = io.rnn;
  const Index T = io.T, B = io.B;
  const LayerForwardIo<double>& f = io.f;
  const LayerBackwardIo<double>& b = io.b;
  const Md& out = io.out;
  rnn.forward_io(f, T, B);
  const RowMatrix<double> loaded = rnn.params(0).w_hh;
  rnn.release_record();
  EXPECT_EQ(rnn.steps(), 0);
  EXPECT_EQ(rnn.params(0).w_hh, loaded);
  expect_error<InvalidArgument>([&] { rnn.backward_io(b, {}); }, {"forward_io()"});
  rnn.forward_io(f, T, B);  // and it runs again on the same weights
  const Md again = out;
  rnn.forward_io(f, T, B);
  EXPECT_EQ(out, again);
  EXPECT_EQ(rnn.backward_io(b, {BackwardMethod::bp}), "bp");
}

// Records past 64 columns are kept while the process's kept records stay within the budget
// (the GRU's record and buffers below: 2808 + 2488 doubles, 42 KB), never after a scan, and the
// budget comes back when a stack frees its record or is destroyed.
TEST(RecurrentIo, ReleaseRecordKeepsSmallRecordsWithinTheProcessBudget) {
  KeptRecordBudget budget("0.06");  // 62.9 KB: one record, not two
  GruIo a(40, 5);
  auto b = std::make_unique<GruIo>(40, 7);
  a.rnn.forward_io(a.f, a.T, a.B);
  EXPECT_EQ(a.rnn.backward_io(a.b, {BackwardMethod::bp}), "bp");
  const Md first = a.gw;
  a.rnn.release_record();
  EXPECT_EQ(a.rnn.steps(), a.T);  // kept
  a.gw.setZero();
  EXPECT_EQ(a.rnn.backward_io(a.b, {BackwardMethod::bp}), "bp");  // a kept record serves a second backward
  EXPECT_EQ(a.gw, first);
  b->rnn.forward_io(b->f, b->T, b->B);
  b->rnn.release_record();
  EXPECT_EQ(b->rnn.steps(), 0);  // over the budget: freed
  b->rnn.forward_io(b->f, b->T, b->B);
  EXPECT_EQ(b->rnn.backward_io(b->b, {BackwardMethod::bp}), "bp");
  // a's scan: its half holds Jacobians and is freed, which returns a's part of the budget to b.
  a.rnn.forward_io(a.f, a.T, a.B);
  EXPECT_EQ(a.rnn.backward_io(a.b, {BackwardMethod::blelloch}), "blelloch");
  a.rnn.release_record();
  EXPECT_EQ(a.rnn.steps(), 0);
  b->rnn.release_record();
  EXPECT_EQ(b->rnn.steps(), b->T);  // kept now
  a.rnn.forward_io(a.f, a.T, a.B);
  a.rnn.release_record();
  EXPECT_EQ(a.rnn.steps(), 0);  // b holds the budget
  b.reset();                    // until it goes
  a.rnn.forward_io(a.f, a.T, a.B);
  a.rnn.release_record();
  EXPECT_EQ(a.rnn.steps(), a.T);
  KeptRecordBudget bad("lots");
  expect_error<InvalidArgument>([&] { a.rnn.release_record(); }, {"BPPSA_KEPT_RECORD_MB", "lots", "MiB"});
}

// The CPU half reads the caller's weights in place at every call (no copy, no cache): weights
// changed in the caller's memory between two forward_io calls, at the same addresses, give the
// host API's results for the new weights, forward and backward; a backward_io on other weights, or
// backward() after forward_io, is refused.
TEST_P(RecurrentIo, ReadsTheCallersWeightsAtEveryCall) {
  const RecurrentConfig c = GetParam().config;
  const Index T = 4, B = 2, I = c.input, H = c.hidden, P = output_size(c), G = gate_count(c.cell) * H;
  const std::vector<Index> lengths = GetParam().lengths ? std::vector<Index>{4, 3} : std::vector<Index>{};
  Rng rng(21);
  Recurrent<double> host(c);
  host.reset_parameters(8);
  RecurrentLayerParams<double> w = host.params(0);  // the caller's weights: these buffers throughout
  const Md x = random_matrix(I, T * B, rng), gout = random_matrix(P, T * B, rng);
  Recurrent<double> io_rnn(c);
  Md out(P, T * B), hn(P, B), cn(H, B), gx(I, T * B);
  RecurrentLayerParams<double> gw{RowMatrix<double>(G, I), RowMatrix<double>(G, P), Vector<double>(G),
                                  Vector<double>(G), RowMatrix<double>(P, H)};
  const LayerForwardIo<double> f = forward_io_of(c, w, x, nullptr, nullptr, out, hn, cn);
  LayerBackwardIo<double> b = backward_io_of(c, f, gout, gw, gx);
  auto& [gw_ih, gw_hh, gb_ih, gb_hh, gw_hr] = gw;
  const double tol = 1e-12;
  for (int call = 0; call < 3; ++call) {
    if (call > 0) {  // changed in place, as an optimizer step (or p.data.add_) does
      w.w_hh *= 0.5;
      w.w_ih.array() += 0.25;
      w.b_ih.array() -= 0.1;
      if (c.proj > 0) w.w_hr *= -1.0;
    }
    host.params(0) = w;
    host.forward(x, T, B, lengths);
    host.backward(gout, true, {BackwardMethod::bp});
    io_rnn.forward_io(f, T, B, lengths);
    EXPECT_LE((out - host.output()).cwiseAbs().maxCoeff(), tol) << "call " << call;
    EXPECT_LE((hn - host.final_state(0).topRows(P)).cwiseAbs().maxCoeff(), tol) << "call " << call;
    EXPECT_EQ(io_rnn.backward_io(b, {BackwardMethod::bp}), "bp");
    const auto& g = host.grads(0);
    EXPECT_LE((gw_ih - g.w_ih).cwiseAbs().maxCoeff(), tol) << "call " << call;
    EXPECT_LE((gw_hh - g.w_hh).cwiseAbs().maxCoeff(), tol) << "call " << call;
    EXPECT_LE((gb_ih - g.b_ih).cwiseAbs().maxCoeff(), tol) << "call " << call;
    EXPECT_LE((gb_hh - g.b_hh).cwiseAbs().maxCoeff(), tol) << "call " << call;
    if (c.proj > 0) {
      EXPECT_LE((gw_hr - g.w_hr).cwiseAbs().maxCoeff(), tol) << "call " << call;
    }
    EXPECT_LE((gx - host.input_grad()).cwiseAbs().maxCoeff(), tol) << "call " << call;
  }
  // Gradients not asked for are not written.
  gw_hh.setConstant(7);
  b.grad_w_hh = nullptr;
  io_rnn.forward_io(f, T, B, lengths);
  io_rnn.backward_io(b, {BackwardMethod::blelloch});
  EXPECT_TRUE((gw_hh.array() == 7).all());
  EXPECT_LE((gw_ih - host.grads(0).w_ih).cwiseAbs().maxCoeff(), 1e-10);
  // The backward reads the forward's weights: other addresses are refused, as is backward().
  const RowMatrix<double> moved = w.w_hh;
  b.w_hh = moved.data();
  expect_error<InvalidArgument>([&] { io_rnn.backward_io(b, {}); }, {"weights", "forward_io read"});
  b.w_hh = f.w_hh;
  expect_error<InvalidArgument>([&] { io_rnn.backward(gout, true, {}); }, {"forward_io", "backward_io"});
  io_rnn.forward(x, T, B, lengths);  // the host API's forward: no backward_io for it
  expect_error<InvalidArgument>([&] { io_rnn.backward_io(b, {}); }, {"forward_io()"});
}

// An inference call (LayerForwardIo::record false) runs the steps in chunks; it must give the
// recorded forward's bits (its input projection in the same column blocks) whatever the batch, the
// threads and the cell, and keep no record (backward_io and final_state refused, steps() 0). Input
// 300: a projection deeper than one of blocked_product's depth chunks; B 1 over 1025 steps: a last
// chunk of one column (which joins the chunk before).
TEST(RecurrentIo, AnInferenceCallGivesTheRecordedBitsAndKeepsNoRecord) {
  using Mf = Matrix<float>;
  const Index I = 300, T = 1100;
  for (const RecurrentConfig& c : {RecurrentConfig{CellType::rnn, I, 24, 1}, RecurrentConfig{CellType::gru, I, 24, 1},
                                   RecurrentConfig{CellType::lstm, I, 24, 1},
                                   RecurrentConfig{CellType::lstm, I, 24, 1, Nonlinearity::tanh, Device::cpu, 7}}) {
    for (const Index B : {1, 3, 5, 16, 64}) {
      for (const int threads : {1, 2}) {
        SCOPED_TRACE(std::string(to_string(c.cell)) + " proj " + std::to_string(c.proj) + " B " + std::to_string(B) +
                     " threads " + std::to_string(threads));
        const Index H = c.hidden, P = output_size(c), G = gate_count(c.cell) * H;
        const bool lstm = c.cell == CellType::lstm;
        const Index steps = B == 64 ? 45 : B == 1 ? 1025 : T;  // B 64: a few of its chunks is enough
        Rng rng(static_cast<std::uint64_t>(31 + B));
        const Mf x = random_matrix(I, steps * B, rng).cast<float>(), w_ih = random_matrix(G, I, rng).cast<float>(),
                 w_hh = (0.3 * random_matrix(G, P, rng)).cast<float>(), b = random_matrix(G, 2, rng).cast<float>(),
                 w_hr = random_matrix(P, H, rng).cast<float>(), h0 = random_matrix(P, B, rng).cast<float>(),
                 c0 = random_matrix(H, B, rng).cast<float>();
        // Row-major weights are the transposes of these column-major buffers' shapes: give them as such.
        const Mf w_ih_r = w_ih.transpose(), w_hh_r = w_hh.transpose(), w_hr_r = w_hr.transpose();
        Mf out[2] = {Mf(P, steps * B), Mf(P, steps * B)}, hn[2] = {Mf(P, B), Mf(P, B)}, cn[2] = {Mf(H, B), Mf(H, B)};
        Recurrent<float> rnn(c);
        ForwardOptions fo;
        fo.threads = threads;
        rnn.set_forward_options(fo);
        for (const int recorded : {1, 0}) {
          LayerForwardIo<float> f;
          f.x = x.data();
          f.h0 = h0.data();
          f.c0 = lstm ? c0.data() : nullptr;
          f.w_ih = w_ih_r.data();
          f.w_hh = w_hh_r.data();
          f.b_ih = b.col(0).data();
          f.b_hh = b.col(1).data();
          f.w_hr = c.proj > 0 ? w_hr_r.data() : nullptr;
          f.out = out[recorded].data();
          f.h_n = hn[recorded].data();
          f.c_n = lstm ? cn[recorded].data() : nullptr;
          f.record = recorded == 1;
          rnn.forward_io(f, steps, B);
          EXPECT_EQ(rnn.steps(), recorded == 1 ? steps : 0);
        }
        EXPECT_TRUE(out[0] == out[1]) << "max difference " << (out[0] - out[1]).cwiseAbs().maxCoeff();
        EXPECT_TRUE(hn[0] == hn[1]);
        if (lstm) {
          EXPECT_TRUE(cn[0] == cn[1]);
        }
        EXPECT_TRUE(out[0].allFinite() && out[0].cwiseAbs().maxCoeff() > 0.1f);
        LayerBackwardIo<float> bw;
        bw.w_ih = w_ih_r.data();
        bw.w_hh = w_hh_r.data();
        bw.b_ih = b.col(0).data();
        bw.b_hh = b.col(1).data();
        bw.w_hr = c.proj > 0 ? w_hr_r.data() : nullptr;
        expect_error<InvalidArgument>([&] { rnn.backward_io(bw, {}); }, {"forward_io()", "record"});
        expect_error<InvalidArgument>([&] { rnn.final_state(0); }, {"no forward()"});
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cells, RecurrentIo,
    ::testing::Values(IoCase{{CellType::rnn, 3, 4, 1}, false}, IoCase{{CellType::gru, 3, 4, 1}, true},
                      IoCase{{CellType::lstm, 3, 4, 1}, true},
                      IoCase{{CellType::lstm, 3, 4, 1, Nonlinearity::tanh, Device::cpu, 2}, false}));

TEST(RecurrentErrors, IoNeedsOneLayerAndItsTensors) {
  Recurrent<double> rnn({CellType::gru, 3, 4, 2});
  LayerForwardIo<double> f;
  expect_error<InvalidArgument>([&] { rnn.forward_io(f, 2, 1); }, {"one-layer", "2 layers"});
  Recurrent<double> one({CellType::lstm, 3, 4, 1});
  const Md x = Md::Zero(3, 2), w_ih = Md::Zero(16, 3), w_hh = Md::Zero(16, 4);
  Md out(4, 2), hn(4, 1);
  f.x = x.data();
  f.w_ih = w_ih.data();
  f.w_hh = w_hh.data();
  f.out = out.data();
  f.h_n = hn.data();  // no c_n for an LSTM
  expect_error<InvalidArgument>([&] { one.forward_io(f, 2, 1); }, {"c_n"});
}

// The Newton forward (ForwardMethod::newton, docs/method.md §9) against the sequential forward
// of the same stack, which the parity tests hold to PyTorch: every layer's states, the outputs
// and every gradient of a backward after it, for every cell, two layers, with and without lengths.
struct NewtonRun {
  Md out, final0, final1, gx, g00;
  std::vector<RecurrentLayerParams<double>> grads;
  ForwardReport report;
};

NewtonRun run_stack(const RecurrentConfig& c, const std::vector<RecurrentLayerParams<double>>& params, const Md& x,
                    Index T, Index B, const std::vector<Index>& lengths, const Md& gout, const ForwardOptions& fo) {
  Recurrent<double> r(c);
  for (Index l = 0; l < c.layers; ++l) r.params(l) = params[static_cast<std::size_t>(l)];
  r.set_forward_options(fo);
  r.forward(x, T, B, lengths);
  NewtonRun out;
  out.out = r.output();
  out.final0 = r.final_state(0);
  out.final1 = r.final_state(c.layers - 1);
  out.report = r.forward_report();
  r.backward(gout, true, {BackwardMethod::blelloch});
  for (Index l = 0; l < c.layers; ++l) out.grads.push_back(r.grads(l));
  out.gx = r.input_grad();
  out.g00 = r.state0_grad(0);
  return out;
}

double worst_rel(const Md& a, const Md& b) {
  return (a - b).cwiseAbs().maxCoeff() / std::max(1.0, b.cwiseAbs().maxCoeff());
}

class NewtonForward : public ::testing::TestWithParam<std::tuple<CellVariant, bool>> {};

TEST_P(NewtonForward, EqualsTheSequentialForwardAndItsGradients) {
  const auto [v, with_lengths] = GetParam();
  const Index T = 40, B = 3, I = 3;
  const RecurrentConfig c = v.config(I, 4, 2);
  Rng rng(21 + v.id());
  Recurrent<double> init(c);
  init.reset_parameters(5 + v.id());
  std::vector<RecurrentLayerParams<double>> params;
  for (Index l = 0; l < c.layers; ++l) params.push_back(init.params(l));
  const Md x = random_matrix(I, T * B, rng), gout = random_matrix(output_size(c), T * B, rng);
  const std::vector<Index> lengths = with_lengths ? std::vector<Index>{40, 31, 7} : std::vector<Index>{};
  const NewtonRun seq = run_stack(c, params, x, T, B, lengths, gout, {});
  ForwardOptions fo;
  fo.method = ForwardMethod::newton;
  const NewtonRun nt = run_stack(c, params, x, T, B, lengths, gout, fo);

  EXPECT_EQ(nt.report.method, ForwardMethod::newton);
  ASSERT_EQ(nt.report.iterations.size(), 2u);
  EXPECT_EQ(nt.report.fallbacks(), 0) << "residuals " << nt.report.residual[0] << ", " << nt.report.residual[1];
  for (std::size_t l = 0; l < 2; ++l) {
    EXPECT_GE(nt.report.iterations[l], 2);
    EXPECT_LT(nt.report.iterations[l], fo.max_iterations);
    EXPECT_LE(nt.report.residual[l], 16 * std::numeric_limits<double>::epsilon());
  }
  EXPECT_EQ(seq.report.iterations, (std::vector<int>{0, 0}));
  const double tol = 1e-10;
  EXPECT_LE(worst_rel(nt.out, seq.out), tol);
  EXPECT_LE(worst_rel(nt.final0, seq.final0), tol);
  EXPECT_LE(worst_rel(nt.final1, seq.final1), tol);
  EXPECT_LE(worst_rel(nt.gx, seq.gx), tol);
  EXPECT_LE(worst_rel(nt.g00, seq.g00), tol);
  for (std::size_t l = 0; l < 2; ++l) {
    EXPECT_LE(worst_rel(nt.grads[l].w_ih, seq.grads[l].w_ih), tol) << "layer " << l;
    EXPECT_LE(worst_rel(nt.grads[l].w_hh, seq.grads[l].w_hh), tol) << "layer " << l;
    EXPECT_LE(worst_rel(nt.grads[l].b_ih, seq.grads[l].b_ih), tol) << "layer " << l;
    EXPECT_LE(worst_rel(nt.grads[l].b_hh, seq.grads[l].b_hh), tol) << "layer " << l;
    if (c.proj > 0) {
      EXPECT_LE(worst_rel(nt.grads[l].w_hr, seq.grads[l].w_hr), tol) << "layer " << l;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cells, NewtonForward, ::testing::Combine(::testing::ValuesIn(kVariants), ::testing::Bool()));

TEST(NewtonForward, FloatMatchesDoubleAsTheSequentialForwardDoes) {
  const Index T = 200, B = 2, I = 3;
  const RecurrentConfig c{CellType::gru, I, 8, 1};
  Recurrent<double> d(c);
  d.reset_parameters(9);
  Recurrent<float> sf(c), nf(c);
  for (Recurrent<float>* f : {&sf, &nf}) {
    f->params(0).w_ih = d.params(0).w_ih.cast<float>();
    f->params(0).w_hh = d.params(0).w_hh.cast<float>();
    f->params(0).b_ih = d.params(0).b_ih.cast<float>();
    f->params(0).b_hh = d.params(0).b_hh.cast<float>();
  }
  Rng rng(4);
  const Md x = random_matrix(I, T * B, rng);
  const Eigen::MatrixXf xf = x.cast<float>();
  d.forward(xf.cast<double>(), T, B);
  sf.forward(xf, T, B);
  ForwardOptions fo;
  fo.method = ForwardMethod::newton;
  nf.set_forward_options(fo);
  nf.forward(xf, T, B);
  EXPECT_EQ(nf.forward_report().fallbacks(), 0) << nf.forward_report().residual[0];
  const Md truth = d.output();
  const double seq_err = worst_rel(Md(sf.output().cast<double>()), truth);
  const double newton_err = worst_rel(Md(nf.output().cast<double>()), truth);
  EXPECT_LE(newton_err, 1e-5);
  EXPECT_LE(seq_err, 1e-5);
}

TEST(NewtonForward, ExpandingWeightsAndNonFiniteInputsGiveTheSequentialResult) {
  const Index T = 60, B = 2, I = 2;
  const RecurrentConfig c{CellType::rnn, I, 6, 1};
  Recurrent<double> init(c);
  init.reset_parameters(3);
  std::vector<RecurrentLayerParams<double>> params{init.params(0)};
  params[0].w_hh *= 6.0;  // spectral radius well above 1: chaotic tanh dynamics
  Rng rng(8);
  Md x = random_matrix(I, T * B, rng);
  const Md gout = random_matrix(6, T * B, rng);
  ForwardOptions fo;
  fo.method = ForwardMethod::newton;
  const NewtonRun seq = run_stack(c, params, x, T, B, {}, gout, {});
  const NewtonRun nt = run_stack(c, params, x, T, B, {}, gout, fo);
  // Converged or fell back, the result is the trajectory.
  EXPECT_LE(worst_rel(nt.out, seq.out), 1e-9) << "fell back: " << nt.report.fell_back[0];
  // Each iteration certifies at least one more step (the certified ones are frozen, the first
  // uncertified one takes its exact value): T + 1 iterations always converge.
  fo.max_iterations = static_cast<int>(T) + 1;
  const NewtonRun all = run_stack(c, params, x, T, B, {}, gout, fo);
  EXPECT_EQ(all.report.fallbacks(), 0);
  EXPECT_LE(all.report.iterations[0], T + 1);
  EXPECT_LE(worst_rel(all.out, seq.out), 1e-9);
  // Stopped early, the sequential forward runs from the first uncertified step, which is past
  // the steps the iterations certified (at least one each); the result is the trajectory.
  fo.max_iterations = 3;
  const NewtonRun three = run_stack(c, params, x, T, B, {}, gout, fo);
  if (three.report.fell_back[0]) {
    EXPECT_GE(three.report.fallback_step[0], 3);
  }
  EXPECT_LE(worst_rel(three.out, seq.out), 1e-9);
  EXPECT_LE(worst_rel(three.gx, seq.gx), 1e-9);

  // With one iteration allowed nothing converges: the sequential forward, bit for bit.
  fo.max_iterations = 1;
  const NewtonRun one = run_stack(c, params, x, T, B, {}, gout, fo);
  EXPECT_TRUE(one.report.fell_back[0]);
  EXPECT_EQ(one.report.fallback_step[0], 1);
  EXPECT_EQ(one.report.iterations[0], 1);
  EXPECT_EQ(one.out, seq.out);

  // A NaN input: the residual is not finite, the layer falls back and gives what the sequential
  // forward gives (NaN from that step on in that sample), as torch.nn does.
  Recurrent<double> a(c), b(c);
  a.params(0) = init.params(0);
  b.params(0) = init.params(0);
  x(0, 10 * B + 1) = std::numeric_limits<double>::quiet_NaN();
  fo.max_iterations = 30;
  b.set_forward_options(fo);
  a.forward(x, T, B);
  b.forward(x, T, B);
  EXPECT_TRUE(b.forward_report().fell_back[0]);
  EXPECT_TRUE(std::isnan(b.forward_report().residual[0]));
  const Md oa = a.output(), ob = b.output();
  EXPECT_TRUE(oa.col(10 * B + 1).hasNaN());
  EXPECT_TRUE((oa.array() == ob.array() || (oa.array().isNaN() && ob.array().isNaN())).all());
}

TEST(RecurrentErrors, NewtonForwardRefusesWhatDoesNotFitBeforeAllocatingIt) {
  // LSTM H 1024 (S 2048), 100 steps × batch 64: the dense elements alone are 2.7 TB in double.
  Recurrent<double> r({CellType::lstm, 2, 1024, 1});
  ForwardOptions o;
  o.method = ForwardMethod::newton;
  r.set_forward_options(o);
  expect_error<ResourceError>([&] { r.forward(Md::Zero(2, 100 * 64), 100, 64); },
                              {"Newton forward", "linear recurrence elements", "--forward sequential"});
}

TEST(RecurrentErrors, ForwardOptions) {
  Recurrent<double> r({CellType::gru, 3, 4, 1});
  ForwardOptions o;
  o.max_iterations = 0;
  expect_error<InvalidArgument>([&] { r.set_forward_options(o); }, {"max_iterations", "≥ 1"});
  o = ForwardOptions{};
  o.tolerance = -1;
  expect_error<InvalidArgument>([&] { r.set_forward_options(o); }, {"tolerance"});
  o = ForwardOptions{};
  o.algorithm = Algorithm::fused;
  expect_error<InvalidArgument>([&] { r.set_forward_options(o); }, {"fused"});
  EXPECT_EQ(parse_forward("newton"), ForwardMethod::newton);
  EXPECT_STREQ(to_string(ForwardMethod::sequential), "sequential");
  expect_error<InvalidArgument>([] { parse_forward("deer"); }, {"deer", "sequential, newton or auto"});
  EXPECT_EQ(parse_forward("auto"), ForwardMethod::automatic);
  EXPECT_STREQ(to_string(ForwardMethod::automatic), "auto");
}

}  // namespace
