// Subsets and seeded splits shared by every data set type (SequenceDataset, ImageDataset):
// one gather loop and one split rule, so that the same seed holds out the same samples
// whatever form the samples take.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/core/types.hpp"
#include "bppsa/data/dataset.hpp"

namespace bppsa::detail {

/// The checks every labelled data set shares: `class_names` empty or one per class, every
/// label in [0, classes). `what` names the data set in messages.
inline void check_labels(const std::vector<std::int64_t>& y, Index classes,
                         const std::vector<std::string>& class_names, const std::string& op, const std::string& what) {
  if (!class_names.empty() && static_cast<Index>(class_names.size()) != classes)
    raise<ShapeError>(op, what + " has " + std::to_string(class_names.size()) + " class names for " +
                              std::to_string(classes) + " classes");
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i] < 0 || y[i] >= classes)
      raise<FormatError>(op, what + ": sample " + std::to_string(i) + " has label " + std::to_string(y[i]) +
                                 ", outside [0, " + std::to_string(classes) + ")");
}

/// `out` (data's shape, classes and names, no samples yet) filled with the samples of `data`
/// at `indices`, in that order. D has x (`per` values a sample, contiguous), y, name, size()
/// and sample(i). Throws ShapeError if data.x does not hold per values a sample and
/// InvalidArgument for an index outside [0, size()).
template <class D>
D gather_samples(const D& data, D out, std::span<const Index> indices, std::size_t per) {
  if (data.x.size() != data.y.size() * per)
    raise<ShapeError>("subset", "data set '" + data.name + "' has " + std::to_string(data.x.size()) + " values, not " +
                                    std::to_string(data.y.size() * per));
  out.x.clear();
  out.y.clear();
  out.x.reserve(indices.size() * per);
  out.y.reserve(indices.size());
  for (Index i : indices) {
    if (i < 0 || i >= data.size())
      raise<InvalidArgument>("subset", "index " + std::to_string(i) + " is outside data set '" + data.name + "' of " +
                                           std::to_string(data.size()) + " samples");
    const auto s = data.sample(i);
    out.x.insert(out.x.end(), s.begin(), s.end());
    out.y.push_back(data.y[static_cast<std::size_t>(i)]);
  }
  return out;
}

/// {train, test}: the first `test_count` positions of permutation(size(), seed) go to test,
/// the rest to train, each in permutation order; `subset(data, indices)` (found by ADL) builds
/// both. Throws InvalidArgument if test_count is outside [0, size()].
template <class D>
std::pair<D, D> split_samples(const D& data, Index test_count, std::uint64_t seed) {
  if (test_count < 0 || test_count > data.size())
    raise<InvalidArgument>("split", "cannot hold out " + std::to_string(test_count) + " of the " +
                                        std::to_string(data.size()) + " samples of '" + data.name + "'");
  const std::vector<Index> order = permutation(data.size(), seed);
  const std::span<const Index> all(order);
  const auto n_test = static_cast<std::size_t>(test_count);
  return {subset(data, all.subspan(n_test)), subset(data, all.first(n_test))};
}

}  // namespace bppsa::detail
