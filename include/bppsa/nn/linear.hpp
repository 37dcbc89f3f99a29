// Linear layer y = W x + b (PyTorch nn.Linear): the classification head of the models.
// J^T = W^T is shared by the batch (docs/method.md §4); ∇W = g x^T, ∇b = g.
#pragma once

#include <cstdint>

#include "bppsa/core/types.hpp"

namespace bppsa {

template <class T>
class Linear {
 public:
  Linear(Index in, Index out);

  Index in() const { return weight.cols(); }
  Index out() const { return weight.rows(); }
  /// PyTorch's default: weight and bias U(−1/√in, 1/√in).
  void reset_parameters(std::uint64_t seed);

  /// y = W x + b for the columns of x (in × N) → out × N.
  void forward(const Eigen::Ref<const Matrix<T>>& x, Matrix<T>& y) const;
  /// From dy (out × N) and the forward input x: sets grad_weight, grad_bias, and dx = W^T dy.
  void backward(const Eigen::Ref<const Matrix<T>>& x, const Matrix<T>& dy, Matrix<T>& dx);
  /// The two halves of backward: grad_weight = dy x^T, grad_bias = Σ dy; and dx = W^T dy.
  void param_grads(const Eigen::Ref<const Matrix<T>>& x, const Matrix<T>& dy);
  void input_grad(const Matrix<T>& dy, Matrix<T>& dx) const;

  RowMatrix<T> weight;  ///< out × in, PyTorch layout
  Vector<T> bias;
  RowMatrix<T> grad_weight;
  Vector<T> grad_bias;
};

extern template class Linear<float>;
extern template class Linear<double>;

}  // namespace bppsa
