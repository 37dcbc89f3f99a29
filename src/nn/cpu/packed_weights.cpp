// PackedWeights: Eigen's GEMM pieces (gemm_pack_lhs, gemm_pack_rhs, gebp_kernel, internal in Eigen 3.4)
// driven with W packed once, one block of kProductRows rows at full depth per call.
#include "nn/cpu/packed_weights.hpp"

#include <Eigen/Core>
#include <algorithm>

#include "nn/cpu/parallel.hpp"

namespace bppsa::detail {

#if EIGEN_VERSION_AT_LEAST(3, 4, 0) && !EIGEN_VERSION_AT_LEAST(3, 4, 90)
#define BPPSA_PACKED_WEIGHTS 1
#endif

namespace {
/// Products of fewer columns take Eigen's matrix-vector path (wide ones, parallel_step_product's columns).
constexpr Index kMinCols = 4;

template <class T>
void eigen_product(int threads, const T* w, Index rows, Index depth, Index stride, bool col_major, T* dst,
                   Index dst_stride, const T* h, Index h_stride, Index n) {
  using RowMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
  using ColMap = Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>;
  Eigen::Map<Matrix<T>, 0, Eigen::OuterStride<>> d(dst, rows, n, Eigen::OuterStride<>(dst_stride));
  const ColMap hm(h, depth, n, Eigen::OuterStride<>(h_stride));
  if (col_major)
    parallel_step_product(threads, d, ColMap(w, rows, depth, Eigen::OuterStride<>(stride)), hm);
  else
    parallel_step_product(threads, d, RowMap(w, rows, depth, Eigen::OuterStride<>(stride)), hm);
}

#ifdef BPPSA_PACKED_WEIGHTS
template <class T>
struct Kernel {
  using Traits = Eigen::internal::gebp_traits<T, T>;
  using LhsMapper = Eigen::internal::const_blas_data_mapper<T, Index, Eigen::RowMajor>;
  using ColLhsMapper = Eigen::internal::const_blas_data_mapper<T, Index, Eigen::ColMajor>;
  using RhsMapper = Eigen::internal::const_blas_data_mapper<T, Index, Eigen::ColMajor>;
  using ResMapper = Eigen::internal::blas_data_mapper<T, Index, Eigen::ColMajor, Eigen::Unaligned, 1>;
  Eigen::internal::gemm_pack_lhs<T, Index, LhsMapper, Traits::mr, Traits::LhsProgress,
                                 typename Traits::LhsPacket4Packing, Eigen::RowMajor>
      pack_lhs;
  Eigen::internal::gemm_pack_lhs<T, Index, ColLhsMapper, Traits::mr, Traits::LhsProgress,
                                 typename Traits::LhsPacket4Packing, Eigen::ColMajor>
      pack_col_lhs;
  Eigen::internal::gemm_pack_rhs<T, Index, RhsMapper, Traits::nr, Eigen::ColMajor> pack_rhs;
  Eigen::internal::gebp_kernel<T, T, Index, ResMapper, Traits::mr, Traits::nr, false, false> gebp;
};
#endif
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
void PackedWeights<T>::product(int threads, T* dst, Index dst_stride, const T* h, Index h_stride, Index n) {
#ifdef BPPSA_PACKED_WEIGHTS
  if (n >= kMinCols && n < kWideColumns && depth_ > 0) {
    Kernel<T> k;
    if (!packed_now_) {  // W in blocks of kProductRows rows, once
      packed_.resize(static_cast<std::size_t>(rows_ * depth_));
      for (Index r0 = 0; r0 < rows_; r0 += kProductRows) {
        T* block = packed_.data() + r0 * depth_;
        const Index len = std::min(kProductRows, rows_ - r0);
        if (col_major_)
          k.pack_col_lhs(block, typename Kernel<T>::ColLhsMapper(w_ + r0, stride_), depth_, len);
        else
          k.pack_lhs(block, typename Kernel<T>::LhsMapper(w_ + r0 * stride_, stride_), depth_, len);
      }
      packed_now_ = true;
    }
    rhs_.resize(static_cast<std::size_t>(depth_ * n));  // h packed once, read by every block
    k.pack_rhs(rhs_.data(), typename Kernel<T>::RhsMapper(h, h_stride), depth_, n);
    const Index blocks = (rows_ + kProductRows - 1) / kProductRows;
    const double flops = 2.0 * static_cast<double>(rows_) * static_cast<double>(depth_) * static_cast<double>(n);
    claimed_blocks(team_for(flops, threads), blocks, [&](Index b) {
      const Index r0 = b * kProductRows, len = std::min(kProductRows, rows_ - r0);
      for (Index j = 0; j < n; ++j) std::fill_n(dst + j * dst_stride + r0, len, T(0));
      k.gebp(typename Kernel<T>::ResMapper(dst + r0, dst_stride), packed_.data() + r0 * depth_, rhs_.data(), len,
             depth_, n, T(1));
    });
    return;
  }
#endif
  eigen_product(threads, w_, rows_, depth_, stride_, col_major_, dst, dst_stride, h, h_stride, n);
}

template class PackedWeights<float>;
template class PackedWeights<double>;

}  // namespace bppsa::detail
