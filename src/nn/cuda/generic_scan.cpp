// The generic GPU scan of one recurrent layer (generic_scan.hpp): the layer's chain layouts
// planned through the scan's resident entry (no host values), device-side Jacobians and
// injections.
#include "nn/cuda/generic_scan.hpp"

#include <algorithm>
#include <cmath>

#include "bppsa/core/error.hpp"
#include "nn/cuda/kernels.hpp"
#include "nn/cuda/scan_layout.hpp"
#include "scan/cuda/resident_scan.hpp"

namespace bppsa::detail::gpu {

namespace {
/// Hybrid chunks on the GPU when none are given: √T balances the chunk reductions (T/C
/// products in sequence) against the carry across chunk totals (C).
int default_chunks(Index steps) {
  return static_cast<int>(std::max<Index>(1, std::llround(std::sqrt(static_cast<double>(steps)))));
}
}  // namespace

template <class T>
GenericLayerScan<T>::GenericLayerScan(std::int32_t cell, Index hidden, Index steps, Index batch, bool inject,
                                      Algorithm algorithm, int chunks)
    : cell_(cell),
      hidden_(hidden),
      steps_(steps),
      batch_(batch),
      inject_(inject),
      algorithm_(algorithm),
      chunks_(chunks) {
  layout_ = layer_scan_layout<T>(cell, hidden, batch);
  const std::vector<ElementInfo<T>> elements = layer_scan_elements(layout_, steps, inject);
  const int c = algorithm == Algorithm::hybrid ? (chunks > 0 ? chunks : default_chunks(steps)) : 1;
  scan_ = std::make_unique<ResidentScan<T>>(elements, batch, algorithm, c);

  // Device pointer tables from the program's offsets (the arena starts at prefix(0) − its offset).
  const LayerScanOffsets o = layer_scan_offsets(scan_->program(), steps, inject);
  T* arena = scan_->buffers().prefix(0) - scan_->program().prefix_offset.at(0);
  std::vector<T*> el, inj;
  std::vector<const T*> pre;
  for (const Idx off : o.element) el.push_back(arena + off);
  for (const Idx off : o.injection) inj.push_back(arena + off);
  for (std::size_t t = 0; t + 1 < o.prefix.size(); ++t) pre.push_back(arena + o.prefix[t]);  // g_0 … g_{T−1}
  elements_ = cuda::to_device(el);
  if (!inj.empty()) injections_ = cuda::to_device(inj);
  prefixes_ = cuda::to_device(pre);  // complete when it returns (DeviceBuffer::upload)
}

template <class T>
GenericLayerScan<T>::~GenericLayerScan() = default;

template <class T>
bool GenericLayerScan<T>::matches(Index steps, Index batch, bool inject, Algorithm algorithm, int chunks) const {
  return steps == steps_ && batch == batch_ && inject == inject_ && algorithm == algorithm_ && chunks == chunks_;
}

template <class T>
void GenericLayerScan<T>::run(const LayerArgs<T>& a, cudaStream_t stream, cudaEvent_t jacobians_done) {
  const Index S = a.S, B = a.B, T_ = a.steps;
  launch_jacobians(a, elements_.data(), stream);
  for (std::size_t k = 0; k < scan_->program().shared_matrices.size(); ++k)  // S = W_hh^T: W_hh's row-major values
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(scan_->buffers().shared_matrix(k), a.w,
                                     static_cast<std::size_t>(a.H * a.H) * sizeof(T), cudaMemcpyDeviceToDevice,
                                     stream));
  if (jacobians_done) BPPSA_CUDA_CHECK(cudaEventRecord(jacobians_done, stream));
  if (a.len != nullptr) {
    if (!inject_) raise<InvalidArgument>("GenericLayerScan::run", "per-sample lengths need a plan with injections");
    launch_injections_by_length(injections_.data(), scan_->buffers().prefix(0), a.above, a.g + T_ * B * S, a.len, a.H,
                                S, B, T_, stream);
  } else {
    if (inject_) launch_injections(injections_.data(), a.above, a.H, S, B, T_ - 1, stream);
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(scan_->buffers().prefix(0), a.g + T_ * B * S,
                                     static_cast<std::size_t>(S * B) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
  }
  scan_->run(stream);
  launch_gather_blocks(prefixes_.data(), a.g, T_, S * B, stream);
}

template <class T>
std::size_t GenericLayerScan<T>::device_bytes() const {
  return scan_->device_bytes() + elements_.bytes() + injections_.bytes() + prefixes_.bytes();
}

template class GenericLayerScan<float>;
template class GenericLayerScan<double>;

}  // namespace bppsa::detail::gpu
