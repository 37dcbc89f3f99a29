// Storage on cache-line boundaries: every numeric buffer the scan and the Jacobians compute in.
// Eigen's vectorised kernels peel scalar iterations up to the first aligned address, so with
// AVX2/AVX-512 a product's bits would depend on where its buffers happen to start; with every
// buffer starting on a 64-byte boundary, the same inputs give the same bits in every buffer.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace bppsa {

/// The alignment of bppsa's numeric buffers (one cache line, one AVX-512 register).
inline constexpr std::size_t kBufferAlignment = 64;

/// A std::allocator that starts every allocation on a kBufferAlignment boundary.
template <class T>
struct AlignedAllocator {
  using value_type = T;

  AlignedAllocator() noexcept = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kBufferAlignment}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kBufferAlignment}); }

  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

/// A std::vector whose data() starts on a kBufferAlignment boundary.
template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace bppsa
