// The CUDA half of a Scanner plan: a DeviceScan (compiled program, device arenas, library
// handles) run for host data. Also the factory that picks the half by device.
#include "scan/scan_half.hpp"

#include "scan/cuda/device_scan.hpp"
#include "scan/plan.hpp"

namespace bppsa::detail {
namespace {

template <class T>
class ScanCuda final : public ScanHalf<T> {
 public:
  explicit ScanCuda(DeviceScanPtr<T> scan) : scan_(std::move(scan)) {}
  void run(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out, int threads) override {
    run_device_scan(*scan_, chain, g_last, out, threads);
  }
  std::size_t workspace_bytes() const override { return device_scan_info(*scan_).workspace_bytes; }
  Index launches() const override { return device_scan_info(*scan_).launches; }

 private:
  DeviceScanPtr<T> scan_;
};

}  // namespace

template <class T>
std::unique_ptr<ScanHalf<T>> make_scan_cuda(const Schedule<T>& schedule, const Chain<T>& chain,
                                            const HostMemoryCheck& check_host) {
  // The workspace (item 0) is device memory, checked against the GPU when it is allocated: the
  // host holds the gradients, patterns and schedule only.
  std::vector<MemoryItem> host = run_memory(schedule, chain);
  host.erase(host.begin());
  check_host(host);
  return std::make_unique<ScanCuda<T>>(make_device_scan(schedule, scan_elements(chain), chain.batch()));
}
BPPSA_INSTANTIATE_SCAN_CUDA(float)
BPPSA_INSTANTIATE_SCAN_CUDA(double)

}  // namespace bppsa::detail
