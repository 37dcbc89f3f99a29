// ImageDataset checks, subsets, splits and per-channel standardisation.
#include "bppsa/data/image.hpp"

#include <algorithm>
#include <cmath>

#include "bppsa/core/error.hpp"
#include "data/subset.hpp"

namespace bppsa {

std::span<const float> ImageDataset::sample(Index i) const {
  const auto per = static_cast<std::size_t>(sample_size());
  return std::span<const float>(x).subspan(static_cast<std::size_t>(i) * per, per);
}

void ImageDataset::validate(const std::string& op) const {
  const std::string what = "data set '" + name + "'";
  if (channels <= 0 || height <= 0 || width <= 0 || classes <= 0)
    detail::raise<ShapeError>(op, what + " has channels " + std::to_string(channels) + ", height " +
                                      std::to_string(height) + ", width " + std::to_string(width) + ", classes " +
                                      std::to_string(classes) + "; all must be positive");
  const auto per = static_cast<std::size_t>(sample_size());
  if (x.size() != y.size() * per)
    detail::raise<ShapeError>(op, what + " has " + std::to_string(x.size()) + " values for " +
                                      std::to_string(y.size()) + " images of " + std::to_string(channels) + " × " +
                                      shape_string(height, width) + " (expected " + std::to_string(y.size() * per) +
                                      ")");
  detail::check_labels(y, classes, class_names, op, what);
  const auto bad = std::find_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); });
  if (bad != x.end()) {
    const auto at = static_cast<Index>(bad - x.begin());
    const Index in_sample = at % sample_size(), plane = height * width;
    detail::raise<FormatError>(op, what + ": sample " + std::to_string(at / sample_size()) + " holds " +
                                       std::to_string(*bad) + " at channel " + std::to_string(in_sample / plane) +
                                       ", row " + std::to_string(in_sample % plane / width) + ", col " +
                                       std::to_string(in_sample % width));
  }
}

ImageDataset subset(const ImageDataset& data, std::span<const Index> indices) {
  ImageDataset out{.channels = data.channels,
                   .height = data.height,
                   .width = data.width,
                   .classes = data.classes,
                   .x = {},
                   .y = {},
                   .class_names = data.class_names,
                   .name = data.name};
  return detail::gather_samples(data, std::move(out), indices, static_cast<std::size_t>(data.sample_size()));
}

std::pair<ImageDataset, ImageDataset> split(const ImageDataset& data, Index test_count, std::uint64_t seed) {
  return detail::split_samples(data, test_count, seed);
}

void normalize_channels(ImageDataset& data, std::span<const float> mean, std::span<const float> std) {
  const std::string op = "normalize_channels";
  const auto c = static_cast<std::size_t>(data.channels);
  if (mean.size() != c || std.size() != c)
    detail::raise<InvalidArgument>(op, "data set '" + data.name + "' has " + std::to_string(data.channels) +
                                           " channels, but " + std::to_string(mean.size()) + " means and " +
                                           std::to_string(std.size()) + " standard deviations were given");
  for (std::size_t k = 0; k < c; ++k)
    if (!std::isfinite(mean[k]) || !std::isfinite(std[k]) || !(std[k] > 0.0f))
      detail::raise<InvalidArgument>(op, "channel " + std::to_string(k) + " has mean " + std::to_string(mean[k]) +
                                             " and std " + std::to_string(std[k]) +
                                             "; the mean must be finite and the std positive and finite");
  const auto plane = static_cast<std::size_t>(data.height * data.width);
  if (data.height <= 0 || data.width <= 0 || data.x.size() != data.y.size() * c * plane)
    detail::raise<ShapeError>(op, "data set '" + data.name + "' has " + std::to_string(data.x.size()) + " values for " +
                                      std::to_string(data.y.size()) + " images of " + std::to_string(data.channels) +
                                      " × " + shape_string(data.height, data.width));
  // Subtract, then divide, in float, as torchvision's Normalize does (sub_, then div_).
  float* v = data.x.data();
  for (std::size_t n = 0; n < data.y.size(); ++n)
    for (std::size_t k = 0; k < c; ++k)
      for (std::size_t p = 0; p < plane; ++p, ++v) *v = (*v - mean[k]) / std[k];
}

}  // namespace bppsa
