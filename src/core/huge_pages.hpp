// Transparent huge pages for the CPU engine's large buffers. A record or a backward's buffers come
// back as fresh pages at each step once glibc has returned them to the kernel; each 4 KiB page then
// faults on first touch. Advised, the kernel maps 2 MiB at a time (where THP is "madvise" or "always").
#pragma once

#include <cstddef>

namespace bppsa::detail {

/// Buffers smaller than this are left alone (a few pages: no whole 2 MiB page inside them).
inline constexpr std::size_t kHugePageMinBytes = std::size_t(4) << 20;

/// Asks Linux (madvise MADV_HUGEPAGE) to back the 2 MiB-aligned part of [p, p + bytes) with huge
/// pages when bytes ≥ kHugePageMinBytes; elsewhere nothing. Call before the buffer's first write.
/// Never fails: a kernel that refuses the advice leaves the buffer as it was.
void advise_huge_pages(const void* p, std::size_t bytes);

/// The same for an Eigen matrix's storage.
template <class M>
void advise_huge_pages(const M& m) {
  advise_huge_pages(m.data(), static_cast<std::size_t>(m.size()) * sizeof(typename M::Scalar));
}

}  // namespace bppsa::detail
