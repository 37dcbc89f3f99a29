// Labelled sequence data: what every loader produces and the trainer consumes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/core/types.hpp"

namespace bppsa {

/// N sequences of `steps` time steps with `features` inputs each, and a class label per
/// sequence. x is row-major [N][steps][features] (PyTorch's batch_first layout).
struct SequenceDataset {
  Index steps = 0;
  Index features = 0;
  Index classes = 0;
  std::vector<float> x;
  std::vector<std::int64_t> y;
  std::vector<std::string> class_names;  ///< optional, `classes` entries when present
  std::string name;                      ///< e.g. "bitstream T=1000", "mnist rows"
  /// Optional, one per sample: its real length, 1..steps (the steps after it are padding that
  /// no model reads). Empty: every sample is `steps` long.
  std::vector<Index> lengths;

  Index size() const { return static_cast<Index>(y.size()); }
  /// Sample i's length: lengths[i], or steps.
  Index length(Index i) const { return lengths.empty() ? steps : lengths[static_cast<std::size_t>(i)]; }
  /// Sample i: steps × features values.
  std::span<const float> sample(Index i) const;
  /// Throws FormatError/ShapeError if x's size is not N·steps·features, a label is outside
  /// [0, classes), a length is outside 1..steps (or there is not one per sample), or a value
  /// is NaN/Inf; `op` prefixes the message.
  void validate(const std::string& op) const;
};

/// The samples at `indices`, in that order.
SequenceDataset subset(const SequenceDataset& data, std::span<const Index> indices);

/// Deterministic shuffled split: `test_count` samples to the second set, the rest to the
/// first. Same seed, same split. Throws InvalidArgument if test_count > size().
std::pair<SequenceDataset, SequenceDataset> split(const SequenceDataset& data, Index test_count, std::uint64_t seed);

/// A permutation of 0..n-1 from `seed` (the trainer's epoch shuffles use this too), the same
/// on every platform (no std:: distributions, whose outputs are implementation-defined).
std::vector<Index> permutation(Index n, std::uint64_t seed);

/// The samples of a batch: order[first, first + n), or first, first + 1, … when order is empty.
void batch_indices(std::span<const Index> order, Index first, Index n, std::vector<Index>& indices);

/// Gathers samples `indices` of `data` (a SequenceDataset or an ImageDataset) into x, one
/// sample after another, and their labels into y.
template <class Data>
void gather_batch(const Data& data, std::span<const Index> indices, std::vector<float>& x,
                  std::vector<std::int64_t>& y);

/// Each sample's length of samples `indices` of a sequence data set that has lengths; empty
/// otherwise (every sample has every step).
std::vector<Index> sample_lengths(const SequenceDataset& data, std::span<const Index> indices);

}  // namespace bppsa
