// The optimizer's CUDA half replayed on the CPU (tests/common/cuda/optimizer_replay.hpp: its
// kernels' arithmetic, thread by thread) against Optimizer<T>::step on host parameters, the
// independent CPU implementation: SGD with and without momentum and weight decay, Adam with
// clipping and a cosine schedule, over parameters in three segments (the GPU sees the model's as
// the recurrent arena and the head's), five steps with new gradients each.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "bppsa/nn/params.hpp"
#include "bppsa/train/optimizer.hpp"
#include "cuda/optimizer_replay.hpp"
#include "train/cuda/step_constants.hpp"

namespace {

using namespace bppsa;
namespace gpu = bppsa::detail::gpu;

template <class T>
void steps_match(const OptimizerConfig& oc, double tol) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd;
  const std::vector<gpu::Idx> sizes{37, 300, 5};  // more values than a block's threads, and a short tail
  std::vector<std::vector<T>> cpu(sizes.size()), grads(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i)
    for (gpu::Idx k = 0; k < sizes[i]; ++k) {
      cpu[i].push_back(static_cast<T>(nd(rng)));
      grads[i].push_back(T(0));
    }
  std::vector<std::vector<T>> dev = cpu;  // the GPU's copy of the values
  std::vector<NamedParam<T>> params;
  gpu::Idx total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::string name = "p";  // (not "p" + …: g++ 12 warns falsely about that form)
    name += std::to_string(i);
    params.push_back({name, {sizes[i]}, cpu[i].data(), grads[i].data(), sizes[i]});
    total += sizes[i];
  }
  Optimizer<T> opt(oc);
  std::vector<T> m(static_cast<std::size_t>(total), T(0)), v(static_cast<std::size_t>(total), T(0));
  for (std::int64_t step = 1; step <= 5; ++step) {
    for (auto& g : grads)
      for (T& x : g) x = static_cast<T>(3 * nd(rng));  // a norm near 30: clip_grad_norm 1 clips
    opt.step(params);
    gpu::Segments<T> seg;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      seg.values[i] = dev[i].data();
      seg.grads[i] = grads[i].data();
      seg.size[i] = sizes[i];
    }
    seg.count = static_cast<int>(sizes.size());
    gpu::DeviceStatus st;
    testutil::replay_optimizer(seg, m, v, detail::step_constants<T>(oc, step), &st);
    ASSERT_EQ(st.flags, 0) << "step " << step;
    EXPECT_NEAR(st.grad_norm, opt.last_grad_norm(), 1e-12 * opt.last_grad_norm()) << "step " << step;
    for (std::size_t i = 0; i < sizes.size(); ++i)
      for (std::size_t k = 0; k < cpu[i].size(); ++k)
        ASSERT_NEAR(dev[i][k], cpu[i][k], tol * (1 + std::abs(cpu[i][k])))
            << "step " << step << ", p" << i << "[" << k << "]";
  }
}

OptimizerConfig sgd(double momentum, double weight_decay) {
  OptimizerConfig c;
  c.type = OptimizerType::sgd;
  c.lr = 0.05;
  c.momentum = momentum;
  c.weight_decay = weight_decay;
  return c;
}

OptimizerConfig adam(double clip, LrSchedule schedule) {
  OptimizerConfig c;
  c.lr = 1e-2;
  c.weight_decay = 1e-3;
  c.clip_grad_norm = clip;
  c.schedule = schedule;
  c.total_steps = 4;  // the cosine schedule reaches 0 at step 5
  return c;
}

TEST(CudaOptimizerHost, SgdStepsMatchTheCpuOptimizer) {
  for (const OptimizerConfig& c : {sgd(0, 0), sgd(0.9, 0), sgd(0.9, 1e-2)}) {
    steps_match<float>(c, 2e-6);
    steps_match<double>(c, 1e-13);
  }
}

TEST(CudaOptimizerHost, AdamStepsMatchTheCpuOptimizerWithClippingAndSchedules) {
  for (const OptimizerConfig& c :
       {adam(0, LrSchedule::constant), adam(1.0, LrSchedule::constant), adam(1.0, LrSchedule::cosine)}) {
    steps_match<float>(c, 2e-6);
    steps_match<double>(c, 1e-13);
  }
}

}  // namespace
