// GPU test helpers for whole models: a small recurrent classifier configuration, random
// batches, tensor-by-tensor comparison, and one step (forward, loss, backward, optimizer steps) of
// the same model on Device::cpu and Device::cuda compared. Used by tests/nn/cuda/ and
// tests/train/cuda/.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bppsa/nn/model.hpp"
#include "bppsa/train/optimizer.hpp"
#include "cuda/gpu_compare.hpp"
#include "tolerance.hpp"

namespace gpu_test {

using namespace bppsa;

template <class T>
constexpr double kGradTol = std::is_same_v<T, float> ? 1e-4 : 1e-10;

/// max |a − b| / max |b| over one tensor (tolerance.hpp's max_rel_error).
using testutil::max_rel_error;

struct Case {
  CellType cell = CellType::rnn;
  Nonlinearity nl = Nonlinearity::tanh;
  Index input = 3, hidden = 5, layers = 1, classes = 4;
  HeadMode head = HeadMode::last;
  LossType loss = LossType::cross_entropy;
  Index batch = 3, steps = 6;
  std::string str() const {
    return std::string(to_string(cell)) + (nl == Nonlinearity::relu ? "-relu" : "") + " I " + std::to_string(input) +
           " H " + std::to_string(hidden) + " layers " + std::to_string(layers) + " head " + to_string(head) +
           " loss " + to_string(loss) + " B " + std::to_string(batch) + " T " + std::to_string(steps);
  }
  ModelConfig config(Device d) const {
    ModelConfig c;
    c.rnn = RecurrentConfig{cell, input, hidden, layers, nl, d};
    c.classes = classes;
    c.head = head;
    c.loss = loss;
    return c;
  }
};

struct Batch {
  std::vector<float> x;
  std::vector<std::int64_t> y;
};
inline Batch random_batch(const Case& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n;
  Batch b;
  b.x.resize(static_cast<std::size_t>(c.batch * c.steps * c.input));
  for (float& v : b.x) v = n(rng);
  for (Index i = 0; i < c.batch; ++i)
    b.y.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.classes)));
  return b;
}

/// Every parameter's gradient (or value) of a and b within tol, tensor by tensor.
template <class T>
::testing::AssertionResult same_tensors(const std::vector<NamedParam<T>>& got, const std::vector<NamedParam<T>>& want,
                                        bool grads, double tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "parameter lists differ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = grads ? max_rel_error(got[i].grad, want[i].grad, want[i].size)
                           : max_rel_error(got[i].value, want[i].value, want[i].size);
    if (!(e <= tol))
      return ::testing::AssertionFailure()
             << (grads ? "gradient" : "value") << " of " << want[i].name << ": relative error " << e << " > " << tol;
  }
  return ::testing::AssertionSuccess();
}

/// The CPU model and its GPU twin with the same weights; one forward_loss + backward each.
template <class T>
void gpu_step_matches_cpu(const Case& c, BackwardMethod method, bool optimizer_steps = true) {
  SCOPED_TRACE(c.str() + " backward " + to_string(method));
  SequenceClassifier<T> cpu(c.config(Device::cpu));
  cpu.reset_parameters(4202);
  SequenceClassifier<T> gpu(c.config(Device::cuda));
  // The same seed gives the same weights on either device; a state_dict is F32 and would round
  // the double model's weights on one side only.
  gpu.reset_parameters(4202);
  ASSERT_TRUE(same_tensors(gpu.parameters(), cpu.parameters(), false, 0.0));
  const Batch b = random_batch(c, 7);
  std::vector<std::int64_t> cpu_pred, gpu_pred;
  const T want = cpu.forward_loss(b.x, c.batch, c.steps, b.y, &cpu_pred);
  const T got = gpu.forward_loss(b.x, c.batch, c.steps, b.y, &gpu_pred);
  EXPECT_LE(std::abs(static_cast<double>(got - want)), kGradTol<T> * std::abs(static_cast<double>(want))) << "loss";
  EXPECT_EQ(gpu_pred, cpu_pred);
  cpu.backward(BackwardOptions{.method = BackwardMethod::bp});
  BackwardTimes times;
  gpu.backward(BackwardOptions{.method = method}, &times);
  EXPECT_GE(times.total(), 0.0);
  EXPECT_TRUE(same_tensors(gpu.parameters(), cpu.parameters(), true, kGradTol<T>));
  if (!optimizer_steps) return;
  // One Adam step (clipping and weight decay on) and one SGD step with momentum, on both sides.
  OptimizerConfig adam;
  adam.lr = 1e-2;
  adam.clip_grad_norm = 0.1;
  adam.weight_decay = 1e-3;
  OptimizerConfig sgd;
  sgd.type = OptimizerType::sgd;
  sgd.lr = 1e-1;
  sgd.momentum = 0.9;
  for (const OptimizerConfig& oc : {adam, sgd}) {
    Optimizer<T> on_cpu(oc), on_gpu(oc);
    on_cpu.step(cpu);
    on_gpu.step(gpu);
    EXPECT_TRUE(same_tensors(gpu.parameters(), cpu.parameters(), false, kGradTol<T>)) << to_string(oc.type) << " step";
    // A second step from new gradients (SGD's momentum buffer, Adam's moments).
    cpu.forward_loss(b.x, c.batch, c.steps, b.y);
    gpu.forward_loss(b.x, c.batch, c.steps, b.y);
    cpu.backward(BackwardOptions{.method = BackwardMethod::bp});
    gpu.backward(BackwardOptions{.method = method});
    on_cpu.step(cpu);
    on_gpu.step(gpu);
    EXPECT_TRUE(same_tensors(gpu.parameters(), cpu.parameters(), false, kGradTol<T>))
        << to_string(oc.type) << " 2nd step";
  }
}

/// Every cell (reduced, under compute-sanitizer: the two with gates, which cover every kernel branch but RNN's).
inline std::vector<CellType> cells() {
  return pick<std::vector<CellType>>({CellType::rnn, CellType::gru, CellType::lstm}, {CellType::gru, CellType::lstm});
}

}  // namespace gpu_test
