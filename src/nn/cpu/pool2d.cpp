// MaxPool2d / AvgPool2d, CPU half: forward (recording each window's argmax), Jacobian values
// through the fixed pattern (max: a 1 per output at its argmax tap, explicit zeros elsewhere;
// avg: 1/taps everywhere) and the scatter kernels of sequential BP.
#include <cmath>
#include <limits>

#include "bppsa/core/error.hpp"
#include "nn/cnn_layers.hpp"

namespace bppsa::detail {

template <class T>
Pool2d<T>::Pool2d(const LayerSpec& spec, const Shape3& in)
    : Layer<T>(spec, in, window_output(in, in.c, spec.window, to_string(spec.type))) {
  const Window2d& w = spec.window;
  if (2 * w.ph > w.kh || 2 * w.pw > w.kw)
    raise<ShapeError>(to_string(spec.type), "padding " + std::to_string(w.ph) + "×" + std::to_string(w.pw) +
                                                " is more than half the kernel " + std::to_string(w.kh) + "×" +
                                                std::to_string(w.kw) + " (PyTorch's limit): use padding ≤ kernel/2");
  if (w.dh != 1 || w.dw != 1) raise<ShapeError>(to_string(spec.type), "pooling takes no dilation");
}

namespace {
/// Visits the in-bounds taps of output (c, i, j): f(input index, tap).
template <class F>
void window_taps(const Shape3& in, const Window2d& w, Index c, Index i, Index j, F&& f) {
  for (Index u = 0; u < w.kh; ++u) {
    const Index y = i * w.sh - w.ph + u;
    if (y < 0 || y >= in.h) continue;
    for (Index v = 0; v < w.kw; ++v) {
      const Index x = j * w.sw - w.pw + v;
      if (x >= 0 && x < in.w) f((c * in.h + y) * in.w + x, u * w.kw + v);
    }
  }
}
}  // namespace

template <class T>
void Pool2d<T>::forward(const Matrix<T>& x, Matrix<T>& y, int threads) {
  const Shape3 &in = this->in_, &out = this->out_;
  const Window2d& w = this->spec_.window;
  const Index B = x.cols(), n = out.size();
  y.resize(n, B);
  if (max()) argtap_.resize(static_cast<std::size_t>(n * B));
  const T inv = T(1) / static_cast<T>(w.taps());
#pragma omp parallel for num_threads(team(threads)) schedule(static) collapse(2)
  for (Index b = 0; b < B; ++b)
    for (Index c = 0; c < out.c; ++c) {
      const T* xb = x.col(b).data();
      for (Index i = 0; i < out.h; ++i)
        for (Index j = 0; j < out.w; ++j) {
          const Index q = (c * out.h + i) * out.w + j;
          if (max()) {
            // PyTorch's rule: the first maximum in row-major window order (a NaN wins); the
            // first in-bounds tap when every value is −inf.
            T best = -std::numeric_limits<T>::infinity();
            std::int32_t tap = -1;
            window_taps(in, w, c, i, j, [&](Index k, Index t) {
              if (tap < 0) tap = static_cast<std::int32_t>(t);
              if (xb[k] > best || std::isnan(xb[k])) {
                best = xb[k];
                tap = static_cast<std::int32_t>(t);
              }
            });
            y(q, b) = best;
            argtap_[static_cast<std::size_t>(b * n + q)] = tap;
          } else {
            T sum = 0;
            window_taps(in, w, c, i, j, [&](Index k, Index) { sum += xb[k]; });
            y(q, b) = sum * inv;
          }
        }
    }
}

template <class T>
const PoolPattern& Pool2d<T>::pattern() {
  if (!pattern_.pattern) pattern_ = pool2d_pattern(this->in_, this->spec_.window);
  return pattern_;
}

template <class T>
Jacobian<T> Pool2d<T>::make_jacobian(Index batch) {
  return Jacobian<T>::csr(pattern().pattern, max() ? batch : 1);
}

template <class T>
void Pool2d<T>::fill_jacobian(const Matrix<T>&, const Matrix<T>&, Jacobian<T>& jt, int threads) {
  const PoolPattern& p = pattern();
  const Index taps = this->spec_.window.taps(), n = this->out_.size();
  if (!max()) {
    std::fill(jt.values().begin(), jt.values().end(), T(1) / static_cast<T>(taps));
    return;
  }
  const Index B = jt.count();
#pragma omp parallel for num_threads(team(threads)) schedule(static)
  for (Index b = 0; b < B; ++b) {
    const std::span<T> v = jt.sample(b);
    std::fill(v.begin(), v.end(), T(0));
    const std::int32_t* arg = argtap_.data() + b * n;
    for (Index q = 0; q < n; ++q) v[static_cast<std::size_t>(p.tap_position[static_cast<std::size_t>(q * taps + arg[q])])] = T(1);
  }
}

template <class T>
void Pool2d<T>::backward_input(const Matrix<T>&, const Matrix<T>&, const Matrix<T>& g_out, Matrix<T>& g_in,
                               int threads) {
  const Shape3 &in = this->in_, &out = this->out_;
  const Window2d& w = this->spec_.window;
  const Index B = g_out.cols(), n = out.size();
  g_in.setZero(in.size(), B);
  const T inv = T(1) / static_cast<T>(w.taps());
  // Channels never mix, so (sample, channel) blocks are independent.
#pragma omp parallel for num_threads(team(threads)) schedule(static) collapse(2)
  for (Index b = 0; b < B; ++b)
    for (Index c = 0; c < out.c; ++c) {
      T* gi = g_in.col(b).data();
      for (Index i = 0; i < out.h; ++i)
        for (Index j = 0; j < out.w; ++j) {
          const Index q = (c * out.h + i) * out.w + j;
          const T g = g_out(q, b);
          if (max()) {
            const std::int32_t tap = argtap_[static_cast<std::size_t>(b * n + q)];
            const Index y = i * w.sh - w.ph + tap / w.kw, x = j * w.sw - w.pw + tap % w.kw;
            gi[(c * in.h + y) * in.w + x] += g;
          } else {
            window_taps(in, w, c, i, j, [&](Index k, Index) { gi[k] += g * inv; });
          }
        }
    }
}

template class Pool2d<float>;
template class Pool2d<double>;

}  // namespace bppsa::detail
