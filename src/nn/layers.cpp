// CNN layers: names, SPEC tokens, masks and the factory. The layers' CPU halves are in
// src/nn/cpu/{conv2d,pool2d,pointwise}.cpp.
#include "bppsa/nn/layers.hpp"

#include <cstdio>
#include <utility>

#include "bppsa/core/error.hpp"
#include "nn/cnn_layers.hpp"

namespace bppsa {

const char* to_string(LayerType t) {
  switch (t) {
    case LayerType::conv: return "conv";
    case LayerType::maxpool: return "maxpool";
    case LayerType::avgpool: return "avgpool";
    case LayerType::relu: return "relu";
    case LayerType::tanh: return "tanh";
    case LayerType::flatten: return "flatten";
    case LayerType::linear: return "linear";
  }
  return "?";
}

std::string LayerSpec::str() const {
  // Appends piece by piece (GCC 12 warns falsely about chains of std::string operator+).
  std::string t = to_string(type);
  auto field = [&t](Index a, Index b) {
    t += ':';
    t += std::to_string(a);
    if (a != b) {
      t += 'x';
      t += std::to_string(b);
    }
  };
  const Window2d& w = window;
  switch (type) {
    case LayerType::conv:
      field(out, out);
      field(w.kh, w.kw);
      field(w.sh, w.sw);
      field(w.ph, w.pw);
      if (w.dh != 1 || w.dw != 1) field(w.dh, w.dw);
      break;
    case LayerType::maxpool:
    case LayerType::avgpool:
      field(w.kh, w.kw);
      field(w.sh, w.sw);
      if (w.ph != 0 || w.pw != 0) field(w.ph, w.pw);
      break;
    case LayerType::linear:
      field(out, out);
      break;
    default:
      break;
  }
  return t;
}

template <class T>
std::string Layer<T>::describe() const {
  std::string s = std::string(to_string(type())) + " " + in_.str() + " → " + out_.str();
  if (type() == LayerType::conv || type() == LayerType::maxpool || type() == LayerType::avgpool)
    s += " (" + spec_.window.str() + ")";
  return s;
}

template <class T>
void Layer<T>::set_mask(std::vector<std::uint8_t>) {
  detail::raise<InvalidArgument>("prune", describe() + " has no weights to prune");
}

template <class T>
void Layer<T>::apply_mask() {
  if (mask_.empty()) return;
  const ParamRef<T> w = params().front();
  for (Index i = 0; i < w.size; ++i)
    if (!mask_[static_cast<std::size_t>(i)]) w.value[i] = w.grad[i] = T(0);
}

template <class T>
std::unique_ptr<Layer<T>> make_layer(const LayerSpec& spec, const Shape3& in, bool flat, const std::string& where) {
  // Extents come from architecture strings and checkpoint metadata: multiply them in double
  // (they can overflow Index) and refuse what the Jacobians' 32-bit indices cannot address.
  const double in_size = static_cast<double>(in.c) * static_cast<double>(in.h) * static_cast<double>(in.w);
  double weights = 0;
  if (spec.type == LayerType::conv)
    weights = static_cast<double>(spec.out) * static_cast<double>(in.c) * static_cast<double>(spec.window.kh) *
              static_cast<double>(spec.window.kw);
  if (spec.type == LayerType::linear) weights = static_cast<double>(spec.out) * in_size;
  constexpr double kMaxElements = 2147483647.0;  // 2^31 − 1
  for (const auto& [what, n] : {std::pair<const char*, double>{"input", in_size}, {"weight", weights}})
    if (n > kMaxElements) {
      char count[32];
      std::snprintf(count, sizeof count, "%.3g", n);
      detail::raise<ShapeError>(where, std::string("its ") + what + " would have " + count +
                                           " elements, more than 2^31 − 1 (the most a layer's Jacobian can index): "
                                           "use smaller layers or a smaller input");
    }
  const bool spatial = spec.type == LayerType::conv || spec.type == LayerType::maxpool ||
                       spec.type == LayerType::avgpool;
  if (spatial && flat)
    detail::raise<ShapeError>(where, "its input is already flat (" + std::to_string(in.size()) + " features, after "
                                     "flatten or linear); " + to_string(spec.type) + " needs a C×H×W input: move it "
                                     "before 'flatten'");
  if (spec.type == LayerType::linear && !flat)
    detail::raise<ShapeError>(where, "its input is " + in.str() + ", not flat: add 'flatten' before it");
  if ((spec.type == LayerType::conv || spec.type == LayerType::linear) && spec.out < 1)
    detail::raise<ShapeError>(where, "needs at least one output (got " + std::to_string(spec.out) + ")");
  try {
    switch (spec.type) {
      case LayerType::conv: return std::make_unique<detail::Conv2d<T>>(spec, in);
      case LayerType::maxpool:
      case LayerType::avgpool: return std::make_unique<detail::Pool2d<T>>(spec, in);
      case LayerType::linear: return std::make_unique<detail::LinearLayer<T>>(spec, in);
      case LayerType::flatten: return std::make_unique<detail::Pointwise<T>>(spec, in, Shape3{in.size(), 1, 1});
      case LayerType::relu:
      case LayerType::tanh: return std::make_unique<detail::Pointwise<T>>(spec, in, in);
    }
  } catch (const ShapeError& e) {
    detail::raise<ShapeError>(where, e.what());
  }
  detail::raise<InvalidArgument>(where, "unknown layer type");
}

template class Layer<float>;
template class Layer<double>;
template std::unique_ptr<Layer<float>> make_layer(const LayerSpec&, const Shape3&, bool, const std::string&);
template std::unique_ptr<Layer<double>> make_layer(const LayerSpec&, const Shape3&, bool, const std::string&);

}  // namespace bppsa
