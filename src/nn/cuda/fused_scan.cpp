// A recurrent layer's side of the fused chunked scan (fused_scan.hpp): the cell's Step, its name
// in messages, the record's arrays by name.
#include "nn/cuda/fused_scan.hpp"

#include <string>
#include <utility>

#include "bppsa/core/error.hpp"
#include "nn/cuda/fused_cells.hpp"

namespace bppsa::detail::gpu {
namespace {

constexpr const char* kOp = "FusedRecurrentScan";

/// The cell's Step, or InvalidArgument naming the codes.
template <class T>
FusedStep<T> step_of(std::int32_t cell) {
  if (!known_cell(cell))
    raise<InvalidArgument>(kOp, "unknown cell code " + std::to_string(cell) +
                                    "; use kRnnTanh, kRnnRelu, kGru or kLstm (nn/cuda/layer_args.hpp)");
  FusedStep<T> step;
  visit_cell(cell, [&](auto c) { step = make_fused_step<T, decltype(c)>(); });
  return step;
}

const char* label(std::int32_t cell) {
  switch (cell) {
    case kRnnTanh:
      return "rnn (tanh)";
    case kRnnRelu:
      return "rnn (relu)";
    case kGru:
      return "gru";
    default:
      return "lstm";
  }
}

}  // namespace

template <class T>
FusedRecurrentScan<T> FusedRecurrentScan<T>::plan(std::int32_t cell, Idx hidden, Idx steps, Idx batch,
                                                  const FusedScanOptions& options) {
  const FusedStep<T> step = step_of<T>(cell);
  return FusedRecurrentScan(cell, FusedScan<T>::plan(step, cell, hidden, steps, batch, options, label(cell)));
}

template <class T>
FusedScanStats FusedRecurrentScan<T>::estimate(std::int32_t cell, Idx hidden, Idx steps, Idx batch,
                                               const FusedScanOptions& options) {
  return FusedScan<T>::estimate(step_of<T>(cell), cell, hidden, steps, batch, options, label(cell));
}

template <class T>
void FusedRecurrentScan<T>::run(cudaStream_t stream, const FusedDevicePtrs<T>& p) {
  FusedChainPtrs<T> q;
  q.w = p.w_hh;
  q.record[kRecordH] = p.h;
  q.record[kRecordC] = p.c;
  q.record[kRecordGates] = p.gates;
  q.record[kRecordAux] = p.aux;
  // The record arrays the cell's Step reads (its kFusedRecordNeeded), by their names here.
  const char* const names[kFusedRecordArrays] = {" h", " c", " gates", " aux"};
  const unsigned needed = fused_cell_info(cell_).record_needed;
  std::string missing;
  if (!p.w_hh) missing += " w_hh";
  for (int i = 0; i < kFusedRecordArrays; ++i)
    if ((needed >> i & 1u) != 0 && !q.record[i]) missing += names[i];
  if (!p.g_last) missing += " g_last";
  if (!p.g) missing += " g";
  const bool gru = cell_ == kGru;
  if (p.dx && gru && !p.dh) missing += " dh (with dx: the GRU's recurrent side)";
  if (!missing.empty()) raise<InvalidArgument>("FusedRecurrentScan::run", "null device pointers:" + missing);
  if (p.dh && (!gru || !p.dx))
    raise<InvalidArgument>("FusedRecurrentScan::run",
                           std::string("dh given ") + (p.dx ? "for a cell that uses dx for both sides" : "without dx") +
                               "; give dx alone, or dx and dh for a GRU");
  q.g_last = p.g_last;
  q.above = p.above;
  q.g = p.g;
  q.len = p.len;
  // The pre-activation gradients: the Step's y is the recurrent side (dh for a GRU, else dx).
  q.y_out = gru ? p.dh : p.dx;
  q.yi_out = gru ? p.dx : nullptr;
  scan_.run(stream, q);
}

template class FusedRecurrentScan<float>;
template class FusedRecurrentScan<double>;

}  // namespace bppsa::detail::gpu
