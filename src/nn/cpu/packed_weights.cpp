// PackedWeights: Eigen's GEMM pieces (nn/cpu/gebp.hpp) driven with W packed once, one block of
// kProductRows rows at full depth per call.
#include "nn/cpu/packed_weights.hpp"

#include <Eigen/Core>
#include <algorithm>

#include "nn/cpu/gebp.hpp"
#include "nn/cpu/parallel.hpp"

namespace bppsa::detail {

namespace {
/// Products of fewer columns take Eigen's matrix-vector path (wide ones, parallel_step_product's columns).
constexpr Index kMinCols = 4;

template <class T>
void eigen_product(int threads, const T* w, Index rows, Index depth, Index stride, bool col_major, T* dst,
                   Index dst_stride, const T* h, Index h_stride, Index n, bool accumulate) {
  using RowMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
  using ColMap = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
  Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>> d(dst, rows, n, Eigen::OuterStride<>(dst_stride));
  const ColMap hm(h, depth, n, Eigen::OuterStride<>(h_stride));
  if (col_major)
    parallel_step_product(threads, d, ColMap(w, rows, depth, Eigen::OuterStride<>(stride)), hm, accumulate);
  else
    parallel_step_product(threads, d, RowMap(w, rows, depth, Eigen::OuterStride<>(stride)), hm, accumulate);
}

}  // namespace

template <class T>
void PackedWeights<T>::pack(const T* w, Index rows, Index depth, Index stride, bool col_major) {
  w_ = w;
  rows_ = rows;
  depth_ = depth;
  stride_ = stride;
  col_major_ = col_major;
  packed_now_ = false;
}

template <class T>
void PackedWeights<T>::product(int threads, T* dst, Index dst_stride, const T* h, Index h_stride, Index n,
                               bool accumulate) {
#ifdef BPPSA_EIGEN_GEBP
  if (n >= kMinCols && n < kWideColumns && depth_ > 0) {
    using K = GebpKernel<T>;
    if (!packed_now_) {  // W in blocks of kProductRows rows, once
      packed_.resize(static_cast<std::size_t>(rows_ * depth_));
      for (Index r0 = 0; r0 < rows_; r0 += kProductRows)
        K::pack_lhs(packed_.data() + r0 * depth_, w_, stride_, !col_major_, r0, 0, depth_,
                    std::min(kProductRows, rows_ - r0));
      packed_now_ = true;
    }
    rhs_.resize(static_cast<std::size_t>(depth_ * n));  // h packed once, read by every block
    K::pack_rhs(rhs_.data(), h, h_stride, /*row_major=*/false, 0, 0, depth_, n);
    const Index blocks = (rows_ + kProductRows - 1) / kProductRows;
    const double flops = 2.0 * static_cast<double>(rows_) * static_cast<double>(depth_) * static_cast<double>(n);
    claimed_blocks(team_for(flops, threads), blocks, [&](Index b) {
      const Index r0 = b * kProductRows, len = std::min(kProductRows, rows_ - r0);
      if (!accumulate)
        for (Index j = 0; j < n; ++j) std::fill_n(dst + j * dst_stride + r0, len, T(0));
      K::gebp(dst + r0, dst_stride, packed_.data() + r0 * depth_, rhs_.data(), len, depth_, n);
    });
    return;
  }
#endif
  eigen_product(threads, w_, rows_, depth_, stride_, col_major_, dst, dst_stride, h, h_stride, n, accumulate);
}

template class PackedWeights<float>;
template class PackedWeights<double>;

}  // namespace bppsa::detail
