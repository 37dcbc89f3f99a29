// The training pass and the optimizer step on the GPU (src/train/cuda/) against the CPU's: epochs
// over resident data (the CPU trainer's shuffles, a partial last batch), evaluation, and the
// optimizer's state round-tripped through the host. GpuSmall.* stay small enough for
// compute-sanitizer.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/train/optimizer.hpp"
#include "bppsa/train/trainer.hpp"
#include "cuda/model_compare.hpp"

namespace {

using namespace bppsa;
using gpu_test::Case;
using gpu_test::pick;
using gpu_test::same_tensors;

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

}  // namespace
