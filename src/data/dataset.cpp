// SequenceDataset checks, subsets, the seeded shuffles behind every split and epoch order, and
// a batch's samples gathered from a data set.
#include "bppsa/data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "bppsa/core/error.hpp"
#include "bppsa/data/image.hpp"
#include "core/random.hpp"
#include "data/subset.hpp"

namespace bppsa {

std::span<const float> SequenceDataset::sample(Index i) const {
  const auto per = static_cast<std::size_t>(steps * features);
  return std::span<const float>(x).subspan(static_cast<std::size_t>(i) * per, per);
}

void SequenceDataset::validate(const std::string& op) const {
  const std::string what = "data set '" + name + "'";
  if (steps <= 0 || features <= 0 || classes <= 0)
    detail::raise<ShapeError>(op, what + " has steps " + std::to_string(steps) + ", features " +
                                      std::to_string(features) + ", classes " + std::to_string(classes) +
                                      "; all must be positive");
  if (x.size() != y.size() * static_cast<std::size_t>(steps * features))
    detail::raise<ShapeError>(op, what + " has " + std::to_string(x.size()) + " values for " +
                                      std::to_string(y.size()) + " samples of " + std::to_string(steps) + " × " +
                                      std::to_string(features) + " (expected " +
                                      std::to_string(y.size() * steps * features) + ")");
  detail::check_labels(y, classes, class_names, op, what);
  if (!lengths.empty() && lengths.size() != y.size())
    detail::raise<ShapeError>(
        op, what + " has " + std::to_string(lengths.size()) + " lengths for " + std::to_string(y.size()) + " samples");
  for (std::size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] < 1 || lengths[i] > steps)
      detail::raise<FormatError>(op, what + ": sample " + std::to_string(i) + " has length " +
                                         std::to_string(lengths[i]) + ", outside 1.." + std::to_string(steps));
  const auto bad = std::find_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); });
  if (bad != x.end()) {
    const auto at = static_cast<Index>(bad - x.begin());
    detail::raise<FormatError>(op, what + ": sample " + std::to_string(at / (steps * features)) + " holds " +
                                       std::to_string(*bad) + " at step " +
                                       std::to_string(at % (steps * features) / features));
  }
}

SequenceDataset subset(const SequenceDataset& data, std::span<const Index> indices) {
  SequenceDataset out{.steps = data.steps,
                      .features = data.features,
                      .classes = data.classes,
                      .x = {},
                      .y = {},
                      .class_names = data.class_names,
                      .name = data.name,
                      .lengths = {}};  // the subset's, gathered below
  out = detail::gather_samples(data, std::move(out), indices, static_cast<std::size_t>(data.steps * data.features));
  if (!data.lengths.empty())
    for (Index i : indices) out.lengths.push_back(data.lengths[static_cast<std::size_t>(i)]);
  return out;
}

std::pair<SequenceDataset, SequenceDataset> split(const SequenceDataset& data, Index test_count, std::uint64_t seed) {
  return detail::split_samples(data, test_count, seed);
}

std::vector<Index> permutation(Index n, std::uint64_t seed) {
  if (n < 0) detail::raise<InvalidArgument>("permutation", "length " + std::to_string(n) + " is negative");
  std::vector<Index> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), Index{0});
  std::mt19937_64 rng(detail::mix_seed(seed, 1));
  // Fisher–Yates: position i takes a uniform pick from the not yet placed [0, i].
  for (std::size_t i = p.size(); i > 1; --i) std::swap(p[i - 1], p[detail::uniform_below(rng, i)]);
  return p;
}

void batch_indices(std::span<const Index> order, Index first, Index n, std::vector<Index>& indices) {
  indices.resize(static_cast<std::size_t>(n));
  for (Index k = 0; k < n; ++k)
    indices[static_cast<std::size_t>(k)] = order.empty() ? first + k : order[static_cast<std::size_t>(first + k)];
}

template <class Data>
void gather_batch(const Data& data, std::span<const Index> indices, std::vector<float>& x,
                  std::vector<std::int64_t>& y) {
  const std::size_t per = data.sample(0).size();
  x.resize(indices.size() * per);
  y.resize(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const auto s = data.sample(indices[k]);
    std::copy(s.begin(), s.end(), x.begin() + static_cast<std::ptrdiff_t>(k * per));
    y[k] = data.y[static_cast<std::size_t>(indices[k])];
  }
}
template void gather_batch(const SequenceDataset&, std::span<const Index>, std::vector<float>&,
                           std::vector<std::int64_t>&);
template void gather_batch(const ImageDataset&, std::span<const Index>, std::vector<float>&,
                           std::vector<std::int64_t>&);

std::vector<Index> sample_lengths(const SequenceDataset& data, std::span<const Index> indices) {
  std::vector<Index> lengths;
  if (!data.lengths.empty())
    for (const Index i : indices) lengths.push_back(data.length(i));
  return lengths;
}

}  // namespace bppsa
