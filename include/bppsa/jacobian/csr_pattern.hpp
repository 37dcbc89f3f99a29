// The structural pattern of a CSR matrix: fixed for the life of a model, shared by every
// sample and every step, so symbolic work on it (SpGEMM fill-in) is done once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bppsa/core/types.hpp"

namespace bppsa {

/// Row pointers and column indices of a rows × cols CSR matrix (rectangular allowed).
///
/// Contract: row_ptr has rows + 1 entries, starts at 0 and never decreases; column indices
/// within a row are strictly increasing and lie in [0, cols). Explicit zeros are allowed and
/// encouraged (ReLU off, max-pool non-argmax) so the pattern stays the same across samples.
///
/// The constructor never throws on content: it records what is wrong, and every consumer
/// (the scan's validation, products) reports it with its own context, e.g. the element
/// index of the chain the pattern was found in.
class CsrPattern {
 public:
  CsrPattern(Index rows, Index cols, std::vector<std::int32_t> row_ptr, std::vector<std::int32_t> col_idx);

  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  Index nnz() const { return static_cast<Index>(col_idx_.size()); }
  std::span<const std::int32_t> row_ptr() const { return row_ptr_; }
  std::span<const std::int32_t> col_idx() const { return col_idx_; }

  /// Empty when the pattern satisfies the contract; otherwise what is wrong with it.
  const std::string& error() const { return error_; }
  bool valid() const { return error_.empty(); }

  /// Throws InvalidArgument "[context] <error>" unless valid().
  void require_valid(const std::string& context) const;

  /// Fraction of structural zeros, 1 − nnz / (rows·cols).
  double sparsity() const;

 private:
  Index rows_;
  Index cols_;
  std::vector<std::int32_t> row_ptr_;
  std::vector<std::int32_t> col_idx_;
  std::string error_;
};

using CsrPatternPtr = std::shared_ptr<const CsrPattern>;

/// Convenience: a validated pattern (throws InvalidArgument if the arrays break the contract).
CsrPatternPtr make_csr_pattern(Index rows, Index cols, std::vector<std::int32_t> row_ptr,
                               std::vector<std::int32_t> col_idx);

/// The transpose of a valid pattern, and where its entries come from: entry p of the transpose
/// (in its CSR order) is entry source[p] of the original, so values_T[p] = values[source[p]].
struct CsrTranspose {
  CsrPatternPtr pattern;
  std::vector<std::int32_t> source;
};
CsrTranspose transpose(const CsrPattern& pattern);

}  // namespace bppsa
