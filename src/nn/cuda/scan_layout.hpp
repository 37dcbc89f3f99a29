// How one recurrent layer's backward maps onto the generic GPU scan (scan/cuda/program.hpp):
// the layout every element is planned with, and where J_t^T, the affine parts and the
// gradients g_t sit in the program's value arena. Host code without CUDA: GenericLayerScan
// uses it with the device arena, the g++ tests with a replayed one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/jacobian/jacobian.hpp"
#include "nn/cuda/recurrent_math.hpp"
#include "scan/cuda/program.hpp"
#include "scan/schedule.hpp"

namespace bppsa::detail::gpu {

/// J_t^T's layout for a batch: RNN, W_hh^T shared by the batch × a per-sample diagonal (only
/// S's identity matters to a plan; its values are written on the device); GRU, LSTM, dense S × S.
template <class T>
Layout<T> layer_scan_layout(std::int32_t cell, Index hidden, Index batch) {
  if (cell == kRnnTanh || cell == kRnnRelu)
    return Layout<T>{Kind::shared_dense_diag,
                     hidden,
                     hidden,
                     batch,
                     nullptr,
                     std::make_shared<const Matrix<T>>(Matrix<T>::Zero(hidden, hidden))};
  const Index S = cell_state(cell, hidden);
  return Layout<T>{Kind::dense, S, S, batch, nullptr, nullptr};
}

/// The scan positions (scan_elements' convention): position i holds J_{T−i+1}^T and, with
/// injections, the affine part e_{T−i} (set for 1 ≤ T − i ≤ T − 1, as the CPU layer sets them).
template <class T>
std::vector<ElementInfo<T>> layer_scan_elements(const Layout<T>& layout, Index steps, bool inject) {
  std::vector<ElementInfo<T>> elements(static_cast<std::size_t>(steps) + 1);
  for (Index i = 1; i <= steps; ++i) elements[static_cast<std::size_t>(i)] = {&layout, inject && i <= steps - 1};
  return elements;
}

/// Offsets in the program's value arena: element[t − 1] = J_t^T's values (t = 1..T),
/// injection[k − 1] = e_k (k = 1..T − 1, with injections), prefix[t] = g_t (t = 0..T; g_T is
/// the scan's input).
struct LayerScanOffsets {
  std::vector<Idx> element, injection, prefix;
};
template <class T>
LayerScanOffsets layer_scan_offsets(const Program<T>& p, Index steps, bool inject) {
  LayerScanOffsets o;
  for (Index t = 1; t <= steps; ++t) o.element.push_back(p.element_offset.at(static_cast<std::size_t>(steps - t + 1)));
  for (Index k = 1; inject && k <= steps - 1; ++k) {
    const Idx off = p.injection_offset.at(static_cast<std::size_t>(steps - k));
    if (off < 0)
      raise<DeviceError>("scan", "the GPU plan has no affine part for step " + std::to_string(k) + " (planner bug)");
    o.injection.push_back(off);
  }
  for (Index t = 0; t <= steps; ++t) o.prefix.push_back(p.prefix_offset.at(static_cast<std::size_t>(steps - t)));
  return o;
}

}  // namespace bppsa::detail::gpu
