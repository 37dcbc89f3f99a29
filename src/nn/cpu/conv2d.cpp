// Conv2d, CPU half: im2col + Eigen GEMM forward, direct CSR Jacobian values (a gather of the
// weights through the pattern's index map), and the GEMM + col2im kernels of sequential BP.
#include <cmath>
#include <random>

#include "bppsa/core/error.hpp"
#include "core/random.hpp"
#include "nn/cnn_layers.hpp"

namespace bppsa::detail {

template <class T>
using ColMap = Eigen::Map<Matrix<T>>;
template <class T>
using CColMap = Eigen::Map<const Matrix<T>>;

template <class T>
Conv2d<T>::Conv2d(const LayerSpec& spec, const Shape3& in)
    : Layer<T>(spec, in, window_output(in, spec.out, spec.window, "conv")) {
  weight = grad_weight = RowMatrix<T>::Zero(spec.out, patch());
  bias = grad_bias = Vector<T>::Zero(spec.out);
}

template <class T>
std::vector<ParamRef<T>> Conv2d<T>::params() {
  const Window2d& w = this->spec_.window;
  return {{"weight", {this->out_.c, this->in_.c, w.kh, w.kw}, weight.data(), grad_weight.data(), weight.size()},
          {"bias", {this->out_.c}, bias.data(), grad_bias.data(), bias.size()}};
}

template <class T>
void Conv2d<T>::reset_parameters(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(patch()));
  for (Index i = 0; i < weight.size(); ++i) weight.data()[i] = static_cast<T>((uniform01(rng) * 2 - 1) * bound);
  for (Index i = 0; i < bias.size(); ++i) bias[i] = static_cast<T>((uniform01(rng) * 2 - 1) * bound);
  this->apply_mask();
}

template <class T>
void Conv2d<T>::set_mask(std::vector<std::uint8_t> mask) {
  if (!mask.empty() && static_cast<Index>(mask.size()) != weight.size())
    raise<ShapeError>("prune", this->describe() + ": mask has " + std::to_string(mask.size()) +
                                   " entries, the weight " + std::to_string(weight.size()));
  this->mask_ = std::move(mask);
  pattern_ = {};
  this->apply_mask();
}

template <class T>
void Conv2d<T>::im2col(const T* x, T* cols) const {
  const Shape3 &in = this->in_, &out = this->out_;
  const Window2d& w = this->spec_.window;
  const Index P = plane();
  for (Index c = 0; c < in.c; ++c)
    for (Index u = 0; u < w.kh; ++u)
      for (Index v = 0; v < w.kw; ++v) {
        T* col = cols + ((c * w.kh + u) * w.kw + v) * P;
        for (Index i = 0; i < out.h; ++i) {
          const Index y = i * w.sh - w.ph + u * w.dh;
          const bool row_in = y >= 0 && y < in.h;
          for (Index j = 0; j < out.w; ++j) {
            const Index xx = j * w.sw - w.pw + v * w.dw;
            col[i * out.w + j] = row_in && xx >= 0 && xx < in.w ? x[(c * in.h + y) * in.w + xx] : T(0);
          }
        }
      }
}

template <class T>
void Conv2d<T>::col2im(const T* cols, T* x) const {
  const Shape3 &in = this->in_, &out = this->out_;
  const Window2d& w = this->spec_.window;
  const Index P = plane();
  std::fill(x, x + in.size(), T(0));
  for (Index c = 0; c < in.c; ++c)
    for (Index u = 0; u < w.kh; ++u)
      for (Index v = 0; v < w.kw; ++v) {
        const T* col = cols + ((c * w.kh + u) * w.kw + v) * P;
        for (Index i = 0; i < out.h; ++i) {
          const Index y = i * w.sh - w.ph + u * w.dh;
          if (y < 0 || y >= in.h) continue;
          for (Index j = 0; j < out.w; ++j) {
            const Index xx = j * w.sw - w.pw + v * w.dw;
            if (xx >= 0 && xx < in.w) x[(c * in.h + y) * in.w + xx] += col[i * out.w + j];
          }
        }
      }
}

template <class T>
void Conv2d<T>::forward(const Matrix<T>& x, Matrix<T>& y, int threads) {
  const Index B = x.cols(), P = plane(), K = patch(), O = this->out_.c;
  batch_ = B;
  cols_.resize(static_cast<std::size_t>(B * P * K));
  y.resize(this->out_.size(), B);
  // weight (O × K, row-major) is W^T as a K × O column-major matrix; sample b's output
  // (O × P row-major) is P × O column-major: Y_b^T = cols_b · W^T.
  const CColMap<T> wt(weight.data(), K, O);
#pragma omp parallel for num_threads(team(threads)) schedule(static)
  for (Index b = 0; b < B; ++b) {
    T* cols = cols_.data() + b * P * K;
    im2col(x.col(b).data(), cols);
    ColMap<T> yb(y.col(b).data(), P, O);
    yb.noalias() = CColMap<T>(cols, P, K) * wt;
    yb.rowwise() += bias.transpose();
  }
}

template <class T>
Jacobian<T> Conv2d<T>::make_jacobian(Index) {
  if (!pattern_.pattern) pattern_ = conv2d_pattern(this->in_, this->out_.c, this->spec_.window, this->mask_);
  return Jacobian<T>::csr(pattern_.pattern, 1);
}

template <class T>
void Conv2d<T>::fill_jacobian(const Matrix<T>&, const Matrix<T>&, Jacobian<T>& jt, int threads) {
  T* v = jt.values().data();
  const std::int32_t* idx = pattern_.weight_index.data();
  const T* w = weight.data();
  const auto nnz = static_cast<Index>(pattern_.weight_index.size());
#pragma omp parallel for num_threads(team(threads)) schedule(static)
  for (Index p = 0; p < nnz; ++p) v[p] = w[idx[p]];
}

template <class T>
void Conv2d<T>::backward_input(const Matrix<T>&, const Matrix<T>&, const Matrix<T>& g_out, Matrix<T>& g_in,
                               int threads) {
  const Index B = g_out.cols(), P = plane(), K = patch(), O = this->out_.c;
  g_in.resize(this->in_.size(), B);
  const CColMap<T> wt(weight.data(), K, O);
  if (dcols_.size() < static_cast<std::size_t>(team(threads))) dcols_.resize(static_cast<std::size_t>(team(threads)));
#pragma omp parallel for num_threads(team(threads)) schedule(static)
  for (Index b = 0; b < B; ++b) {
    auto& dcols = dcols_[static_cast<std::size_t>(omp_get_thread_num())];
    dcols.resize(static_cast<std::size_t>(P * K));
    // dcols_b (P × K) = G_b^T (P × O) · W (O × K)
    ColMap<T>(dcols.data(), P, K).noalias() = CColMap<T>(g_out.col(b).data(), P, O) * wt.transpose();
    col2im(dcols.data(), g_in.col(b).data());
  }
}

template <class T>
void Conv2d<T>::param_grads(const Matrix<T>&, const Matrix<T>& g_out, int threads) {
  const Index B = g_out.cols(), P = plane(), K = patch(), O = this->out_.c;
  if (B != batch_)
    raise<InvalidArgument>("conv", "gradient batch " + std::to_string(B) + " is not the last forward's " +
                                       std::to_string(batch_));
  // A fixed number of partial sums over fixed sample ranges, added in order: the result does
  // not depend on the thread count.
  const Index parts = std::min<Index>(B, 8);
  part_.resize(static_cast<std::size_t>(parts));
  part_b_.resize(static_cast<std::size_t>(parts));
#pragma omp parallel for num_threads(team(threads)) schedule(static, 1)
  for (Index t = 0; t < parts; ++t) {
    Matrix<T>& part = part_[static_cast<std::size_t>(t)];
    Vector<T>& part_b = part_b_[static_cast<std::size_t>(t)];
    part.setZero(K, O);
    part_b.setZero(O);
    for (Index b = t * B / parts; b < (t + 1) * B / parts; ++b) {
      const CColMap<T> gb(g_out.col(b).data(), P, O);
      // ∇W^T (K × O) += cols_b^T (K × P) · G_b^T (P × O)
      part.noalias() += CColMap<T>(cols_.data() + b * P * K, P, K).transpose() * gb;
      part_b += gb.colwise().sum().transpose();
    }
  }
  ColMap<T> gw(grad_weight.data(), K, O);  // [O, K] row-major = K × O column-major
  gw.setZero();
  grad_bias.setZero();
  for (Index t = 0; t < parts; ++t) {
    gw += part_[static_cast<std::size_t>(t)];
    grad_bias += part_b_[static_cast<std::size_t>(t)];
  }
  this->apply_mask();
}

template class Conv2d<float>;
template class Conv2d<double>;

}  // namespace bppsa::detail
