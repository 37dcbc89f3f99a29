// CIFAR-10 from its "binary version" batches (docs/method.md §7): 50,000 train and 10,000 test 3×32×32 images.
#pragma once

#include <array>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/data/image.hpp"

namespace bppsa {

/// The CIFAR-10 "binary version" (cifar-10-batches-bin): data_batch_1.bin … data_batch_5.bin
/// and test_batch.bin, each a sequence of 3073-byte records: 1 label byte (0..9), then 1024
/// red, 1024 green, 1024 blue bytes, each plane row-major 32×32 (so a record's pixels are
/// already [C][H][W]). `dir` may be the cifar-10-batches-bin folder or its parent. Loads
/// every data_batch_K.bin present for K = 1, 2, … (stopping at the first missing one; at
/// least data_batch_1.bin is required), concatenated in that order, as train ("cifar10 train")
/// and test_batch.bin as test ("cifar10 test"). Class names from batches.meta.txt when present
/// (one per line, surrounding blanks trimmed, blank lines ignored), else the standard ten.
/// Pixels are scaled to [0, 1] (byte / 255); see normalize_channels with kCifar10Mean/Std.
/// Throws IoError for a missing folder or file (naming the expected files and where to get
/// them: https://www.cs.toronto.edu/~kriz/cifar.html, "CIFAR-10 binary version") and
/// FormatError naming the file for an empty file, a size that is not a multiple of 3073
/// (truncated: the size and the record count are named), a label byte > 9 (the record is
/// named), or a batches.meta.txt that does not list ten names.
std::pair<ImageDataset, ImageDataset> load_cifar10(const std::filesystem::path& dir);

namespace detail {
/// The parsers behind load_cifar10, on a file's bytes (`source` names it in messages): one
/// batch's records appended to `out` (a 3×32×32 data set), and batches.meta.txt's ten class
/// names. The same FormatErrors as load_cifar10.
void parse_cifar10_batch(std::span<const unsigned char> bytes, const std::string& source, ImageDataset& out);
std::vector<std::string> parse_cifar10_class_names(std::span<const unsigned char> bytes, const std::string& source);
}  // namespace detail

/// The usual CIFAR-10 channel means and standard deviations (R, G, B) of the [0, 1] pixels.
inline constexpr std::array<float, 3> kCifar10Mean{0.4914f, 0.4822f, 0.4465f};
inline constexpr std::array<float, 3> kCifar10Std{0.2470f, 0.2435f, 0.2616f};

}  // namespace bppsa
