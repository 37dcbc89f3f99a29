// The step policy of the fused chunked scan (docs/method.md §2 hybrid, §8): what the scan needs to
// know of a chain whose transposed Jacobians are never stored, only applied. A chain of this kind
// has, at step t of sample b, J_t^T x = W^T y_t(x) + D_t(x) on a state of S = parts·H rows, with W
// (G·H × H, row-major) shared by every step and sample, y_t (G values per unit k) and the direct
// part D_t (row-local) formed from a record the model wrote in its forward pass. The scan (math.hpp,
// kernels.cuh) owns the chunking, the threads, the products and the carry; a Step owns the record.
//
// A Step is a struct with, for T = float and double (every function BPPSA_HD):
//   kGates, kStateParts (1, or 2: rows h over rows c), kFusedCoefficients (per unit k),
//   kFusedMaxTile4 (largest row tile with 4 columns per thread that does not spill), kFusedName,
//   kFusedRecordNeeded (bit i: FusedArgs::record[i] must be set), kFusedRecordPerUnit (values of
//   the record one step reads per unit: fused_record's spans must total exactly this times H, as
//   it sizes the record's ring slots and the traffic estimate), kFusedCost (the model's issue
//   slots, FusedStepCost);
//   fused_record(a, t, b) → FusedStepRecord<T>: the spans of the record step t of sample b reads;
//   fused_unit(rec, H, variant, k, q): unit k's coefficients q[kFusedCoefficients] (shared by the
//     columns of a thread); `variant` is the plan's opaque integer (e.g. an activation);
//   fused_y(q, xh, xc, y): y's G values of one column from its unit-k rows x_h (and x_c);
//   fused_direct(rec, H, i) → FusedDirect<T>: row i's direct coefficients;
//   fused_rows(d, xh, xc, vh, vc): adds row i's direct part to vh (which holds W^T y plus any
//     injection) and, with two parts, sets the c row vc, from the old rows x_h, x_c;
//   kFusedInputSide, and where true fused_yi(q, xh, xc, y, yi): a second set of G values per unit
//     (e.g. the GRU's input-side pre-activation gradients) the push writes beside y (FusedArgs::y_out).
// nn/cuda/{rnn,gru,lstm}_cell.hpp are the Steps of the recurrent cells. No CUDA headers.
#pragma once

#include <cstdint>

#include "core/cuda/grid.hpp"
#include "core/cuda/hd.hpp"

namespace bppsa::detail::gpu {

/// What a step reads of the record at (step t, sample b): up to three spans of the Step's choosing
/// and their lengths (the kernels prefetch them a few steps ahead).
template <class T>
struct FusedStepRecord {
  const T* p0 = nullptr;
  const T* p1 = nullptr;
  const T* p2 = nullptr;
  Idx n0 = 0, n1 = 0, n2 = 0;
};

/// Row i's direct coefficients, as the Step's fused_direct and fused_rows read them.
template <class T>
struct FusedDirect {
  T d[2] = {T(0), T(0)};
};

/// Record arrays a fused scan carries to its Step (FusedArgs::record).
inline constexpr int kFusedRecordArrays = 4;

/// The cost model's issue slots of a Step beyond those every Step has (plan.hpp): per unit k of a
/// thread's step, per unit and column, per row of its tile, per row and column.
struct FusedStepCost {
  double unit = 0, column = 0, row = 0, row_column = 0;
};

/// A Step's constants as the host planner sees them (plain data, no types).
struct FusedStepInfo {
  const char* name = "";
  int gates = 0;  ///< G (0: no Step)
  int parts = 1;  ///< S = parts·H
  int max_tile4 = 0;
  unsigned record_needed = 0;
  double record_per_unit = 0;
  bool input_side = false;  ///< kFusedInputSide
  FusedStepCost cost;
};

template <class Step>
constexpr FusedStepInfo fused_step_info() {
  FusedStepInfo i;
  i.name = Step::kFusedName;
  i.gates = Step::kGates;
  i.parts = Step::kStateParts;
  i.max_tile4 = Step::kFusedMaxTile4;
  i.record_needed = Step::kFusedRecordNeeded;
  i.record_per_unit = Step::kFusedRecordPerUnit;
  i.input_side = Step::kFusedInputSide;
  i.cost = Step::kFusedCost;
  return i;
}

}  // namespace bppsa::detail::gpu
