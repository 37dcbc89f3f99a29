// Transposed Jacobians in compact form (docs/method.md §3): the elements of the BPPSA scan.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bppsa/core/aligned.hpp"
#include "bppsa/core/types.hpp"
#include "bppsa/jacobian/csr_pattern.hpp"

namespace bppsa {

/// How a transposed Jacobian J^T (or a product of them) is stored.
///  - identity:           I (square); no values.
///  - diagonal:           diag(d) (square); `rows` values per sample.
///  - dense:              rows × cols, column-major; rows·cols values per sample.
///  - csr:                values of a fixed CsrPattern; nnz values per sample.
///  - shared_dense_diag:  S · diag(d) with S (rows × cols) shared by the whole batch and d
///                        (cols values) per sample: an RNN's W_hh^T · diag(1 − h_t²).
enum class Kind : std::uint8_t { identity, diagonal, dense, csr, shared_dense_diag };
inline constexpr int kKindCount = 5;

/// "identity", "diagonal", "dense", "csr", "shared_dense_diag".
const char* to_string(Kind kind);

/// Everything about a Jacobian except its values: what the scan plans on.
///
/// `count` is 1 when one Jacobian serves every sample of the batch (Linear W^T, Conv2d),
/// or B when each sample has its own (activation derivatives). Values are stored sample
/// after sample, `values_per_sample()` each.
template <class T>
struct Layout {
  Kind kind = Kind::identity;
  Index rows = 0;
  Index cols = 0;
  Index count = 1;
  CsrPatternPtr pattern;                          ///< kind == csr
  std::shared_ptr<const Matrix<T>> shared_dense;  ///< kind == shared_dense_diag: S

  Index values_per_sample() const;
  bool shared() const { return count == 1; }
  /// ShapeError / InvalidArgument (under `op`) for inconsistent fields: a negative shape,
  /// count < 1, a non-square identity or diagonal, a missing or misshaped CSR pattern or S.
  /// What Jacobian's constructor checks.
  void check(const char* op) const;
  /// "dense 20×30 ×16" for messages.
  std::string describe() const;
};

/// A transposed Jacobian J^T (one row per input element, one column per output element,
/// so g_in = J^T g_out) for one sample or a batch, owning its values.
///
/// Create with the factories, then fill values in place every step: the layout (kind,
/// shape, pattern, shared matrix) is what the scan plans on, so keeping it unchanged lets
/// the scan reuse its plan and buffers.
template <class T>
class Jacobian {
 public:
  Jacobian() = default;
  explicit Jacobian(Layout<T> layout);

  static Jacobian identity(Index n);
  /// diag(d), n × n; count = 1 (shared) or the batch size.
  static Jacobian diagonal(Index n, Index count = 1);
  static Jacobian dense(Index rows, Index cols, Index count = 1);
  static Jacobian csr(CsrPatternPtr pattern, Index count = 1);
  /// S · diag(d_b) with S shared (rows × cols) and d_b of length cols for each sample b.
  static Jacobian shared_dense_diag(std::shared_ptr<const Matrix<T>> s, Index count);

  const Layout<T>& layout() const { return layout_; }
  Kind kind() const { return layout_.kind; }
  Index rows() const { return layout_.rows; }
  Index cols() const { return layout_.cols; }
  Index count() const { return layout_.count; }
  bool shared() const { return layout_.shared(); }

  /// All values, sample after sample.
  std::span<T> values() { return values_; }
  std::span<const T> values() const { return values_; }
  /// The values of sample s (s < count()).
  std::span<T> sample(Index s);
  std::span<const T> sample(Index s) const;
  /// Sample s of a dense Jacobian as a rows × cols matrix.
  Eigen::Map<Matrix<T>> dense_map(Index s);
  Eigen::Map<const Matrix<T>> dense_map(Index s) const;

  /// Sample s as a dense matrix (for tests, small sizes and printing).
  Matrix<T> to_dense(Index s = 0) const;

 private:
  Layout<T> layout_;
  AlignedVector<T> values_;
};

/// A non-owning view: layout plus values (sample after sample). Product kernels take views
/// so that the scan can place intermediate products in reused workspace buffers.
template <class T>
struct JacobianView {
  const Layout<T>* layout = nullptr;
  const T* values = nullptr;
  /// Distance between consecutive samples' values; -1 = packed (values_per_sample()).
  Index stride = -1;

  /// Values of sample s; a shared Jacobian answers every sample with its one set.
  const T* sample(Index s) const {
    return values + (layout->shared() ? 0 : s) * (stride >= 0 ? stride : layout->values_per_sample());
  }
};

template <class T>
JacobianView<T> view(const Jacobian<T>& j) {
  return {&j.layout(), j.values().data()};
}

/// Sample s of any view as a dense matrix.
template <class T>
Matrix<T> to_dense(const JacobianView<T>& j, Index s);

extern template class Jacobian<float>;
extern template class Jacobian<double>;
extern template struct Layout<float>;
extern template struct Layout<double>;

}  // namespace bppsa
