// The bodies of bppsa's fuzz targets, one per file parser, shared by the libFuzzer binaries
// (fuzz/fuzz_main.cpp) and the regression test that replays their corpora in every build.
//
// Contract of every target: bad input ends in a bppsa::Error (the documented outcome, caught
// here); anything else escapes — another exception (std::bad_alloc, std::out_of_range, …),
// or Broken when an accepted input breaks an invariant (a round trip that differs, a data
// set that fails its own validation). Crashes, sanitizer reports and hangs are bugs too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace bppsa::fuzz {

/// An accepted input that breaks what the parser promises; never a bppsa::Error.
struct Broken : std::logic_error {
  using std::logic_error::logic_error;
};

using Bytes = std::span<const std::uint8_t>;

/// One target: its name (the binary is bppsa_fuzz_<name>, its seeds fuzz/corpus/<name>/),
/// the parser run on an input, returning "" when the input was accepted or the bppsa::Error's
/// message when it was refused, and the largest input worth fuzzing (libFuzzer's -max_len).
struct Target {
  const char* name;
  std::string (*run)(Bytes data);
  std::size_t max_len;
};

/// Every target, in a fixed order.
const std::vector<Target>& targets();
/// The target called `name`; std::invalid_argument listing the names otherwise.
const Target& target(const std::string& name);

/// What the MFCC cache target asks of a cache: load_irmas's key, the labels of three files
/// and 4 features a frame (fuzz/make_corpus.cpp writes the seeds with these).
inline constexpr const char* kCacheKey = "00c0ffee00c0ffee";
inline const std::vector<std::int64_t> kCacheLabels = {1, 0, 10};
inline constexpr std::int64_t kCacheFeatures = 4;

/// An IDX file of unsigned bytes (type 0x08) as LeCun's MNIST files are written: 00 00 08
/// <ndims>, the big-endian sizes, then the bytes (the idx target's round trip and its seeds).
inline std::vector<std::uint8_t> idx_file(const std::vector<std::int64_t>& dims, Bytes data) {
  std::vector<std::uint8_t> b = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (const std::int64_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(d >> shift));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

/// Splits a two-file input (the checkpoint target's weights and optimizer state) at
/// kSeparator: {first, rest}, rest empty when there is no separator.
inline constexpr char kSeparator[] = "\n--bppsa-fuzz-next-file--\n";
std::pair<Bytes, Bytes> split_input(Bytes data);

}  // namespace bppsa::fuzz
