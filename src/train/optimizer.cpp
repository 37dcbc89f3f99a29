// SGD (momentum) and Adam, following torch.optim's update rules step for step.
#include "bppsa/train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "bppsa/core/error.hpp"
#include "core/finite.hpp"
#include "nn/classifier_half.hpp"
#include "train/optimizer_half.hpp"

namespace bppsa {

const char* to_string(OptimizerType o) { return o == OptimizerType::sgd ? "sgd" : "adam"; }

const char* to_string(LrSchedule s) { return s == LrSchedule::cosine ? "cosine" : "constant"; }

LrSchedule parse_lr_schedule(std::string_view name) {
  if (name == "constant") return LrSchedule::constant;
  if (name == "cosine") return LrSchedule::cosine;
  detail::raise<InvalidArgument>("optimizer",
                                 "unknown learning-rate schedule '" + std::string(name) + "'; use constant or cosine");
}

namespace {
void check_total_steps(const OptimizerConfig& config) {
  if (config.schedule == LrSchedule::cosine && config.total_steps <= 0)
    detail::raise<InvalidArgument>("optimizer", "the cosine schedule needs the run's total steps (> 0, got " +
                                                    std::to_string(config.total_steps) + ")");
}
}  // namespace

double learning_rate(const OptimizerConfig& config, std::int64_t step) {
  if (config.schedule == LrSchedule::constant) return config.lr;
  check_total_steps(config);
  const double done = static_cast<double>(std::clamp<std::int64_t>(step - 1, 0, config.total_steps));
  return config.lr * 0.5 * (1 + std::cos(std::numbers::pi * done / static_cast<double>(config.total_steps)));
}

OptimizerType parse_optimizer(std::string_view name) {
  if (name == "sgd") return OptimizerType::sgd;
  if (name == "adam") return OptimizerType::adam;
  detail::raise<InvalidArgument>("optimizer", "unknown optimizer '" + std::string(name) + "'; use sgd or adam");
}

template <class T>
Optimizer<T>::Optimizer(OptimizerConfig config) : config_(config) {
  const char* op = "optimizer";
  if (!(config.lr > 0) || !std::isfinite(config.lr))
    detail::raise<InvalidArgument>(op,
                                   "learning rate must be a positive number (got " + std::to_string(config.lr) + ")");
  if (config.momentum < 0 || config.momentum >= 1)
    detail::raise<InvalidArgument>(op, "momentum must be in [0, 1) (got " + std::to_string(config.momentum) + ")");
  if (config.beta1 < 0 || config.beta1 >= 1 || config.beta2 < 0 || config.beta2 >= 1 || !(config.eps > 0))
    detail::raise<InvalidArgument>(op, "Adam needs betas in [0, 1) and eps > 0");
  if (config.weight_decay < 0) detail::raise<InvalidArgument>(op, "weight decay must be ≥ 0");
  if (config.clip_grad_norm < 0) detail::raise<InvalidArgument>(op, "gradient clipping norm must be ≥ 0 (0 = off)");
  check_total_steps(config);
}

template <class T>
Optimizer<T>::~Optimizer() = default;
template <class T>
Optimizer<T>::Optimizer(Optimizer&&) noexcept = default;
template <class T>
Optimizer<T>& Optimizer<T>::operator=(Optimizer&&) noexcept = default;

template <class T>
void Optimizer<T>::step(const std::vector<NamedParam<T>>& params) {
  if (m_.empty()) {
    m_.resize(params.size());
    v_.resize(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      m_[i].assign(static_cast<std::size_t>(params[i].size), T(0));
      if (config_.type == OptimizerType::adam) v_[i].assign(static_cast<std::size_t>(params[i].size), T(0));
    }
  }
  if (m_.size() != params.size()) detail::raise<InvalidArgument>("optimizer", "parameter list changed between steps");
  ++step_;
  double sq = 0;
  for (const auto& p : params)
    for (Index k = 0; k < p.size; ++k) sq += static_cast<double>(p.grad[k]) * static_cast<double>(p.grad[k]);
  last_norm_ = std::sqrt(sq);
  T clip = T(1);
  if (config_.clip_grad_norm > 0 && last_norm_ > config_.clip_grad_norm)
    clip = static_cast<T>(config_.clip_grad_norm / (last_norm_ + 1e-6));
  const T lr = static_cast<T>(learning_rate(config_, step_)), wd = static_cast<T>(config_.weight_decay);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    T* m = m_[i].data();
    if (config_.type == OptimizerType::sgd) {
      const T mu = static_cast<T>(config_.momentum);
      for (Index k = 0; k < p.size; ++k) {
        const T g = clip * p.grad[k] + wd * p.value[k];
        if (mu != T(0)) {
          m[k] = step_ == 1 ? g : mu * m[k] + g;
          p.value[k] -= lr * m[k];
        } else {
          p.value[k] -= lr * g;
        }
      }
    } else {
      T* v = v_[i].data();
      const T b1 = static_cast<T>(config_.beta1), b2 = static_cast<T>(config_.beta2);
      const T bc1 = T(1) - static_cast<T>(std::pow(config_.beta1, static_cast<double>(step_)));
      const T bc2 = T(1) - static_cast<T>(std::pow(config_.beta2, static_cast<double>(step_)));
      const T step_size = lr / bc1, bc2_sqrt = std::sqrt(bc2), eps = static_cast<T>(config_.eps);
      for (Index k = 0; k < p.size; ++k) {
        const T g = clip * p.grad[k] + wd * p.value[k];
        m[k] = b1 * m[k] + (T(1) - b1) * g;
        v[k] = b2 * v[k] + (T(1) - b2) * g * g;
        p.value[k] -= step_size * m[k] / (std::sqrt(v[k]) / bc2_sqrt + eps);
      }
    }
    if (!detail::all_finite(p.value, p.size))
      detail::raise<NonFiniteError>("optimizer", "parameter '" + p.name + "' is not finite (NaN/Inf) after step " +
                                                     std::to_string(step_) +
                                                     ": training diverged; lower the learning "
                                                     "rate (" +
                                                     std::to_string(config_.lr) + ")");
  }
}

template <class T>
TensorFile Optimizer<T>::state(const std::vector<NamedParam<T>>& params) const {
  TensorFile f;
  f.metadata["optimizer"] = to_string(config_.type);
  f.metadata["step"] = std::to_string(step_);
  state_from_device(params);  // a Device::cuda step's state lives on the GPU
  if (m_.empty()) return f;
  auto put = [&](const std::string& name, const std::vector<T>& src, const std::vector<Index>& shape) {
    std::vector<double> d(src.begin(), src.end());
    f.tensors[name] = Tensor::from_f64(d, shape);
  };
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (config_.type == OptimizerType::adam) {
      put(params[i].name + ".exp_avg", m_[i], params[i].shape);
      put(params[i].name + ".exp_avg_sq", v_[i], params[i].shape);
    } else {
      put(params[i].name + ".momentum_buffer", m_[i], params[i].shape);
    }
  }
  return f;
}

template <class T>
void Optimizer<T>::load_state(const TensorFile& file, const std::vector<NamedParam<T>>& params) {
  const char* op = "optimizer state";
  const std::string saved = file.metadata_or("optimizer");
  if (saved != to_string(config_.type))
    detail::raise<FormatError>(op, file.source + " holds " + (saved.empty() ? std::string("no optimizer") : saved) +
                                       " state but this run uses " + to_string(config_.type) +
                                       "; pass the same --optimizer as the run that saved it");
  // Everything is read and checked before any member changes: a bad file leaves the
  // optimizer as it was.
  const std::int64_t step = file.metadata_count("step", 0, op);
  std::vector<std::vector<T>> m, v;
  auto get = [&](const std::string& name, const std::vector<Index>& shape, bool nonnegative) {
    const auto d = file.require(name, shape, op).to_f64(name);
    for (double x : d)
      if (!std::isfinite(x) || (nonnegative && x < 0))
        detail::raise<NonFiniteError>(op, "tensor '" + name + "' in " + file.source + " holds " +
                                              (std::isfinite(x) ? "a negative value" : "NaN/Inf") +
                                              "; the optimizer state is corrupt (start afresh)");
    return std::vector<T>(d.begin(), d.end());
  };
  if (step > 0) {
    for (const auto& p : params) {
      if (config_.type == OptimizerType::adam) {
        m.push_back(get(p.name + ".exp_avg", p.shape, false));
        v.push_back(get(p.name + ".exp_avg_sq", p.shape, true));
      } else {
        m.push_back(get(p.name + ".momentum_buffer", p.shape, false));
        v.emplace_back();
      }
    }
  }
  step_ = step;
  m_ = std::move(m);
  v_ = std::move(v);
  state_to_device();
}

template <class T>
void Optimizer<T>::step(SequenceClassifier<T>& model) {
  if (model.device() == Device::cpu) {
    step(model.parameters());
    return;
  }
  const detail::gpu::DeviceParameters<T>* device = detail::ClassifierAccess<T>::half(model).device_parameters();
  if (device == nullptr)  // a model on a device whose half keeps its parameters on the host
    detail::raise<UnsupportedError>("optimizer", std::string("no device step for a model on ") +
                                                     to_string(model.device()) + "; use Device::cpu");
  const detail::gpu::DeviceParameters<T>& params = *device;
  if (!cuda_) {
    cuda_ = detail::make_optimizer_cuda(params);
    if (!m_.empty()) cuda_->upload(m_, v_);  // a resumed state (load_state) or earlier CPU steps
  }
  ++step_;
  cuda_->step(params, config_, step_);
  last_norm_ = std::numeric_limits<double>::quiet_NaN();
}

template <class T>
void Optimizer<T>::state_from_device(const std::vector<NamedParam<T>>& params) const {
  if (!cuda_) return;
  m_.assign(params.size(), {});  // sized as the parameters, filled from the device
  v_.assign(params.size(), {});
  for (std::size_t i = 0; i < params.size(); ++i) {
    m_[i].assign(static_cast<std::size_t>(params[i].size), T(0));
    v_[i].assign(static_cast<std::size_t>(params[i].size), T(0));
  }
  cuda_->download(m_, v_);
}

template <class T>
void Optimizer<T>::state_to_device() {
  if (!cuda_) return;
  if (m_.empty()) {
    cuda_.reset();  // step 0: fresh zeros at the next device step
  } else {
    cuda_->upload(m_, v_);
  }
}

template class Optimizer<float>;
template class Optimizer<double>;

}  // namespace bppsa
