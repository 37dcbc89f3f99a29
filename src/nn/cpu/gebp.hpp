// Eigen 3.4's GEMM pieces (internal: gemm_pack_lhs, gemm_pack_rhs, gebp_kernel), as the CPU half's
// own product drivers use them: PackedWeights (a weight packed once per forward) and
// blocked_product (every operand packed once per depth chunk).
#pragma once

#include <Eigen/Core>

#if EIGEN_VERSION_AT_LEAST(3, 4, 0) && !EIGEN_VERSION_AT_LEAST(3, 4, 90)
#define BPPSA_EIGEN_GEBP 1
#endif

#ifdef BPPSA_EIGEN_GEBP
namespace bppsa::detail {

/// The packers for either storage order of either operand, and the micro-kernel. A packed lhs
/// block is `rows` × `depth` at a time, a packed rhs block `depth` × `cols`.
template <class T>
struct GebpKernel {
  using Traits = Eigen::internal::gebp_traits<T, T>;
  template <int Order>
  using Mapper = Eigen::internal::const_blas_data_mapper<T, Eigen::Index, Order>;
  using ResMapper = Eigen::internal::blas_data_mapper<T, Eigen::Index, Eigen::ColMajor, Eigen::Unaligned, 1>;
  template <int Order>
  using PackLhs = Eigen::internal::gemm_pack_lhs<T, Eigen::Index, Mapper<Order>, Traits::mr, Traits::LhsProgress,
                                                 typename Traits::LhsPacket4Packing, Order>;
  template <int Order>
  using PackRhs = Eigen::internal::gemm_pack_rhs<T, Eigen::Index, Mapper<Order>, Traits::nr, Order>;

  /// Packs rows [i0, i0 + rows) × depth [k0, k0 + depth) of a (row-major: rows `stride` apart).
  static void pack_lhs(T* block, const T* a, Eigen::Index stride, bool row_major, Eigen::Index i0, Eigen::Index k0,
                       Eigen::Index depth, Eigen::Index rows) {
    if (row_major)
      PackLhs<Eigen::RowMajor>{}(block, Mapper<Eigen::RowMajor>(a + i0 * stride + k0, stride), depth, rows);
    else
      PackLhs<Eigen::ColMajor>{}(block, Mapper<Eigen::ColMajor>(a + i0 + k0 * stride, stride), depth, rows);
  }
  /// Packs depth [k0, k0 + depth) × columns [j0, j0 + cols) of b.
  static void pack_rhs(T* block, const T* b, Eigen::Index stride, bool row_major, Eigen::Index k0, Eigen::Index j0,
                       Eigen::Index depth, Eigen::Index cols) {
    if (row_major)
      PackRhs<Eigen::RowMajor>{}(block, Mapper<Eigen::RowMajor>(b + k0 * stride + j0, stride), depth, cols);
    else
      PackRhs<Eigen::ColMajor>{}(block, Mapper<Eigen::ColMajor>(b + k0 + j0 * stride, stride), depth, cols);
  }
  /// dst (column-major, columns `stride` apart) += packed lhs · packed rhs.
  static void gebp(T* dst, Eigen::Index stride, const T* lhs, const T* rhs, Eigen::Index rows, Eigen::Index depth,
                   Eigen::Index cols) {
    Eigen::internal::gebp_kernel<T, T, Eigen::Index, ResMapper, Traits::mr, Traits::nr, false, false>{}(
        ResMapper(dst, stride), lhs, rhs, rows, depth, cols, T(1));
  }
};

}  // namespace bppsa::detail
#endif
