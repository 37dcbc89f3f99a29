// Platform-independent random draws (data sets, shuffles, initial weights): std::mt19937_64's
// output is fixed by the standard, but the std:: distributions are implementation-defined.
#pragma once

#include <cstdint>
#include <random>

namespace bppsa::detail {

/// Uniform integer in [0, n), n > 0, without modulo bias: draws below 2^64 mod n are rejected.
inline std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

/// Uniform double in [0, 1) with 53 random bits.
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// splitmix64: derives independent seeds for separate streams from one user seed.
inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace bppsa::detail
