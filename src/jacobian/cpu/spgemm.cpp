// Gustavson SpGEMM split into a symbolic phase (pattern, once per pattern pair) and a
// numeric phase (values, every step) that never allocates.
#include "jacobian/cpu/spgemm.hpp"

#include <algorithm>
#include <limits>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"

namespace bppsa::detail {

SpGemmSymbolic spgemm_symbolic(const CsrPattern& a, const CsrPattern& b) {
  const auto arp = a.row_ptr(), aci = a.col_idx();
  const auto brp = b.row_ptr(), bci = b.col_idx();
  std::vector<std::int32_t> marker(static_cast<std::size_t>(b.cols()), -1);
  std::vector<std::int32_t> row_ptr(static_cast<std::size_t>(a.rows()) + 1, 0);
  std::vector<std::int32_t> col_idx;
  double terms = 0;
  // Fill-in can reach rows × cols: refuse a pattern beyond the CSR index type, or beyond half
  // of what one request may use (growing the vector doubles it), as soon as it gets there.
  const double memory = memory_limit_bytes();
  const double limit = std::min<double>(std::numeric_limits<std::int32_t>::max(),
                                        memory > 0 ? kMemoryShare * memory / (2 * sizeof(std::int32_t)) : 1e300);
  for (Index i = 0; i < a.rows(); ++i) {
    const std::size_t row_begin = col_idx.size();
    if (static_cast<double>(row_begin) > limit)
      raise<ResourceError>("spgemm", "the fill-in pattern of a " + shape_string(a.rows(), a.cols()) + " · " +
                                         shape_string(b.rows(), b.cols()) + " CSR product passes " +
                                         std::to_string(row_begin) + " nonzeros at row " + std::to_string(i) +
                                         " of " + std::to_string(a.rows()) + " (more than 2^31 − 1 or " +
                                         format_bytes(memory * kMemoryShare / 2) +
                                         "); use a smaller or sparser network, or --backward bp or hybrid (fewer "
                                         "products)");
    for (std::int32_t p = arp[i]; p < arp[i + 1]; ++p) {
      const std::int32_t k = aci[p];
      terms += brp[k + 1] - brp[k];
      for (std::int32_t q = brp[k]; q < brp[k + 1]; ++q) {
        const std::int32_t j = bci[q];
        if (marker[j] != i) {
          marker[j] = static_cast<std::int32_t>(i);
          col_idx.push_back(j);
        }
      }
    }
    std::sort(col_idx.begin() + static_cast<std::ptrdiff_t>(row_begin), col_idx.end());
    row_ptr[i + 1] = static_cast<std::int32_t>(col_idx.size());
  }
  auto pattern = std::make_shared<const CsrPattern>(a.rows(), b.cols(), std::move(row_ptr), std::move(col_idx));
  pattern->require_valid("spgemm_symbolic");
  return {std::move(pattern), terms};
}

template <class T>
void spgemm_numeric(const CsrPattern& a, const T* av, const CsrPattern& b, const T* bv, const CsrPattern& c, T* cv,
                    std::vector<std::int32_t>& position) {
  const auto arp = a.row_ptr(), aci = a.col_idx();
  const auto brp = b.row_ptr(), bci = b.col_idx();
  const auto crp = c.row_ptr(), cci = c.col_idx();
  if (position.size() < static_cast<std::size_t>(c.cols())) position.resize(static_cast<std::size_t>(c.cols()));
  std::int32_t* pos = position.data();
  for (Index i = 0; i < a.rows(); ++i) {
    // Every column this row can reach is in C's row i (symbolic phase), so pos needs no reset.
    for (std::int32_t p = crp[i]; p < crp[i + 1]; ++p) {
      pos[cci[p]] = p;
      cv[p] = T(0);
    }
    for (std::int32_t p = arp[i]; p < arp[i + 1]; ++p) {
      const T x = av[p];
      const std::int32_t k = aci[p];
      for (std::int32_t q = brp[k]; q < brp[k + 1]; ++q) cv[pos[bci[q]]] += x * bv[q];
    }
  }
}

template void spgemm_numeric(const CsrPattern&, const float*, const CsrPattern&, const float*, const CsrPattern&,
                             float*, std::vector<std::int32_t>&);
template void spgemm_numeric(const CsrPattern&, const double*, const CsrPattern&, const double*, const CsrPattern&,
                             double*, std::vector<std::int32_t>&);

}  // namespace bppsa::detail
