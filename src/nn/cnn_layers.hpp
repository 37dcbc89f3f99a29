// The concrete CNN layers behind make_layer (bppsa/nn/layers.hpp). Each is declared once
// here; its CPU half (forward, Jacobian values, BP kernels) is in src/nn/cpu/.
#pragma once

#include <omp.h>

#include "bppsa/core/aligned.hpp"
#include "bppsa/nn/layers.hpp"
#include "bppsa/nn/linear.hpp"

namespace bppsa::detail {

/// OpenMP thread count for a `threads` option (0 = OpenMP's default).
inline int team(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

/// nn.Conv2d(C, O, (KH, KW), stride, padding, dilation), bias = True.
template <class T>
class Conv2d final : public Layer<T> {
 public:
  Conv2d(const LayerSpec& spec, const Shape3& in);
  std::vector<ParamRef<T>> params() override;
  void reset_parameters(std::uint64_t seed) override;
  void set_mask(std::vector<std::uint8_t> mask) override;
  void forward(const Matrix<T>& x, Matrix<T>& y, int threads) override;
  Jacobian<T> make_jacobian(Index batch) override;
  void fill_jacobian(const Matrix<T>& x, const Matrix<T>& y, Jacobian<T>& jt, int threads) override;
  void backward_input(const Matrix<T>& x, const Matrix<T>& y, const Matrix<T>& g_out, Matrix<T>& g_in,
                      int threads) override;
  void param_grads(const Matrix<T>& x, const Matrix<T>& g_out, int threads) override;

  RowMatrix<T> weight, grad_weight;  ///< O × (C·KH·KW): [O, C, KH, KW] row-major
  Vector<T> bias, grad_bias;

 private:
  Index patch() const { return this->in_.c * this->spec_.window.taps(); }  ///< C·KH·KW
  Index plane() const { return this->out_.h * this->out_.w; }              ///< H'·W'
  /// im2col of one sample, transposed: P × (C·KH·KW) column-major (P = H'·W').
  void im2col(const T* x, T* cols) const;
  void col2im(const T* cols, T* x) const;
  AlignedVector<T> cols_;  ///< the last forward's im2col, sample after sample
  Index batch_ = 0;
  // Buffers kept between steps (no allocation in the backward hot path): per-thread col2im
  // input of backward_input; the fixed partial sums of param_grads.
  std::vector<AlignedVector<T>> dcols_;
  std::vector<Matrix<T>> part_;
  std::vector<Vector<T>> part_b_;
  ConvPattern pattern_;  ///< built on first use, rebuilt when the mask changes
};

/// nn.MaxPool2d(kernel, stride, padding) and nn.AvgPool2d(kernel, stride, padding) with
/// count_include_pad = True, ceil_mode = False.
template <class T>
class Pool2d final : public Layer<T> {
 public:
  Pool2d(const LayerSpec& spec, const Shape3& in);
  void forward(const Matrix<T>& x, Matrix<T>& y, int threads) override;
  Jacobian<T> make_jacobian(Index batch) override;
  void fill_jacobian(const Matrix<T>& x, const Matrix<T>& y, Jacobian<T>& jt, int threads) override;
  void backward_input(const Matrix<T>& x, const Matrix<T>& y, const Matrix<T>& g_out, Matrix<T>& g_in,
                      int threads) override;

 private:
  bool max() const { return this->spec_.type == LayerType::maxpool; }
  const PoolPattern& pattern();
  /// maxpool: the tap (u·kw + v) of each output's maximum, out_size × B.
  std::vector<std::int32_t> argtap_;
  PoolPattern pattern_;
};

/// ReLU, Tanh (diagonal Jacobians) and Flatten (none).
template <class T>
class Pointwise final : public Layer<T> {
 public:
  Pointwise(const LayerSpec& spec, const Shape3& in, const Shape3& out);
  void forward(const Matrix<T>& x, Matrix<T>& y, int threads) override;
  bool has_jacobian() const override { return this->spec_.type != LayerType::flatten; }
  Jacobian<T> make_jacobian(Index batch) override;
  void fill_jacobian(const Matrix<T>& x, const Matrix<T>& y, Jacobian<T>& jt, int threads) override;
  void backward_input(const Matrix<T>& x, const Matrix<T>& y, const Matrix<T>& g_out, Matrix<T>& g_in,
                      int threads) override;
};

/// nn.Linear on a flat input; J^T = W^T dense, or CSR over the unpruned weights.
template <class T>
class LinearLayer final : public Layer<T> {
 public:
  LinearLayer(const LayerSpec& spec, const Shape3& in);
  std::vector<ParamRef<T>> params() override;
  void reset_parameters(std::uint64_t seed) override;
  void set_mask(std::vector<std::uint8_t> mask) override;
  void forward(const Matrix<T>& x, Matrix<T>& y, int threads) override;
  Jacobian<T> make_jacobian(Index batch) override;
  void fill_jacobian(const Matrix<T>& x, const Matrix<T>& y, Jacobian<T>& jt, int threads) override;
  void backward_input(const Matrix<T>& x, const Matrix<T>& y, const Matrix<T>& g_out, Matrix<T>& g_in,
                      int threads) override;
  void param_grads(const Matrix<T>& x, const Matrix<T>& g_out, int threads) override;

  Linear<T> linear;

 private:
  CsrPatternPtr pattern_;               ///< pruned: rows = inputs k, columns = outputs o
  std::vector<std::int32_t> weight_index_;  ///< entry p = weight[weight_index_[p]]
};

}  // namespace bppsa::detail
