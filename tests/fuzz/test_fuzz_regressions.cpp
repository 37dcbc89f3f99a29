// Replays the fuzz targets' inputs in every build (g++, ASan+UBSan): the seed corpora
// (fuzz/corpus/<target>/, valid files every parser must accept) and each input a fuzzer once
// broke a parser with (tests/fuzz_regressions/<target>/<name>, with <name>.expect holding a
// piece of the bppsa error it must now end in, or nothing when it must be accepted).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "../../fuzz/targets.hpp"

namespace fs = std::filesystem;
using bppsa::fuzz::Target;

namespace {

const fs::path kTests = fs::path(__FILE__).parent_path().parent_path();  // tests/
const fs::path kCorpus = kTests.parent_path() / "fuzz" / "corpus";
const fs::path kRegressions = kTests / "fuzz_regressions";

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << p;
  return {std::istreambuf_iterator<char>(f), {}};
}

/// The inputs in `dir` (not the .expect files), sorted.
std::vector<fs::path> inputs(const fs::path& dir) {
  std::vector<fs::path> out;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() != ".expect") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// Runs `t` on the file: the outcome ("" = accepted, else the bppsa error) and a failure for
/// anything else that escapes (the target's Broken, std::bad_alloc, …) or a run over 20 s.
std::string replay(const Target& t, const fs::path& file) {
  const std::string bytes = read(file);
  const auto start = std::chrono::steady_clock::now();
  std::string result;
  try {
    result = t.run({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
  } catch (const std::exception& e) {
    ADD_FAILURE() << file << " escaped the parser with " << typeid(e).name() << ": " << e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0) << file << " took " << seconds << " s (a hang?)";
  return result;
}

class FuzzInputs : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzInputs, SeedsAreAccepted) {
  const Target& t = GetParam();
  const auto seeds = inputs(kCorpus / t.name);
  ASSERT_FALSE(seeds.empty()) << "no seeds in " << kCorpus / t.name;
  for (const auto& f : seeds) {
    EXPECT_LE(fs::file_size(f), t.max_len) << f << " is longer than the target's -max_len";
    EXPECT_EQ(replay(t, f), "") << f << " is a seed: a valid file the parser must accept";
  }
}

TEST_P(FuzzInputs, RegressionsEndInTheirError) {
  const Target& t = GetParam();
  for (const auto& f : inputs(kRegressions / t.name)) {
    fs::path expect = f;
    expect += ".expect";
    ASSERT_TRUE(fs::exists(expect)) << f << " has no " << expect.filename() << " saying how it must end";
    std::string want = read(expect);
    while (!want.empty() && (want.back() == '\n' || want.back() == '\r')) want.pop_back();
    const std::string got = replay(t, f);
    if (want.empty())
      EXPECT_EQ(got, "") << f << " must be accepted";
    else
      EXPECT_NE(got.find(want), std::string::npos) << f << " must be refused with '" << want << "', got: '" << got << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Parsers, FuzzInputs, ::testing::ValuesIn(bppsa::fuzz::targets()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(FuzzInputs, EveryCorpusFolderIsATarget) {
  std::set<std::string> names;
  for (const Target& t : bppsa::fuzz::targets()) names.insert(t.name);
  for (const fs::path& root : {kCorpus, kRegressions})
    for (const auto& e : fs::directory_iterator(root))
      if (e.is_directory()) {
        EXPECT_TRUE(names.count(e.path().filename().string())) << e.path() << " names no target";
      }
}

TEST(FuzzInputs, SplitInput) {
  using bppsa::fuzz::split_input;
  const std::string two = std::string("ab") + bppsa::fuzz::kSeparator + "cde";
  const auto [a, b] = split_input({reinterpret_cast<const std::uint8_t*>(two.data()), two.size()});
  EXPECT_EQ(std::string(a.begin(), a.end()), "ab");
  EXPECT_EQ(std::string(b.begin(), b.end()), "cde");
  const std::string one = "abc";
  const auto [c, d] = split_input({reinterpret_cast<const std::uint8_t*>(one.data()), one.size()});
  EXPECT_EQ(c.size(), 3u);
  EXPECT_TRUE(d.empty());
}

}  // namespace
