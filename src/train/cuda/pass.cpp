// The CUDA half of a pass, for a SequenceClassifier on Device::cuda: the data set resident on
// the GPU (uploaded once), batches gathered there in the host pass's order, and forward, loss,
// backward and the optimizer step queued without waiting. wait() reads a step's status (a few
// bytes, through pinned memory) and its CUDA-event times; the loop reads step k − 1 while step
// k runs. A model on the CPU runs the host pass.
#include "train/pass.hpp"

#include <algorithm>

#include "nn/cuda/gpu_model.hpp"
#include "train/cpu/host_pass.hpp"

namespace bppsa::detail {
namespace {

static_assert(kPassSlots == gpu::kSlots, "a pass slot is a GPU timing slot");

template <class T>
class GpuPass final : public Pass {
 public:
  GpuPass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
          std::span<const Index> order, const BackwardOptions& options)
      : model_(model), optimizer_(optimizer), options_(options), g_(*model.gpu()), data_slot_(optimizer ? 0 : 1) {
    g_.use_data(data_slot_, data);
    g_.set_order(data_slot_, order);
    g_.reset_totals();
  }

  void queue(Index first, Index n, int slot) override {
    g_.gather(data_slot_, first, n, slot);
    g_.forward_loss(optimizer_ != nullptr, slot);
    if (optimizer_) {
      g_.backward(options_, slot);
      optimizer_->step(model_);
      g_.mark(slot, gpu::kOptimizerEnd);
    }
    g_.snapshot(slot);
  }

  PassTotals wait(int slot, StepTimes& times, double& optimizer_seconds) override {
    const gpu::DeviceStatus st = g_.snapshot_wait(slot);
    gpu::raise_flagged(g_.stack(), model_.config(), st);  // what the CPU engine would have thrown at that step
    times = StepTimes{};
    optimizer_seconds = 0;
    if (optimizer_) g_.step_times(slot, times, optimizer_seconds);
    return {st.loss_sum, st.correct, st.samples};
  }

 private:
  SequenceClassifier<T>& model_;
  Optimizer<T>* optimizer_;
  BackwardOptions options_;
  gpu::ModelGpu<T>& g_;
  int data_slot_;  ///< the GPU's resident-data slot: 0 training, 1 evaluation
};

}  // namespace

template <class T>
std::unique_ptr<Pass> make_pass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
                                std::span<const Index> order, const BackwardOptions& options) {
  if (model.device() == Device::cuda) {
    if (!data.lengths.empty())
      raise<UnsupportedError>("train", "data set '" + data.name +
                                           "' has samples of different lengths, which run on the CPU only for now; "
                                           "use --device cpu");
    return std::make_unique<GpuPass<T>>(model, optimizer, data, order, options);
  }
  return make_host_pass(model, optimizer, data, order, options);
}

BPPSA_SEQUENCE_PASS(float)
BPPSA_SEQUENCE_PASS(double)

}  // namespace bppsa::detail
