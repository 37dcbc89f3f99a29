// The device half of Optimizer<T> in a build without CUDA: every model is on the CPU, so a
// model's step is a step on its host parameters and there is no device state.
#include "train/optimizer_device.hpp"

namespace bppsa {

template <class T>
void Optimizer<T>::step(SequenceClassifier<T>& model) {
  step(model.parameters());
}

template <class T>
void Optimizer<T>::state_from_device(const std::vector<NamedParam<T>>&) const {}

template <class T>
void Optimizer<T>::state_to_device() {}

BPPSA_OPTIMIZER_DEVICE(float)
BPPSA_OPTIMIZER_DEVICE(double)

}  // namespace bppsa
