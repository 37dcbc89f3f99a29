// Jacobian storage: layouts, factories and dense conversion.
#include "bppsa/jacobian/jacobian.hpp"

#include "bppsa/core/error.hpp"

namespace bppsa {

const char* to_string(Kind kind) {
  switch (kind) {
    case Kind::identity:
      return "identity";
    case Kind::diagonal:
      return "diagonal";
    case Kind::dense:
      return "dense";
    case Kind::csr:
      return "csr";
    case Kind::shared_dense_diag:
      return "shared_dense_diag";
  }
  return "unknown";
}

template <class T>
Index Layout<T>::values_per_sample() const {
  switch (kind) {
    case Kind::identity:
      return 0;
    case Kind::diagonal:
      return rows;
    case Kind::dense:
      return rows * cols;
    case Kind::csr:
      return pattern ? pattern->nnz() : 0;
    case Kind::shared_dense_diag:
      return cols;
  }
  return 0;
}

template <class T>
std::string Layout<T>::describe() const {
  std::string s = std::string(to_string(kind)) + " " + shape_string(rows, cols);
  if (kind == Kind::csr && pattern) s += " (nnz " + std::to_string(pattern->nnz()) + ")";
  s += count == 1 ? " shared" : " ×" + std::to_string(count) + " samples";
  return s;
}

template <class T>
void Layout<T>::check(const char* op) const {
  if (rows < 0 || cols < 0) detail::raise<InvalidArgument>(op, "negative shape " + shape_string(rows, cols));
  if (count < 1)
    detail::raise<InvalidArgument>(op,
                                   "count must be ≥ 1 (1 = shared by the batch, B = one per "
                                   "sample), got " +
                                       std::to_string(count));
  switch (kind) {
    case Kind::identity:
    case Kind::diagonal:
      if (rows != cols)
        detail::raise<ShapeError>(op,
                                  std::string(to_string(kind)) + " must be square, got " + shape_string(rows, cols));
      break;
    case Kind::dense:
      break;
    case Kind::csr:
      if (!pattern) detail::raise<InvalidArgument>(op, "csr Jacobian without a pattern");
      if (pattern->rows() != rows || pattern->cols() != cols)
        detail::raise<ShapeError>(op, "pattern is " + shape_string(pattern->rows(), pattern->cols()) +
                                          " but the Jacobian is " + shape_string(rows, cols));
      break;
    case Kind::shared_dense_diag:
      if (!shared_dense) detail::raise<InvalidArgument>(op, "shared_dense_diag Jacobian without its shared matrix S");
      if (shared_dense->rows() != rows || shared_dense->cols() != cols)
        detail::raise<ShapeError>(op, "S is " + shape_string(shared_dense->rows(), shared_dense->cols()) +
                                          " but the Jacobian is " + shape_string(rows, cols));
      break;
  }
}

template <class T>
Jacobian<T>::Jacobian(Layout<T> layout) : layout_(std::move(layout)) {
  layout_.check("Jacobian");
  if (layout_.kind == Kind::identity) layout_.count = 1;
  values_.assign(static_cast<std::size_t>(layout_.values_per_sample() * layout_.count), T(0));
}

template <class T>
Jacobian<T> Jacobian<T>::identity(Index n) {
  return Jacobian(Layout<T>{Kind::identity, n, n, 1, nullptr, nullptr});
}
template <class T>
Jacobian<T> Jacobian<T>::diagonal(Index n, Index count) {
  return Jacobian(Layout<T>{Kind::diagonal, n, n, count, nullptr, nullptr});
}
template <class T>
Jacobian<T> Jacobian<T>::dense(Index rows, Index cols, Index count) {
  return Jacobian(Layout<T>{Kind::dense, rows, cols, count, nullptr, nullptr});
}
template <class T>
Jacobian<T> Jacobian<T>::csr(CsrPatternPtr pattern, Index count) {
  if (!pattern) detail::raise<InvalidArgument>("Jacobian::csr", "null pattern");
  const Index rows = pattern->rows(), cols = pattern->cols();
  return Jacobian(Layout<T>{Kind::csr, rows, cols, count, std::move(pattern), nullptr});
}
template <class T>
Jacobian<T> Jacobian<T>::shared_dense_diag(std::shared_ptr<const Matrix<T>> s, Index count) {
  if (!s) detail::raise<InvalidArgument>("Jacobian::shared_dense_diag", "null shared matrix S");
  const Index rows = s->rows(), cols = s->cols();
  return Jacobian(Layout<T>{Kind::shared_dense_diag, rows, cols, count, nullptr, std::move(s)});
}

template <class T>
std::span<T> Jacobian<T>::sample(Index s) {
  const Index n = layout_.values_per_sample();
  return std::span<T>(values_).subspan(static_cast<std::size_t>(s * n), static_cast<std::size_t>(n));
}
template <class T>
std::span<const T> Jacobian<T>::sample(Index s) const {
  const Index n = layout_.values_per_sample();
  return std::span<const T>(values_).subspan(static_cast<std::size_t>(s * n), static_cast<std::size_t>(n));
}
template <class T>
Eigen::Map<Matrix<T>> Jacobian<T>::dense_map(Index s) {
  if (layout_.kind != Kind::dense)
    detail::raise<InvalidArgument>("Jacobian::dense_map", "Jacobian is " + layout_.describe() + ", not dense");
  return {sample(s).data(), layout_.rows, layout_.cols};
}
template <class T>
Eigen::Map<const Matrix<T>> Jacobian<T>::dense_map(Index s) const {
  if (layout_.kind != Kind::dense)
    detail::raise<InvalidArgument>("Jacobian::dense_map", "Jacobian is " + layout_.describe() + ", not dense");
  return {sample(s).data(), layout_.rows, layout_.cols};
}
template <class T>
Matrix<T> Jacobian<T>::to_dense(Index s) const {
  return bppsa::to_dense(view(*this), s);
}

template <class T>
Matrix<T> to_dense(const JacobianView<T>& j, Index s) {
  const Layout<T>& l = *j.layout;
  const T* v = j.sample(s);
  Matrix<T> m = Matrix<T>::Zero(l.rows, l.cols);
  switch (l.kind) {
    case Kind::identity:
      m.setIdentity();
      break;
    case Kind::diagonal:
      for (Index i = 0; i < l.rows; ++i) m(i, i) = v[i];
      break;
    case Kind::dense:
      m = Eigen::Map<const Matrix<T>>(v, l.rows, l.cols);
      break;
    case Kind::csr: {
      const auto rp = l.pattern->row_ptr();
      const auto ci = l.pattern->col_idx();
      for (Index r = 0; r < l.rows; ++r)
        for (std::int32_t p = rp[r]; p < rp[r + 1]; ++p) m(r, ci[p]) = v[p];
      break;
    }
    case Kind::shared_dense_diag:
      m = *l.shared_dense * Eigen::Map<const Vector<T>>(v, l.cols).asDiagonal();
      break;
  }
  return m;
}

template struct Layout<float>;
template struct Layout<double>;
template class Jacobian<float>;
template class Jacobian<double>;
template Matrix<float> to_dense(const JacobianView<float>&, Index);
template Matrix<double> to_dense(const JacobianView<double>&, Index);

}  // namespace bppsa
