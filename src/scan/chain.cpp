// Chain storage and its validation (the scan's input boundary).
#include "bppsa/scan/chain.hpp"

#include <omp.h>

#include "bppsa/core/error.hpp"
#include "scan/link_check.hpp"

namespace bppsa {

std::string detail::element_name(Index k) { return "J_" + std::to_string(k) + "^T"; }

template <class T>
Chain<T>::Chain(Index batch) : batch_(batch) {
  if (batch < 1) detail::raise<InvalidArgument>("Chain", "batch size must be ≥ 1, got " + std::to_string(batch));
}

template <class T>
Jacobian<T>& Chain<T>::push_back(Jacobian<T> jt) {
  jt_.push_back(std::move(jt));
  try {
    check_element(size(), "Chain::push_back");
  } catch (...) {
    jt_.pop_back();
    throw;
  }
  return jt_.back();
}

template <class T>
Jacobian<T>& Chain<T>::jacobian(Index k) {
  if (k < 1 || k > size())
    detail::raise<InvalidArgument>("Chain::jacobian",
                                   "k = " + std::to_string(k) + " is outside 1.." + std::to_string(size()));
  return jt_[static_cast<std::size_t>(k - 1)];
}
template <class T>
const Jacobian<T>& Chain<T>::jacobian(Index k) const {
  return const_cast<Chain*>(this)->jacobian(k);
}

template <class T>
Index Chain<T>::dim(Index k) const {
  if (k < 0 || k > size() || empty())
    detail::raise<InvalidArgument>("Chain::dim", "k = " + std::to_string(k) + " is outside 0.." +
                                                     std::to_string(size()) + (empty() ? " (the chain is empty)" : ""));
  return k == 0 ? jt_.front().rows() : jt_[static_cast<std::size_t>(k - 1)].cols();
}

template <class T>
void Chain<T>::set_injection(Index k, Matrix<T> e) {
  if (k < 0 || k >= size())
    detail::raise<InvalidArgument>("Chain::set_injection", "k = " + std::to_string(k) + " is outside 0.." +
                                                               std::to_string(size() - 1) + " (e_k for k < N)");
  if (e.rows() != dim(k) || e.cols() != batch_)
    detail::raise<ShapeError>("Chain::set_injection",
                              "e_" + std::to_string(k) + " is " + shape_string(e.rows(), e.cols()) + ", expected d_" +
                                  std::to_string(k) + " × batch = " + shape_string(dim(k), batch_));
  if (injection_.size() < jt_.size()) injection_.resize(jt_.size());
  injection_[static_cast<std::size_t>(k)] = std::move(e);
}

template <class T>
const Matrix<T>* Chain<T>::injection(Index k) const {
  if (k < 0 || static_cast<std::size_t>(k) >= injection_.size()) return nullptr;
  const Matrix<T>& e = injection_[static_cast<std::size_t>(k)];
  return e.size() == 0 ? nullptr : &e;
}
template <class T>
Matrix<T>* Chain<T>::injection(Index k) {
  return const_cast<Matrix<T>*>(static_cast<const Chain*>(this)->injection(k));
}

template <class T>
void Chain<T>::clear_injections() {
  injection_.clear();
}

template <class T>
bool Chain<T>::has_injections() const {
  for (const Matrix<T>& e : injection_)
    if (e.size() != 0) return true;
  return false;
}

namespace detail {

template <class T>
void check_link(const Layout<T>& l, const Layout<T>* prev, Index k, Index n, Index batch, const char* op) {
  auto name = [&] {
    return element_name(k) + " (chain element " + std::to_string(k) + " of " + std::to_string(n) + ", " + l.describe() +
           ")";
  };
  if (l.count != 1 && l.count != batch)
    raise<ShapeError>(op, name() + " has " + std::to_string(l.count) + " samples but the batch has " +
                              std::to_string(batch) + "; use count 1 (shared) or " + std::to_string(batch));
  if (l.kind == Kind::csr && !l.pattern->valid()) l.pattern->require_valid(op + (": " + name()));
  if (prev && prev->cols != l.rows)
    raise<ShapeError>(op, name() + " does not chain with " + element_name(k - 1) + " (" + prev->describe() +
                              "): " + element_name(k - 1) + " has " + std::to_string(prev->cols) + " columns (d_" +
                              std::to_string(k - 1) + ") but " + element_name(k) + " has " + std::to_string(l.rows) +
                              " rows");
}
template void check_link(const Layout<float>&, const Layout<float>*, Index, Index, Index, const char*);
template void check_link(const Layout<double>&, const Layout<double>*, Index, Index, Index, const char*);

}  // namespace detail

template <class T>
void Chain<T>::check_element(Index k, const char* op) const {
  const Jacobian<T>& j = jt_[static_cast<std::size_t>(k - 1)];
  detail::check_link(j.layout(), k > 1 ? &jt_[static_cast<std::size_t>(k - 2)].layout() : nullptr, k, size(), batch_,
                     op);
  if (static_cast<Index>(j.values().size()) != j.layout().values_per_sample() * j.count())
    detail::raise<InvalidArgument>(op, detail::element_name(k) + " (chain element " + std::to_string(k) + " of " +
                                           std::to_string(size()) + ", " + j.layout().describe() + ") holds " +
                                           std::to_string(j.values().size()) + " values, expected " +
                                           std::to_string(j.layout().values_per_sample() * j.count()));
}

template <class T>
void Chain<T>::validate(const char* op, int threads) const {
  if (empty())
    detail::raise<InvalidArgument>(op, "the chain is empty: add at least one Jacobian (J_1^T) before running a scan");
  // Every element is checked on every scan: in parallel for long chains (the scan itself is
  // parallel, so a serial pass here would bound its speedup); the first bad element is then
  // checked again alone to raise its message, so the error is the same at any thread count.
  const Index n = size();
  Index bad = n + 1;
#pragma omp parallel for num_threads(threads > 0 ? threads : omp_get_max_threads()) schedule(static) \
    reduction(min                                                                                    \
              : bad) if (n >= kParallelElements)
  for (Index k = 1; k <= n; ++k) {
    try {
      check_element(k, op);
    } catch (...) {
      bad = std::min(bad, k);
    }
  }
  if (bad <= n) check_element(bad, op);
  for (std::size_t k = 0; k < injection_.size(); ++k) {
    const Matrix<T>& e = injection_[k];
    if (e.size() == 0) continue;
    const Index kk = static_cast<Index>(k);
    if (kk >= size())
      detail::raise<InvalidArgument>(op, "injection e_" + std::to_string(k) + " is set but the chain has only " +
                                             std::to_string(size()) + " Jacobians (e_k exists for k < N)");
    if (e.rows() != dim(kk) || e.cols() != batch_)
      detail::raise<ShapeError>(op, "injection e_" + std::to_string(k) + " is " + shape_string(e.rows(), e.cols()) +
                                        ", expected " + shape_string(dim(kk), batch_));
  }
}

template class Chain<float>;
template class Chain<double>;

}  // namespace bppsa
