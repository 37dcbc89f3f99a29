// The recurrent cells as Steps of the fused chunked scan (scan/cuda/fused/step.hpp; each cell's
// Step is in its file, rnn_cell.hpp, gru_cell.hpp, lstm_cell.hpp): their constants and planning
// requests by cell code, for the host. No CUDA headers.
#pragma once

#include "nn/cuda/recurrent_math.hpp"
#include "scan/cuda/fused/plan.hpp"

namespace bppsa::detail::gpu {

BPPSA_HD inline bool known_cell(std::int32_t cell) {
  return cell == kRnnTanh || cell == kRnnRelu || cell == kGru || cell == kLstm;
}

/// The Step constants of a cell code; an empty FusedStepInfo (gates 0) for an unknown code.
inline FusedStepInfo fused_cell_info(std::int32_t cell) {
  FusedStepInfo info;
  if (known_cell(cell)) visit_cell(cell, [&](auto c) { info = fused_step_info<decltype(c)>(); });
  return info;
}

/// The planning request of a recurrent layer (no overrides); the cell code is the Step's variant.
inline FusedRequest fused_cell_request(std::int32_t cell, Idx H, Idx steps, Idx B, bool inject, Idx scalar) {
  FusedScanOptions o;
  o.injections = inject;
  return fused_request(fused_cell_info(cell), cell, H, steps, B, scalar, o);
}

/// The chunked shape of a recurrent layer with chunk length L.
inline FusedShape fused_cell_shape(std::int32_t cell, Idx H, Idx steps, Idx B, bool inject, Idx L) {
  return fused_shape(cell_gates(cell), cell_state(cell, H) / H, cell, H, steps, B, inject, L);
}

}  // namespace bppsa::detail::gpu
