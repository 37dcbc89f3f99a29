// What this copy of the library was built as: its version, the CPU level its C++ was compiled for
// and what Eigen vectorises with there, and whether it has the CUDA backend (`bppsa --version`,
// bppsa.build_info()).
#pragma once

#include <string>

namespace bppsa {

struct BuildInfo {
  std::string version;   ///< "0.1.0"
  std::string cpu_isa;   ///< the level compiled for (CMake's BPPSA_CPU_ISA or the Python variant's): "native", "x86-64-v4", …
  std::string cpu_flag;  ///< its compiler flag ("-march=native"); empty for the compiler's default target
  /// The widest SIMD Eigen's kernels use in this copy: "AVX-512", "AVX2+FMA", "AVX", "SSE4.2", "SSE2", "NEON", … or "none".
  std::string vectorization;
  bool cuda = false;  ///< built with the CUDA backend (cuda_built())
};

/// The facts of the library copy this call links to (each Python variant has its own).
BuildInfo build_info();

/// One line: "cpu x86-64-v4 (-march=x86-64-v4), Eigen vectorises with AVX-512; cuda off".
std::string to_string(const BuildInfo& info);

}  // namespace bppsa
