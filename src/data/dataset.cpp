// SequenceDataset checks, subsets, and the seeded shuffles behind every split and epoch order.
#include "bppsa/data/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "bppsa/core/error.hpp"
#include "core/random.hpp"

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
  if (!class_names.empty() && static_cast<Index>(class_names.size()) != classes)
    detail::raise<ShapeError>(op, what + " has " + std::to_string(class_names.size()) + " class names for " +
                                      std::to_string(classes) + " classes");
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i] < 0 || y[i] >= classes)
      detail::raise<FormatError>(op, what + ": sample " + std::to_string(i) + " has label " + std::to_string(y[i]) +
                                         ", outside [0, " + std::to_string(classes) + ")");
  const auto bad = std::find_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); });
  if (bad != x.end()) {
    const auto at = static_cast<Index>(bad - x.begin());
    detail::raise<FormatError>(op, what + ": sample " + std::to_string(at / (steps * features)) + " holds " +
                                       std::to_string(*bad) + " at step " +
                                       std::to_string(at % (steps * features) / features));
  }
}

SequenceDataset subset(const SequenceDataset& data, std::span<const Index> indices) {
  SequenceDataset out;
  out.steps = data.steps;
  out.features = data.features;
  out.classes = data.classes;
  out.class_names = data.class_names;
  out.name = data.name;
  const auto per = static_cast<std::size_t>(data.steps * data.features);
  if (data.x.size() != data.y.size() * per)
    detail::raise<ShapeError>("subset", "data set '" + data.name + "' has " + std::to_string(data.x.size()) +
                                            " values, not " + std::to_string(data.y.size() * per));
  out.x.reserve(indices.size() * per);
  out.y.reserve(indices.size());
  for (Index i : indices) {
    if (i < 0 || i >= data.size())
      detail::raise<InvalidArgument>("subset", "index " + std::to_string(i) + " is outside data set '" + data.name +
                                                   "' of " + std::to_string(data.size()) + " samples");
    const auto s = data.sample(i);
    out.x.insert(out.x.end(), s.begin(), s.end());
    out.y.push_back(data.y[static_cast<std::size_t>(i)]);
  }
  return out;
}

std::pair<SequenceDataset, SequenceDataset> split(const SequenceDataset& data, Index test_count, std::uint64_t seed) {
  if (test_count < 0 || test_count > data.size())
    detail::raise<InvalidArgument>("split", "cannot hold out " + std::to_string(test_count) + " of the " +
                                                std::to_string(data.size()) + " samples of '" + data.name + "'");
  const std::vector<Index> order = permutation(data.size(), seed);
  const std::span<const Index> all(order);
  const auto n_test = static_cast<std::size_t>(test_count);
  return {subset(data, all.subspan(n_test)), subset(data, all.first(n_test))};
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

}  // namespace bppsa
