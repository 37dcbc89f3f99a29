// Recurrent training on the GPU (Device::cuda) against the CPU engine, with the same weights and
// data: forward (outputs, states, loss, predictions), every gradient (1e-4 relative per tensor
// in fp32), input and initial-state gradients, one Adam and one SGD step, for every cell ×
// layers {1, 2} × head {last, every} × loss {ce, mse} × backward {bp, fused, and the generic
// scan's blelloch, hybrid and linear}; the issue's sizes (T up to 1000, H up to 256, B up to 64) as a
// covering set; bit-identical reruns; resident-data training and evaluation; errors.
// GpuSmall.* stay small enough for compute-sanitizer (BPPSA_GPU_TESTS_REDUCED=1 runs part of them).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/train/optimizer.hpp"
#include "bppsa/train/trainer.hpp"
#include "cuda/gpu_compare.hpp"
#include "expect_error.hpp"
#include "nn/cuda/fused_scan.hpp"

namespace {

using namespace bppsa;
using gpu_test::pick;

template <class T>
constexpr double kGradTol = std::is_same_v<T, float> ? 1e-4 : 1e-10;

/// max |a − b| / max |b| over one tensor.
template <class T>
double rel_err(const T* a, const T* b, Index n) {
  double num = 0, den = 0;
  for (Index i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<double>::infinity();
    num = std::max(num, std::abs(x - y));
    den = std::max(den, std::abs(y));
  }
  return den > 0 ? num / den : num;
}

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
Batch random_batch(const Case& c, std::uint64_t seed) {
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
    const double e =
        grads ? rel_err(got[i].grad, want[i].grad, want[i].size) : rel_err(got[i].value, want[i].value, want[i].size);
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
std::vector<CellType> cells() {
  return pick<std::vector<CellType>>({CellType::rnn, CellType::gru, CellType::lstm}, {CellType::gru, CellType::lstm});
}

// ---------------------------------------------------------------------------------------------
// Small cases (also under compute-sanitizer)

TEST(GpuSmall, ModelStepMatchesTheCpuEveryCellLayersHeadAndBackward) {
  const std::vector<BackwardMethod> methods =
      pick<std::vector<BackwardMethod>>({BackwardMethod::bp, BackwardMethod::fused, BackwardMethod::blelloch,
                                         BackwardMethod::hybrid, BackwardMethod::linear},
                                        {BackwardMethod::bp, BackwardMethod::fused, BackwardMethod::hybrid});
  for (const CellType cell : cells())
    for (const Index layers : pick<std::vector<Index>>({1, 2}, {2}))
      for (const HeadMode head : pick<std::vector<HeadMode>>({HeadMode::last, HeadMode::every}, {HeadMode::every}))
        for (const BackwardMethod m : methods) {
          Case c;
          c.cell = cell;
          c.layers = layers;
          c.head = head;
          c.loss = (layers + static_cast<int>(head)) % 2 ? LossType::mse : LossType::cross_entropy;
          gpu_step_matches_cpu<float>(c, m, m != BackwardMethod::linear);
        }
  Case relu;  // the RNN's relu activation (and, reduced, the one RNN case)
  relu.nl = Nonlinearity::relu;
  relu.layers = 2;
  gpu_step_matches_cpu<float>(relu, BackwardMethod::fused);
  gpu_step_matches_cpu<float>(relu, BackwardMethod::bp);
}

TEST(GpuSmall, ModelStepsWithLengthsMatchTheCpu) {
  // Samples of different lengths, unsorted (the model sorts the batch longest first, as the CPU
  // does): loss, predictions in the caller's order, every gradient, then a resident-data
  // training epoch and an evaluation (the GPU pass sorts each batch the same way).
  for (const CellType cell : cells())
    for (const HeadMode head : {HeadMode::last, HeadMode::every})
      for (const BackwardMethod m : pick<std::vector<BackwardMethod>>(
               {BackwardMethod::bp, BackwardMethod::fused, BackwardMethod::hybrid}, {BackwardMethod::fused})) {
        Case c;
        c.cell = cell;
        c.layers = 2;
        c.head = head;
        c.batch = 5;
        c.steps = 9;
        SCOPED_TRACE(c.str() + " backward " + to_string(m));
        const std::vector<Index> lengths{3, 9, 1, 9, 5};
        SequenceClassifier<float> cpu(c.config(Device::cpu)), gpu(c.config(Device::cuda));
        cpu.reset_parameters(77);
        gpu.reset_parameters(77);
        Batch b = random_batch(c, 8);
        for (Index s = 0; s < c.batch; ++s)  // the padding is never read: NaN there
          for (Index t = lengths[static_cast<std::size_t>(s)]; t < c.steps; ++t)
            for (Index i = 0; i < c.input; ++i)
              b.x[static_cast<std::size_t>((s * c.steps + t) * c.input + i)] = std::numeric_limits<float>::quiet_NaN();
        std::vector<std::int64_t> cpu_pred, gpu_pred;
        const float want = cpu.forward_loss(b.x, c.batch, c.steps, b.y, &cpu_pred, lengths);
        const float got = gpu.forward_loss(b.x, c.batch, c.steps, b.y, &gpu_pred, lengths);
        EXPECT_LE(std::abs(got - want), 1e-4 * std::abs(want)) << "loss";
        // Predictions in the caller's order (the host replay checks them exactly; here a near tie
        // may flip one).
        ASSERT_EQ(gpu_pred.size(), cpu_pred.size());
        Index differ = 0;
        for (std::size_t k = 0; k < cpu_pred.size(); ++k) differ += gpu_pred[k] != cpu_pred[k];
        EXPECT_LE(differ, 1) << "predictions";
        cpu.backward(BackwardOptions{.method = BackwardMethod::bp});
        gpu.backward(BackwardOptions{.method = m});
        EXPECT_TRUE(same_tensors(gpu.parameters(), cpu.parameters(), true, 1e-4));
        // A training epoch on resident data and an evaluation, batches of 4 (the last one short).
        SequenceDataset data;
        data.name = "lengths";
        data.steps = 12;
        data.features = c.input;
        data.classes = c.classes;
        std::mt19937_64 rng(9);
        std::normal_distribution<float> n;
        for (Index s = 0; s < 10; ++s) {
          const Index len = 1 + static_cast<Index>(rng() % 12);
          data.lengths.push_back(len);
          for (Index t = 0; t < data.steps; ++t)
            for (Index i = 0; i < c.input; ++i) data.x.push_back(t < len ? n(rng) : 0.0f);
          data.y.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(c.classes)));
        }
        OptimizerConfig oc;
        oc.lr = 1e-2;
        Optimizer<float> on_cpu(oc), on_gpu(oc);
        TrainConfig tc;
        tc.batch = 4;
        tc.backward.method = BackwardMethod::bp;
        TrainConfig tg = tc;
        tg.backward.method = m;
        const EpochReport rc = train_epoch(cpu, on_cpu, data, 0, tc);
        const EpochReport rg = train_epoch(gpu, on_gpu, data, 0, tg);
        EXPECT_LE(std::abs(rg.train_loss - rc.train_loss), 1e-4 * std::abs(rc.train_loss)) << "epoch loss";
        EXPECT_LE(std::abs(rg.train_accuracy - rc.train_accuracy), 1.0 / 10 + 1e-12) << "epoch accuracy";
        EXPECT_TRUE(same_tensors(gpu.parameters(), cpu.parameters(), false, 1e-4)) << "weights after the epoch";
        const EvalReport ec = evaluate(cpu, data, 4), eg = evaluate(gpu, data, 4);
        EXPECT_LE(std::abs(eg.loss - ec.loss), 1e-4 * std::abs(ec.loss)) << "evaluation loss";
        EXPECT_EQ(eg.samples, ec.samples);
        EXPECT_LE(std::abs(eg.accuracy - ec.accuracy), 1.0 / 10 + 1e-12) << "evaluation accuracy";
      }
}

TEST(GpuSmall, DoublePrecisionMatchesTightly) {
  for (const CellType cell :
       pick<std::vector<CellType>>({CellType::rnn, CellType::gru, CellType::lstm}, {CellType::lstm})) {
    Case c;
    c.cell = cell;
    c.layers = 2;
    c.head = HeadMode::every;
    for (const BackwardMethod m :
         {BackwardMethod::bp, BackwardMethod::fused, BackwardMethod::blelloch, BackwardMethod::hybrid})
      gpu_step_matches_cpu<double>(c, m, m == BackwardMethod::bp);
  }
}

TEST(GpuSmall, AutoRunsTheFusedScanOnlyWhenItsPlanHasChunks) {
  // automatic on CUDA: the fused scan when the layer's plan splits the sequence into chunks, else
  // the BP kernel (a one-chunk fused plan is BP in a slower kernel); the gradients are bp's.
  namespace gpu = bppsa::detail::gpu;
  for (const Index T : {Index{1}, Index{300}}) {
    Case c;
    c.cell = CellType::gru;
    c.steps = T;
    SCOPED_TRACE(c.str());
    const bool chunked = gpu::FusedRecurrentScan<float>::estimate(gpu::kGru, c.hidden, T, c.batch).chunks > 1;
    EXPECT_EQ(chunked, T > 1) << "the test wants one plan of each kind";
    SequenceClassifier<float> bp(c.config(Device::cuda)), au(c.config(Device::cuda));
    bp.reset_parameters(11);
    au.reset_parameters(11);
    const Batch b = random_batch(c, 5);
    bp.forward_loss(b.x, c.batch, T, b.y);
    au.forward_loss(b.x, c.batch, T, b.y);
    bp.backward(BackwardOptions{.method = BackwardMethod::bp});
    BackwardTimes times;
    au.backward(BackwardOptions{.method = BackwardMethod::automatic}, &times);
    EXPECT_EQ(times.last_scan.device == Device::cuda, chunked) << "the fused scan's statistics, only when it ran";
    if (chunked) {
      EXPECT_EQ(times.last_scan.algorithm, Algorithm::fused);
    }
    EXPECT_TRUE(same_tensors(au.parameters(), bp.parameters(), true, kGradTol<float>));
  }
}

TEST(GpuSmall, BackwardReportsTheScanThatRan) {
  // Each scan method runs under its own name: fused is the fused chunked scan; blelloch, hybrid
  // and linear are the generic GPU engine's schedules of that name.
  Case c;
  c.cell = CellType::lstm;
  c.steps = 40;
  SequenceClassifier<float> m(c.config(Device::cuda));
  m.reset_parameters(3);
  const Batch b = random_batch(c, 9);
  for (const auto& [method, algorithm] :
       {std::pair{BackwardMethod::fused, Algorithm::fused}, std::pair{BackwardMethod::blelloch, Algorithm::blelloch},
        std::pair{BackwardMethod::hybrid, Algorithm::hybrid}, std::pair{BackwardMethod::linear, Algorithm::linear}}) {
    SCOPED_TRACE(to_string(method));
    m.forward_loss(b.x, c.batch, c.steps, b.y);
    BackwardTimes times;
    m.backward(BackwardOptions{.method = method}, &times);
    EXPECT_EQ(times.last_scan.algorithm, algorithm);
    EXPECT_EQ(times.last_scan.device, Device::cuda);
  }
}

/// A rows × cols matrix of standard normal values.
Matrix<float> normal_matrix(Index rows, Index cols, std::mt19937_64& rng) {
  std::normal_distribution<float> n;
  Matrix<float> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

/// The same stack on Device::cuda with cpu's weights.
Recurrent<float> gpu_twin(const Recurrent<float>& cpu) {
  RecurrentConfig c = cpu.config();
  c.device = Device::cuda;
  Recurrent<float> gpu(c);
  for (Index l = 0; l < c.layers; ++l) gpu.params(l) = cpu.params(l);
  return gpu;
}

TEST(GpuSmall, RecurrentApiOutputsStatesAndStateGradients) {
  // The layer stack alone, with initial states and final-state gradients: outputs, every state,
  // the input gradient and every g_0, as on the CPU.
  for (const CellType cell : cells())
    for (const BackwardMethod m : pick<std::vector<BackwardMethod>>(
             {BackwardMethod::bp, BackwardMethod::fused, BackwardMethod::hybrid}, {BackwardMethod::fused})) {
      SCOPED_TRACE(std::string(to_string(cell)) + " " + to_string(m));
      const Index I = 2, H = 4, L = 2, B = 3, T = 5, S = state_size(cell, H);
      Recurrent<float> cpu(RecurrentConfig{cell, I, H, L});
      cpu.reset_parameters(9);
      Recurrent<float> gpu = gpu_twin(cpu);
      std::mt19937_64 rng(3);
      auto random = [&](Index r, Index cols) { return normal_matrix(r, cols, rng); };
      const Matrix<float> x = random(I, T * B), up = random(H, T * B);
      for (Index l = 0; l < L; ++l) {
        const Matrix<float> s0 = random(S, B) * 0.5f, gf = random(S, B);
        cpu.set_initial_state(l, s0);
        gpu.set_initial_state(l, s0);
        cpu.set_final_state_grad(l, gf);
        gpu.set_final_state_grad(l, gf);
      }
      cpu.forward(x, T, B);
      gpu.forward(x, T, B);
      EXPECT_EQ(gpu.steps(), T);
      EXPECT_EQ(gpu.batch(), B);
      const Matrix<float> out_cpu = cpu.output(), out_gpu = gpu.output();
      EXPECT_LE(rel_err(out_gpu.data(), out_cpu.data(), out_cpu.size()), 1e-5);
      for (Index l = 0; l < L; ++l)
        for (Index t : {Index{0}, Index{2}, T}) {
          const Matrix<float> a = gpu.state(l, t), b = cpu.state(l, t);
          EXPECT_LE(rel_err(a.data(), b.data(), b.size()), 1e-5) << "state " << l << "/" << t;
        }
      cpu.backward(up, true, BackwardOptions{.method = BackwardMethod::bp});
      gpu.backward(up, true, BackwardOptions{.method = m});
      for (Index l = 0; l < L; ++l) {
        EXPECT_LE(rel_err(gpu.state0_grad(l).data(), cpu.state0_grad(l).data(), S * B), 1e-4) << "g_0 of " << l;
        EXPECT_LE(rel_err(gpu.grads(l).w_hh.data(), cpu.grads(l).w_hh.data(), cpu.grads(l).w_hh.size()), 1e-4);
        EXPECT_LE(rel_err(gpu.grads(l).b_ih.data(), cpu.grads(l).b_ih.data(), cpu.grads(l).b_ih.size()), 1e-4);
      }
      EXPECT_LE(rel_err(gpu.input_grad().data(), cpu.input_grad().data(), I * T * B), 1e-4);
      // Many-to-one through the same API (only the last block of the output gradient counts).
      cpu.backward(up, false, BackwardOptions{.method = BackwardMethod::bp});
      gpu.backward(up, false, BackwardOptions{.method = m});
      EXPECT_LE(rel_err(gpu.grads(0).w_ih.data(), cpu.grads(0).w_ih.data(), cpu.grads(0).w_ih.size()), 1e-4);
    }
}

TEST(GpuSmall, RecurrentApiRunsEachSampleAtItsLength) {
  // Per-sample lengths (longest first, with repeats and 1) on every backward path, against the
  // CPU engine, which runs each sample's chain at its own length: outputs (zeros past a length),
  // final states at each length, g_0, every parameter and input gradient, many-to-one and every
  // step. The padding of the input and of the output gradient is NaN: it must never be used.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const CellType cell : cells())
    for (const auto& [T, lengths] : pick<std::vector<std::pair<Index, std::vector<Index>>>>(
             {{7, {7, 5, 5, 2, 1}}, {300, {260, 170, 170, 40, 1}}}, {{7, {7, 5, 5, 2, 1}}}))
      for (const BackwardMethod m :
           pick<std::vector<BackwardMethod>>({BackwardMethod::bp, BackwardMethod::fused, BackwardMethod::automatic,
                                              BackwardMethod::hybrid, BackwardMethod::linear},
                                             {BackwardMethod::bp, BackwardMethod::fused, BackwardMethod::hybrid}))
        for (const bool every : {true, false}) {
          SCOPED_TRACE(std::string(to_string(cell)) + " T " + std::to_string(T) + " " + to_string(m) +
                       (every ? " every step" : " last step"));
          const Index I = 3, H = 6, L = 2, B = static_cast<Index>(lengths.size()), S = state_size(cell, H);
          Recurrent<float> cpu(RecurrentConfig{cell, I, H, L});
          cpu.reset_parameters(4);
          Recurrent<float> gpu = gpu_twin(cpu);
          std::mt19937_64 rng(5);
          auto random = [&](Index r, Index cols) { return normal_matrix(r, cols, rng); };
          Matrix<float> x = random(I, T * B), up = random(H, T * B);
          for (Index b = 0; b < B; ++b)
            for (Index t = 1; t <= T; ++t) {
              if (t > lengths[static_cast<std::size_t>(b)]) {
                x.col((t - 1) * B + b).setConstant(nan);
                up.col((t - 1) * B + b).setConstant(nan);
              } else if (!every && t < lengths[static_cast<std::size_t>(b)]) {
                up.col((t - 1) * B + b).setZero();
              }
            }
          for (Index l = 0; l < L; ++l) {
            const Matrix<float> s0 = random(S, B) * 0.5f, gf = random(S, B);
            for (auto* r : {&cpu, &gpu}) {
              r->set_initial_state(l, s0);
              r->set_final_state_grad(l, gf);
            }
          }
          cpu.forward(x, T, B, lengths);
          gpu.forward(x, T, B, lengths);
          const Matrix<float> out_cpu = cpu.output(), out_gpu = gpu.output();
          EXPECT_LE(rel_err(out_gpu.data(), out_cpu.data(), out_cpu.size()), 1e-5) << "outputs";
          for (Index l = 0; l < L; ++l) {
            const Matrix<float> a = gpu.final_state(l), b = cpu.final_state(l);
            EXPECT_LE(rel_err(a.data(), b.data(), b.size()), 1e-5) << "final state of " << l;
          }
          cpu.backward(up, every, BackwardOptions{.method = BackwardMethod::bp});
          gpu.backward(up, every, BackwardOptions{.method = m});
          for (Index l = 0; l < L; ++l) {
            EXPECT_LE(rel_err(gpu.state0_grad(l).data(), cpu.state0_grad(l).data(), S * B), 1e-4) << "g_0 of " << l;
            const auto &g = gpu.grads(l), &c = cpu.grads(l);
            EXPECT_LE(rel_err(g.w_ih.data(), c.w_ih.data(), c.w_ih.size()), 1e-4) << "w_ih of " << l;
            EXPECT_LE(rel_err(g.w_hh.data(), c.w_hh.data(), c.w_hh.size()), 1e-4) << "w_hh of " << l;
            EXPECT_LE(rel_err(g.b_ih.data(), c.b_ih.data(), c.b_ih.size()), 1e-4) << "b_ih of " << l;
            EXPECT_LE(rel_err(g.b_hh.data(), c.b_hh.data(), c.b_hh.size()), 1e-4) << "b_hh of " << l;
          }
          EXPECT_LE(rel_err(gpu.input_grad().data(), cpu.input_grad().data(), I * T * B), 1e-4) << "input gradient";
        }
}

TEST(GpuSmall, RerunsAreBitIdentical) {
  // Fixed reduction orders and no atomics in sums: the same step twice gives the same bits.
  for (const BackwardMethod m : pick<std::vector<BackwardMethod>>(
           {BackwardMethod::bp, BackwardMethod::fused, BackwardMethod::hybrid}, {BackwardMethod::fused})) {
    Case c;
    c.cell = CellType::gru;
    c.layers = 2;
    c.head = HeadMode::every;
    SequenceClassifier<float> gpu(c.config(Device::cuda));
    gpu.reset_parameters(1);
    const Batch b = random_batch(c, 2);
    std::vector<std::vector<float>> first;
    for (int run = 0; run < 2; ++run) {
      const float loss = gpu.loss_and_grad(b.x, c.batch, c.steps, b.y, BackwardOptions{.method = m});
      std::vector<std::vector<float>> g;
      for (const auto& p : gpu.parameters()) g.emplace_back(p.grad, p.grad + p.size);
      g.push_back({loss});
      if (run == 0)
        first = g;
      else
        for (std::size_t i = 0; i < g.size(); ++i)
          EXPECT_EQ(0, std::memcmp(g[i].data(), first[i].data(), g[i].size() * sizeof(float)))
              << to_string(m) << " tensor " << i;
    }
  }
}

TEST(GpuSmall, TrainingAndEvaluationOnResidentDataFollowTheCpu) {
  // The same seed: the same batches (the CPU trainer's shuffles), the same losses and weights.
  SequenceDataset data;
  data.steps = 7;
  data.features = 2;
  data.classes = 3;
  data.name = "random";
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n;
  for (Index i = 0; i < 23; ++i) {
    for (Index k = 0; k < data.steps * data.features; ++k) data.x.push_back(n(rng));
    data.y.push_back(static_cast<std::int64_t>(i % 3));
  }
  for (const BackwardMethod m :
       pick<std::vector<BackwardMethod>>({BackwardMethod::bp, BackwardMethod::fused}, {BackwardMethod::fused})) {
    Case c;
    c.cell = CellType::lstm;
    c.input = 2;
    c.classes = 3;
    c.layers = 2;
    SequenceClassifier<float> cpu(c.config(Device::cpu)), gpu(c.config(Device::cuda));
    cpu.reset_parameters(3);
    gpu.reset_parameters(3);
    OptimizerConfig oc;
    oc.lr = 1e-2;
    Optimizer<float> ocpu(oc), ogpu(oc);
    TrainConfig tc;
    tc.batch = 5;  // 23 samples: a partial last batch
    tc.backward.method = BackwardMethod::bp;
    TrainConfig tg = tc;
    tg.backward.method = m;
    for (Index epoch = 1; epoch <= pick<Index>(2, 1); ++epoch) {
      const EpochReport rc = train_epoch(cpu, ocpu, data, epoch, tc);
      Index progress_calls = 0;
      const EpochReport rg =
          train_epoch(gpu, ogpu, data, epoch, tg, [&](Index done, Index, double) { progress_calls = done; });
      EXPECT_EQ(rg.steps, rc.steps);
      EXPECT_EQ(rg.samples, rc.samples);
      EXPECT_EQ(progress_calls, rc.steps);
      EXPECT_NEAR(rg.train_loss, rc.train_loss, 1e-4 * std::abs(rc.train_loss)) << "epoch " << epoch;
      // A near-tie between two classes may flip one prediction (float order differs): one at most.
      EXPECT_LE(std::abs(rg.train_accuracy - rc.train_accuracy) * static_cast<double>(rc.samples), 1.0 + 1e-9)
          << "epoch " << epoch;
      EXPECT_GT(rg.forward_seconds, 0.0);
      EXPECT_GT(rg.backward_seconds, 0.0);
    }
    EXPECT_TRUE(same_tensors(gpu.parameters(), cpu.parameters(), false, 1e-4));
    const EvalReport ec = evaluate(cpu, data, 4), eg = evaluate(gpu, data, 4);
    EXPECT_NEAR(eg.loss, ec.loss, 1e-4 * ec.loss);
    EXPECT_LE(std::abs(eg.accuracy - ec.accuracy) * static_cast<double>(ec.samples), 1.0 + 1e-9);  // as above
    EXPECT_EQ(eg.samples, ec.samples);
    // The optimizer state round-trips through the host (checkpoints): both continue identically.
    const auto params = gpu.parameters();
    Optimizer<float> resumed(oc);
    resumed.load_state(ogpu.state(params), params);
    SequenceClassifier<float> twin(c.config(Device::cuda));
    twin.load_state_dict(gpu.state_dict());
    train_epoch(gpu, ogpu, data, 9, tg);
    train_epoch(twin, resumed, data, 9, tg);
    const auto a = gpu.parameters(), b = twin.parameters();
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(0, std::memcmp(a[i].value, b[i].value, static_cast<std::size_t>(a[i].size) * sizeof(float)))
          << a[i].name;
  }
}

TEST(GpuSmall, HostChangesReachTheGpuAndErrorsAreTheCpus) {
  using testutil::expect_error;
  Case c;
  c.cell = CellType::gru;
  SequenceClassifier<float> cpu(c.config(Device::cpu)), gpu(c.config(Device::cuda));
  cpu.reset_parameters(1);
  gpu.reset_parameters(1);
  const Batch b = random_batch(c, 3);
  // A change through the host copies is uploaded before the next device step.
  gpu.loss_and_grad(b.x, c.batch, c.steps, b.y, BackwardOptions{.method = BackwardMethod::bp});
  cpu.rnn().params(0).w_hh(1, 2) += 0.5f;
  gpu.rnn().params(0).w_hh(1, 2) += 0.5f;
  cpu.head().bias[1] -= 0.25f;
  gpu.head().bias[1] -= 0.25f;
  const float lc = cpu.forward_loss(b.x, c.batch, c.steps, b.y), lg = gpu.forward_loss(b.x, c.batch, c.steps, b.y);
  EXPECT_NEAR(lg, lc, 1e-5 * std::abs(lc));
  // Errors.
  SequenceClassifier<float> fresh(c.config(Device::cuda));
  expect_error<InvalidArgument>([&] { fresh.backward(BackwardOptions{}); }, {"forward_loss"});
  std::vector<std::int64_t> bad = b.y;
  bad[0] = c.classes;
  expect_error<InvalidArgument>([&] { gpu.forward_loss(b.x, c.batch, c.steps, bad); }, {"outside [0, 4)"});
  expect_error<UnsupportedError>([&] { gpu.rnn().chain(0); }, {"Device::cpu"});
  Matrix<float> d, o;
  expect_error<UnsupportedError>([&] { gpu.head_backward(d, o); }, {"GPU"});
  // Initial states and final-state gradients of another batch size: ShapeError on both devices
  // (the GPU copies S × B values from them), and the model still runs once they are cleared.
  const Index S = state_size(c.cell, c.hidden);
  for (SequenceClassifier<float>* m : {&cpu, &gpu}) {
    m->rnn().set_initial_state(0, Matrix<float>::Zero(S, c.batch + 1));
    expect_error<ShapeError>([&] { m->forward_loss(b.x, c.batch, c.steps, b.y); },
                             {"initial state of layer 0", "expected"});
    m->rnn().set_initial_state(0, Matrix<float>());
    m->rnn().set_final_state_grad(0, Matrix<float>::Zero(S, c.batch + 1));
    m->forward_loss(b.x, c.batch, c.steps, b.y);
    expect_error<ShapeError>([&] { m->backward(BackwardOptions{.method = BackwardMethod::bp}); },
                             {"final-state gradient of layer 0"});
    m->rnn().set_final_state_grad(0, Matrix<float>());
    m->loss_and_grad(b.x, c.batch, c.steps, b.y, BackwardOptions{.method = BackwardMethod::bp});
  }
  // A NaN weight: the loss is not finite, as on the CPU.
  gpu.rnn().params(0).w_ih(0, 0) = std::numeric_limits<float>::quiet_NaN();
  expect_error<NonFiniteError>([&] { gpu.forward_loss(b.x, c.batch, c.steps, b.y); }, {"not finite"});
  // A backward that cannot fit in the GPU's memory is refused with the numbers.
  expect_error<ResourceError>(
      [&] {
        gpu.rnn().check_backward_memory(Index{1} << 24, Index{1} << 14,
                                        BackwardOptions{.method = BackwardMethod::hybrid});
      },
      {"GPU", "--batch"});
}

// ---------------------------------------------------------------------------------------------
// The issue's sizes: a covering set of T ∈ {1, 2, 3, 1000}, H ∈ {1, 20, 33, 64, 256}, B ∈ {1, 16, 64}

TEST(GpuRecurrent, IssueSizesMatchTheCpuEngine) {
  struct Size {
    CellType cell;
    Index hidden, steps, batch;
  };
  const std::vector<Size> sizes{
      {CellType::rnn, 1, 1, 1},      {CellType::gru, 20, 2, 16},     {CellType::lstm, 33, 3, 64},
      {CellType::rnn, 20, 1000, 16}, {CellType::gru, 64, 1000, 1},   {CellType::lstm, 20, 1000, 16},
      {CellType::rnn, 256, 3, 64},   {CellType::gru, 256, 2, 1},     {CellType::lstm, 64, 1000, 16},
      {CellType::rnn, 33, 1000, 64}, {CellType::lstm, 256, 1000, 1}, {CellType::gru, 1, 3, 64}};
  for (const Size& s : sizes) {
    Case c;
    c.cell = s.cell;
    c.input = 1;
    c.hidden = s.hidden;
    c.steps = s.steps;
    c.batch = s.batch;
    c.classes = 10;
    c.head = s.steps == 1000 ? HeadMode::last : HeadMode::every;
    for (const BackwardMethod m : {BackwardMethod::bp, BackwardMethod::fused}) gpu_step_matches_cpu<float>(c, m, false);
    // The generic scan stores T·B Jacobians of S²: only where they are small.
    const double jac = static_cast<double>(s.steps * s.batch) * std::pow(state_size(s.cell, s.hidden), 2);
    if (jac < 2e8) gpu_step_matches_cpu<float>(c, BackwardMethod::hybrid, false);
  }
  // More units per block than threads (H 600 > 512): the forward kernel's general path, where a
  // thread takes several units a step (the sizes above all take the one-unit-per-thread path).
  for (const CellType cell : {CellType::gru, CellType::lstm}) {
    Case c;
    c.cell = cell;
    c.input = 3;
    c.hidden = 600;
    c.steps = 4;
    c.batch = 3;
    c.classes = 10;
    c.head = HeadMode::every;
    gpu_step_matches_cpu<float>(c, BackwardMethod::bp, false);
  }
}

}  // namespace
