// The CUDA half of Optimizer<T> (optimizer_half.hpp): Adam's moments or SGD's momentum buffers
// on the device, in the flat order of the model's parameters (the stack's arena, then the
// head's), and the step queued on the model's stream (norm, clip factor and update:
// optimizer_kernels.cu), without a host round trip.
#include <cuda_runtime_api.h>

#include "bppsa/core/error.hpp"
#include "core/cuda/buffer.hpp"
#include "nn/cuda/device_parameters.hpp"
#include "train/cuda/kernels.hpp"
#include "train/cuda/step_constants.hpp"
#include "train/optimizer_half.hpp"

namespace bppsa::detail {
namespace {

using gpu::Idx;
using gpu::Segments;

/// The model's parameters in parameters() order: the recurrent arena, then the head's weight and bias.
template <class T>
Segments<T> segments(const gpu::DeviceParameters<T>& m) {
  Segments<T> p;
  p.values[0] = m.stack;
  p.grads[0] = m.stack_grads;
  p.size[0] = m.stack_size;
  p.values[1] = m.head;
  p.grads[1] = m.head_grads;
  p.size[1] = m.head_size;
  p.count = 2;
  return p;
}

template <class T>
class OptimizerCuda final : public OptimizerHalf<T> {
 public:
  explicit OptimizerCuda(const gpu::DeviceParameters<T>& params)
      : stream_(params.stream),
        count_(total_size(segments(params))),
        m_(static_cast<std::size_t>(count_)),
        v_(static_cast<std::size_t>(count_)),
        partials_(gpu::kNormBlocks),
        clip_(1) {
    BPPSA_CUDA_CHECK(cudaMemsetAsync(m_.data(), 0, m_.bytes(), stream_));
    BPPSA_CUDA_CHECK(cudaMemsetAsync(v_.data(), 0, v_.bytes(), stream_));
    BPPSA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void step(const gpu::DeviceParameters<T>& params, const OptimizerConfig& config, std::int64_t step) override {
    const gpu::StepConstants<T> k = step_constants<T>(config, step);
    const Segments<T> p = segments(params);
    if (total_size(p) != count_)
      raise<InvalidArgument>("optimizer", "parameter list changed between steps (" + std::to_string(count_) + " → " +
                                              std::to_string(total_size(p)) + " values)");
    const cudaStream_t s = params.stream;
    gpu::launch_norm_partials(p, partials_.data(), s);
    gpu::launch_norm_finish(partials_.data(), k.clip_max, clip_.data(), params.status, s);
    gpu::launch_update(p, m_.data(), v_.data(), clip_.data(), k, params.status, s);
  }

  void upload(const std::vector<std::vector<T>>& m, const std::vector<std::vector<T>>& v) override {
    copy(m, m_, true);
    copy(v, v_, true);
  }
  void download(std::vector<std::vector<T>>& m, std::vector<std::vector<T>>& v) override {
    copy(m, m_, false);
    copy(v, v_, false);
  }

 private:
  /// Host per-parameter vectors ↔ the flat device array (empty host lists: zeros / nothing).
  template <class V>
  void copy(V& host, cuda::DeviceBuffer<T>& dev, bool up) {
    Idx off = 0;
    for (auto& h : host) {
      if (off + static_cast<Idx>(h.size()) > count_)
        raise<InvalidArgument>("optimizer", "optimizer state holds more values than the model's parameters");
      if (up)
        BPPSA_CUDA_CHECK(
            cudaMemcpyAsync(dev.data() + off, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream_));
      else
        BPPSA_CUDA_CHECK(cudaMemcpyAsync(const_cast<T*>(h.data()), dev.data() + off, h.size() * sizeof(T),
                                         cudaMemcpyDeviceToHost, stream_));
      off += static_cast<Idx>(h.size());
    }
    BPPSA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  cudaStream_t stream_;
  Idx count_;
  cuda::DeviceBuffer<T> m_, v_;
  cuda::DeviceBuffer<double> partials_;
  cuda::DeviceBuffer<T> clip_;
};

}  // namespace

template <class T>
std::unique_ptr<OptimizerHalf<T>> make_optimizer_cuda(const gpu::DeviceParameters<T>& params) {
  return std::make_unique<OptimizerCuda<T>>(params);
}
template std::unique_ptr<OptimizerHalf<float>> make_optimizer_cuda(const gpu::DeviceParameters<float>&);
template std::unique_ptr<OptimizerHalf<double>> make_optimizer_cuda(const gpu::DeviceParameters<double>&);

}  // namespace bppsa::detail
