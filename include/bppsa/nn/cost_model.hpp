// The step cost model behind `auto`: the time of one recurrent layer's training step (forward and
// backward) with each CPU backward method, and with torch.nn's own kernels (bppsa.nn's fallback),
// fitted to measured times by bench/auto/fit_auto.py (docs/method.md §8, docs/benchmarks.md).
#pragma once

#include <string>

#include "bppsa/nn/backward.hpp"
#include "bppsa/nn/recurrent.hpp"

namespace bppsa {

/// One recurrent layer's training step as the cost model sees it.
struct StepShape {
  CellType cell = CellType::rnn;
  Index input = 0;   ///< features of x_t
  Index hidden = 0;  ///< H
  Index proj = 0;    ///< LSTM projection (0: none)
  Index steps = 0;   ///< T
  Index batch = 0;   ///< B
  int threads = 0;   ///< OpenMP threads; 0 = OpenMP's default
};

/// What the model predicts: bppsa's three CPU backward methods, and torch.nn's own kernels.
enum class StepCandidate { bp, blelloch, hybrid, torch_nn };
const char* to_string(StepCandidate c);

/// Milliseconds of one training step of the shape with the candidate, as the model in use
/// predicts; NaN where it has no fit for that cell and candidate. A fit made at other thread
/// counts serves the nearest one it has (the largest below, else the smallest above).
double predict_step_ms(const StepShape& shape, StepCandidate candidate);

/// Whether the fit predict_step_ms uses for this shape and candidate was measured on shapes
/// spanning it: T, B and H each within the smallest and largest its sweep measured (a model file
/// that records no span spans every shape); false where the model has no fit. bppsa.nn's `auto`
/// runs torch.nn's kernels only inside torch.nn's span: a prediction outside it is extrapolated
/// (at T 1, say, the fixed costs of a fit made at T >= 30 alone would decide it).
bool cost_model_spans(const StepShape& shape, StepCandidate candidate);

/// `automatic` on the CPU for this shape: bp at T 1 (a chain of one step: no scan to run); else of
/// bp, blelloch and hybrid the one with the least predicted time; where the model has no fit for the
/// cell, resolve_backward(options, batch)'s batch rule. Other methods resolve to themselves.
BackwardMethod resolve_backward(const BackwardOptions& options, const StepShape& shape);

/// Where the model in use came from: the path of a loaded file, "BPPSA_COST_MODEL=<path>", or
/// "built-in (<what it was fitted on>)"; "none" when no fit is built in.
std::string cost_model_source();

/// Replaces the model in use, for the whole process, by the file bench/auto/fit_auto.py wrote
/// (JSON, format "bppsa-cost-model/1"). IoError when it cannot be read, FormatError naming the
/// file and the fault when it is not such a model; the model in use is then unchanged. At first
/// use the model is the file named by the environment variable BPPSA_COST_MODEL when set (its
/// faults raised the same way), else the built-in fit; an empty path returns to that.
void load_cost_model(const std::string& path);

}  // namespace bppsa
