// The CUDA half of Optimizer<T>: a Device::cuda model's optimizer state (momentum buffers or
// Adam's moments) on the GPU and its steps queued there, on the parameters the model's CUDA half
// hands out (ClassifierHalf::device_parameters). The front (src/train/optimizer.cpp) chooses by
// the model's device; src/train/cuda/optimizer.cpp defines the half, src/train/no_gpu/optimizer.cpp
// its stub (UnsupportedError: no Device::cuda model exists there).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bppsa/train/optimizer.hpp"

namespace bppsa::detail {

namespace gpu {
template <class T>
struct DeviceParameters;  // nn/cuda/device_parameters.hpp
}  // namespace gpu

template <class T>
class OptimizerHalf {
 public:
  virtual ~OptimizerHalf() = default;
  /// Optimizer step `step` (1-based) of `config` on the model's parameters: the global norm,
  /// clipping and the update, all queued on the model's stream.
  virtual void step(const gpu::DeviceParameters<T>& params, const OptimizerConfig& config, std::int64_t step) = 0;
  /// Host state per parameter (sizes as the model's parameters) ↔ the device.
  virtual void upload(const std::vector<std::vector<T>>& m, const std::vector<std::vector<T>>& v) = 0;
  virtual void download(std::vector<std::vector<T>>& m, std::vector<std::vector<T>>& v) = 0;
};

/// Zero state for the parameters `params`, on their device and stream.
template <class T>
std::unique_ptr<OptimizerHalf<T>> make_optimizer_cuda(const gpu::DeviceParameters<T>& params);

}  // namespace bppsa::detail
