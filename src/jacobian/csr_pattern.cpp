// Validation of CSR patterns (done once, at construction).
#include "bppsa/jacobian/csr_pattern.hpp"

#include <limits>

#include "bppsa/core/error.hpp"

namespace bppsa {
namespace {

std::string check_pattern(Index rows, Index cols, const std::vector<std::int32_t>& row_ptr,
                          const std::vector<std::int32_t>& col_idx) {
  const std::string shape = shape_string(rows, cols);
  if (rows < 0 || cols < 0) return "negative shape " + shape;
  if (rows > std::numeric_limits<std::int32_t>::max() || cols > std::numeric_limits<std::int32_t>::max() ||
      col_idx.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    return "CSR " + shape + " with " + std::to_string(col_idx.size()) + " entries exceeds the 32-bit index range";
  if (row_ptr.size() != static_cast<std::size_t>(rows) + 1)
    return "CSR " + shape + ": row_ptr has " + std::to_string(row_ptr.size()) +
           " entries, expected rows + 1 = " + std::to_string(rows + 1);
  if (row_ptr.front() != 0)
    return "CSR " + shape + ": row_ptr[0] is " + std::to_string(row_ptr.front()) + ", expected 0";
  if (static_cast<std::size_t>(row_ptr.back()) != col_idx.size())
    return "CSR " + shape + ": row_ptr[rows] is " + std::to_string(row_ptr.back()) + " but there are " +
           std::to_string(col_idx.size()) + " column indices";
  for (Index r = 0; r < rows; ++r)
    if (row_ptr[r + 1] < row_ptr[r])
      return "CSR " + shape + ": row_ptr decreases at row " + std::to_string(r) + " (" + std::to_string(row_ptr[r]) +
             " then " + std::to_string(row_ptr[r + 1]) + ")";
  for (Index r = 0; r < rows; ++r) {
    const std::int32_t begin = row_ptr[r], end = row_ptr[r + 1];
    for (std::int32_t p = begin; p < end; ++p) {
      const std::int32_t c = col_idx[p];
      if (c < 0 || c >= cols)
        return "CSR " + shape + ": column index " + std::to_string(c) + " at row " + std::to_string(r) + " (entry " +
               std::to_string(p) + ") is out of range [0, " + std::to_string(cols) + ")";
      if (p > begin && c <= col_idx[p - 1])
        return "CSR " + shape + ": column indices of row " + std::to_string(r) + " are not strictly increasing (" +
               std::to_string(col_idx[p - 1]) + " then " + std::to_string(c) + " at entry " + std::to_string(p) +
               "); sort each row and merge duplicates";
    }
  }
  return {};
}

}  // namespace

CsrPattern::CsrPattern(Index rows, Index cols, std::vector<std::int32_t> row_ptr, std::vector<std::int32_t> col_idx)
    : rows_(rows), cols_(cols), row_ptr_(std::move(row_ptr)), col_idx_(std::move(col_idx)) {
  error_ = check_pattern(rows_, cols_, row_ptr_, col_idx_);
}

void CsrPattern::require_valid(const std::string& context) const {
  if (!valid()) detail::raise<InvalidArgument>(context, error_);
}

double CsrPattern::sparsity() const {
  const double total = static_cast<double>(rows_) * static_cast<double>(cols_);
  return total == 0 ? 0.0 : 1.0 - static_cast<double>(nnz()) / total;
}

CsrPatternPtr make_csr_pattern(Index rows, Index cols, std::vector<std::int32_t> row_ptr,
                               std::vector<std::int32_t> col_idx) {
  auto p = std::make_shared<const CsrPattern>(rows, cols, std::move(row_ptr), std::move(col_idx));
  p->require_valid("CsrPattern");
  return p;
}

CsrTranspose transpose(const CsrPattern& pattern) {
  pattern.require_valid("transpose(CsrPattern)");
  const Index r = pattern.rows(), c = pattern.cols(), nnz = pattern.nnz();
  const std::span<const std::int32_t> ptr = pattern.row_ptr(), col = pattern.col_idx();
  // A counting sort of the entries by column (the transpose's rows), stable in rows.
  std::vector<std::int32_t> tptr(static_cast<std::size_t>(c + 1), 0), tcol(static_cast<std::size_t>(nnz));
  std::vector<std::int32_t> source(static_cast<std::size_t>(nnz));
  for (const std::int32_t j : col) ++tptr[static_cast<std::size_t>(j) + 1];
  for (Index k = 0; k < c; ++k) tptr[static_cast<std::size_t>(k + 1)] += tptr[static_cast<std::size_t>(k)];
  std::vector<std::int32_t> next(tptr.begin(), tptr.end() - 1);
  for (Index row = 0; row < r; ++row)
    for (std::int32_t k = ptr[static_cast<std::size_t>(row)]; k < ptr[static_cast<std::size_t>(row + 1)]; ++k) {
      const auto dst = static_cast<std::size_t>(next[static_cast<std::size_t>(col[static_cast<std::size_t>(k)])]++);
      tcol[dst] = static_cast<std::int32_t>(row);
      source[dst] = k;
    }
  return {make_csr_pattern(c, r, std::move(tptr), std::move(tcol)), std::move(source)};
}

}  // namespace bppsa
