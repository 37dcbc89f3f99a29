// Named parameters, the common currency of models, optimizers and checkpoints: every model
// lists its tensors under PyTorch's state_dict names, so checkpoints load with
// model.load_state_dict in PyTorch.
#pragma once

#include <string>
#include <vector>

#include "bppsa/core/types.hpp"
#include "bppsa/io/safetensors.hpp"

namespace bppsa {

/// A named parameter: PyTorch name and shape, row-major values and the last gradient.
template <class T>
struct NamedParam {
  std::string name;
  std::vector<Index> shape;
  T* value = nullptr;
  const T* grad = nullptr;
  Index size = 0;
};

/// The parameters as F32 tensors under their names (no metadata).
template <class T>
TensorFile params_to_tensors(const std::vector<NamedParam<T>>& params);

/// Loads every parameter from `file`, strictly: an unexpected tensor, a missing or misshaped
/// one, or NaN/Inf is an error listing what a `model` expects. Everything is checked before
/// anything changes: a failed load leaves the parameters as they were.
template <class T>
void load_params(const TensorFile& file, const std::vector<NamedParam<T>>& params, const std::string& model);

}  // namespace bppsa
