// The GPU half of SequenceClassifier<T> (gpu_model.hpp): the Linear head and the loss on the
// device (cuBLAS GEMMs, one thread per column for the loss, one block for the fixed-order
// reduction), batches uploaded or gathered on the device from data sets kept resident there,
// CUDA-event timing per step slot, and status snapshots through pinned memory.
#include <cuda_runtime_api.h>

#include <array>
#include <span>
#include <string>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/data/dataset.hpp"
#include "bppsa/nn/model.hpp"
#include "core/cuda/buffer.hpp"
#include "jacobian/cuda/library.hpp"
#include "nn/cuda/blas.hpp"
#include "nn/cuda/gpu_model.hpp"
#include "nn/cuda/kernels.hpp"
#include "nn/lengths.hpp"

namespace bppsa::detail::gpu {
namespace {

using cuda::DeviceBuffer;

template <class T>
void ensure(DeviceBuffer<T>& b, Idx n) {
  if (b.size() < static_cast<std::size_t>(n)) b = DeviceBuffer<T>(static_cast<std::size_t>(n));
}

template <class T>
class ModelGpuImpl final : public ModelGpu<T> {
 public:
  ModelGpuImpl(RecurrentGpu<T>& stack, const RecurrentConfig& rnn, Index classes, bool every_step, LossType loss);
  ~ModelGpuImpl() override;

  RecurrentGpu<T>& stack() override { return stack_; }
  void upload_head(const Linear<T>& head) override;
  void download_head(Linear<T>& head, bool values, bool grads) override;
  Segments<T> segments() override;

  void set_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels) override;
  void use_data(int slot, const SequenceDataset& data) override;
  void set_order(int slot, std::span<const Index> order) override;
  void gather(int slot, Index first, Index n, int time_slot) override;
  void gather_ids(int slot, std::span<const std::int64_t> ids, int time_slot) override;
  void set_lengths(std::span<const Index> lengths) override;
  void forward_loss(bool grad, int time_slot) override;
  void backward(const BackwardOptions& options, int time_slot) override;
  void mark(int time_slot, int point) override;
  void step_times(int time_slot, StepTimes& times, double& optimizer_seconds) override;
  void download_predictions(std::vector<std::int64_t>& predictions) override;
  void reset_totals() override;
  void snapshot(int slot) override;
  DeviceStatus snapshot_wait(int slot) override;
  std::size_t device_bytes() const override;

 private:
  /// A data set resident on the GPU, and what identifies the host copy it came from.
  struct Resident {
    const SequenceDataset* source = nullptr;
    const float* host_x = nullptr;
    const std::int64_t* host_y = nullptr;
    Index samples = 0, steps = 0, features = 0;
    DeviceBuffer<float> x;
    DeviceBuffer<std::int64_t> y, order;
    bool ordered = false;
  };

  cudaStream_t s() const { return stack_.stream(); }
  Idx columns() const {
    return lengths_ ? static_cast<Idx>(cols_host_.size()) : every_ ? stack_.steps() * stack_.batch() : stack_.batch();
  }
  /// The head's input: every step's outputs (H × TB), the last step's (H × B), or with lengths
  /// the columns head_columns chose, gathered (H × columns()).
  const T* head_input() const {
    if (lengths_) return head_in_.data();
    return every_ ? stack_.output() : stack_.output() + (stack_.steps() - 1) * stack_.batch() * H_;
  }

  RecurrentGpu<T>& stack_;
  Idx I_, H_, C_;
  bool every_, mse_;
  std::unique_ptr<BlasHandle> blas_;
  DeviceBuffer<T> head_, head_grads_;  ///< weight (C × H, row-major) then bias (C)
  DeviceBuffer<T> logits_, dlogits_, dout_, ones_;
  DeviceBuffer<double> col_loss_;
  DeviceBuffer<std::int64_t> labels_, labels_in_, predictions_;
  DeviceBuffer<float> batch_in_;
  // With lengths (set_lengths): the output columns the head reads, its gathered input, the
  // chosen columns' labels, the gradient on every output column (per-step head), the batch's ids.
  bool lengths_ = false;
  std::vector<Idx> cols_host_;
  DeviceBuffer<Idx> cols_;
  DeviceBuffer<T> head_in_, dfull_;
  DeviceBuffer<std::int64_t> col_labels_, ids_;
  cuda::StagedUploads uploads_;  ///< the ids' and columns' copies, queued without waiting
  std::array<Resident, 2> data_;
  std::array<std::array<cuda::Event, kTimePoints>, kSlots> events_;
  std::array<std::array<bool, kTimePoints>, kSlots> marked_{};
  cuda::PinnedBuffer<DeviceStatus> pinned_;
  static_assert(kSlots == 2, "one snapshot event per slot");
  std::array<cuda::Event, kSlots> snap_{cuda::Event(false), cuda::Event(false)};  ///< ordering only
};

template <class T>
ModelGpuImpl<T>::ModelGpuImpl(RecurrentGpu<T>& stack, const RecurrentConfig& rnn, Index classes, bool every_step,
                              LossType loss)
    : stack_(stack),
      I_(rnn.input),
      H_(rnn.hidden),
      C_(classes),
      every_(every_step),
      mse_(loss == LossType::mse),
      pinned_(kSlots) {
  blas_ = std::make_unique<BlasHandle>(s());
  head_ = DeviceBuffer<T>(static_cast<std::size_t>(C_ * H_ + C_));
  head_grads_ = DeviceBuffer<T>(head_.size());
  BPPSA_CUDA_CHECK(cudaMemsetAsync(head_.data(), 0, head_.bytes(), s()));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(head_grads_.data(), 0, head_grads_.bytes(), s()));
  stack_.synchronize();
}

template <class T>
ModelGpuImpl<T>::~ModelGpuImpl() = default;

template <class T>
void ModelGpuImpl<T>::upload_head(const Linear<T>& head) {
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(head_.data(), head.weight.data(), static_cast<std::size_t>(C_ * H_) * sizeof(T),
                                   cudaMemcpyHostToDevice, s()));
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(head_.data() + C_ * H_, head.bias.data(), static_cast<std::size_t>(C_) * sizeof(T),
                                   cudaMemcpyHostToDevice, s()));
  stack_.synchronize();
}

template <class T>
void ModelGpuImpl<T>::download_head(Linear<T>& head, bool values, bool grads) {
  const std::size_t w = static_cast<std::size_t>(C_ * H_) * sizeof(T), b = static_cast<std::size_t>(C_) * sizeof(T);
  if (values) {
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(head.weight.data(), head_.data(), w, cudaMemcpyDeviceToHost, s()));
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(head.bias.data(), head_.data() + C_ * H_, b, cudaMemcpyDeviceToHost, s()));
  }
  if (grads) {
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(head.grad_weight.data(), head_grads_.data(), w, cudaMemcpyDeviceToHost, s()));
    BPPSA_CUDA_CHECK(
        cudaMemcpyAsync(head.grad_bias.data(), head_grads_.data() + C_ * H_, b, cudaMemcpyDeviceToHost, s()));
  }
  stack_.synchronize();
}

template <class T>
Segments<T> ModelGpuImpl<T>::segments() {
  Segments<T> p;
  p.values[0] = stack_.param_values();
  p.grads[0] = stack_.param_grads();
  p.size[0] = stack_.param_count();
  p.values[1] = head_.data();
  p.grads[1] = head_grads_.data();
  p.size[1] = static_cast<Idx>(head_.size());
  p.count = 2;
  return p;
}

template <class T>
void ModelGpuImpl<T>::set_batch(std::span<const float> x, Index batch, Index steps,
                                std::span<const std::int64_t> labels) {
  lengths_ = false;
  stack_.resize(steps, batch);
  ensure(batch_in_, static_cast<Idx>(x.size()));
  ensure(labels_in_, batch);
  ensure(labels_, batch);
  mark(0, kStepBegin);
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(batch_in_.data(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, s()));
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(labels_in_.data(), labels.data(), labels.size() * sizeof(std::int64_t),
                                   cudaMemcpyHostToDevice, s()));
  launch_gather(batch_in_.data(), labels_in_.data(), I_, steps, batch, nullptr, 0, stack_.input(), labels_.data(), s());
  stack_.synchronize();  // the caller's buffers may go once this returns
}

template <class T>
void ModelGpuImpl<T>::use_data(int slot, const SequenceDataset& data) {
  Resident& r = data_[static_cast<std::size_t>(slot)];
  if (r.source == &data && r.host_x == data.x.data() && r.host_y == data.y.data() && r.samples == data.size() &&
      r.steps == data.steps && r.features == data.features)
    return;
  const char* op = "train";
  if (data.features != I_ || data.steps < 1 ||
      static_cast<Index>(data.x.size()) != data.size() * data.steps * data.features)
    raise<ShapeError>("data", data.name + " holds " + std::to_string(data.x.size()) + " values for " +
                                  std::to_string(data.size()) + " sequences of " + std::to_string(data.steps) +
                                  " steps × " + std::to_string(data.features) + " features; the model takes " +
                                  std::to_string(I_) + " features per step");
  for (Index i = 0; i < data.size(); ++i)
    check_label("loss", data.y[static_cast<std::size_t>(i)], "sample " + std::to_string(i) + " of " + data.name, C_);
  r = Resident{};
  const double n = static_cast<double>(data.size());
  cuda::require_device_memory(
      op,
      std::string(slot == 0 ? "the training set" : "the evaluation set") + " (" + std::to_string(data.size()) +
          " sequences of " + std::to_string(data.steps) + " steps × " + std::to_string(data.features) +
          " features, kept on the GPU)",
      {{"inputs", static_cast<double>(data.x.size()) * sizeof(float)}, {"labels and order", 2 * n * 8}},
      "use --limit-train/--limit-test, shorter sequences or --device cpu");
  r.x = cuda::to_device(data.x);
  r.y = cuda::to_device(data.y);  // complete when it returns (DeviceBuffer::upload)
  r.source = &data;
  r.host_x = data.x.data();
  r.host_y = data.y.data();
  r.samples = data.size();
  r.steps = data.steps;
  r.features = data.features;
}

template <class T>
void ModelGpuImpl<T>::set_order(int slot, std::span<const Index> order) {
  Resident& r = data_[static_cast<std::size_t>(slot)];
  r.ordered = !order.empty();
  if (!r.ordered) return;
  const std::vector<std::int64_t> host(order.begin(), order.end());
  ensure(r.order, static_cast<Idx>(host.size()));
  // Stream-ordered after the batches that read the previous order; waits so `host` may go.
  BPPSA_CUDA_CHECK(
      cudaMemcpyAsync(r.order.data(), host.data(), host.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice, s()));
  stack_.synchronize();
}

template <class T>
void ModelGpuImpl<T>::gather(int slot, Index first, Index n, int time_slot) {
  const Resident& r = data_[static_cast<std::size_t>(slot)];
  lengths_ = false;
  stack_.resize(r.steps, n);
  ensure(labels_, n);
  mark(time_slot, kStepBegin);
  launch_gather(r.x.data(), r.y.data(), I_, r.steps, n, r.ordered ? r.order.data() : nullptr, first, stack_.input(),
                labels_.data(), s());
}

template <class T>
void ModelGpuImpl<T>::gather_ids(int slot, std::span<const std::int64_t> ids, int time_slot) {
  const Resident& r = data_[static_cast<std::size_t>(slot)];
  const auto n = static_cast<Idx>(ids.size());
  for (const std::int64_t i : ids)
    if (i < 0 || i >= r.samples)
      raise<InvalidArgument>("train", "sample " + std::to_string(i) + " of a data set of " + std::to_string(r.samples));
  lengths_ = false;
  stack_.resize(r.steps, n);
  ensure(labels_, n);
  ensure(ids_, n);
  mark(time_slot, kStepBegin);
  uploads_.upload(ids_.data(), ids.data(), ids.size() * sizeof(std::int64_t), s());
  launch_gather(r.x.data(), r.y.data(), I_, r.steps, n, ids_.data(), 0, stack_.input(), labels_.data(), s());
}

template <class T>
void ModelGpuImpl<T>::set_lengths(std::span<const Index> lengths) {
  stack_.set_lengths(lengths);  // checks them
  lengths_ = !lengths.empty() && lengths.back() < stack_.steps();
  if (!lengths_) return;
  std::vector<Index> cols;
  std::vector<std::int64_t> col_labels;
  const std::vector<std::int64_t> unused(lengths.size(), 0);  // the labels are the device's: only the columns here
  head_columns(every_, lengths, unused, cols, col_labels);
  cols_host_.assign(cols.begin(), cols.end());
  ensure(cols_, static_cast<Idx>(cols_host_.size()));
  uploads_.upload(cols_.data(), cols_host_.data(), cols_host_.size() * sizeof(Idx), s());
}

template <class T>
void ModelGpuImpl<T>::forward_loss(bool grad, int time_slot) {
  stack_.forward(this->initial_states);
  const Idx B = stack_.batch(), N = columns();
  ensure(logits_, C_ * N);
  ensure(col_loss_, N);
  ensure(predictions_, B);
  if (grad) ensure(dlogits_, C_ * N);
  if (lengths_) {  // the chosen columns and their labels (column j's label at j: a "batch" of N)
    ensure(head_in_, H_ * N);
    ensure(col_labels_, N);
    launch_head_columns(stack_.output(), cols_.data(), H_, N, labels_.data(), B, head_in_.data(), col_labels_.data(),
                        s());
  }
  run(blas_->get(), head_logits(C_, H_, N, head_.data(), head_input(), logits_.data()));
  launch_loss_columns(mse_, C_, N, lengths_ ? N : B, logits_.data(), head_.data() + C_ * H_,
                      lengths_ ? col_labels_.data() : labels_.data(), grad ? dlogits_.data() : nullptr,
                      col_loss_.data(), s());
  launch_loss_finish(mse_, C_, N, B, col_loss_.data(), logits_.data(), labels_.data(), predictions_.data(),
                     stack_.status(), s());
  mark(time_slot, kForwardEnd);
}

template <class T>
void ModelGpuImpl<T>::backward(const BackwardOptions& options, int time_slot) {
  const Idx N = columns();
  if (ones_.size() < static_cast<std::size_t>(N)) {
    ones_ = DeviceBuffer<T>(static_cast<std::size_t>(N));
    launch_fill(ones_.data(), N, T(1), s());
  }
  ensure(dout_, H_ * N);
  const HeadGradProducts<T> p = head_grad_products(C_, H_, N, head_.data(), head_input(), dlogits_.data(), ones_.data(),
                                                   head_grads_.data(), head_grads_.data() + C_ * H_, dout_.data());
  cublasHandle_t h = blas_->get();
  run(h, p.weight);
  run(h, p.bias);
  run(h, p.input);
  const T* top = dout_.data();  // H × N: every step's (per-step head) or each sample's last step's
  if (lengths_ && every_) {     // back to the output columns the head read, zeros elsewhere
    const Idx full = H_ * stack_.steps() * stack_.batch();
    ensure(dfull_, full);
    launch_scatter_head_grad(dout_.data(), cols_.data(), H_, N, dfull_.data(), full, s());
    top = dfull_.data();
  }
  stack_.backward_begin(top, every_);
  for (Index l = stack_.layers() - 1; l >= 0; --l)
    stack_.backward_layer(
        l, options,
        l < static_cast<Index>(this->final_grads.size()) ? this->final_grads[static_cast<std::size_t>(l)] : nullptr,
        time_slot);
  stack_.check_grads();
  launch_check_finite(head_grads_.data(), static_cast<Idx>(head_grads_.size()), kGradNotFinite, stack_.status(), s());
  mark(time_slot, kBackwardEnd);
  stack_.sync.grads_newer = true;
  this->head_sync.grads_newer = true;
}

template <class T>
void ModelGpuImpl<T>::mark(int time_slot, int point) {
  BPPSA_CUDA_CHECK(cudaEventRecord(events_[static_cast<std::size_t>(time_slot)][static_cast<std::size_t>(point)], s()));
  marked_[static_cast<std::size_t>(time_slot)][static_cast<std::size_t>(point)] = true;
}

template <class T>
void ModelGpuImpl<T>::step_times(int time_slot, StepTimes& times, double& optimizer_seconds) {
  const auto& ev = events_[static_cast<std::size_t>(time_slot)];
  auto& done = marked_[static_cast<std::size_t>(time_slot)];
  auto seconds = [&](int a, int b) {
    if (!done[static_cast<std::size_t>(a)] || !done[static_cast<std::size_t>(b)]) return 0.0;
    BPPSA_CUDA_CHECK(cudaEventSynchronize(ev[static_cast<std::size_t>(b)]));
    float ms = 0;
    BPPSA_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(a)], ev[static_cast<std::size_t>(b)]));
    return 1e-3 * ms;
  };
  times.forward = seconds(kStepBegin, kForwardEnd);
  times.backward = seconds(kForwardEnd, kBackwardEnd);
  times.detail = done[kBackwardEnd] ? stack_.backward_times(time_slot) : BackwardTimes{};
  optimizer_seconds = seconds(kBackwardEnd, kOptimizerEnd);
  done.fill(false);
}

template <class T>
void ModelGpuImpl<T>::download_predictions(std::vector<std::int64_t>& predictions) {
  predictions.resize(static_cast<std::size_t>(stack_.batch()));
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(predictions.data(), predictions_.data(), predictions.size() * sizeof(std::int64_t),
                                   cudaMemcpyDeviceToHost, s()));
  stack_.synchronize();
}

template <class T>
void ModelGpuImpl<T>::reset_totals() {
  DeviceStatus* d = stack_.status();
  BPPSA_CUDA_CHECK(cudaMemsetAsync(&d->loss_sum, 0, sizeof d->loss_sum, s()));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(&d->correct, 0, sizeof d->correct, s()));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(&d->samples, 0, sizeof d->samples, s()));
}

template <class T>
void ModelGpuImpl<T>::snapshot(int slot) {
  BPPSA_CUDA_CHECK(
      cudaMemcpyAsync(pinned_.data() + slot, stack_.status(), sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s()));
  BPPSA_CUDA_CHECK(cudaEventRecord(snap_[static_cast<std::size_t>(slot)], s()));
}

template <class T>
DeviceStatus ModelGpuImpl<T>::snapshot_wait(int slot) {
  BPPSA_CUDA_CHECK(cudaEventSynchronize(snap_[static_cast<std::size_t>(slot)]));
  return pinned_.data()[slot];
}

template <class T>
std::size_t ModelGpuImpl<T>::device_bytes() const {
  std::size_t n = stack_.device_bytes() + head_.bytes() + head_grads_.bytes() + logits_.bytes() + dlogits_.bytes() +
                  dout_.bytes() + ones_.bytes() + col_loss_.bytes() + labels_.bytes() + labels_in_.bytes() +
                  predictions_.bytes() + batch_in_.bytes() + cols_.bytes() + head_in_.bytes() + dfull_.bytes() +
                  col_labels_.bytes() + ids_.bytes();
  for (const Resident& r : data_) n += r.x.bytes() + r.y.bytes() + r.order.bytes();
  return n;
}

}  // namespace

template <class T>
std::unique_ptr<ModelGpu<T>> make_model_gpu(RecurrentGpu<T>& stack, const RecurrentConfig& rnn, Index classes,
                                            bool every_step, LossType loss) {
  return std::make_unique<ModelGpuImpl<T>>(stack, rnn, classes, every_step, loss);
}

template std::unique_ptr<ModelGpu<float>> make_model_gpu(RecurrentGpu<float>&, const RecurrentConfig&, Index, bool,
                                                         LossType);
template std::unique_ptr<ModelGpu<double>> make_model_gpu(RecurrentGpu<double>&, const RecurrentConfig&, Index, bool,
                                                          LossType);

}  // namespace bppsa::detail::gpu
