// BPPSA_HD marks arithmetic and indexing shared by the CUDA kernels and the host: compiled by
// nvcc it is __host__ __device__, by the C++ compiler it is nothing, so the g++ test suite
// (tests/scan/cuda/test_scan_host.cpp) runs the very functions the kernels run. This header is the one
// place that looks at __CUDACC__; kernel and op code never does.
#pragma once

#include <utility>

#if defined(__CUDACC__)
#define BPPSA_HD __host__ __device__
/// For helpers that must disappear into their caller (register arrays indexed through them stay
/// registers only when they are inlined; ptxas otherwise keeps them as calls with a stack frame).
#define BPPSA_HD_FORCEINLINE __host__ __device__ __forceinline__
#else
#define BPPSA_HD
#define BPPSA_HD_FORCEINLINE inline
#endif

/// A hint that the global-memory line holding *p will be read soon: PTX prefetch.global.L1 in
/// device code (non-blocking; the later load hits L1), nothing on the host.
BPPSA_HD_FORCEINLINE void hd_prefetch_l1(const void* p) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

/// hd_unrolled<N>(f): f(HdIndex<0>{}), …, f(HdIndex<N − 1>{}) in order, each index a compile-time
/// constant (HdIndex<I>::value), so that register arrays indexed by it stay registers.
template <int I>
struct HdIndex {
  static constexpr int value = I;
};
template <class F, int... I>
BPPSA_HD_FORCEINLINE void hd_unrolled_seq(F& f, std::integer_sequence<int, I...>) {
  (f(HdIndex<I>{}), ...);
}
template <int N, class F>
BPPSA_HD_FORCEINLINE void hd_unrolled(F&& f) {
  hd_unrolled_seq(f, std::make_integer_sequence<int, N>{});
}

/// out[0..3] = p[0..3], p aligned to 16 bytes: one 128-bit load (float) or two (double) in device
/// code, four scalar loads on the host.
template <class T>
BPPSA_HD_FORCEINLINE void hd_load4(const T* p, T* out) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
  } else {
    static_assert(sizeof(T) == 8, "float or double");
    const double2 u = reinterpret_cast<const double2*>(p)[0], v = reinterpret_cast<const double2*>(p)[1];
    out[0] = u.x, out[1] = u.y, out[2] = v.x, out[3] = v.y;
  }
#else
  for (int i = 0; i < 4; ++i) out[i] = p[i];
#endif
}

/// acc + a·b as each side computes an unguarded `acc += a * b`: one rounding (FMA) in device code,
/// where nvcc contracts it, two on the host (bppsa's C++ is compiled with -ffp-contract=off).
/// Written out where a multiply-add sits under a condition, which nvcc may compile as a multiply
/// and a select instead: so that such a loop gives the bits of its unguarded twin on both sides.
template <class T>
BPPSA_HD_FORCEINLINE T hd_fma(T a, T b, T acc) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4)
    return __fmaf_rn(a, b, acc);
  else
    return __fma_rn(a, b, acc);
#else
  return acc + a * b;
#endif
}
