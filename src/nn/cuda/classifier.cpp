// The CUDA half of SequenceClassifier<T> (classifier.hpp): the Linear head and the loss on
// the device (cuBLAS GEMMs, one thread per column for the loss, one block for the fixed-order
// reduction), batches uploaded or gathered on the device from data sets kept resident there,
// CUDA-event timing per step slot, status snapshots through pinned memory; the front's host
// calls and a pass's queued steps over them. Also its factory, which the CUDA stack's
// make_classifier calls.
#include "nn/cuda/classifier.hpp"

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/data/dataset.hpp"
#include "bppsa/nn/model.hpp"
#include "jacobian/cuda/library.hpp"
#include "nn/cuda/blas.hpp"
#include "nn/lengths.hpp"

namespace bppsa::detail::gpu {
namespace {

using cuda::DeviceBuffer;

template <class T>
void ensure(DeviceBuffer<T>& b, Idx n) {
  if (b.size() < static_cast<std::size_t>(n)) b = DeviceBuffer<T>(static_cast<std::size_t>(n));
}

}  // namespace

template <class T>
ClassifierCuda<T>::ClassifierCuda(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head,
                                  RecurrentCuda<T>& stack)
    : config_(config),
      rnn_(rnn),
      head_host_(head),
      stack_(stack),
      I_(config.rnn.input),
      H_(config.rnn.hidden),
      C_(config.classes),
      every_(config.head == HeadMode::every),
      mse_(config.loss == LossType::mse),
      pinned_(kSlots) {
  blas_ = std::make_unique<BlasHandle>(s());
  head_ = DeviceBuffer<T>(static_cast<std::size_t>(C_ * H_ + C_));
  head_grads_ = DeviceBuffer<T>(head_.size());
  BPPSA_CUDA_CHECK(cudaMemsetAsync(head_.data(), 0, head_.bytes(), s()));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(head_grads_.data(), 0, head_grads_.bytes(), s()));
  stack_.synchronize();
}

template <class T>
ClassifierCuda<T>::~ClassifierCuda() = default;

template <class T>
void ClassifierCuda<T>::make_current() {
  stack_.make_current(RecurrentAccess<T>::params(rnn_));
  if (!head_sync_.host_newer) return;
  const Linear<T>& head = head_host_;
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(head_.data(), head.weight.data(), static_cast<std::size_t>(C_ * H_) * sizeof(T),
                                   cudaMemcpyHostToDevice, s()));
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(head_.data() + C_ * H_, head.bias.data(), static_cast<std::size_t>(C_) * sizeof(T),
                                   cudaMemcpyHostToDevice, s()));
  stack_.synchronize();
  head_sync_.host_newer = false;
}

template <class T>
void ClassifierCuda<T>::pull() {
  synchronize();
  RecurrentAccess<T>::pull(rnn_);
  Linear<T>& head = head_host_;
  const bool values = head_sync_.device_newer, grads = head_sync_.grads_newer;
  if (!values && !grads) return;
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
  head_sync_.device_newer = head_sync_.grads_newer = false;
}

template <class T>
void ClassifierCuda<T>::upload_batch(std::span<const float> x, Index batch, Index steps,
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
void ClassifierCuda<T>::use_data(int slot, const SequenceDataset& data) {
  Resident& r = data_[static_cast<std::size_t>(slot)];
  if (r.source == &data && r.host_x == data.x.data() && r.host_y == data.y.data() && r.samples == data.size() &&
      r.steps == data.steps && r.features == data.features)
    return;
  const char* op = "train";  // the front (ClassifierAccess::pass_half) checked the shapes
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
void ClassifierCuda<T>::set_order(int slot, std::span<const Index> order) {
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
void ClassifierCuda<T>::gather(int slot, Index first, Index n, int time_slot) {
  const Resident& r = data_[static_cast<std::size_t>(slot)];
  lengths_ = false;
  stack_.resize(r.steps, n);
  ensure(labels_, n);
  mark(time_slot, kStepBegin);
  launch_gather(r.x.data(), r.y.data(), I_, r.steps, n, r.ordered ? r.order.data() : nullptr, first, stack_.input(),
                labels_.data(), s());
}

template <class T>
void ClassifierCuda<T>::gather_ids(int slot, std::span<const std::int64_t> ids, int time_slot) {
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
void ClassifierCuda<T>::set_sorted_lengths(std::span<const Index> lengths) {
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
void ClassifierCuda<T>::queue_forward_loss(bool grad, int time_slot) {
  stack_.forward_device(
      stack_.stage_states(RecurrentAccess<T>::initial_states(rnn_), "initial state", "Recurrent::forward"));
  const Idx B = stack_.batch(), N = columns();
  ensure(logits_, C_ * N);
  ensure(col_loss_, N);
  ensure(predictions_, B);
  if (grad) ensure(dlogits_, C_ * N);
  if (lengths_) {  // the chosen columns and their labels (column j's label at j: a "batch" of N)
    ensure(head_in_, H_ * N);
    ensure(col_labels_, N);
    launch_head_columns(stack_.device_output(), cols_.data(), H_, N, labels_.data(), B, head_in_.data(), col_labels_.data(),
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
void ClassifierCuda<T>::queue_backward(const BackwardOptions& options, int time_slot) {
  // Checked and staged first: a misshaped final-state gradient throws before any gradient changes.
  const std::vector<DeviceState<T>> final_grads =
      stack_.stage_states(RecurrentAccess<T>::final_grads(rnn_), "final-state gradient", "Recurrent::backward");
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
  stack_.backward_begin_device(top, every_);
  for (Index l = stack_.layers() - 1; l >= 0; --l)
    stack_.backward_layer_device(
        l, options, l < static_cast<Index>(final_grads.size()) ? final_grads[static_cast<std::size_t>(l)] : DeviceState<T>{},
        time_slot);
  stack_.check_grads();
  launch_check_finite(head_grads_.data(), static_cast<Idx>(head_grads_.size()), kGradNotFinite, stack_.status(), s());
  mark(time_slot, kBackwardEnd);
  stack_.sync.grads_newer = true;
  head_sync_.grads_newer = true;
}

template <class T>
void ClassifierCuda<T>::mark(int time_slot, int point) {
  BPPSA_CUDA_CHECK(cudaEventRecord(events_[static_cast<std::size_t>(time_slot)][static_cast<std::size_t>(point)], s()));
  marked_[static_cast<std::size_t>(time_slot)][static_cast<std::size_t>(point)] = true;
}

template <class T>
void ClassifierCuda<T>::step_times(int time_slot, StepTimes& times, double& optimizer_seconds) {
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
void ClassifierCuda<T>::download_predictions(std::vector<std::int64_t>& predictions) {
  predictions.resize(static_cast<std::size_t>(stack_.batch()));
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(predictions.data(), predictions_.data(), predictions.size() * sizeof(std::int64_t),
                                   cudaMemcpyDeviceToHost, s()));
  stack_.synchronize();
}

template <class T>
void ClassifierCuda<T>::reset_totals() {
  DeviceStatus* d = stack_.status();
  BPPSA_CUDA_CHECK(cudaMemsetAsync(&d->loss_sum, 0, sizeof d->loss_sum, s()));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(&d->correct, 0, sizeof d->correct, s()));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(&d->samples, 0, sizeof d->samples, s()));
}

template <class T>
void ClassifierCuda<T>::snapshot(int slot) {
  BPPSA_CUDA_CHECK(
      cudaMemcpyAsync(pinned_.data() + slot, stack_.status(), sizeof(DeviceStatus), cudaMemcpyDeviceToHost, s()));
  BPPSA_CUDA_CHECK(cudaEventRecord(snap_[static_cast<std::size_t>(slot)], s()));
}

template <class T>
DeviceStatus ClassifierCuda<T>::snapshot_wait(int slot) {
  BPPSA_CUDA_CHECK(cudaEventSynchronize(snap_[static_cast<std::size_t>(slot)]));
  return pinned_.data()[slot];
}

template <class T>
std::size_t ClassifierCuda<T>::device_bytes() const {
  std::size_t n = stack_.device_bytes() + head_.bytes() + head_grads_.bytes() + logits_.bytes() + dlogits_.bytes() +
                  dout_.bytes() + ones_.bytes() + col_loss_.bytes() + labels_.bytes() + labels_in_.bytes() +
                  predictions_.bytes() + batch_in_.bytes() + cols_.bytes() + head_in_.bytes() + dfull_.bytes() +
                  col_labels_.bytes() + ids_.bytes();
  for (const Resident& r : data_) n += r.x.bytes() + r.y.bytes() + r.order.bytes();
  return n;
}


template <class T>
Idx ClassifierCuda<T>::columns() const {
  return lengths_ ? static_cast<Idx>(cols_host_.size()) : every_ ? stack_.steps() * stack_.batch() : stack_.batch();
}

template <class T>
const T* ClassifierCuda<T>::head_input() const {
  if (lengths_) return head_in_.data();
  return every_ ? stack_.device_output() : stack_.device_output() + (stack_.steps() - 1) * stack_.batch() * H_;
}

template <class T>
void ClassifierCuda<T>::raise_flagged(const DeviceStatus& status) {
  if (status.flags == 0) return;
  stack_.clear_flags();
  if ((status.flags & kLossNotFinite) != 0)  // the CPU's message (src/nn/loss.cpp)
    raise<NonFiniteError>("loss", std::string("the ") + to_string(config_.loss) +
                                      " loss is not finite (NaN/Inf): the model diverged or the inputs hold NaN/Inf; "
                                      "lower the learning rate or check the data");
  if ((status.flags & kGradNotFinite) != 0)
    raise<NonFiniteError>("SequenceClassifier::backward",
                          "gradients are not finite (NaN/Inf): the loss or the weights diverged; lower the "
                          "learning rate");
  if ((status.flags & kParamNotFinite) != 0) {
    std::string name = "?";
    std::uint64_t at = status.bad_param;
    for (const auto& [n, shape] : expected_state_dict(config_)) {
      std::uint64_t size = 1;
      for (const Index d : shape) size *= static_cast<std::uint64_t>(d);
      if (at < size) {
        name = n;
        break;
      }
      at -= size;
    }
    raise<NonFiniteError>("optimizer", "parameter '" + name +
                                           "' is not finite (NaN/Inf) after an optimizer step: training diverged; "
                                           "lower the learning rate");
  }
}

// ---------------------------------------------------------------------------------------------
// ClassifierHalf: the front's host calls over the device API

template <class T>
void ClassifierCuda<T>::set_batch(std::span<const float> x, Index batch, Index steps,
                                  std::span<const std::int64_t> labels, std::span<const Index> lengths) {
  // The GPU computes the loss without looking at label ranges: check them here, as loss() does.
  for (Index b = 0; b < batch; ++b)
    check_label("loss", labels[static_cast<std::size_t>(b)], "prediction " + std::to_string(b), C_);
  make_current();
  // With lengths the batch runs sorted longest first, as on the CPU (order_[k]: the caller's
  // sample at position k).
  order_ = longest_first(lengths, steps, batch);
  sorted_lengths_.clear();
  for (Index b : order_) sorted_lengths_.push_back(lengths.empty() ? steps : lengths[static_cast<std::size_t>(b)]);
  if (lengths.empty() || std::is_sorted(order_.begin(), order_.end())) {
    upload_batch(x, batch, steps, labels);
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
    upload_batch(xs, batch, steps, ys);
  }
  set_sorted_lengths(lengths.empty() ? std::span<const Index>() : std::span<const Index>(sorted_lengths_));
}

template <class T>
T ClassifierCuda<T>::forward_loss(bool grad, std::vector<std::int64_t>* predictions) {
  make_current();
  queue_forward_loss(grad, 0);
  const DeviceStatus st = stack_.read_status();  // waits for the loss
  raise_flagged(st);                              // throws NonFiniteError as the CPU's loss() would
  if (predictions) {
    download_predictions(*predictions);
    const std::vector<std::int64_t> sorted = *predictions;  // back to the caller's order
    for (std::size_t k = 0; k < order_.size() && k < sorted.size(); ++k)
      (*predictions)[static_cast<std::size_t>(order_[k])] = sorted[k];
  }
  return static_cast<T>(st.loss);
}

template <class T>
void ClassifierCuda<T>::backward(const BackwardOptions& options, BackwardTimes* times) {
  make_current();
  queue_backward(options, 0);
  if (times) {
    StepTimes st;
    double optimizer = 0;
    step_times(0, st, optimizer);
    *times = st.detail;
  }
}

template <class T>
void ClassifierCuda<T>::backward_timed(const BackwardOptions& options, double, StepTimes* times) {
  make_current();
  queue_backward(options, 0);
  StepTimes st;
  double optimizer = 0;
  step_times(0, st, optimizer);  // CUDA events of the forward and the backward; waits for the backward
  if (times) *times = st;
}

template <class T>
void ClassifierCuda<T>::head_backward(const Matrix<T>&, Matrix<T>&) {
  raise<UnsupportedError>("SequenceClassifier::head_backward",
                          "a Device::cuda model runs its head on the GPU inside backward(); head_backward "
                          "takes host matrices of a Device::cpu model");
}

template <class T>
void ClassifierCuda<T>::host_written() {
  head_sync_.host_newer = true;
  head_sync_.device_newer = false;
}

template <class T>
void ClassifierCuda<T>::synchronize() {
  raise_flagged(stack_.read_status());
}

// ---------------------------------------------------------------------------------------------
// ClassifierHalf: a pass's steps, queued on the device

template <class T>
void ClassifierCuda<T>::begin_pass(const SequenceDataset& data, std::span<const Index> order, bool training) {
  make_current();
  training_ = training;
  pass_slot_ = training ? 0 : 1;
  pass_data_ = &data;
  pass_order_.assign(order.begin(), order.end());
  use_data(pass_slot_, data);
  set_order(pass_slot_, order);
  reset_totals();
}

template <class T>
void ClassifierCuda<T>::queue_step(Index first, Index n, const BackwardOptions* options,
                                   const std::function<void()>& optimizer_step, int slot) {
  make_current();
  const SequenceDataset& data = *pass_data_;
  if (data.lengths.empty()) {
    gather(pass_slot_, first, n, slot);
  } else {  // the batch sorted longest first (as the CPU's classifier runs it), each at its length
    std::vector<Index> ids, lengths;
    batch_indices(pass_order_, first, n, ids);
    for (const Index i : ids) lengths.push_back(data.length(i));
    std::vector<std::int64_t> sorted;
    std::vector<Index> sorted_lengths;
    for (const Index k : longest_first(lengths, data.steps, n)) {
      sorted.push_back(ids[static_cast<std::size_t>(k)]);
      sorted_lengths.push_back(lengths[static_cast<std::size_t>(k)]);
    }
    gather_ids(pass_slot_, sorted, slot);
    set_sorted_lengths(sorted_lengths);
  }
  queue_forward_loss(options != nullptr, slot);
  if (options) {
    queue_backward(*options, slot);
    optimizer_step();
    mark(slot, kOptimizerEnd);
  }
  snapshot(slot);
}

template <class T>
StepReport ClassifierCuda<T>::wait_step(int slot) {
  const DeviceStatus st = snapshot_wait(slot);
  raise_flagged(st);  // what the CPU engine would have thrown at that step
  StepReport r;
  r.loss_sum = st.loss_sum;
  r.correct = st.correct;
  r.samples = st.samples;
  if (training_) step_times(slot, r.times, r.optimizer_seconds);
  return r;
}

template <class T>
const DeviceParameters<T>* ClassifierCuda<T>::device_parameters() {
  make_current();
  head_sync_.device_newer = true;  // the caller writes them: the host copies are stale
  stack_.sync.device_newer = true;
  params_ = {stack_.param_values(),
             stack_.param_grads(),
             static_cast<Idx>(stack_.param_count()),
             head_.data(),
             head_grads_.data(),
             static_cast<Idx>(head_.size()),
             s(),
             stack_.status()};
  return &params_;
}

template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cuda(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head,
                                                        RecurrentCuda<T>& stack) {
  return std::make_unique<ClassifierCuda<T>>(config, rnn, head, stack);
}

template class ClassifierCuda<float>;
template class ClassifierCuda<double>;
template std::unique_ptr<ClassifierHalf<float>> make_classifier_cuda(const ModelConfig&, Recurrent<float>&,
                                                                     Linear<float>&, RecurrentCuda<float>&);
template std::unique_ptr<ClassifierHalf<double>> make_classifier_cuda(const ModelConfig&, Recurrent<double>&,
                                                                      Linear<double>&, RecurrentCuda<double>&);

}  // namespace bppsa::detail::gpu
