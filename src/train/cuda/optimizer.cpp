// The device half of Optimizer<T>: a Device::cuda model's step runs on the GPU (norm, clipping,
// the update, all queued on the model's stream), its state kept there; a Device::cpu model's
// step runs on the host parameters.
#include <limits>

#include "nn/cuda/gpu_model.hpp"
#include "train/optimizer_device.hpp"
#include "train/step_constants.hpp"

namespace bppsa {

template <class T>
void Optimizer<T>::step(SequenceClassifier<T>& model) {
  if (model.device() == Device::cpu) {
    step(model.parameters());
    return;
  }
  detail::gpu::ModelGpu<T>* g = model.gpu();
  if (!gpu_) {
    gpu_ = detail::gpu::make_optimizer_gpu(*g);
    if (!m_.empty()) gpu_->upload(m_, v_);  // a resumed state (load_state) or earlier CPU steps
  }
  ++step_;
  gpu_->step(*g, detail::step_constants<T>(config_, step_));
  last_norm_ = std::numeric_limits<double>::quiet_NaN();
}

template <class T>
void Optimizer<T>::state_from_device(const std::vector<NamedParam<T>>& params) const {
  if (!gpu_) return;
  m_.assign(params.size(), {});  // sized as the parameters, filled from the device
  v_.assign(params.size(), {});
  for (std::size_t i = 0; i < params.size(); ++i) {
    m_[i].assign(static_cast<std::size_t>(params[i].size), T(0));
    v_[i].assign(static_cast<std::size_t>(params[i].size), T(0));
  }
  gpu_->download(m_, v_);
}

template <class T>
void Optimizer<T>::state_to_device() {
  if (!gpu_) return;
  if (m_.empty()) {
    gpu_.reset();  // step 0: fresh zeros at the next device step
  } else {
    gpu_->upload(m_, v_);
  }
}

BPPSA_OPTIMIZER_DEVICE(float)
BPPSA_OPTIMIZER_DEVICE(double)

}  // namespace bppsa
