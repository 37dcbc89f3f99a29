// Cost model: per-element product costs from kinds and shapes, hybrid chunk balancing and
// the choice made by Algorithm::automatic.
#include "scan/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace bppsa::detail {

template <class T>
std::vector<ElementCost> element_costs(const std::vector<ElementInfo<T>>& elements, const CostModel& model) {
  std::vector<ElementCost> costs(elements.size());
  for (std::size_t i = 1; i < elements.size(); ++i) {
    const Layout<T>& l = *elements[i].layout;
    const double mv = apply_flops(l);
    // The running product of a chunk is as dense as the element (dense stays dense, diagonal
    // stays diagonal); a sparse running product fills in, in the worst case to dense, so a
    // CSR element is charged as CSR × dense (2·nnz·cols): pessimistic for chains that stay
    // sparse, right for banded ones (convolutions), whose products fill in within ~cols/3 steps.
    double mm = 0;
    switch (l.kind) {
      case Kind::identity:
        mm = 0;
        break;
      case Kind::diagonal:
        mm = static_cast<double>(l.rows);
        break;
      case Kind::csr:
        mm = 2.0 * static_cast<double>(l.pattern->nnz()) * static_cast<double>(l.cols);
        break;
      case Kind::dense:
      case Kind::shared_dense_diag:
        mm = 2.0 * static_cast<double>(l.rows) * static_cast<double>(l.cols) * static_cast<double>(l.rows);
        break;
    }
    costs[i].mv = mv * model.flop_seconds + model.product_seconds;
    costs[i].mm = mm * model.flop_seconds + model.product_seconds;
    costs[i].bytes = static_cast<double>((l.values_per_sample() + l.rows) * static_cast<Index>(sizeof(T)));
  }
  return costs;
}

namespace {

/// Greedy split for a span target; returns the chunk ends (may be more than wanted).
std::vector<Index> split(const std::vector<ElementCost>& costs, double target) {
  const Index n = static_cast<Index>(costs.size()) - 1;
  std::vector<Index> ends;
  Index i = 0;
  double acc = 0;
  while (i < n && acc + costs[static_cast<std::size_t>(i) + 1].mv <= target) {
    ++i;
    acc += costs[static_cast<std::size_t>(i)].mv;
  }
  ends.push_back(i);
  while (i < n) {
    ++i;  // a chunk takes at least one element
    acc = costs[static_cast<std::size_t>(i)].mm;
    while (i < n) {
      const auto& c = costs[static_cast<std::size_t>(i) + 1];
      if (acc + c.mm > target) break;
      acc += c.mm;
      ++i;
    }
    ends.push_back(i);
  }
  return ends;
}

}  // namespace

std::vector<Index> hybrid_partition(const std::vector<ElementCost>& costs, int chunks) {
  const Index n = static_cast<Index>(costs.size()) - 1;
  chunks = static_cast<int>(std::clamp<Index>(chunks, 1, n + 1));
  if (chunks == 1) return {n};
  // Binary search the smallest span target that needs at most `chunks` chunks.
  double hi = 0;
  for (const auto& c : costs) hi += c.mm + c.mv;  // enough for one chunk
  double lo = 0;
  for (int it = 0; it < 60; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (static_cast<int>(split(costs, mid).size()) <= chunks)
      hi = mid;
    else
      lo = mid;
  }
  return split(costs, hi);
}

Choice choose_algorithm(const std::vector<ElementCost>& costs, Index batch, int threads, const CostModel& model) {
  const Index n = static_cast<Index>(costs.size()) - 1;
  double sum_mv = 0, sum_mm = 0, sum_bytes = 0;
  for (std::size_t i = 1; i < costs.size(); ++i) {
    sum_mv += costs[i].mv;
    sum_mm += costs[i].mm;
    sum_bytes += costs[i].bytes;
  }
  // Memory traffic bounds every algorithm from below, whatever the thread count: linear
  // passes over each element once, hybrid twice (reduce, push), Blelloch about three times
  // (operands and the product it writes).
  const double one_pass = sum_bytes * static_cast<double>(batch) / model.bytes_per_second;
  // Linear: samples spread over the threads, each chain sequential.
  const double rounds = std::ceil(static_cast<double>(batch) / threads);
  Choice best{Algorithm::linear, 1, std::max(sum_mv * rounds, one_pass)};
  // Within-chain parallelism only pays with more threads than samples.
  const int per_chain = static_cast<int>(threads / std::max<Index>(batch, 1));
  if (per_chain < 2) return best;
  for (int c = 2; c <= per_chain && c <= n + 1; ++c) {
    const std::vector<Index> ends = hybrid_partition(costs, c);
    double span0 = 0, span_reduce = 0, span_push = 0;
    for (Index i = 1; i <= ends[0]; ++i) span0 += costs[static_cast<std::size_t>(i)].mv;
    for (std::size_t k = 1; k < ends.size(); ++k) {
      double r = 0, p = 0;
      for (Index i = ends[k - 1] + 1; i <= ends[k]; ++i) {
        r += costs[static_cast<std::size_t>(i)].mm;
        p += costs[static_cast<std::size_t>(i)].mv;
      }
      span_reduce = std::max(span_reduce, r);
      span_push = std::max(span_push, p);
    }
    const double t = std::max(std::max(span0, span_reduce) + static_cast<double>(ends.size() - 1) * costs.back().mv +
                                  span_push + 3 * model.phase_seconds,
                              2 * one_pass);
    if (t < best.predicted_seconds) best = {Algorithm::hybrid, static_cast<int>(ends.size()), t};
  }
  // Blelloch: all the work spread over the chain's threads, one barrier per level.
  const double levels = 2 * std::ceil(std::log2(static_cast<double>(n) + 1));
  const double t_blelloch = std::max((sum_mm + 2 * sum_mv) / per_chain + levels * model.phase_seconds, 3 * one_pass);
  if (t_blelloch < best.predicted_seconds) best = {Algorithm::blelloch, 0, t_blelloch};
  return best;
}

template std::vector<ElementCost> element_costs(const std::vector<ElementInfo<float>>&, const CostModel&);
template std::vector<ElementCost> element_costs(const std::vector<ElementInfo<double>>&, const CostModel&);

}  // namespace bppsa::detail
