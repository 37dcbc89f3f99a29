// Recurrent stacks split over time (model parallelism over steps): the final-state gradient,
// the layer-by-layer backward and each layer's affine transfer g_0 = M · g_in + v, against a
// whole-sequence run, direct recomputation and finite differences of the forward map.
#include <array>
#include <cstdint>
#include <string>
#include <tuple>

#include "bppsa/nn/recurrent.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"

namespace {

using testutil::expect_error;

using namespace bppsa;
using oracle::Md;
using oracle::Rng;

constexpr std::array<CellType, 3> kCells = {CellType::rnn, CellType::gru, CellType::lstm};
constexpr std::array<BackwardMethod, 4> kMethods = {BackwardMethod::bp, BackwardMethod::linear,
                                                    BackwardMethod::blelloch, BackwardMethod::hybrid};
constexpr Index kI = 3, kH = 4, kB = 3;

Md random_matrix(Index rows, Index cols, Rng& rng, double bound = 1.0) {
  std::uniform_real_distribution<double> u(-bound, bound);
  Md m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

/// max|got − want| ≤ rtol · max(max|want|, 1e-3): relative to the tensor's scale (the floor
/// keeps an all-but-zero reference from demanding exactness beyond rounding).
::testing::AssertionResult close(const std::string& what, const Md& got, const Md& want, double rtol) {
  if (got.rows() != want.rows() || got.cols() != want.cols())
    return ::testing::AssertionFailure() << what << ": shape " << got.rows() << "×" << got.cols() << ", expected "
                                         << want.rows() << "×" << want.cols();
  const double scale = std::max(want.cwiseAbs().maxCoeff(), 1e-3);
  const double err = (got - want).cwiseAbs().maxCoeff();
  if (err <= rtol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": max |diff| " << err << " > " << rtol << " × " << scale
                                       << "\ngot:\n"
                                       << got << "\nexpected:\n"
                                       << want;
}

/// A model with random parameters, scaled so that the gates leave their near-linear range.
Recurrent<double> make_model(CellType cell, Index layers, std::uint64_t seed) {
  Recurrent<double> rnn({cell, kI, kH, layers});
  rnn.reset_parameters(seed);
  for (Index l = 0; l < layers; ++l) {
    rnn.params(l).w_ih *= 1.5;
    rnn.params(l).w_hh *= 1.5;
  }
  return rnn;
}

/// A second model with the same parameters.
Recurrent<double> same_params(const Recurrent<double>& rnn) {
  Recurrent<double> out(rnn.config());
  for (Index l = 0; l < rnn.layers(); ++l) out.params(l) = rnn.params(l);
  return out;
}

/// Sample b of g_0 = M · g_in + v, by plain loops on the densified M (oracle.hpp).
Md affine(const Jacobian<double>& m, const Md& v, const Md& g_in) {
  Md out = v;
  for (Index b = 0; b < v.cols(); ++b) out.col(b) += oracle::matmul(oracle::densify(m, b), g_in.col(b));
  return out;
}

// ---------------------------------------------------------------------------------------
// 1. Splitting a sequence over time is exact: stage A (steps 1..4) and stage B (5..7), B
// starting from A's final states and A receiving B's initial-state gradients as final-state
// gradients, give the whole run's parameter gradients (summed) and input gradients (blocks).

class TimeSplit : public ::testing::TestWithParam<std::tuple<CellType, Index, bool>> {};
INSTANTIATE_TEST_SUITE_P(Cells, TimeSplit,
                         ::testing::Combine(::testing::ValuesIn(kCells), ::testing::Values(1, 2), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_layers" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_every" : "_last");
                         });

TEST_P(TimeSplit, MatchesWholeSequence) {
  const auto [cell, layers, every] = GetParam();
  const Index T = 7, TA = 4, TB = T - TA, S = state_size(cell, kH);
  Rng rng(500 + static_cast<std::uint64_t>(cell) * 10 + static_cast<std::uint64_t>(layers) * 2 + (every ? 1 : 0));
  Recurrent<double> full = make_model(cell, layers, rng());
  Recurrent<double> a = same_params(full), b = same_params(full);
  const Md x = random_matrix(kI, T * kB, rng);
  Md grad_out = random_matrix(kH, T * kB, rng);
  if (!every) grad_out.leftCols((T - 1) * kB).setZero();  // many-to-one: only the last step's block
  std::vector<Md> s0;
  for (Index l = 0; l < layers; ++l) {
    s0.push_back(random_matrix(S, kB, rng));
    full.set_initial_state(l, s0.back());
    a.set_initial_state(l, s0.back());
  }
  full.forward(x, T, kB);
  a.forward(x.leftCols(TA * kB), TA, kB);
  for (Index l = 0; l < layers; ++l) b.set_initial_state(l, a.state(l, TA));
  b.forward(x.rightCols(TB * kB), TB, kB);
  for (Index l = 0; l < layers; ++l)
    for (Index t = 0; t <= TB; ++t)
      ASSERT_TRUE(close("state(" + std::to_string(l) + ", " + std::to_string(TA + t) + ")", b.state(l, t),
                        full.state(l, TA + t), 1e-12));

  for (BackwardMethod m : kMethods) {
    SCOPED_TRACE(to_string(m));
    const BackwardOptions opts{m, 2};
    full.backward(grad_out, every, opts);
    b.backward(grad_out.rightCols(TB * kB), every, opts);
    // A's head gradient is zero when !every: everything it gets arrives through s_T.
    for (Index l = 0; l < layers; ++l) a.set_final_state_grad(l, b.state0_grad(l));
    a.backward(grad_out.leftCols(TA * kB), every, opts);

    for (Index l = 0; l < layers; ++l) {
      const std::string n = "layer " + std::to_string(l) + " ";
      const auto &ga = a.grads(l), &gb = b.grads(l), &gf = full.grads(l);
      EXPECT_TRUE(close(n + "w_ih", ga.w_ih + gb.w_ih, gf.w_ih, 1e-10));
      EXPECT_TRUE(close(n + "w_hh", ga.w_hh + gb.w_hh, gf.w_hh, 1e-10));
      EXPECT_TRUE(close(n + "b_ih", ga.b_ih + gb.b_ih, gf.b_ih, 1e-10));
      EXPECT_TRUE(close(n + "b_hh", ga.b_hh + gb.b_hh, gf.b_hh, 1e-10));
      EXPECT_TRUE(close(n + "state0_grad", a.state0_grad(l), full.state0_grad(l), 1e-10));
    }
    EXPECT_TRUE(close("input_grad A", a.input_grad(), full.input_grad().leftCols(TA * kB), 1e-10));
    EXPECT_TRUE(close("input_grad B", b.input_grad(), full.input_grad().rightCols(TB * kB), 1e-10));
  }

  // The final-state gradient lives until cleared: without it A's gradients change (they are
  // all zero when !every).
  for (Index l = 0; l < layers; ++l) a.set_final_state_grad(l, Md());
  a.backward(grad_out.leftCols(TA * kB), every, {BackwardMethod::bp});
  if (!every)
    EXPECT_EQ(a.input_grad().cwiseAbs().maxCoeff(), 0.0);
  else
    EXPECT_FALSE(close("input_grad A without final grads", a.input_grad(), full.input_grad().leftCols(TA * kB), 1e-6));
}

// ---------------------------------------------------------------------------------------
// 2. layer_transfer: g_0 = M · g_in + v for any final-state gradient g_in (by re-running the
// backward with set_final_state_grad), M^T = ∂s_T/∂s_0 by central differences of the forward,
// and a backward_layer after it is bit-identical to one without it.

class LayerTransfer : public ::testing::TestWithParam<std::tuple<CellType, Index, bool>> {};
INSTANTIATE_TEST_SUITE_P(Cells, LayerTransfer,
                         ::testing::Combine(::testing::ValuesIn(kCells), ::testing::Values(1, 2), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + "_layers" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "_every" : "_last");
                         });

TEST_P(LayerTransfer, AffineMapMatchesBackwardAndFiniteDifferences) {
  const auto [cell, layers, every] = GetParam();
  const Index T = 5, S = state_size(cell, kH);
  Rng rng(900 + static_cast<std::uint64_t>(cell) * 10 + static_cast<std::uint64_t>(layers) * 2 + (every ? 1 : 0));
  Recurrent<double> rnn = make_model(cell, layers, rng());
  const Md x = random_matrix(kI, T * kB, rng);
  Md grad_out = random_matrix(kH, T * kB, rng);
  if (!every) grad_out.leftCols((T - 1) * kB).setZero();
  std::vector<Md> s0, g_fixed;
  for (Index l = 0; l < layers; ++l) {
    s0.push_back(random_matrix(S, kB, rng));
    rnn.set_initial_state(l, s0.back());
    g_fixed.push_back(random_matrix(S, kB, rng));  // the final-state gradients held fixed
  }
  rnn.forward(x, T, kB);

  for (BackwardMethod m : kMethods) {
    SCOPED_TRACE(to_string(m));
    const BackwardOptions opts{m, 2};
    for (Index l = layers - 1; l >= 0; --l) {
      SCOPED_TRACE("layer " + std::to_string(l));
      // Layers above l keep their fixed final-state gradients (they shape l's injections);
      // layers at and below l get them too, except that l's is what varies below.
      for (Index k = 0; k < layers; ++k) rnn.set_final_state_grad(k, g_fixed[static_cast<std::size_t>(k)]);

      // Reference: the plain backward.
      rnn.backward(grad_out, every, opts);
      std::vector<RecurrentLayerParams<double>> ref_grads;
      std::vector<Md> ref_g0;
      for (Index k = 0; k < layers; ++k) {
        ref_grads.push_back(rnn.grads(k));
        ref_g0.push_back(rnn.state0_grad(k));
      }
      const Md ref_gx = rnn.input_grad();

      // Layer by layer, with layer_transfer(l) just before backward_layer(l).
      rnn.backward_begin(grad_out, every);
      for (Index k = layers - 1; k > l; --k) rnn.backward_layer(k, opts);
      if (l > 0) {
        expect_error<InvalidArgument>([&] { rnn.layer_transfer(l - 1, opts); }, {"out of order"});
      }
      auto [mt, v] = rnn.layer_transfer(l, opts);
      ASSERT_EQ(mt.rows(), S);
      ASSERT_EQ(mt.cols(), S);
      ASSERT_EQ(v.rows(), S);
      ASSERT_EQ(v.cols(), kB);
      EXPECT_EQ(rnn.chain(l).size(), T);
      for (Index k = l; k >= 0; --k) rnn.backward_layer(k, opts);
      for (Index k = 0; k < layers; ++k) {
        EXPECT_EQ(rnn.grads(k).w_ih, ref_grads[static_cast<std::size_t>(k)].w_ih) << "layer " << k;
        EXPECT_EQ(rnn.grads(k).w_hh, ref_grads[static_cast<std::size_t>(k)].w_hh) << "layer " << k;
        EXPECT_EQ(rnn.grads(k).b_ih, ref_grads[static_cast<std::size_t>(k)].b_ih) << "layer " << k;
        EXPECT_EQ(rnn.grads(k).b_hh, ref_grads[static_cast<std::size_t>(k)].b_hh) << "layer " << k;
        EXPECT_EQ(rnn.state0_grad(k), ref_g0[static_cast<std::size_t>(k)]) << "layer " << k;
      }
      EXPECT_EQ(rnn.input_grad(), ref_gx);
      // The g_in held fixed is itself covered by the affine map.
      EXPECT_TRUE(close("g_0 with the fixed g_in", rnn.state0_grad(l),
                        affine(mt, v, g_fixed[static_cast<std::size_t>(l)]), 1e-10));

      // Vary only layer l's final-state gradient: none, then random ones.
      for (int trial = 0; trial < 3; ++trial) {
        const Md g_in = trial == 0 ? Md::Zero(S, kB) : random_matrix(S, kB, rng);
        rnn.set_final_state_grad(l, trial == 0 ? Md() : g_in);
        rnn.backward(grad_out, every, opts);
        EXPECT_TRUE(close("g_0, trial " + std::to_string(trial), rnn.state0_grad(l), affine(mt, v, g_in), 1e-10));
      }

      // M^T = ∂s_T/∂s_0 (sample b: M_b(i, j) = ∂s_T[j, b]/∂s_0[i, b]), by central differences
      // of the forward of a model with the same parameters (only for one method: M is the same).
      if (m != BackwardMethod::bp) continue;
      Recurrent<double> probe = same_params(rnn);
      for (Index k = 0; k < layers; ++k) probe.set_initial_state(k, s0[static_cast<std::size_t>(k)]);
      const double h = 1e-6;
      Md s = s0[static_cast<std::size_t>(l)];
      const auto final_state = [&] {
        probe.set_initial_state(l, s);
        probe.forward(x, T, kB);
        return probe.state(l, T);
      };
      for (Index b = 0; b < kB; ++b) {
        Md fd(S, S);
        for (Index i = 0; i < S; ++i) {
          const double v0 = s(i, b);
          s(i, b) = v0 + h;
          const Md up = final_state();
          s(i, b) = v0 - h;
          const Md dn = final_state();
          s(i, b) = v0;
          fd.row(i) = ((up.col(b) - dn.col(b)) / (2 * h)).transpose();
        }
        EXPECT_TRUE(close("M sample " + std::to_string(b), oracle::densify(mt, b), fd, 1e-6));
      }
    }
  }
}

// T = 1: M is J_1^T itself.
TEST(LayerTransfer, OneStepIsTheJacobian) {
  for (CellType cell : kCells) {
    SCOPED_TRACE(to_string(cell));
    Rng rng(77 + static_cast<std::uint64_t>(cell));
    Recurrent<double> rnn = make_model(cell, 1, rng());
    rnn.forward(random_matrix(kI, kB, rng), 1, kB);
    rnn.backward_begin(random_matrix(kH, kB, rng), true);
    const auto [mt, v] = rnn.layer_transfer(0, {BackwardMethod::linear});
    EXPECT_EQ(mt.kind(), rnn.chain(0).jacobian(1).kind());
    for (Index b = 0; b < kB; ++b) EXPECT_EQ(oracle::densify(mt, b), oracle::densify(rnn.chain(0).jacobian(1), b));
    rnn.backward_layer(0, {BackwardMethod::linear});
    EXPECT_TRUE(close("v", v, rnn.state0_grad(0), 1e-12));
  }
}

// ---------------------------------------------------------------------------------------
// 3. Errors.

TEST(StageErrors, FinalStateGradShape) {
  Recurrent<double> rnn({CellType::lstm, kI, kH, 2});
  rnn.reset_parameters(4);
  Rng rng(5);
  expect_error<InvalidArgument>([&] { rnn.set_final_state_grad(2, Md::Zero(8, kB)); }, {"layer 2"});
  expect_error<InvalidArgument>([&] { rnn.set_final_state_grad(-1, Md::Zero(8, kB)); }, {"layer -1"});
  // LSTM's state is [h; c]: 2H rows.
  expect_error<ShapeError>([&] { rnn.set_final_state_grad(1, Md::Zero(4, kB)); }, {"layer 1", "4×3", "8 rows"});
  // The columns are the batch of the forward it is used with: checked by the backward.
  rnn.forward(random_matrix(kI, 2 * kB, rng), 2, kB);
  rnn.set_final_state_grad(0, Md::Zero(8, kB + 1));
  for (BackwardMethod m : kMethods)
    expect_error<ShapeError>([&] { rnn.backward(Md::Zero(kH, 2 * kB), true, {m}); },
                             {"layer 0", "8×4", "expected 8×3"});
  expect_error<ShapeError>([&] { rnn.backward_begin(Md::Zero(kH, 2 * kB), true); }, {"expected 8×3"});
  rnn.set_final_state_grad(0, Md());  // cleared
  EXPECT_NO_THROW(rnn.backward(Md::Zero(kH, 2 * kB), true, {}));
  // Set after backward_begin: backward_layer checks it.
  rnn.backward_begin(Md::Zero(kH, 2 * kB), true);
  rnn.backward_layer(1, {});
  rnn.set_final_state_grad(0, Md::Zero(8, kB + 1));
  expect_error<ShapeError>([&] { rnn.backward_layer(0, {}); }, {"expected 8×3"});
}

TEST(StageErrors, LayerOrder) {
  Recurrent<double> rnn({CellType::gru, kI, kH, 2});
  rnn.reset_parameters(6);
  Rng rng(7);
  const Md grad_out = random_matrix(kH, 3 * kB, rng);
  rnn.forward(random_matrix(kI, 3 * kB, rng), 3, kB);
  const BackwardOptions opts{BackwardMethod::blelloch};
  expect_error<InvalidArgument>([&] { rnn.backward_layer(1, opts); }, {"backward_begin()"});
  expect_error<InvalidArgument>([&] { rnn.layer_transfer(1, opts); }, {"backward_begin()"});
  rnn.backward_begin(grad_out, true);
  expect_error<InvalidArgument>([&] { rnn.backward_layer(0, opts); }, {"layer 0", "out of order", "layer 1"});
  expect_error<InvalidArgument>([&] { rnn.backward_layer(2, opts); }, {"out of order"});
  expect_error<InvalidArgument>([&] { rnn.layer_transfer(0, opts); }, {"out of order"});
  // A refused call leaves the order as it was, and layer_transfer does not advance it. A
  // method the CPU cannot run is refused before the layer starts: the layer can still run.
  expect_error<InvalidArgument>([&] { rnn.backward_layer(1, BackwardOptions{BackwardMethod::fused}); }, {"fused"});
  EXPECT_NO_THROW(rnn.layer_transfer(1, opts));
  EXPECT_NO_THROW(rnn.backward_layer(1, opts));
  expect_error<InvalidArgument>([&] { rnn.backward_layer(1, opts); }, {"out of order"});
  EXPECT_NO_THROW(rnn.layer_transfer(0, opts));
  EXPECT_NO_THROW(rnn.backward_layer(0, opts));
  // Complete: a new backward_begin is needed.
  expect_error<InvalidArgument>([&] { rnn.backward_layer(0, opts); }, {"backward_begin()"});
  expect_error<InvalidArgument>([&] { rnn.backward_layer(1, opts); }, {"backward_begin()"});
  // A forward in between starts over too.
  rnn.backward_begin(grad_out, true);
  rnn.forward(random_matrix(kI, 3 * kB, rng), 3, kB);
  expect_error<InvalidArgument>([&] { rnn.backward_layer(1, opts); }, {"backward_begin()"});
}

}  // namespace
