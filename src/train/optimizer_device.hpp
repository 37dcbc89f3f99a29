// What the device halves of Optimizer<T> define (src/train/cuda/optimizer.cpp, or
// src/train/no_gpu/optimizer.cpp in a build without CUDA): instantiated in the file that does.
#pragma once

#include "bppsa/train/optimizer.hpp"

#define BPPSA_OPTIMIZER_DEVICE(T)                                                         \
  template void Optimizer<T>::step(SequenceClassifier<T>&);                               \
  template void Optimizer<T>::state_from_device(const std::vector<NamedParam<T>>&) const; \
  template void Optimizer<T>::state_to_device();
