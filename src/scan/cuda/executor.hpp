// CUDA half of the scan, as the other CUDA files see it: the GPU part of a plan, built once per
// plan and run for host data. Defined by scan/cuda/executor.cpp; the front reaches it through
// make_scan_cuda (scan_half.hpp) only, so a build without CUDA needs no stub of it.
#pragma once

#include <memory>
#include <vector>

#include "bppsa/scan/chain.hpp"
#include "scan/schedule.hpp"

namespace bppsa::detail {

/// The GPU half of a plan (scan/cuda/device_scan.hpp in a CUDA build; opaque elsewhere).
template <class T>
class DeviceScan;

template <class T>
struct DeviceScanDeleter {
  void operator()(DeviceScan<T>* p) const noexcept;
};
template <class T>
using DeviceScanPtr = std::unique_ptr<DeviceScan<T>, DeviceScanDeleter<T>>;

/// Compiles `schedule` (planned for `elements`, batch `batch`) for the current CUDA device and
/// allocates everything a run needs, once: the device arenas, the op tables, pinned staging,
/// the cuBLAS/cuSPARSE handles, descriptors and buffers. Refuses with ResourceError, before
/// allocating, what does not fit in the GPU's free memory; DeviceError when there is no usable
/// GPU; UnsupportedError when bppsa was built without CUDA.
template <class T>
DeviceScanPtr<T> make_device_scan(const Schedule<T>& schedule, const std::vector<ElementInfo<T>>& elements,
                                  Index batch);

/// One backward pass for host data, as the CPU executor's bind_operands + execute: uploads the
/// chain's values, S matrices, injections and g_N (one copy through pinned memory), runs the
/// schedule, downloads g_{N−1} … g_0 into `out` (shaped d_k × batch) and sets g_N. `threads`
/// pack and unpack on the host.
template <class T>
void run_device_scan(DeviceScan<T>& scan, const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out,
                     int threads);

/// What a run costs on the device: kernel launches and library calls per run (the sequential
/// schedule needs one per element: launch latency is its floor), and device bytes held.
struct DeviceScanInfo {
  Index launches = 0;
  std::size_t device_bytes = 0;     ///< everything the plan holds on the device
  std::size_t workspace_bytes = 0;  ///< of which intermediate products and affine parts
};
template <class T>
DeviceScanInfo device_scan_info(const DeviceScan<T>& scan);

/// How the GPU runs each product. automatic: cuBLAS for dense·dense, cuSPARSE SpMM for a CSR
/// shared by the batch times vectors, cuSPARSE SpGEMM (structure reuse) for CSR·CSR products
/// shared by the batch, bppsa's kernels for the rest (per-sample CSR·CSR included: one batched
/// launch instead of a library call per sample). kernels: bppsa's kernels only. libraries:
/// also per-sample CSR·CSR through cuSPARSE, one call per sample. Read when a plan is made.
enum class CudaProducts { automatic, kernels, libraries };
/// The environment variable BPPSA_CUDA_PRODUCTS (auto, kernels, libraries; default auto), unless
/// set_cuda_products() said otherwise. InvalidArgument for another value.
CudaProducts cuda_products();
void set_cuda_products(CudaProducts products);
const char* to_string(CudaProducts products);

/// What cuda/executor.cpp instantiates.
#define BPPSA_INSTANTIATE_DEVICE_SCAN(T)                                                                        \
  template class DeviceScan<T>;                                                                                 \
  template struct DeviceScanDeleter<T>;                                                                         \
  template DeviceScanPtr<T> make_device_scan(const Schedule<T>&, const std::vector<ElementInfo<T>>&, Index);    \
  template void run_device_scan(DeviceScan<T>&, const Chain<T>&, const Matrix<T>&, Gradients<T>&, int);        \
  template DeviceScanInfo device_scan_info(const DeviceScan<T>&);

}  // namespace bppsa::detail
