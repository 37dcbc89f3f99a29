// The chunked scan for p workers (docs/method.md §2, "hybrid") as a schedule of three phases:
//   1. chunk 0 runs plain BP from g_N (mv); every other chunk reduces its elements to one
//      total T_c = a_end ⋯ a_start (mm);
//   2. one task scans the chunk totals: s_end(c) = T_c · s_start(c)−1 (mv);
//   3. every chunk c ≥ 1 pushes its incoming prefix through its elements (mv).
#include "scan/schedule.hpp"

namespace bppsa::detail {

template <class T>
void build_hybrid(Builder<T>& b, const std::vector<Index>& ends) {
  const std::size_t chunks = ends.size();
  auto start = [&](std::size_t c) { return c == 0 ? Index{0} : ends[c - 1] + 1; };
  std::vector<MatRef> total(chunks);

  b.begin_phase();
  b.begin_task();
  for (Index i = 1; i <= ends[0]; ++i) b.mv(b.element(i), i - 1, i);
  for (std::size_t c = 1; c < chunks; ++c) {
    b.begin_task();
    MatRef t = b.element(start(c));
    for (Index i = start(c) + 1; i <= ends[c]; ++i) t = b.mm(b.element(i), t);
    total[c] = t;
  }
  if (chunks > 1) {
    b.begin_phase();
    b.begin_task();
    for (std::size_t c = 1; c < chunks; ++c) b.mv(total[c], start(c) - 1, ends[c]);
    b.begin_phase();
    for (std::size_t c = 1; c < chunks; ++c) {
      b.begin_task();
      for (Index i = start(c); i < ends[c]; ++i) b.mv(b.element(i), i - 1, i);
    }
  }
}

template void build_hybrid(Builder<float>&, const std::vector<Index>&);
template void build_hybrid(Builder<double>&, const std::vector<Index>&);

}  // namespace bppsa::detail
