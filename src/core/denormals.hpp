// Subnormal floats flushed to zero while the CPU engine computes (the policy of oneDNN and
// TensorFlow). A recurrent gradient that decays through hundreds of tanh steps reaches
// subnormal values (below 1.2e-38 in float), where x86 arithmetic runs one to two orders of
// magnitude slower; flushed, those values become 0, far below any tolerance a gradient is
// compared with. The floating-point control register is per thread: a guard sets it for the
// thread it runs on and restores it on exit, so the caller's (PyTorch's) threads keep their mode.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace bppsa::detail {

class FlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
#elif defined(__aarch64__)
  FlushDenormals() {
    __asm__ volatile("mrs %0, fpcr" : "=r"(saved_));
    const unsigned long flushed = saved_ | kFlushToZeroArm;
    __asm__ volatile("msr fpcr, %0" : : "r"(flushed));
  }
  ~FlushDenormals() { __asm__ volatile("msr fpcr, %0" : : "r"(saved_)); }
#else
  FlushDenormals() = default;  // other CPUs: IEEE subnormals, as before
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned kFlushToZero = 0x8000;      // MXCSR bit 15: results
  static constexpr unsigned kDenormalsAreZero = 0x0040;  // MXCSR bit 6: inputs
  unsigned saved_;
#elif defined(__aarch64__)
  static constexpr unsigned long kFlushToZeroArm = 1ul << 24;  // FPCR.FZ
  unsigned long saved_;
#endif
};

}  // namespace bppsa::detail
