// The CUDA half of a pass, for a SequenceClassifier on Device::cuda: the data set resident on
// the GPU (uploaded once), batches gathered there in the host pass's order, and forward, loss,
// backward and the optimizer step queued without waiting. wait() reads a step's status (a few
// bytes, through pinned memory) and its CUDA-event times; the loop reads step k − 1 while step
// k runs. The front (src/train/pass.cpp) makes it for a model on Device::cuda only.
#include <algorithm>
#include <vector>

#include "nn/cuda/classifier_cuda.hpp"
#include "nn/lengths.hpp"
#include "train/pass.hpp"

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
        g_(gpu::cuda_half(model)),
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
      g_.set_sorted_lengths(sorted_lengths);
    }
    g_.queue_forward_loss(optimizer_ != nullptr, slot);
    if (optimizer_) {
      g_.queue_backward(options_, slot);
      optimizer_->step(model_);
      g_.mark(slot, gpu::kOptimizerEnd);
    }
    g_.snapshot(slot);
  }

  PassTotals wait(int slot, StepTimes& times, double& optimizer_seconds) override {
    const gpu::DeviceStatus st = g_.snapshot_wait(slot);
    g_.raise_flagged(st);  // what the CPU engine would have thrown at that step
    times = StepTimes{};
    optimizer_seconds = 0;
    if (optimizer_) g_.step_times(slot, times, optimizer_seconds);
    return {st.loss_sum, st.correct, st.samples};
  }

 private:
  SequenceClassifier<T>& model_;
  Optimizer<T>* optimizer_;
  BackwardOptions options_;
  gpu::ClassifierCuda<T>& g_;
  int data_slot_;  ///< the GPU's resident-data slot: 0 training, 1 evaluation
  const SequenceDataset& data_;
  std::vector<Index> order_;  ///< the pass's order (empty: 0, 1, 2, …)
};

}  // namespace

template <class T>
std::unique_ptr<Pass> make_pass_cuda(SequenceClassifier<T>& model, Optimizer<T>* optimizer, const SequenceDataset& data,
                                     std::span<const Index> order, const BackwardOptions& options) {
  return std::make_unique<GpuPass<T>>(model, optimizer, data, order, options);
}

BPPSA_CUDA_PASS(float)
BPPSA_CUDA_PASS(double)

}  // namespace bppsa::detail
