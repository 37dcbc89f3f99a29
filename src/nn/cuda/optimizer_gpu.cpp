// The GPU half of Optimizer<T> (gpu_model.hpp): Adam's moments or SGD's momentum buffers on the
// device, in the flat order of the model's parameters, and the step queued on the model's
// stream (norm, clip factor and update: optimizer_kernels.cu), without a host round trip.
#include <cuda_runtime_api.h>

#include "bppsa/core/error.hpp"
#include "core/cuda/buffer.hpp"
#include "nn/cuda/gpu_model.hpp"
#include "nn/cuda/kernels.hpp"

namespace bppsa::detail::gpu {
namespace {

using cuda::DeviceBuffer;

template <class T>
class OptimizerState final : public OptimizerGpu<T> {
 public:
  explicit OptimizerState(ModelGpu<T>& model)
      : stream_(model.stack().stream()),
        count_(total_size(model.segments())),
        m_(static_cast<std::size_t>(count_)),
        v_(static_cast<std::size_t>(count_)),
        partials_(kNormBlocks),
        clip_(1) {
    BPPSA_CUDA_CHECK(cudaMemsetAsync(m_.data(), 0, m_.bytes(), stream_));
    BPPSA_CUDA_CHECK(cudaMemsetAsync(v_.data(), 0, v_.bytes(), stream_));
    BPPSA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void step(ModelGpu<T>& model, const StepConstants<T>& k) override {
    const Segments<T> p = model.segments();
    if (total_size(p) != count_)
      raise<InvalidArgument>("optimizer", "parameter list changed between steps (" + std::to_string(count_) + " → " +
                                              std::to_string(total_size(p)) + " values)");
    const cudaStream_t s = model.stack().stream();
    launch_norm_partials(p, partials_.data(), s);
    launch_norm_finish(partials_.data(), k.clip_max, clip_.data(), model.stack().status(), s);
    launch_update(p, m_.data(), v_.data(), clip_.data(), k, model.stack().status(), s);
    model.parameters_stepped();
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
  void copy(V& host, DeviceBuffer<T>& dev, bool up) {
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
  DeviceBuffer<T> m_, v_;
  DeviceBuffer<double> partials_;
  DeviceBuffer<T> clip_;
};

}  // namespace

template <class T>
std::unique_ptr<OptimizerGpu<T>> make_optimizer_gpu(ModelGpu<T>& model) {
  return std::make_unique<OptimizerState<T>>(model);
}

template std::unique_ptr<OptimizerGpu<float>> make_optimizer_gpu(ModelGpu<float>&);
template std::unique_ptr<OptimizerGpu<double>> make_optimizer_gpu(ModelGpu<double>&);

}  // namespace bppsa::detail::gpu
