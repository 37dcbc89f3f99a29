// Optimizers with PyTorch's update rules (torch.optim.SGD with momentum, torch.optim.Adam).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bppsa/core/types.hpp"
#include "bppsa/nn/model.hpp"

namespace bppsa {

namespace detail {
template <class T>
class OptimizerHalf;
}  // namespace detail

enum class OptimizerType { sgd, adam };
const char* to_string(OptimizerType o);
OptimizerType parse_optimizer(std::string_view name);  ///< "sgd", "adam"

/// How the learning rate moves over the steps: constant, or cosine annealing to 0 over
/// total_steps (torch.optim.lr_scheduler.CosineAnnealingLR(T_max = total_steps, eta_min = 0)
/// stepped after every optimizer step).
enum class LrSchedule { constant, cosine };
const char* to_string(LrSchedule s);
LrSchedule parse_lr_schedule(std::string_view name);  ///< "constant", "cosine"

struct OptimizerConfig {
  OptimizerType type = OptimizerType::adam;
  double lr = 3e-5;
  double momentum = 0;                            ///< SGD: buf = μ·buf + g (dampening 0), p −= lr·buf
  double weight_decay = 0;                        ///< both: g += wd·p (PyTorch's L2 form)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  ///< Adam
  /// > 0: scale the gradients so that their global 2-norm is at most this, as
  /// torch.nn.utils.clip_grad_norm_(params, max_norm) before the step (coef = max/(norm + 1e-6)).
  double clip_grad_norm = 0;
  LrSchedule schedule = LrSchedule::constant;
  std::int64_t total_steps = 0;  ///< cosine: the steps of the whole run (> 0)
};

/// The learning rate of optimizer step `step` (1-based): lr, or for cosine
/// lr · (1 + cos(π · min(step − 1, total_steps) / total_steps)) / 2. A function of the step count
/// alone, so a resumed run (whose optimizer state restores the count) continues the schedule.
/// InvalidArgument for cosine with total_steps ≤ 0.
double learning_rate(const OptimizerConfig& config, std::int64_t step);

/// Updates a fixed list of parameters (the model's parameters(), same order every step).
/// State (momentum buffers, Adam moments, step count) is kept per parameter and can be
/// saved and restored with state()/load_state() for --resume.
template <class T>
class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig config);
  ~Optimizer();
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;
  const OptimizerConfig& config() const { return config_; }
  /// One step on host parameters (a Device::cpu model's parameters()).
  void step(const std::vector<NamedParam<T>>& params);
  /// One step on a model's parameters wherever they live: Device::cpu, step(model.parameters());
  /// Device::cuda, the same update (norm, clipping, Adam/SGD) queued on the GPU, its state kept
  /// there, nothing copied to the host. Use one model with one optimizer.
  void step(SequenceClassifier<T>& model);
  std::int64_t steps() const { return step_; }
  /// Global gradient 2-norm seen by the last step (before clipping); NaN after a Device::cuda
  /// step (the norm stays on the GPU).
  double last_grad_norm() const { return last_norm_; }

  /// Tensors "<param>.exp_avg", "<param>.exp_avg_sq" (Adam) or "<param>.momentum_buffer" (SGD)
  /// and metadata "optimizer", "step" (after Device::cuda steps: downloaded from the GPU).
  TensorFile state(const std::vector<NamedParam<T>>& params) const;
  /// Restores state(); FormatError if it does not match the parameters or the optimizer type.
  void load_state(const TensorFile& file, const std::vector<NamedParam<T>>& params);

 private:
  OptimizerConfig config_;
  std::int64_t step_ = 0;
  double last_norm_ = 0;
  /// The state on the GPU, once a Device::cuda step made it, copied into m_/v_, or replaced by them.
  void state_from_device(const std::vector<NamedParam<T>>& params) const;
  void state_to_device();
  mutable std::vector<std::vector<T>> m_, v_;  ///< on the GPU once cuda_ exists (state() downloads)
  std::unique_ptr<detail::OptimizerHalf<T>> cuda_;  ///< the CUDA half (src/train/optimizer_half.hpp)
};

extern template class Optimizer<float>;
extern template class Optimizer<double>;

}  // namespace bppsa
