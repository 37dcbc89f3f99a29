// ReLU, Tanh, Flatten and Linear, CPU half. Activations give diagonal Jacobians (one
// derivative per element and sample); Linear gives W^T, shared by the batch — dense, or CSR
// over the weights a pruning mask keeps.
#include <cmath>

#include "bppsa/core/error.hpp"
#include "nn/cnn_layers.hpp"

namespace bppsa::detail {

template <class T>
Pointwise<T>::Pointwise(const LayerSpec& spec, const Shape3& in, const Shape3& out) : Layer<T>(spec, in, out) {}

template <class T>
void Pointwise<T>::forward(const Matrix<T>& x, Matrix<T>& y, int threads) {
  y.resize(x.rows(), x.cols());
  const Index n = x.size();
  const T* a = x.data();
  T* o = y.data();
  const LayerType t = this->type();
#pragma omp parallel for num_threads(team(threads)) schedule(static)
  for (Index i = 0; i < n; ++i)
    o[i] = t == LayerType::relu ? (a[i] > T(0) ? a[i] : T(0)) : t == LayerType::tanh ? std::tanh(a[i]) : a[i];
}

template <class T>
Jacobian<T> Pointwise<T>::make_jacobian(Index batch) {
  if (!has_jacobian()) raise<InvalidArgument>("flatten", "Flatten has no Jacobian (it is the identity)");
  return Jacobian<T>::diagonal(this->in_.size(), batch);
}

namespace {
/// ∂y/∂x of an activation at one element (ReLU: 0 at x = 0, as PyTorch).
template <class T>
T derivative(LayerType t, T x, T y) {
  if (t == LayerType::relu) return x > T(0) ? T(1) : T(0);
  if (t == LayerType::tanh) return T(1) - y * y;
  return T(1);
}
}  // namespace

template <class T>
void Pointwise<T>::fill_jacobian(const Matrix<T>& x, const Matrix<T>& y, Jacobian<T>& jt, int threads) {
  const Index n = x.size();
  T* d = jt.values().data();
  const LayerType t = this->type();
#pragma omp parallel for num_threads(team(threads)) schedule(static)
  for (Index i = 0; i < n; ++i) d[i] = derivative(t, x.data()[i], y.data()[i]);
}

template <class T>
void Pointwise<T>::backward_input(const Matrix<T>& x, const Matrix<T>& y, const Matrix<T>& g_out, Matrix<T>& g_in,
                                  int threads) {
  g_in.resize(g_out.rows(), g_out.cols());
  const Index n = g_out.size();
  const LayerType t = this->type();
#pragma omp parallel for num_threads(team(threads)) schedule(static)
  for (Index i = 0; i < n; ++i) g_in.data()[i] = derivative(t, x.data()[i], y.data()[i]) * g_out.data()[i];
}

template <class T>
LinearLayer<T>::LinearLayer(const LayerSpec& spec, const Shape3& in)
    : Layer<T>(spec, in, Shape3{spec.out, 1, 1}), linear(in.size(), spec.out) {}

template <class T>
std::vector<ParamRef<T>> LinearLayer<T>::params() {
  return {{"weight", {linear.out(), linear.in()}, linear.weight.data(), linear.grad_weight.data(), linear.weight.size()},
          {"bias", {linear.out()}, linear.bias.data(), linear.grad_bias.data(), linear.bias.size()}};
}

template <class T>
void LinearLayer<T>::reset_parameters(std::uint64_t seed) {
  linear.reset_parameters(seed);
  this->apply_mask();
}

template <class T>
void LinearLayer<T>::set_mask(std::vector<std::uint8_t> mask) {
  if (!mask.empty() && static_cast<Index>(mask.size()) != linear.weight.size())
    raise<ShapeError>("prune", this->describe() + ": mask has " + std::to_string(mask.size()) +
                                   " entries, the weight " + std::to_string(linear.weight.size()));
  this->mask_ = std::move(mask);
  pattern_.reset();
  weight_index_.clear();
  this->apply_mask();
}

template <class T>
void LinearLayer<T>::forward(const Matrix<T>& x, Matrix<T>& y, int) {
  linear.forward(x, y);
}

template <class T>
Jacobian<T> LinearLayer<T>::make_jacobian(Index) {
  const Index in = linear.in(), out = linear.out();
  if (this->mask_.empty()) return Jacobian<T>::dense(in, out, 1);
  if (!pattern_) {
    // Row k of W^T lists the outputs o whose weight w[o, k] is kept.
    std::vector<std::int32_t> row_ptr(static_cast<std::size_t>(in) + 1, 0), col_idx;
    weight_index_.clear();
    for (Index k = 0; k < in; ++k) {
      for (Index o = 0; o < out; ++o)
        if (this->mask_[static_cast<std::size_t>(o * in + k)]) {
          col_idx.push_back(static_cast<std::int32_t>(o));
          weight_index_.push_back(static_cast<std::int32_t>(o * in + k));
        }
      row_ptr[static_cast<std::size_t>(k) + 1] = static_cast<std::int32_t>(col_idx.size());
    }
    pattern_ = make_csr_pattern(in, out, std::move(row_ptr), std::move(col_idx));
  }
  return Jacobian<T>::csr(pattern_, 1);
}

template <class T>
void LinearLayer<T>::fill_jacobian(const Matrix<T>&, const Matrix<T>&, Jacobian<T>& jt, int) {
  const T* w = linear.weight.data();
  if (jt.kind() == Kind::dense) {
    // W (out × in, row-major) has the memory of W^T (in × out, column-major).
    std::copy(w, w + linear.weight.size(), jt.values().begin());
    return;
  }
  for (std::size_t p = 0; p < weight_index_.size(); ++p) jt.values()[p] = w[weight_index_[p]];
}

template <class T>
void LinearLayer<T>::backward_input(const Matrix<T>&, const Matrix<T>&, const Matrix<T>& g_out, Matrix<T>& g_in, int) {
  linear.input_grad(g_out, g_in);
}

template <class T>
void LinearLayer<T>::param_grads(const Matrix<T>& x, const Matrix<T>& g_out, int) {
  linear.param_grads(x, g_out);
  this->apply_mask();
}

template class Pointwise<float>;
template class Pointwise<double>;
template class LinearLayer<float>;
template class LinearLayer<double>;

}  // namespace bppsa::detail
