// The machine's memory (physical, cgroup, BPPSA_MEMORY_LIMIT) and the shared check that
// refuses, before allocating, a request that cannot fit.
#include "bppsa/core/memory.hpp"

#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "bppsa/core/error.hpp"
#include "core/huge_pages.hpp"

namespace bppsa {
namespace {

std::atomic<double> g_override{0};

double physical_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<double>(pages) * static_cast<double>(size) : 0;
}

/// A cgroup's memory limit (v2 memory.max, else v1 memory.limit_in_bytes); 0 when none.
double cgroup_bytes() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string value;
    if (!(in >> value) || value == "max") continue;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end != value.c_str() && *end == '\0' && v > 0) return v;
  }
  return 0;
}

/// BPPSA_MEMORY_LIMIT in bytes; 0 when unset; InvalidArgument when malformed.
double env_bytes() {
  const char* env = std::getenv("BPPSA_MEMORY_LIMIT");
  if (!env || !*env) return 0;
  const std::string s(env);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string unit(end ? end : "");
  const std::size_t power =
      unit.size() == 1 ? std::string("KMGT").find(static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))))
                       : std::string::npos;
  double scale = 1;
  if (power != std::string::npos)
    scale = std::pow(1024.0, 1.0 + static_cast<double>(power));
  else if (!unit.empty())
    v = -1;
  if (end == s.c_str() || !std::isfinite(v) || v <= 0)
    detail::raise<InvalidArgument>("memory", "BPPSA_MEMORY_LIMIT='" + s +
                                                 "' is not a size: give bytes, or a positive number with K, M, G or "
                                                 "T (e.g. 8G), or unset it");
  return v * scale;
}

/// What this machine offers, read once: min(physical, cgroup limit).
double machine_bytes() {
  static const double bytes = [] {
    const double physical = physical_bytes(), cgroup = cgroup_bytes();
    return physical > 0 && cgroup > 0 ? std::min(physical, cgroup) : std::max(physical, cgroup);
  }();
  return bytes;
}

}  // namespace

double memory_limit_bytes() {
  const double o = g_override.load(std::memory_order_relaxed);
  if (o > 0) return o;
  const double env = env_bytes();
  return env > 0 ? env : machine_bytes();
}

void set_memory_limit(double bytes) {
  if (!(bytes >= 0) || !std::isfinite(bytes))
    detail::raise<InvalidArgument>("set_memory_limit",
                                   "the limit must be a finite number of bytes ≥ 0 (0 = the "
                                   "machine's), got " +
                                       std::to_string(bytes));
  g_override.store(bytes, std::memory_order_relaxed);
}

bool fits_in_memory(double bytes) {
  const double have = memory_limit_bytes();
  return have <= 0 || bytes <= kMemoryShare * have;  // NaN (an absurd product) does not fit
}

std::string format_bytes(double bytes) {
  char buf[64];
  if (!std::isfinite(bytes)) return "an unbounded amount";
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 999.5 && u < 6) {
    bytes /= 1000;
    ++u;
  }
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else if (u == 6 && bytes >= 1000)
    std::snprintf(buf, sizeof buf, "%.3g EB", bytes);
  else
    std::snprintf(buf, sizeof buf, bytes < 9.995 ? "%.2f %s" : bytes < 99.95 ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

void check_memory(const std::string& op, const std::string& what, const std::vector<MemoryItem>& items,
                  const std::string& fix) {
  double total = 0;
  std::string parts, only;
  std::size_t listed = 0;
  for (const MemoryItem& item : items) {
    if (!(item.bytes > 0) && !std::isnan(item.bytes)) continue;
    total += item.bytes;
    parts += (listed++ ? ", " : "") + item.what + " " + format_bytes(item.bytes);
    only = item.what;
  }
  if (!std::isnan(total) && fits_in_memory(total)) return;
  const double have = memory_limit_bytes();
  const char* source = g_override.load(std::memory_order_relaxed) > 0 ? " (set by set_memory_limit)"
                       : env_bytes() > 0                              ? " (BPPSA_MEMORY_LIMIT)"
                                                                      : "";
  std::string msg = what + " needs about " + format_bytes(total);
  if (listed > 1)
    msg += " (" + parts + ")";
  else if (listed == 1)
    msg += " (" + only + ")";
  msg += " but this machine has " + format_bytes(have) + source + " and one request may use " +
         std::to_string(static_cast<int>(std::lround(100 * kMemoryShare))) + " % of it; " + fix;
  detail::raise<ResourceError>(op, msg);
}

namespace detail {

void advise_huge_pages(const void* p, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p == nullptr || bytes < kHugePageMinBytes) return;
  constexpr std::uintptr_t huge = std::uintptr_t(2) << 20;
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = (begin + huge - 1) & ~(huge - 1), last = (begin + bytes) & ~(huge - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);  // advice only
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace detail
}  // namespace bppsa
