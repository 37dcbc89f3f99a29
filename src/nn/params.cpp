// Parameters ↔ safetensors: one strict loader for every model.
#include "bppsa/nn/params.hpp"

#include <cmath>
#include <set>

#include "bppsa/core/error.hpp"

namespace bppsa {

template <class T>
TensorFile params_to_tensors(const std::vector<NamedParam<T>>& params) {
  TensorFile f;
  for (const auto& p : params) {
    std::vector<float> v(static_cast<std::size_t>(p.size));
    for (Index i = 0; i < p.size; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(p.value[i]);
    f.tensors[p.name] = Tensor::from_f32(v, p.shape);
  }
  return f;
}

template <class T>
void load_params(const TensorFile& file, const std::vector<NamedParam<T>>& params, const std::string& model) {
  const char* op = "load_state_dict";
  std::set<std::string> known;
  for (const auto& p : params) known.insert(p.name);
  for (const auto& [name, tensor] : file.tensors)
    if (!known.count(name)) {
      std::string list;
      for (const auto& p : params) list += (list.empty() ? "" : ", ") + p.name + " " + shape_list(p.shape);
      detail::raise<FormatError>(op, file.source + " holds unexpected tensor '" + name + "' " + tensor.describe() +
                                         "; a " + model + " model expects: " + list);
    }
  std::vector<std::vector<float>> values;
  for (const auto& p : params) {
    values.push_back(file.require(p.name, p.shape, op).to_f32(p.name));
    for (float v : values.back())
      if (!std::isfinite(v))
        detail::raise<NonFiniteError>(op, "tensor '" + p.name + "' in " + file.source + " holds NaN/Inf");
  }
  for (std::size_t k = 0; k < params.size(); ++k)
    for (Index i = 0; i < params[k].size; ++i)
      params[k].value[i] = static_cast<T>(values[k][static_cast<std::size_t>(i)]);
}

template TensorFile params_to_tensors(const std::vector<NamedParam<float>>&);
template TensorFile params_to_tensors(const std::vector<NamedParam<double>>&);
template void load_params(const TensorFile&, const std::vector<NamedParam<float>>&, const std::string&);
template void load_params(const TensorFile&, const std::vector<NamedParam<double>>&, const std::string&);

}  // namespace bppsa
