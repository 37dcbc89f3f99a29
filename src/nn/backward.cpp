// Backward methods: names, resolution of `automatic`, and the scan options they mean.
#include "bppsa/nn/backward.hpp"

#include <omp.h>

#include "bppsa/core/error.hpp"

namespace bppsa {

const char* to_string(BackwardMethod m) {
  switch (m) {
    case BackwardMethod::bp:
      return "bp";
    case BackwardMethod::linear:
      return "linear";
    case BackwardMethod::blelloch:
      return "blelloch";
    case BackwardMethod::hybrid:
      return "hybrid";
    case BackwardMethod::automatic:
      return "auto";
    case BackwardMethod::fused:
      return "fused";
  }
  return "?";
}

BackwardMethod parse_backward(std::string_view name) {
  if (name == "bp") return BackwardMethod::bp;
  if (name == "linear") return BackwardMethod::linear;
  if (name == "blelloch") return BackwardMethod::blelloch;
  if (name == "hybrid") return BackwardMethod::hybrid;
  if (name == "auto") return BackwardMethod::automatic;
  if (name == "fused") return BackwardMethod::fused;
  detail::raise<InvalidArgument>("backward", "unknown backward method '" + std::string(name) +
                                                 "'; use bp, blelloch, hybrid, auto, linear or fused (GPU)");
}

Algorithm scan_algorithm(BackwardMethod m) {
  switch (m) {
    case BackwardMethod::linear:
      return Algorithm::linear;
    case BackwardMethod::blelloch:
      return Algorithm::blelloch;
    case BackwardMethod::hybrid:
      return Algorithm::hybrid;
    case BackwardMethod::fused:
      return Algorithm::fused;
    default:
      return Algorithm::automatic;
  }
}

ScanOptions scan_options(const BackwardOptions& options) {
  return {.algorithm = scan_algorithm(options.method),
          .threads = options.threads,
          .chunks = options.chunks,
          .check_inputs = options.check_finite,
          .check_outputs = options.check_finite};
}

int resolve_threads(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

void require_cpu_method(BackwardMethod m, const char* op) {
  if (m == BackwardMethod::fused)
    detail::raise<InvalidArgument>(op, "backward 'fused' is the recurrent layers' fused chunked scan on the GPU "
                                       "(--device cuda); on the CPU use blelloch, hybrid, auto or bp");
}

BackwardMethod resolve_backward(const BackwardOptions& options, Index batch) {
  if (options.method != BackwardMethod::automatic) return options.method;
  return resolve_threads(options.threads) < 2 * batch ? BackwardMethod::bp : BackwardMethod::automatic;
}

}  // namespace bppsa
