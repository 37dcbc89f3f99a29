// The executing half of a Scanner plan. The front (src/scan/scanner.cpp) validates the chain,
// plans the schedule and keeps the plan while the chain's layout holds; a ScanHalf holds the
// plan's run-time memory and runs it: the CPU half (src/scan/cpu/scan_half.cpp) a Workspace and
// the CPU executor, the CUDA half (src/scan/cuda/scan_half.cpp) a DeviceScan. The front picks the
// half by device (make_scan_cpu or make_scan_cuda); cuda/ defines the CUDA factory, no_gpu/ its stub.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "bppsa/core/device.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/scan/chain.hpp"
#include "scan/schedule.hpp"

namespace bppsa::detail {

template <class T>
class ScanHalf {
 public:
  virtual ~ScanHalf() = default;
  /// One backward pass of the plan for this chain (same layouts as the plan's): out.g(k) for
  /// k = 0 … N, shaped d_k × batch.
  virtual void run(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out, int threads) = 0;
  /// Bytes of intermediate products and affine parts the plan holds.
  virtual std::size_t workspace_bytes() const = 0;
  /// Kernel launches and library calls per run (0 on the CPU).
  virtual Index launches() const = 0;
};

/// Refuses what the host cannot hold (check_host: the run's host items, which throws), then
/// allocates the half's memory once. The schedule outlives the half.
using HostMemoryCheck = std::function<void(const std::vector<MemoryItem>&)>;
template <class T>
std::unique_ptr<ScanHalf<T>> make_scan_cpu(const Schedule<T>& schedule, const Chain<T>& chain, int threads,
                                           const HostMemoryCheck& check_host);
/// The CUDA half (src/scan/cuda/scan_half.cpp; without CUDA, src/scan/no_gpu/executor.cpp throws
/// UnsupportedError). threads is the CPU half's only.
template <class T>
std::unique_ptr<ScanHalf<T>> make_scan_cuda(const Schedule<T>& schedule, const Chain<T>& chain,
                                            const HostMemoryCheck& check_host);

#define BPPSA_INSTANTIATE_SCAN_CUDA(T) \
  template std::unique_ptr<ScanHalf<T>> make_scan_cuda(const Schedule<T>&, const Chain<T>&, const HostMemoryCheck&);

}  // namespace bppsa::detail
