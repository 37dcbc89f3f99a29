// build_info(): BPPSA_VERSION, BPPSA_CPU_ISA_NAME and BPPSA_CPU_ISA_FLAG come from CMake per library copy;
// the vector ISA is read from Eigen's own macros in this translation unit, compiled with the copy's flags.
#include "bppsa/core/build_info.hpp"

#include <Eigen/Core>

#include "bppsa/core/device.hpp"

namespace bppsa {
namespace {

const char* eigen_vectorization() {
#if defined(EIGEN_VECTORIZE_AVX512)
  return "AVX-512";
#elif defined(EIGEN_VECTORIZE_AVX2) && defined(EIGEN_VECTORIZE_FMA)
  return "AVX2+FMA";
#elif defined(EIGEN_VECTORIZE_AVX2)
  return "AVX2";
#elif defined(EIGEN_VECTORIZE_AVX)
  return "AVX";
#elif defined(EIGEN_VECTORIZE_SSE4_2)
  return "SSE4.2";
#elif defined(EIGEN_VECTORIZE_SSE2)
  return "SSE2";
#elif defined(EIGEN_VECTORIZE_NEON)
  return "NEON";
#elif defined(EIGEN_VECTORIZE_SVE)
  return "SVE";
#elif defined(EIGEN_VECTORIZE_VSX)
  return "VSX";
#elif defined(EIGEN_VECTORIZE)
  return "yes";
#else
  return "none";
#endif
}

}  // namespace

BuildInfo build_info() {
  return {BPPSA_VERSION, BPPSA_CPU_ISA_NAME, BPPSA_CPU_ISA_FLAG, eigen_vectorization(), cuda_built()};
}

std::string to_string(const BuildInfo& info) {
  std::string s = "cpu " + info.cpu_isa;
  s += info.cpu_flag.empty() ? " (no -march: the compiler's default target)" : " (" + info.cpu_flag + ")";
  s += ", Eigen vectorises with " + info.vectorization;
  s += info.cuda ? "; cuda on" : "; cuda off";
  return s;
}

}  // namespace bppsa
