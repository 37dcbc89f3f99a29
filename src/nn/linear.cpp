// Linear layer: forward, parameter gradients and the input gradient.
#include "bppsa/nn/linear.hpp"

#include <cmath>
#include <random>

#include "bppsa/core/error.hpp"
#include "core/random.hpp"

namespace bppsa {

template <class T>
Linear<T>::Linear(Index in, Index out)
    : weight(RowMatrix<T>::Zero(out, in)),
      bias(Vector<T>::Zero(out)),
      grad_weight(RowMatrix<T>::Zero(out, in)),
      grad_bias(Vector<T>::Zero(out)) {
  if (in < 1 || out < 1)
    detail::raise<InvalidArgument>(
        "Linear", "sizes must be ≥ 1 (got in " + std::to_string(in) + ", out " + std::to_string(out) + ")");
}

template <class T>
void Linear<T>::reset_parameters(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in()));
  auto draw = [&] { return static_cast<T>((detail::uniform01(rng) * 2 - 1) * bound); };
  for (Index i = 0; i < weight.size(); ++i) weight.data()[i] = draw();
  for (Index i = 0; i < bias.size(); ++i) bias[i] = draw();
}

template <class T>
void Linear<T>::forward(const Eigen::Ref<const Matrix<T>>& x, Matrix<T>& y) const {
  if (x.rows() != in())
    detail::raise<ShapeError>("Linear::forward",
                              "input has " + std::to_string(x.rows()) + " rows, expected " + std::to_string(in()));
  y.noalias() = weight * x;
  y.colwise() += bias;
}

template <class T>
void Linear<T>::backward(const Eigen::Ref<const Matrix<T>>& x, const Matrix<T>& dy, Matrix<T>& dx) {
  if (dy.rows() != out() || dy.cols() != x.cols())
    detail::raise<ShapeError>("Linear::backward", "output gradient is " + shape_string(dy.rows(), dy.cols()) +
                                                      ", expected " + shape_string(out(), x.cols()));
  param_grads(x, dy);
  input_grad(dy, dx);
}

template <class T>
void Linear<T>::param_grads(const Eigen::Ref<const Matrix<T>>& x, const Matrix<T>& dy) {
  grad_weight.noalias() = dy * x.transpose();
  grad_bias = dy.rowwise().sum();
}

template <class T>
void Linear<T>::input_grad(const Matrix<T>& dy, Matrix<T>& dx) const {
  dx.noalias() = weight.transpose() * dy;
}

template class Linear<float>;
template class Linear<double>;

}  // namespace bppsa
