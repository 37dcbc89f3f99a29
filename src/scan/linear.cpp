// Sequential back-propagation as a schedule: s_i = a_i · s_{i−1}, i = 1..n. The oracle.
#include "scan/schedule.hpp"

namespace bppsa::detail {

template <class T>
void build_linear(Builder<T>& b) {
  b.begin_phase();
  b.begin_task();
  for (Index i = 1; i <= b.n(); ++i) b.mv(b.element(i), i - 1, i);
}

template void build_linear(Builder<float>&);
template void build_linear(Builder<double>&);

}  // namespace bppsa::detail
