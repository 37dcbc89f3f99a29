// Labelled image data for CNN training (MNIST as images, CIFAR-10): the image counterpart of
// SequenceDataset, with the same subset/split rules.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/core/types.hpp"

namespace bppsa {

/// N images of C×H×W with a class label each; x is row-major [N][C][H][W] (PyTorch's NCHW).
struct ImageDataset {
  Index channels = 0;
  Index height = 0;
  Index width = 0;
  Index classes = 0;
  std::vector<float> x;
  std::vector<std::int64_t> y;
  std::vector<std::string> class_names;  ///< optional, `classes` entries when present
  std::string name;                      ///< e.g. "cifar10 train", "mnist 32×32"

  Index size() const { return static_cast<Index>(y.size()); }
  /// Values per image: C·H·W.
  Index sample_size() const { return channels * height * width; }
  /// Image i: C·H·W values, [C][H][W] row-major.
  std::span<const float> sample(Index i) const;
  /// Throws ShapeError if a dimension is not positive, x's size is not N·C·H·W or the class
  /// names do not number `classes`, and FormatError if a label is outside [0, classes) or a
  /// value is NaN/Inf (naming sample, channel, row and column); `op` prefixes the message.
  void validate(const std::string& op) const;
};

/// The images at `indices`, in that order.
ImageDataset subset(const ImageDataset& data, std::span<const Index> indices);

/// An image has no length: empty (as sample_lengths of a sequence data set without lengths).
inline std::vector<Index> sample_lengths(const ImageDataset&, std::span<const Index>) { return {}; }

/// Deterministic shuffled split, {train, test}: the same rule as split(SequenceDataset) (the
/// first `test_count` of permutation(size(), seed) to test), so data sets of the same size
/// split with the same seed hold out the same positions. Throws InvalidArgument if
/// test_count > size().
std::pair<ImageDataset, ImageDataset> split(const ImageDataset& data, Index test_count, std::uint64_t seed);

/// Per-channel standardisation in place: x = (x − mean[c]) / std[c] (torchvision's
/// Normalize). Throws InvalidArgument if mean or std does not have `channels` entries, a mean
/// is not finite or a std is not a positive finite number; ShapeError if x's size is not N·C·H·W.
void normalize_channels(ImageDataset& data, std::span<const float> mean, std::span<const float> std);

}  // namespace bppsa
