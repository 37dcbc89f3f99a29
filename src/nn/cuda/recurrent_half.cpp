// The CUDA half of Recurrent<T>: the front's calls on gpu::RecurrentGpu (recurrent_gpu.cpp),
// with the host copies of parameters and gradients kept coherent through its flags. Also the
// factory that picks the half by device.
#include "nn/recurrent_half.hpp"

#include "bppsa/core/error.hpp"
#include "nn/cuda/gpu_model.hpp"

namespace bppsa::detail {
namespace {

template <class T>
class RecurrentGpuHalf final : public RecurrentHalf<T> {
 public:
  explicit RecurrentGpuHalf(const RecurrentConfig& config)
      : config_(config), g_(gpu::make_recurrent_gpu<T>(config)), g0_(static_cast<std::size_t>(config.layers)) {}

  void pull(LayerParamsList<T>& params, LayerParamsList<T>& grads) const override {
    if (g_->sync.device_newer) {
      g_->download_params(params);
      g_->sync.device_newer = false;
    }
    if (g_->sync.grads_newer) {
      g_->download_grads(grads);
      g_->sync.grads_newer = false;
    }
  }
  void host_written() override {
    g_->sync.host_newer = true;
    g_->sync.device_newer = false;
  }
  gpu::RecurrentGpu<T>* gpu(const LayerParamsList<T>& params) override {
    if (g_->sync.host_newer) {
      g_->upload_params(params);
      g_->sync.host_newer = false;
    }
    return g_.get();
  }

  void forward(const Eigen::Ref<const Matrix<T>>& x, Index steps, Index batch, const LayerParamsList<T>& params,
               const LayerMatrices<T>& initial_states, std::span<const Index> lengths) override {
    gpu::RecurrentGpu<T>* g = gpu(params);
    g->resize(steps, batch);
    g->set_lengths(lengths);
    if (x.outerStride() == x.rows()) {
      g->upload_input(x.data());
    } else {
      const Matrix<T> packed = x;
      g->upload_input(packed.data());
    }
    g->forward(initial_states);
  }
  Index steps() const override { return g_->steps(); }
  Index batch() const override { return g_->batch(); }
  Matrix<T> state(Index layer, Index t) const override {
    Matrix<T> s;
    g_->download_state(layer, t, s);
    return s;
  }
  Matrix<T> final_state(Index layer) const override {
    Matrix<T> s;
    g_->download_final_state(layer, s);
    return s;
  }
  Eigen::Block<const Matrix<T>, Eigen::Dynamic, Eigen::Dynamic, true> output() const override {
    g_->download_output(out_);
    const Matrix<T>& out = out_;
    return out.rightCols(out.cols());
  }

  void check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const override {
    g_->check_backward_memory(steps, batch, options);
  }
  void backward_begin(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step,
                      const LayerParamsList<T>& params) override {
    gpu::RecurrentGpu<T>* g = gpu(params);
    const Index T_ = g->steps(), B = g->batch(), H = config_.hidden;
    const Matrix<T> packed = grad_out;  // contiguous, whatever the caller's strides
    // Only each sample's last step when every_step is false (many-to-one), as the CPU reads it.
    const std::vector<Index> lengths = g->lengths();  // the stack's (shared with a model's batches)
    Matrix<T> last(H, B);
    for (Index b = 0; b < B && !every_step; ++b)
      last.col(b) = packed.col((lengths.empty() ? T_ - 1 : lengths[static_cast<std::size_t>(b)] - 1) * B + b);
    const T* top =
        every_step ? g->upload_grad_out(packed.data(), packed.size()) : g->upload_grad_out(last.data(), H * B);
    g->backward_begin(top, every_step);
  }
  void prepare_layer(Index, const BackwardOptions&) const override {}  // the stack checks as it runs
  void backward_layer(Index l, const BackwardOptions& options, const LayerParamsList<T>& params, LayerParamsList<T>&,
                      const Matrix<T>* final_grad, BackwardTimes* times) override {
    gpu::RecurrentGpu<T>* g = gpu(params);
    g->backward_layer(l, options, final_grad, 0);
    g->check_grads(l);
    g->sync.grads_newer = true;
    const gpu::DeviceStatus st = g->read_status();  // waits: the layer is done when this returns
    if ((st.flags & gpu::kGradNotFinite) != 0) {
      g->clear_flags();
      raise<NonFiniteError>("Recurrent::backward", "gradients of layer " + std::to_string(l) +
                                                       " are not finite (NaN/Inf): the loss or the weights "
                                                       "diverged; lower the learning rate");
    }
    if (times) {
      const BackwardTimes t = g->backward_times(0, l);
      times->jacobians += t.jacobians;
      times->scan += t.scan;
      times->params += t.params;
      times->last_scan = t.last_scan;
    }
  }
  std::pair<Jacobian<T>, Matrix<T>> layer_transfer(Index, const BackwardOptions&, const LayerParamsList<T>&) override {
    raise<UnsupportedError>("Recurrent::layer_transfer",
                            "layer_transfer (model-parallel stages) runs on the CPU; use Device::cpu");
  }
  const Matrix<T>& input_grad() const override {
    if (g_->steps() > 0) g_->download_input_grad(input_grad_);
    return input_grad_;
  }
  const Matrix<T>& state0_grad(Index layer) const override {
    Matrix<T>& g0 = g0_.at(static_cast<std::size_t>(layer));
    if (g_->steps() > 0) g_->download_state0_grad(layer, g0);
    return g0;
  }
  const Chain<T>& chain(Index) const override {
    raise<UnsupportedError>("Recurrent::chain",
                            "a Device::cuda layer generates its Jacobians on the GPU and "
                            "keeps no host chain; inspect chains with Device::cpu");
  }

 private:
  RecurrentConfig config_;
  std::unique_ptr<gpu::RecurrentGpu<T>> g_;
  // Host copies of what the accessors download.
  mutable Matrix<T> out_, input_grad_;
  mutable std::vector<Matrix<T>> g0_;
};

}  // namespace

template <class T>
std::unique_ptr<RecurrentHalf<T>> make_recurrent_cuda(const RecurrentConfig& config) {
  return std::make_unique<RecurrentGpuHalf<T>>(config);
}
template std::unique_ptr<RecurrentHalf<float>> make_recurrent_cuda<float>(const RecurrentConfig&);
template std::unique_ptr<RecurrentHalf<double>> make_recurrent_cuda<double>(const RecurrentConfig&);

}  // namespace bppsa::detail
