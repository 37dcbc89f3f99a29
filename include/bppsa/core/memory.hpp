// Memory guards: how much memory this machine offers, and the one check every path that sizes
// buffers from its input makes before allocating (a ResourceError with the numbers and the fix).
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

namespace bppsa {

/// The bytes a bppsa process may count on: the machine's physical memory, or less where a
/// cgroup (a container) limits it. The environment variable BPPSA_MEMORY_LIMIT (bytes, or a
/// number with K, M, G or T: "8G", binary units) lowers or raises it, and set_memory_limit
/// overrides both. 0 when nothing is known (then every check passes).
double memory_limit_bytes();

/// Overrides memory_limit_bytes() for this process (tests, embedders); 0 restores the
/// machine's (and BPPSA_MEMORY_LIMIT's) value.
void set_memory_limit(double bytes);

/// One request may use at most this share of memory_limit_bytes(): the rest is for the
/// program, the data it already holds and the operating system.
inline constexpr double kMemoryShare = 0.8;

/// A part of a request: what it is for (said in the message) and its size. Sizes are doubles
/// so that absurd requests (N·d² for N = 10^8, d = 10^6) cannot overflow on the way.
struct MemoryItem {
  std::string what;
  double bytes = 0;
};

/// Throws ResourceError when the items together need more than kMemoryShare of
/// memory_limit_bytes(), before anything is allocated:
///   "[op] <what> needs about 41.6 GB (Jacobians 20.8 GB, scan workspace 20.8 GB) but this
///    machine has 24.0 GB (a request may use 80 % of it); <fix>"
/// `fix` says which flag or argument to change. Items of 0 bytes are left out of the list.
void check_memory(const std::string& op, const std::string& what, const std::vector<MemoryItem>& items,
                  const std::string& fix);

/// Whether `bytes` fit in one request (the test check_memory makes).
bool fits_in_memory(double bytes);

/// "1.23 GB", "512 MB", "4.0 kB", "12 B" (decimal units, three significant digits).
std::string format_bytes(double bytes);

}  // namespace bppsa
