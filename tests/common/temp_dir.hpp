// Shared by the tests that write files: a fresh folder per test, and writing raw bytes.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace testutil {

/// A fresh empty folder for the running test (named after its suite, test and process, so
/// parallel ctest processes never share one), removed with everything in it at the end.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() / ("bppsa_" + std::string(info->test_suite_name()) + "_" +
                                                     info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

/// Writes `bytes` to `file`, creating its folder; a test failure if the write fails.
inline void write_bytes(const std::filesystem::path& file, const std::vector<unsigned char>& bytes) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream f(file, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(f.good()) << file;
}

}  // namespace testutil
