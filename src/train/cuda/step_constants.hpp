// The constants of one optimizer step as the GPU update reads them (optimizer_math.hpp),
// computed exactly as Optimizer<T>::step computes them on the CPU (T values, PyTorch's rules).
#pragma once

#include <cmath>
#include <cstdint>

#include "bppsa/train/optimizer.hpp"
#include "train/cuda/optimizer_math.hpp"

namespace bppsa::detail {

template <class T>
gpu::StepConstants<T> step_constants(const OptimizerConfig& c, std::int64_t step) {
  gpu::StepConstants<T> k;
  k.adam = c.type == OptimizerType::adam;
  k.lr = static_cast<T>(learning_rate(c, step));
  k.wd = static_cast<T>(c.weight_decay);
  k.mu = static_cast<T>(c.momentum);
  k.first_step = step == 1;
  k.b1 = static_cast<T>(c.beta1);
  k.b2 = static_cast<T>(c.beta2);
  const T bc1 = T(1) - static_cast<T>(std::pow(c.beta1, static_cast<double>(step)));
  const T bc2 = T(1) - static_cast<T>(std::pow(c.beta2, static_cast<double>(step)));
  k.step_size = k.lr / bc1;
  k.bc2_sqrt = std::sqrt(bc2);
  k.eps = static_cast<T>(c.eps);
  k.clip_max = c.clip_grad_norm;
  return k;
}

}  // namespace bppsa::detail
