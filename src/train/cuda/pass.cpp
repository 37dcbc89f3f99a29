// The CUDA half of a pass, for a SequenceClassifier on Device::cuda: the data set resident on
// the GPU (uploaded once), batches gathered there in the host pass's order, and forward, loss,
// backward and the optimizer step queued without waiting. wait() reads a step's status (a few
// bytes, through pinned memory) and its CUDA-event times; the loop reads step k − 1 while step
// k runs. A model on the CPU runs the host pass.
#include "train/pass.hpp"

#include <algorithm>
#include <vector>

#include "nn/cuda/gpu_model.hpp"
#include "nn/lengths.hpp"
#include "train/cpu/host_pass.hpp"

namespace bppsa::detail {
namespace {

static_assert(kPassSlots == gpu::kSlots, "a pass slot is a GPU timing slot");

template <class T>
class GpuPass final : public Pass {
 public:
  GpuPass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
          std::span<const Index> order, const BackwardOptions& options)
      : model_(model),
        optimizer_(optimizer),
        options_(options),
        g_(*model.gpu()),
        data_slot_(optimizer ? 0 : 1),
        data_(data),
        order_(order.begin(), order.end()) {
    g_.use_data(data_slot_, data);
    g_.set_order(data_slot_, order);
    g_.reset_totals();
  }

  void queue(Index first, Index n, int slot) override {
    if (data_.lengths.empty()) {
      g_.gather(data_slot_, first, n, slot);
    } else {  // the batch sorted longest first (as the CPU's classifier runs it), each at its length
      std::vector<Index> ids(static_cast<std::size_t>(n)), lengths;
      for (Index k = 0; k < n; ++k)
        ids[static_cast<std::size_t>(k)] = order_.empty() ? first + k : order_[static_cast<std::size_t>(first + k)];
      for (const Index i : ids) lengths.push_back(data_.length(i));
      const std::vector<Index> pos = longest_first(lengths, data_.steps, n);
      std::vector<std::int64_t> sorted;
      std::vector<Index> sorted_lengths;
      for (const Index k : pos) {
        sorted.push_back(ids[static_cast<std::size_t>(k)]);
        sorted_lengths.push_back(lengths[static_cast<std::size_t>(k)]);
      }
      g_.gather_ids(data_slot_, sorted, slot);
      g_.set_lengths(sorted_lengths);
    }
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
  const SequenceDataset& data_;
  std::vector<Index> order_;  ///< the pass's order (empty: 0, 1, 2, …)
};

}  // namespace

template <class T>
std::unique_ptr<Pass> make_pass(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
                                std::span<const Index> order, const BackwardOptions& options) {
  if (model.device() == Device::cuda) {
    return std::make_unique<GpuPass<T>>(model, optimizer, data, order, options);
  }
  return make_host_pass(model, optimizer, data, order, options);
}

BPPSA_SEQUENCE_PASS(float)
BPPSA_SEQUENCE_PASS(double)

}  // namespace bppsa::detail
