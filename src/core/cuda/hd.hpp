// BPPSA_HD marks arithmetic and indexing shared by the CUDA kernels and the host: compiled by
// nvcc it is __host__ __device__, by the C++ compiler it is nothing, so the g++ test suite
// (tests/scan/cuda/test_scan_host.cpp) runs the very functions the kernels run. This header is the one
// place that looks at __CUDACC__; kernel and op code never does.
#pragma once

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
