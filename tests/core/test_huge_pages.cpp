// advise_huge_pages (src/core/huge_pages.hpp): a large buffer's 2 MiB-aligned part is marked for
// transparent huge pages, as the kernel reports it in /proc/self/smaps; a small one is left alone.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/huge_pages.hpp"

namespace {

/// The kernel's THP mode ("always", "madvise" or "never"); empty where it has none.
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const auto open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

/// Whether the mapping holding address a has the hugepage advice ("hg" in its VmFlags).
bool advised(std::uintptr_t a) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.find(" hg") != std::string::npos;
  }
  return false;
}

TEST(HugePages, ALargeBufferIsAdvisedAndASmallOneIsNot) {
#if !defined(__linux__)
  GTEST_SKIP() << "transparent huge pages are Linux's";
#endif
  if (thp_mode().empty() || thp_mode() == "never") GTEST_SKIP() << "the kernel has no transparent huge pages";
  constexpr std::size_t huge = std::size_t(2) << 20, large = std::size_t(16) << 20;
  // Mappings of their own, so that no other buffer shares their flags.
  const auto map = [](std::size_t bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  };
  const auto aligned_inside = [&](const char* p) {
    return (reinterpret_cast<std::uintptr_t>(p) + huge - 1) & ~std::uintptr_t(huge - 1);
  };
  char* big = map(large);
  ASSERT_NE(big, nullptr);
  char* buffer = big + 64;  // (a buffer need not start on a page)
  EXPECT_FALSE(advised(aligned_inside(buffer))) << "the mapping was advised before the call";
  bppsa::detail::advise_huge_pages(buffer, large - 64);
  EXPECT_TRUE(advised(aligned_inside(buffer))) << "the 2 MiB-aligned part of a 16 MiB buffer was not advised";
  munmap(big, large);

  const std::size_t under = bppsa::detail::kHugePageMinBytes - 4096;  // under the threshold: nothing
  char* small = map(under);
  ASSERT_NE(small, nullptr);
  bppsa::detail::advise_huge_pages(small, under);
  EXPECT_FALSE(advised(aligned_inside(small))) << "a buffer under kHugePageMinBytes was advised";
  munmap(small, under);
  bppsa::detail::advise_huge_pages(nullptr, large);  // nothing, no fault
}

}  // namespace
