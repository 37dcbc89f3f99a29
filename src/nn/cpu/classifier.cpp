// The CPU half of SequenceClassifier<T>: the batch in host memory, the stack's and the head's
// host forward, the loss, and the backward through the head into the stack; a pass's step runs
// to its end when it is queued (gather, forward, loss, backward, the optimizer step).
#include <omp.h>

#include <algorithm>
#include <array>
#include <numeric>

#include "bppsa/core/error.hpp"
#include "nn/classifier_half.hpp"
#include "nn/lengths.hpp"

namespace bppsa::detail {
namespace {

template <class T>
void argmax_last(const Matrix<T>& logits, Index batch, std::vector<std::int64_t>* predictions) {
  if (!predictions) return;
  predictions->resize(static_cast<std::size_t>(batch));
  const Index first = logits.cols() - batch;
  for (Index b = 0; b < batch; ++b) {
    Index best = 0;
    logits.col(first + b).maxCoeff(&best);
    (*predictions)[static_cast<std::size_t>(b)] = best;
  }
}

template <class T>
class ClassifierCpu final : public ClassifierHalf<T> {
 public:
  ClassifierCpu(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head)
      : config_(config), rnn_(rnn), head_(head) {}

  void set_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                 std::span<const Index> lengths) override {
    const Index I = config_.rnn.input;
    // With lengths the stack runs the batch sorted longest first (Recurrent's order; stable):
    // order_[k] is the caller's sample at position k.
    order_ = longest_first(lengths, steps, batch);
    lengths_.clear();
    if (!lengths.empty() && *std::min_element(lengths.begin(), lengths.end()) < steps)
      for (Index b : order_) lengths_.push_back(lengths[static_cast<std::size_t>(b)]);
    x_.resize(I, steps * batch);
    labels_.resize(static_cast<std::size_t>(batch));
    for (Index k = 0; k < batch; ++k) {
      const Index b = order_[static_cast<std::size_t>(k)];
      for (Index t = 0; t < steps; ++t)
        for (Index i = 0; i < I; ++i)
          x_(i, t * batch + k) = static_cast<T>(x[static_cast<std::size_t>((b * steps + t) * I + i)]);
      labels_[static_cast<std::size_t>(k)] = labels[static_cast<std::size_t>(b)];
    }
    steps_ = steps;
    batch_ = batch;
  }

  T forward_loss(bool grad, std::vector<std::int64_t>* predictions) override {
    const Index batch = batch_, steps = steps_;
    rnn_.forward(x_, steps, batch, lengths_);
    // The output columns the head reads, each sample's last real step last (argmax_last reads
    // those): every real step (every) or the last real step (last) of each sample.
    head_cols_.clear();
    col_labels_.clear();
    if (!lengths_.empty()) {
      head_columns(config_.head == HeadMode::every, lengths_, labels_, head_cols_, col_labels_);
      head_in_.resize(rnn_.output().rows(), static_cast<Index>(head_cols_.size()));
      for (std::size_t j = 0; j < head_cols_.size(); ++j)
        head_in_.col(static_cast<Index>(j)) = rnn_.output().col(head_cols_[j]);
      head_.forward(head_in_, logits_);
    } else if (config_.head == HeadMode::every) {
      head_.forward(rnn_.output(), logits_);
      col_labels_.resize(static_cast<std::size_t>(steps * batch));
      for (Index t = 0; t < steps; ++t)
        for (Index b = 0; b < batch; ++b)
          col_labels_[static_cast<std::size_t>(t * batch + b)] = labels_[static_cast<std::size_t>(b)];
    } else {
      head_.forward(rnn_.output().rightCols(batch), logits_);
      col_labels_.assign(labels_.begin(), labels_.end());
    }
    const T l = loss<T>(config_.loss, logits_, col_labels_, grad ? &dlogits_ : nullptr);
    argmax_last(logits_, batch, predictions);
    if (predictions && !lengths_.empty()) {  // back to the caller's order
      const std::vector<std::int64_t> sorted = *predictions;
      for (Index k = 0; k < batch; ++k)
        (*predictions)[static_cast<std::size_t>(order_[static_cast<std::size_t>(k)])] =
            sorted[static_cast<std::size_t>(k)];
    }
    return l;
  }

  void backward(const BackwardOptions& options, BackwardTimes* times) override {
    if (!lengths_.empty()) {  // the head's gradient back to the columns it read
      head_.backward(head_in_, dlogits_, dh_);
      dout_.setZero(output_size(config_.rnn), rnn_.output().cols());
      for (std::size_t j = 0; j < head_cols_.size(); ++j) dout_.col(head_cols_[j]) = dh_.col(static_cast<Index>(j));
    } else {
      head_backward(dlogits_, dout_);
    }
    BackwardTimes bt;
    rnn_.backward(dout_, config_.head == HeadMode::every, options, &bt);
    if (times) *times = bt;
  }

  void backward_timed(const BackwardOptions& options, double forward_seconds, StepTimes* times) override {
    const double t0 = omp_get_wtime();
    BackwardTimes bt;
    backward(options, &bt);
    if (times) *times = {forward_seconds, omp_get_wtime() - t0, bt};
  }

  void head_backward(const Matrix<T>& dlogits, Matrix<T>& dout) override {
    if (config_.head == HeadMode::every) {
      head_.backward(rnn_.output(), dlogits, dout);
    } else {
      const Index batch = dlogits.cols();
      head_.backward(rnn_.output().rightCols(batch), dlogits, dh_);
      dout.setZero(output_size(config_.rnn), rnn_.output().cols());
      dout.rightCols(batch) = dh_;
    }
  }

  void pull() override {}
  void host_written() override {}
  void synchronize() override {}
  std::size_t device_bytes() const override { return 0; }

  void begin_pass(const SequenceDataset& data, std::span<const Index> order, bool) override {
    pass_data_ = &data;
    pass_order_.assign(order.begin(), order.end());
    totals_ = StepReport{};
  }

  void queue_step(Index first, Index n, const BackwardOptions* options, const std::function<void()>& optimizer_step,
                  int slot) override {
    const SequenceDataset& data = *pass_data_;
    batch_indices(pass_order_, first, n, ids_);
    StepReport& r = slots_.at(static_cast<std::size_t>(slot));
    r = StepReport{};
    gather_batch(data, ids_, batch_x_, batch_y_);
    const double t0 = omp_get_wtime();
    set_batch(batch_x_, n, data.steps, batch_y_, sample_lengths(data, ids_));
    const T loss = forward_loss(options != nullptr, &predictions_);
    if (options) {
      backward_timed(*options, omp_get_wtime() - t0, &r.times);
      const double t1 = omp_get_wtime();
      optimizer_step();
      r.optimizer_seconds = omp_get_wtime() - t1;
    }
    totals_.loss_sum += static_cast<double>(loss) * static_cast<double>(n);
    for (Index k = 0; k < n; ++k)
      totals_.correct += predictions_[static_cast<std::size_t>(k)] == batch_y_[static_cast<std::size_t>(k)];
    totals_.samples += n;
    r.loss_sum = totals_.loss_sum;
    r.correct = totals_.correct;
    r.samples = totals_.samples;
  }

  StepReport wait_step(int slot) override { return slots_.at(static_cast<std::size_t>(slot)); }

  const gpu::DeviceParameters<T>* device_parameters() override { return nullptr; }

 private:
  ModelConfig config_;
  Recurrent<T>& rnn_;
  Linear<T>& head_;
  Matrix<T> x_, logits_, dlogits_, dout_, dh_, head_in_;
  std::vector<std::int64_t> labels_, col_labels_;
  std::vector<Index> order_, lengths_;  ///< the batch sorted longest first (lengths_ empty: no lengths)
  std::vector<Index> head_cols_;        ///< with lengths: the output columns the head reads
  Index steps_ = 0, batch_ = 0;         ///< of the stored batch
  // The current pass (begin_pass), its last batch, and each slot's step.
  const SequenceDataset* pass_data_ = nullptr;
  std::vector<Index> pass_order_, ids_;
  std::vector<float> batch_x_;
  std::vector<std::int64_t> batch_y_, predictions_;
  StepReport totals_;
  std::array<StepReport, kStepSlots> slots_;
};

}  // namespace

template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cpu(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head) {
  return std::make_unique<ClassifierCpu<T>>(config, rnn, head);
}
template std::unique_ptr<ClassifierHalf<float>> make_classifier_cpu(const ModelConfig&, Recurrent<float>&,
                                                                    Linear<float>&);
template std::unique_ptr<ClassifierHalf<double>> make_classifier_cpu(const ModelConfig&, Recurrent<double>&,
                                                                     Linear<double>&);

}  // namespace bppsa::detail
