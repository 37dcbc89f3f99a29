// The Newton forward of one layer on the CPU (docs/method.md §9): the trajectory s_1 … s_T as
// the root of s_t − f(s_{t−1}, x_t) = 0, found by Newton's method (DEER). Each iteration
// evaluates the cell at every step of the current iterate at once (one record of T·B one-step
// samples: the cell's own forward and Jacobian generator), then solves the linear recurrence
// s_t = A_t s_{t−1} + c_t, A_t = ∂f/∂s at the iterate, with the scan engine (an affine chain run
// in reverse time), and projects the new iterate into the box the cell maps into (§9.2's
// safeguard: an expanding linear model cannot overflow it). Certified steps are frozen and the first uncertified one takes its exact
// value, so every iteration certifies at least one more step. It stops when every step is
// certified, or after max_iterations (or at a residual that is not finite) runs the sequential
// forward from the first uncertified step; either way the record is complete, as the sequential
// forward leaves it (states, gates and the cell's auxiliaries).
#pragma once

#include "nn/cell.hpp"

namespace bppsa::detail {

/// How one layer's Newton forward ended.
struct NewtonOutcome {
  int iterations = 0;
  double residual = 0;     ///< the last certificate residual (NaN/Inf: diverged)
  Index fallback_step = 0;  ///< the first step the sequential forward ran (1-based); 0: every step certified
};

/// rec as ops.forward takes it (x, ax, block 0 of h and c set, the other arrays sized); with
/// per-sample lengths the padding of rec.ax is zeroed (nothing reads it) and the steps past a
/// length carry the state (the caller zeroes them, as after a sequential forward).
template <class T>
NewtonOutcome newton_forward(const CellOps<T>& ops, const RecurrentConfig& config, const LayerWeights<T>& p,
                             LayerRecord<T>& rec, const ForwardOptions& options);

}  // namespace bppsa::detail
