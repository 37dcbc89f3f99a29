// The modified Blelloch scan of docs/method.md §2 as a schedule.
//
// Positions 0..n hold [g_N, J_N^T, …, J_1^T]; val[i] is the up-sweep value at position i
// (the product of a contiguous range ending at i). The textbook in-place down-sweep only
// ever carries prefixes, and the prefix it carries into a block [i..r] is s_{i−1}, so here
// it writes straight into the outputs: at each block with i ≠ 0, s_l = val[l] · s_{i−1}
// (val[l] being the total of [i..l]). The leftmost block's copies (identity implicit) and
// the root up-sweep level disappear. With L = ⌈log2(n+1)⌉ − 1:
//   up-sweep   d = 0..L−1:  r = min(i + 2^{d+1} − 1, n), l = i + 2^d − 1 ≤ n − 1, l < r:
//                           i == 0: s_r = val[r] · s_l (mv);  else val[r] = val[r] · val[l] (mm)
//   down-sweep d = L−1..0:  i ≠ 0, same l, r:  s_l = val[l] · s_{i−1} (mv)
//   last:                   s_n = a_n · s_{n−1} (mv) gives g_0.
#include <bit>

#include "scan/schedule.hpp"

namespace bppsa::detail {

template <class T>
void build_blelloch(Builder<T>& b) {
  const Index n = b.n();
  const int levels = static_cast<int>(std::bit_width(static_cast<std::uint64_t>(n)));  // ⌈log2(n+1)⌉
  const int L = levels - 1;
  std::vector<MatRef> val(static_cast<std::size_t>(n) + 1);
  for (Index i = 1; i <= n; ++i) val[static_cast<std::size_t>(i)] = b.element(i);

  for (int d = 0; d < L; ++d) {
    const Index half = Index{1} << d, step = half << 1;
    b.begin_phase();
    for (Index i = 0; i + half - 1 <= n - 1; i += step) {
      const Index l = i + half - 1, r = std::min(i + step - 1, n);
      if (l >= r) continue;
      b.begin_task();
      if (i == 0)
        b.mv(val[static_cast<std::size_t>(r)], l, r);
      else
        val[static_cast<std::size_t>(r)] = b.mm(val[static_cast<std::size_t>(r)], val[static_cast<std::size_t>(l)]);
    }
  }
  for (int d = L - 1; d >= 0; --d) {
    const Index half = Index{1} << d, step = half << 1;
    b.begin_phase();
    for (Index i = step; i + half - 1 <= n - 1; i += step) {
      const Index l = i + half - 1, r = std::min(i + step - 1, n);
      if (l >= r) continue;
      b.begin_task();
      b.mv(val[static_cast<std::size_t>(l)], i - 1, l);
    }
  }
  b.begin_phase();
  b.begin_task();
  b.mv(b.element(n), n - 1, n);
}

template void build_blelloch(Builder<float>&);
template void build_blelloch(Builder<double>&);

}  // namespace bppsa::detail
