// The CUDA half of SequenceClassifier<T>: the front's calls on gpu::ModelGpu (model_gpu.cpp),
// with the head's host copy kept coherent through its flags (the stack's through the stack's
// own half). Also the factory that picks the half by device.
#include "nn/classifier_half.hpp"

#include <algorithm>
#include <vector>

#include "bppsa/core/error.hpp"
#include "nn/cuda/gpu_model.hpp"
#include "nn/lengths.hpp"
#include "nn/recurrent_half.hpp"

namespace bppsa::detail {
namespace {

template <class T>
class ClassifierGpu final : public ClassifierHalf<T> {
 public:
  ClassifierGpu(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head)
      : config_(config),
        rnn_(rnn),
        head_(head),
        g_(gpu::make_model_gpu<T>(*RecurrentAccess<T>::gpu(rnn), config.rnn, config.classes,
                                  config.head == HeadMode::every, config.loss)) {}

  void set_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                 std::span<const Index> lengths) override {
    // The GPU computes the loss without looking at label ranges: check them here, as loss() does.
    for (Index b = 0; b < batch; ++b)
      check_label("loss", labels[static_cast<std::size_t>(b)], "prediction " + std::to_string(b), config_.classes);
    // With lengths the batch runs sorted longest first, as on the CPU (order_[k]: the caller's
    // sample at position k).
    order_ = longest_first(lengths, steps, batch);
    sorted_lengths_.clear();
    for (Index b : order_) sorted_lengths_.push_back(lengths.empty() ? steps : lengths[static_cast<std::size_t>(b)]);
    if (lengths.empty() || std::is_sorted(order_.begin(), order_.end())) {
      gpu()->set_batch(x, batch, steps, labels);
    } else {
      const std::size_t per = x.size() / static_cast<std::size_t>(batch);  // one sample: steps × I
      std::vector<float> xs(x.size());
      std::vector<std::int64_t> ys(labels.size());
      for (std::size_t k = 0; k < order_.size(); ++k) {
        const auto b = static_cast<std::size_t>(order_[k]);
        std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(b * per), per,
                    xs.begin() + static_cast<std::ptrdiff_t>(k * per));
        ys[k] = labels[b];
      }
      gpu()->set_batch(xs, batch, steps, ys);
    }
    gpu()->set_lengths(lengths.empty() ? std::span<const Index>() : std::span<const Index>(sorted_lengths_));
  }

  T forward_loss(bool grad, std::vector<std::int64_t>* predictions) override {
    gpu::ModelGpu<T>* g = gpu();
    g->forward_loss(grad, 0);
    const gpu::DeviceStatus st = g->stack().read_status();  // waits for the loss
    gpu::raise_flagged(g->stack(), config_, st);            // throws NonFiniteError as the CPU's loss() would
    if (predictions) {
      g->download_predictions(*predictions);
      const std::vector<std::int64_t> sorted = *predictions;  // back to the caller's order
      for (std::size_t k = 0; k < order_.size() && k < sorted.size(); ++k)
        (*predictions)[static_cast<std::size_t>(order_[k])] = sorted[k];
    }
    return static_cast<T>(st.loss);
  }

  void backward(const BackwardOptions& options, BackwardTimes* times) override {
    gpu::ModelGpu<T>* g = gpu();
    g->backward(options, 0);
    if (times) {
      StepTimes st;
      double optimizer = 0;
      g->step_times(0, st, optimizer);
      *times = st.detail;
    }
  }

  void backward_timed(const BackwardOptions& options, double, StepTimes* times) override {
    gpu()->backward(options, 0);
    StepTimes st;
    double optimizer = 0;
    g_->step_times(0, st, optimizer);  // CUDA events of the forward and the backward; waits for the backward
    if (times) *times = st;
  }

  void head_backward(const Matrix<T>&, Matrix<T>&) override {
    raise<UnsupportedError>("SequenceClassifier::head_backward",
                            "a Device::cuda model runs its head on the GPU inside backward(); head_backward "
                            "takes host matrices of a Device::cpu model");
  }

  void pull() override {
    synchronize();
    RecurrentAccess<T>::pull(rnn_);
    auto& h = g_->head_sync;
    if (h.device_newer || h.grads_newer) g_->download_head(head_, h.device_newer, h.grads_newer);
    h.device_newer = h.grads_newer = false;
  }
  void host_written() override {
    g_->head_sync.host_newer = true;
    g_->head_sync.device_newer = false;
  }
  void synchronize() override { gpu::raise_flagged(g_->stack(), config_, g_->stack().read_status()); }
  std::size_t device_bytes() const override { return g_->device_bytes(); }

  gpu::ModelGpu<T>* gpu() override {
    RecurrentAccess<T>::gpu(rnn_);  // uploads the recurrent parameters the host changed
    if (g_->head_sync.host_newer) {
      g_->upload_head(head_);
      g_->head_sync.host_newer = false;
    }
    g_->initial_states = RecurrentAccess<T>::initial_states(rnn_);
    g_->final_grads = RecurrentAccess<T>::final_grads(rnn_);
    return g_.get();
  }

 private:
  ModelConfig config_;
  Recurrent<T>& rnn_;
  Linear<T>& head_;
  std::unique_ptr<gpu::ModelGpu<T>> g_;
  std::vector<Index> order_, sorted_lengths_;  ///< the stored batch's order (longest first) and lengths
};

}  // namespace

template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cuda(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head) {
  return std::make_unique<ClassifierGpu<T>>(config, rnn, head);
}
template std::unique_ptr<ClassifierHalf<float>> make_classifier_cuda(const ModelConfig&, Recurrent<float>&,
                                                                     Linear<float>&);
template std::unique_ptr<ClassifierHalf<double>> make_classifier_cuda(const ModelConfig&, Recurrent<double>&,
                                                                      Linear<double>&);

}  // namespace bppsa::detail
