// The cost model behind `auto`: the time of one recurrent layer's training step (forward and
// backward) with each CPU backward method and with torch.nn's own kernels (bppsa.nn's fallback),
// and of its forward, sequential or one Newton iteration; fitted to measured times by
// bench/auto/fit_auto.py (docs/cost_model.md, docs/method.md §9).
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

/// What the forward model predicts: the sequential forward of one layer, and one iteration of its
/// Newton forward (the cell and Jacobians at every step, then the scan; docs/method.md §9).
enum class ForwardCandidate { sequential, newton_iteration };
const char* to_string(ForwardCandidate c);

/// Milliseconds of one layer's forward of the shape (no backward), as the model in use predicts;
/// NaN where it has no fit for that cell and candidate. Threads as predict_step_ms.
double predict_forward_ms(const StepShape& shape, ForwardCandidate candidate);

/// Iterations the Newton forward took in the sweep the model's Newton fit measured (their median:
/// what `automatic` expects of a layer it has not seen); 0 where the model has no Newton fit.
int expected_newton_iterations(const StepShape& shape);

/// How a layer's forward runs: the method, and for newton the iterations before it falls back.
struct ForwardPlan {
  ForwardMethod method = ForwardMethod::sequential;
  int max_iterations = 0;
  /// The predictions behind an `automatic` choice (NaN where the model has none, or the method
  /// was asked for), in milliseconds.
  double sequential_ms = 0, iteration_ms = 0;
};

/// `automatic`: newton where its expected iterations (expected_newton_iterations) are predicted
/// faster than the sequential forward, with max_iterations the iterations that fit in the
/// sequential forward's predicted time (at most options.max_iterations): a layer on which Newton
/// does not certify then costs at most about twice the sequential forward. Else, at T 1, on
/// Device::cuda (no CUDA Newton yet), where the model has no forward fit for the cell, or where
/// either fit does not span the shape (T, B, H as cost_model_spans): sequential. Other methods
/// resolve to themselves with options.max_iterations.
ForwardPlan resolve_forward(const ForwardOptions& options, const StepShape& shape, Device device = Device::cpu);

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
