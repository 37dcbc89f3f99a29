// The scan's entry for chains resident on the GPU (resident_scan.hpp).
#include "scan/cuda/resident_scan.hpp"

#include "bppsa/core/error.hpp"
#include "core/cuda/check.hpp"
#include "scan/plan.hpp"

namespace bppsa::detail {

template <class T>
ResidentScan<T>::ResidentScan(const std::vector<ElementInfo<T>>& elements, Index batch, Algorithm algorithm,
                              int chunks) {
  if (algorithm == Algorithm::automatic || algorithm == Algorithm::fused ||
      (algorithm == Algorithm::hybrid && chunks < 1))
    raise<InvalidArgument>("ResidentScan",
                           std::string("a resident scan needs linear, blelloch or hybrid with chunks ≥ 1 "
                                       "(got ") +
                               to_string(algorithm) + ", " + std::to_string(chunks) + " chunks)");
  PlannedSchedule<T> planned =
      plan_schedule(elements, batch, algorithm, 1, algorithm == Algorithm::hybrid ? chunks : 1, 1);
  stats_ = planned.schedule.stats;
  stats_.algorithm = planned.algorithm;
  stats_.chunks = planned.chunks;
  stats_.device = Device::cuda;
  scan_ = make_device_scan(planned.schedule, elements, batch);
  const DeviceScanInfo info = device_scan_info(*scan_);
  stats_.launches = info.launches;
  stats_.workspace_bytes = info.workspace_bytes;
  ready_.emplace(false);
  done_.emplace(false);
}

template <class T>
ResidentScan<T>::~ResidentScan() = default;

template <class T>
void ResidentScan<T>::run(cudaStream_t stream) {
  BPPSA_CUDA_CHECK(cudaEventRecord(*ready_, stream));
  BPPSA_CUDA_CHECK(cudaStreamWaitEvent(scan_->stream(), *ready_, 0));
  scan_->execute();
  BPPSA_CUDA_CHECK(cudaEventRecord(*done_, scan_->stream()));
  BPPSA_CUDA_CHECK(cudaStreamWaitEvent(stream, *done_, 0));
}

template <class T>
std::size_t ResidentScan<T>::device_bytes() const {
  return device_scan_info(*scan_).device_bytes;
}

template class ResidentScan<float>;
template class ResidentScan<double>;

}  // namespace bppsa::detail
