// How a model's backward pass is computed — sequential BP or a BPPSA scan — and where its
// time went. Shared by every model (recurrent and convolutional).
#pragma once

#include <string_view>

#include "bppsa/scan/scanner.hpp"

namespace bppsa {

/// How the backward pass is computed.
///  - bp:                      sequential back-propagation through time with vector-Jacobian
///                             products (no Jacobians formed): the baseline.
///  - blelloch/hybrid:          Jacobians generated, then the scan engine's algorithm.
///  - automatic:               the cheapest. When the batch alone keeps every thread busy
///                             (threads < 2·batch) the scan engine's cost model would pick its
///                             sequential scan, which BP computes with less work (no
///                             Jacobians, one batched product per step): bp. Otherwise the
///                             scan, with the algorithm the cost model picks.
///  - linear:                  Jacobians generated, then the scan engine's sequential scan
///                             (BP over explicit Jacobians; for testing the generators).
///  - fused:                   Device::cuda only: the fused chunked scan of a recurrent layer
///                             (Jacobians formed on the fly, never stored:
///                             src/scan/cuda/fused/). The CPU engines refuse it.
/// On Device::cuda (RecurrentConfig::device): bp is a persistent BP-through-time kernel;
/// automatic is the fused scan when its plan splits the sequence into chunks, else the bp
/// kernel; blelloch, hybrid and linear generate the Jacobians on the GPU and run the generic GPU
/// scan engine's schedule of that name (hybrid: chunks, 0 = √T). A backward's statistics name
/// what ran (Algorithm::fused for the fused scan).
enum class BackwardMethod { bp, linear, blelloch, hybrid, automatic, fused };
const char* to_string(BackwardMethod m);
/// "bp", "linear", "blelloch", "hybrid", "auto", "fused"; InvalidArgument otherwise.
BackwardMethod parse_backward(std::string_view name);

struct BackwardOptions {
  BackwardMethod method = BackwardMethod::blelloch;
  int threads = 0;  ///< OpenMP threads for generation, scan and gradients; 0 = default
  int chunks = 0;   ///< hybrid chunks (0 = automatic)
  /// Raise NonFiniteError when a state gradient is NaN/Inf (the trainer's divergence check); false
  /// lets non-finite values propagate into the gradients, as torch's autograd does.
  bool check_finite = true;
};

/// What `automatic` resolves to for this batch and thread count (other methods: themselves).
BackwardMethod resolve_backward(const BackwardOptions& options, Index batch);
/// The CPU engines' check of a method: InvalidArgument for fused (it runs on the GPU only).
void require_cpu_method(BackwardMethod m, const char* op);

/// The scan engine's algorithm for a scan method (automatic → Algorithm::automatic; fused →
/// Algorithm::fused, which the engine refuses).
Algorithm scan_algorithm(BackwardMethod m);
/// ScanOptions for a backward that scans (algorithm, threads, chunks).
ScanOptions scan_options(const BackwardOptions& options);
/// The thread count an option means (0 → OpenMP's default).
int resolve_threads(int threads);

/// Where the time of a backward pass went (seconds, summed over layers).
struct BackwardTimes {
  double jacobians = 0;  ///< Jacobian generation
  double scan = 0;       ///< scan, or the sequential BP recurrence
  double params = 0;     ///< pre-activation gradients and parameter-gradient GEMMs
  double total() const { return jacobians + scan + params; }
  ScanStats last_scan;  ///< statistics of the last layer's scan (bp: empty)
};

}  // namespace bppsa
