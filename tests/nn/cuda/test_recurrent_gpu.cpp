// Recurrent training on the GPU (Device::cuda) against the CPU engine, with the same weights and
// data: forward (outputs, states, loss, predictions), every gradient (1e-4 relative per tensor
// in fp32), input and initial-state gradients, one Adam and one SGD step, for every cell ×
// layers {1, 2} × head {last, every} × loss {ce, mse} × backward {bp, fused, and the generic
// scan's blelloch, hybrid and linear}; the issue's sizes (T up to 1000, H up to 256, B up to 64) as a
// covering set; bit-identical reruns; an epoch with lengths; errors. The training pass and the
// optimizer's own tests are in tests/train/cuda/.
// GpuSmall.* stay small enough for compute-sanitizer (BPPSA_GPU_TESTS_REDUCED=1 runs part of them).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/train/optimizer.hpp"
#include "bppsa/train/trainer.hpp"
#include "cuda/gpu_compare.hpp"
#include "cuda/model_compare.hpp"
#include "expect_error.hpp"
#include "nn/cuda/fused_scan.hpp"

namespace {

using namespace bppsa;
using gpu_test::Batch;
using gpu_test::Case;
using gpu_test::cells;
using gpu_test::gpu_step_matches_cpu;
using gpu_test::kGradTol;
using gpu_test::max_rel_error;
using gpu_test::pick;
using gpu_test::random_batch;
using gpu_test::same_tensors;

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
      EXPECT_LE(max_rel_error(out_gpu.data(), out_cpu.data(), out_cpu.size()), 1e-5);
      for (Index l = 0; l < L; ++l)
        for (Index t : {Index{0}, Index{2}, T}) {
          const Matrix<float> a = gpu.state(l, t), b = cpu.state(l, t);
          EXPECT_LE(max_rel_error(a.data(), b.data(), b.size()), 1e-5) << "state " << l << "/" << t;
        }
      cpu.backward(up, true, BackwardOptions{.method = BackwardMethod::bp});
      gpu.backward(up, true, BackwardOptions{.method = m});
      for (Index l = 0; l < L; ++l) {
        EXPECT_LE(max_rel_error(gpu.state0_grad(l).data(), cpu.state0_grad(l).data(), S * B), 1e-4) << "g_0 of " << l;
        EXPECT_LE(max_rel_error(gpu.grads(l).w_hh.data(), cpu.grads(l).w_hh.data(), cpu.grads(l).w_hh.size()), 1e-4);
        EXPECT_LE(max_rel_error(gpu.grads(l).b_ih.data(), cpu.grads(l).b_ih.data(), cpu.grads(l).b_ih.size()), 1e-4);
      }
      EXPECT_LE(max_rel_error(gpu.input_grad().data(), cpu.input_grad().data(), I * T * B), 1e-4);
      // Many-to-one through the same API (only the last block of the output gradient counts).
      cpu.backward(up, false, BackwardOptions{.method = BackwardMethod::bp});
      gpu.backward(up, false, BackwardOptions{.method = m});
      EXPECT_LE(max_rel_error(gpu.grads(0).w_ih.data(), cpu.grads(0).w_ih.data(), cpu.grads(0).w_ih.size()), 1e-4);
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
          EXPECT_LE(max_rel_error(out_gpu.data(), out_cpu.data(), out_cpu.size()), 1e-5) << "outputs";
          for (Index l = 0; l < L; ++l) {
            const Matrix<float> a = gpu.final_state(l), b = cpu.final_state(l);
            EXPECT_LE(max_rel_error(a.data(), b.data(), b.size()), 1e-5) << "final state of " << l;
          }
          cpu.backward(up, every, BackwardOptions{.method = BackwardMethod::bp});
          gpu.backward(up, every, BackwardOptions{.method = m});
          for (Index l = 0; l < L; ++l) {
            EXPECT_LE(max_rel_error(gpu.state0_grad(l).data(), cpu.state0_grad(l).data(), S * B), 1e-4)
                << "g_0 of " << l;
            const auto &g = gpu.grads(l), &c = cpu.grads(l);
            EXPECT_LE(max_rel_error(g.w_ih.data(), c.w_ih.data(), c.w_ih.size()), 1e-4) << "w_ih of " << l;
            EXPECT_LE(max_rel_error(g.w_hh.data(), c.w_hh.data(), c.w_hh.size()), 1e-4) << "w_hh of " << l;
            EXPECT_LE(max_rel_error(g.b_ih.data(), c.b_ih.data(), c.b_ih.size()), 1e-4) << "b_ih of " << l;
            EXPECT_LE(max_rel_error(g.b_hh.data(), c.b_hh.data(), c.b_hh.size()), 1e-4) << "b_hh of " << l;
          }
          EXPECT_LE(max_rel_error(gpu.input_grad().data(), cpu.input_grad().data(), I * T * B), 1e-4)
              << "input gradient";
        }
}

/// Sets BPPSA_CUDA_RECURRENCE for its lifetime, then restores what it was.
class RecurrenceVariable {
 public:
  RecurrenceVariable() {
    if (const char* v = std::getenv(kName)) before_ = v;
  }
  ~RecurrenceVariable() {
    if (before_)
      setenv(kName, before_->c_str(), 1);
    else
      unsetenv(kName);
  }
  void set(const char* v) { setenv(kName, v, 1); }

 private:
  static constexpr const char* kName = "BPPSA_CUDA_RECURRENCE";
  std::optional<std::string> before_;
};

/// One stack's forward and bp backward with the persistent kernels `kernels` (block or warp), on a
/// fresh GPU twin of `cpu` (nothing left from another run): outputs, final states, then per layer
/// g_0 and every parameter gradient, then the input gradient, as flat vectors.
template <class T>
std::vector<std::vector<T>> warp_or_block_run(const char* kernels, const Recurrent<T>& cpu, const Matrix<T>& x,
                                              const Matrix<T>& up, const std::vector<Matrix<T>>& s0,
                                              const std::vector<Matrix<T>>& gf, Index steps, Index batch,
                                              const std::vector<Index>& len) {
  RecurrenceVariable var;
  var.set(kernels);
  RecurrentConfig c = cpu.config();
  c.device = Device::cuda;
  Recurrent<T> gpu(c);
  for (Index l = 0; l < c.layers; ++l) {
    gpu.params(l) = cpu.params(l);
    gpu.set_initial_state(l, s0[static_cast<std::size_t>(l)]);
    gpu.set_final_state_grad(l, gf[static_cast<std::size_t>(l)]);
  }
  gpu.forward(x, steps, batch, len);
  std::vector<std::vector<T>> r;
  const auto add = [&](const auto& m) { r.emplace_back(m.data(), m.data() + m.size()); };
  add(gpu.output());
  for (Index l = 0; l < c.layers; ++l) add(gpu.final_state(l));
  gpu.backward(up, true, BackwardOptions{.method = BackwardMethod::bp});
  for (Index l = 0; l < c.layers; ++l) {
    add(gpu.state0_grad(l));
    const auto& g = gpu.grads(l);
    add(g.w_ih), add(g.w_hh), add(g.b_ih), add(g.b_hh);
  }
  add(gpu.input_grad());
  return r;
}

/// A two-layer stack of `cell` (hidden H, batch B, T_ steps, lengths or not) on random weights,
/// states and data, run with the persistent kernels `base` and then `other` (warp_or_block_run):
/// the same bits in every tensor (`backward_bits` false: in the forward's, and the backward's within
/// the tolerance); and `other`'s outputs and input gradient against the CPU engine.
template <class T>
void expect_the_same_bits(const char* base, const char* other, CellType cell, Index H, Index B, Index T_,
                          bool by_length, bool backward_bits = true) {
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  const Index I = 3, L = 2, S = state_size(cell, H);
  Recurrent<T> cpu(RecurrentConfig{cell, I, H, L});
  cpu.reset_parameters(6);
  std::mt19937_64 rng(8);
  std::normal_distribution<double> nd;
  const auto random = [&](Index r, Index cols) {
    Matrix<T> m(r, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(nd(rng));
    return m;
  };
  const Matrix<T> x = random(I, T_ * B), up = random(H, T_ * B);
  std::vector<Matrix<T>> s0, gf;
  for (Index l = 0; l < L; ++l) {
    s0.push_back(random(S, B) * T(0.5));
    gf.push_back(random(S, B));
    cpu.set_initial_state(l, s0.back());
    cpu.set_final_state_grad(l, gf.back());
  }
  std::vector<Index> len;
  for (Index b = 0; by_length && b < B; ++b) len.push_back(std::max<Index>(1, T_ - (b * T_) / B));
  const auto want = warp_or_block_run<T>(base, cpu, x, up, s0, gf, T_, B, len);
  const auto got = warp_or_block_run<T>(other, cpu, x, up, s0, gf, T_, B, len);
  ASSERT_EQ(want.size(), got.size());
  const std::size_t forward = 1 + static_cast<std::size_t>(L);  // outputs and final states
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].size(), got[i].size());
    if (i < forward || backward_bits)
      EXPECT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(T)))
          << other << " against " << base << ": tensor " << i
          << " (outputs, final states, then per layer g_0, w_ih, w_hh, b_ih, b_hh; input)";
    else
      EXPECT_LE(max_rel_error(got[i].data(), want[i].data(), want[i].size()), tol)
          << other << " against " << base << ": tensor " << i << " (per layer g_0, w_ih, w_hh, b_ih, b_hh; input)";
  }
  cpu.forward(x, T_, B, len);
  cpu.backward(up, true, BackwardOptions{.method = BackwardMethod::bp});
  const Matrix<T> out = cpu.output(), gx = cpu.input_grad();
  EXPECT_LE(max_rel_error(got.front().data(), out.data(), out.size()), tol) << "outputs against the CPU";
  EXPECT_LE(max_rel_error(got.back().data(), gx.data(), gx.size()), tol) << "input gradient against the CPU";
}

/// The warp-per-sample forward and BP against the block kernels they replace (BPPSA_CUDA_RECURRENCE
/// =block), each on a fresh stack: the same arithmetic in the same order, so the same bits in every
/// tensor; and against the CPU engine (its outputs and input gradient). H around the vector width
/// and the partial sums, B above twice the SMs (several warps a block, a short last block).
template <class T>
void warp_kernels_give_the_block_kernels_bits() {
  for (const CellType cell : cells())
    for (const Index H : pick<std::vector<Index>>({5, 13, 16, 20, 31, 32}, {13}))  // reduced: under the sanitizers
      for (const Index B : {Index{5}, Index{301}}) {
        const bool by_length = (H + B) % 2 == 0;
        if (std::is_same_v<T, double> && cell != CellType::rnn && H > 16) continue;  // the warp kernels' limit
        if (B > 5 && H != 13 && H != 32) continue;
        SCOPED_TRACE(std::string(to_string(cell)) + " H " + std::to_string(H) + " B " + std::to_string(B) +
                     (by_length ? " lengths" : "") + (std::is_same_v<T, float> ? " float" : " double"));
        expect_the_same_bits<T>("block", "warp", cell, H, B, 37, by_length);
      }
}

TEST(GpuSmall, WarpKernelsGiveTheBlockKernelsBits) {
  warp_kernels_give_the_block_kernels_bits<float>();
  if (!gpu_test::reduced()) warp_kernels_give_the_block_kernels_bits<double>();
  // BPPSA_CUDA_RECURRENCE's refusals.
  RecurrenceVariable var;
  Recurrent<float> wide(RecurrentConfig{CellType::gru, 2, 64, 1, Nonlinearity::tanh, Device::cuda});
  const Matrix<float> x = Matrix<float>::Zero(2, 3);
  var.set("warp");
  testutil::expect_error<UnsupportedError>([&] { wide.forward(x, 3, 1); },
                                           {"BPPSA_CUDA_RECURRENCE=warp", "up to 32", "not 64"});
  var.set("fast");
  testutil::expect_error<InvalidArgument>([&] { wide.forward(x, 3, 1); },
                                          {"BPPSA_CUDA_RECURRENCE", "'fast'", "auto, warp, block or cluster"});
}

/// The cluster forward and BP (BPPSA_CUDA_RECURRENCE=cluster: wherever a cluster of up to eight
/// blocks holds W_hh, from two blocks) against the block kernels they replace: the forward's
/// dot-product slices added in the block kernel's order, so the same bits in the forward's tensors;
/// the BP's sums split over threads, so its tensors within the tolerance; and against the CPU engine. H where W_hh fits
/// one block (64) and where it does not (RNN 256, GRU 160, LSTM 128: what auto gives the cluster), a short last
/// cluster.
template <class T>
void cluster_forward_gives_the_block_kernels_bits() {
  for (const CellType cell : cells())
    for (const Index H : pick<std::vector<Index>>({64, 0}, {64})) {  // 0: the cell's large size
      const Index h = H > 0 ? H : cell == CellType::rnn ? 256 : cell == CellType::gru ? 160 : 128;
      const Index B = pick<Index>(37, 5);
      SCOPED_TRACE(std::string(to_string(cell)) + " H " + std::to_string(h) + " B " + std::to_string(B) +
                   (std::is_same_v<T, float> ? " float" : " double"));
      expect_the_same_bits<T>("block", "cluster", cell, h, B, 23, h == 64, false);
    }
}

TEST(GpuSmall, ClusterForwardGivesTheBlockKernelsBits) {
  cluster_forward_gives_the_block_kernels_bits<float>();
  if (!gpu_test::reduced()) cluster_forward_gives_the_block_kernels_bits<double>();
  // Where no cluster of eight blocks holds W_hh (LSTM H 512 float: 4 MiB), =cluster is refused.
  RecurrenceVariable var;
  var.set("cluster");
  Recurrent<float> huge(RecurrentConfig{CellType::lstm, 2, 512, 1, Nonlinearity::tanh, Device::cuda});
  const Matrix<float> x = Matrix<float>::Zero(2, 3);
  testutil::expect_error<UnsupportedError>([&] { huge.forward(x, 3, 1); },
                                           {"BPPSA_CUDA_RECURRENCE=cluster", "hidden size 512"});
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
