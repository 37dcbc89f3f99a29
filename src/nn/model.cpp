// Sequence classifier: recurrent stack + Linear head + loss, with PyTorch state_dict names. The
// front: it checks batches and call order and dispatches to its half (nn/classifier_half.hpp).
#include "bppsa/nn/model.hpp"

#include <omp.h>

#include "bppsa/core/error.hpp"
#include "nn/classifier_half.hpp"
#include "nn/recurrent_half.hpp"

namespace bppsa {

const char* to_string(HeadMode h) { return h == HeadMode::last ? "last" : "every"; }

HeadMode parse_head(std::string_view name) {
  if (name == "last") return HeadMode::last;
  if (name == "every") return HeadMode::every;
  detail::raise<InvalidArgument>(
      "head", "unknown head '" + std::string(name) + "'; use last (many-to-one) or every (many-to-many)");
}

std::string describe(const ModelConfig& c) {
  return std::string(to_string(c.rnn.cell)) + " I=" + std::to_string(c.rnn.input) +
         " H=" + std::to_string(c.rnn.hidden) + (c.rnn.proj > 0 ? " P=" + std::to_string(c.rnn.proj) : "") +
         " layers=" + std::to_string(c.rnn.layers) + " C=" + std::to_string(c.classes) + " head=" + to_string(c.head) +
         " loss=" + to_string(c.loss);
}

std::vector<std::pair<std::string, std::vector<Index>>> expected_state_dict(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<Index>>> out;
  const Index gh = gate_count(c.rnn.cell) * c.rnn.hidden, P = output_size(c.rnn);
  for (Index l = 0; l < c.rnn.layers; ++l) {
    const std::string s = std::to_string(l);
    out.push_back({"rnn.weight_ih_l" + s, {gh, l == 0 ? c.rnn.input : P}});
    out.push_back({"rnn.weight_hh_l" + s, {gh, P}});
    out.push_back({"rnn.bias_ih_l" + s, {gh}});
    out.push_back({"rnn.bias_hh_l" + s, {gh}});
    if (c.rnn.proj > 0) out.push_back({"rnn.weight_hr_l" + s, {P, c.rnn.hidden}});  // PyTorch's order
  }
  out.push_back({"head.weight", {c.classes, P}});
  out.push_back({"head.bias", {c.classes}});
  return out;
}

ModelConfig config_from_state_dict(const TensorFile& file, CellType cell, HeadMode head, LossType loss) {
  const char* op = "model";
  ModelConfig c;
  c.rnn.cell = cell;
  c.head = head;
  c.loss = loss;
  Index layers = 0;
  while (file.contains("rnn.weight_ih_l" + std::to_string(layers))) ++layers;
  if (layers == 0) file.at("rnn.weight_ih_l0", op);  // throws, listing what the file holds
  const Tensor& w = file.at("rnn.weight_ih_l0", op);
  if (w.shape.size() != 2)
    detail::raise<ShapeError>(op, "tensor 'rnn.weight_ih_l0' in " + file.source + " has shape " + shape_list(w.shape) +
                                      ", expected [gates·hidden, input]");
  const Index g = gate_count(cell);
  if (w.shape[0] % g != 0 || w.shape[0] == 0)
    detail::raise<ShapeError>(op, "tensor 'rnn.weight_ih_l0' in " + file.source + " has " + std::to_string(w.shape[0]) +
                                      " rows, not a multiple of " + std::to_string(g) + " (the gate count of " +
                                      to_string(cell) + "): is --model right?");
  if (w.shape[1] < 1)
    detail::raise<ShapeError>(op, "tensor 'rnn.weight_ih_l0' in " + file.source + " has shape " + shape_list(w.shape) +
                                      ": the model needs at least one input feature");
  c.rnn.layers = layers;
  c.rnn.hidden = w.shape[0] / g;
  c.rnn.input = w.shape[1];
  if (file.contains("rnn.weight_hr_l0")) {  // an LSTM with a projection: weight_hr is [proj, hidden]
    const Tensor& hr = file.at("rnn.weight_hr_l0", op);
    if (cell != CellType::lstm || hr.shape.size() != 2 || hr.shape[1] != c.rnn.hidden || hr.shape[0] < 1 ||
        hr.shape[0] >= c.rnn.hidden)
      detail::raise<ShapeError>(op, "tensor 'rnn.weight_hr_l0' in " + file.source + " has shape " +
                                        shape_list(hr.shape) + ", expected [proj < " + std::to_string(c.rnn.hidden) +
                                        ", " + std::to_string(c.rnn.hidden) + "] of an lstm with a projection" +
                                        (cell != CellType::lstm ? " (is --model right? only lstm has one)" : ""));
    c.rnn.proj = hr.shape[0];
  }
  const Index P = output_size(c.rnn);
  const Tensor& hw = file.at("rnn.weight_hh_l0", op);
  if (hw.shape != std::vector<Index>{w.shape[0], P})
    detail::raise<ShapeError>(op, "tensor 'rnn.weight_hh_l0' in " + file.source + " has shape " + shape_list(hw.shape) +
                                      ", expected [" + std::to_string(w.shape[0]) + ", " + std::to_string(P) +
                                      "] for a " + to_string(cell) + " (is --model right?)");
  const Tensor& hd = file.at("head.weight", op);
  if (hd.shape.size() != 2 || hd.shape[0] < 1)
    detail::raise<ShapeError>(op, "tensor 'head.weight' in " + file.source + " has shape " + shape_list(hd.shape) +
                                      ", expected [classes ≥ 1, " + std::to_string(P) + "]");
  c.classes = hd.shape[0];
  // Every tensor of the config, with its shape, before anything is allocated for it: the
  // model's size is then bounded by the file's own bytes (a 0-byte tensor of shape
  // [4·10^9, 0] cannot make a model of 10^9 hidden units).
  for (const auto& [name, shape] : expected_state_dict(c)) file.require(name, shape, op);
  return c;
}

template <class T>
struct SequenceClassifier<T>::Impl {
  Recurrent<T> rnn;
  Linear<T> head;
  std::unique_ptr<detail::ClassifierHalf<T>> half;  // last: it refers to rnn and head

  explicit Impl(const ModelConfig& config)
      : rnn(config.rnn),
        head(output_size(config.rnn), config.classes),
        half(detail::RecurrentAccess<T>::half(rnn).make_classifier(config, rnn, head)) {}
};

template <class T>
SequenceClassifier<T>::SequenceClassifier(ModelConfig config)
    : config_(config), impl_(std::make_unique<Impl>(config)) {}

template <class T>
SequenceClassifier<T>::~SequenceClassifier() = default;
template <class T>
SequenceClassifier<T>::SequenceClassifier(SequenceClassifier&&) noexcept = default;
template <class T>
SequenceClassifier<T>& SequenceClassifier<T>::operator=(SequenceClassifier&&) noexcept = default;

template <class T>
void SequenceClassifier<T>::reset_parameters(std::uint64_t seed) {
  impl_->rnn.reset_parameters(seed);
  impl_->head.reset_parameters(seed ^ 0x9E3779B97F4A7C15ull);
  impl_->half->host_written();  // every value replaced: the host copy is the current one
}

template <class T>
void SequenceClassifier<T>::synchronize() {
  impl_->half->synchronize();
}

template <class T>
void SequenceClassifier<T>::sync_to_host() {
  impl_->half->pull();
}

template <class T>
std::size_t SequenceClassifier<T>::device_bytes() const {
  return impl_->half->device_bytes();
}

template <class T>
Recurrent<T>& SequenceClassifier<T>::rnn() {
  return impl_->rnn;
}

template <class T>
Linear<T>& SequenceClassifier<T>::head() {
  impl_->half->pull();
  impl_->half->host_written();  // the caller may change it
  return impl_->head;
}

template <class T>
void SequenceClassifier<T>::set_batch(std::span<const float> x, Index batch, Index steps,
                                      std::span<const std::int64_t> labels, std::span<const Index> lengths) {
  const char* op = "model";
  const Index I = config_.rnn.input;
  if (batch < 1 || steps < 1)
    detail::raise<ShapeError>(op, "need at least one sample and one step (got batch " + std::to_string(batch) +
                                      ", steps " + std::to_string(steps) + ")");
  if (static_cast<Index>(x.size()) != batch * steps * I)
    detail::raise<ShapeError>(op, "input holds " + std::to_string(x.size()) + " values, expected [" +
                                      std::to_string(batch) + ", " + std::to_string(steps) + ", " + std::to_string(I) +
                                      "] = " + std::to_string(batch * steps * I));
  if (static_cast<Index>(labels.size()) != batch)
    detail::raise<ShapeError>(op, std::to_string(labels.size()) + " labels for a batch of " + std::to_string(batch));
  if (!lengths.empty()) {
    if (static_cast<Index>(lengths.size()) != batch)
      detail::raise<ShapeError>(op, std::to_string(lengths.size()) + " lengths for a batch of " +
                                        std::to_string(batch) + " (one per sample, or none)");
    for (std::size_t b = 0; b < lengths.size(); ++b)
      if (lengths[b] < 1 || lengths[b] > steps)
        detail::raise<InvalidArgument>(op, "length " + std::to_string(lengths[b]) + " of sample " + std::to_string(b) +
                                               " is outside 1.." + std::to_string(steps));
  }
  stored_ = 0;
  batch_ = 0;  // no backward until a forward of this batch has run
  impl_->half->set_batch(x, batch, steps, labels, lengths);
  stored_ = batch;
}

template <class T>
T SequenceClassifier<T>::run_forward(bool grad, std::vector<std::int64_t>* predictions) {
  if (stored_ == 0)
    detail::raise<InvalidArgument>("SequenceClassifier::forward_loss",
                                   "no batch to run: call set_batch (or forward_loss with a batch) first");
  return impl_->half->forward_loss(grad, predictions);
}

template <class T>
T SequenceClassifier<T>::evaluate(std::span<const float> x, Index batch, Index steps,
                                  std::span<const std::int64_t> labels, std::vector<std::int64_t>* predictions,
                                  std::span<const Index> lengths) {
  set_batch(x, batch, steps, labels, lengths);  // the recorded forward is no longer the one a gradient was taken of
  return run_forward(false, predictions);
}

template <class T>
T SequenceClassifier<T>::forward_loss(std::span<const float> x, Index batch, Index steps,
                                      std::span<const std::int64_t> labels, std::vector<std::int64_t>* predictions,
                                      std::span<const Index> lengths) {
  set_batch(x, batch, steps, labels, lengths);
  return forward_loss(predictions);
}

template <class T>
T SequenceClassifier<T>::forward_loss(std::vector<std::int64_t>* predictions) {
  batch_ = 0;
  const T l = run_forward(true, predictions);
  batch_ = stored_;
  return l;
}

template <class T>
void SequenceClassifier<T>::backward(const BackwardOptions& options, BackwardTimes* times) {
  if (batch_ == 0)
    detail::raise<InvalidArgument>("SequenceClassifier::backward",
                                   "no loss to differentiate: call forward_loss (or loss_and_grad) first");
  impl_->half->backward(options, times);
}

template <class T>
void SequenceClassifier<T>::head_backward(const Matrix<T>& dlogits, Matrix<T>& dout) {
  impl_->half->head_backward(dlogits, dout);
}

template <class T>
T SequenceClassifier<T>::loss_and_grad(std::span<const float> x, Index batch, Index steps,
                                       std::span<const std::int64_t> labels, const BackwardOptions& options,
                                       StepTimes* times, std::vector<std::int64_t>* predictions,
                                       std::span<const Index> lengths) {
  const double t0 = omp_get_wtime();
  const T l = forward_loss(x, batch, steps, labels, predictions, lengths);  // sets batch_: backward's precondition
  impl_->half->backward_timed(options, omp_get_wtime() - t0, times);
  return l;
}

template <class T>
std::vector<NamedParam<T>> SequenceClassifier<T>::parameters() {
  impl_->half->pull();
  impl_->half->host_written();  // writes through the pointers go up before the next device step
  Recurrent<T>& stack = impl_->rnn;
  Linear<T>& linear = impl_->head;
  std::vector<NamedParam<T>> out;
  const auto names = expected_state_dict(config_);
  auto add = [&](std::size_t i, T* v, const T* g, Index n) {
    out.push_back({names[i].first, names[i].second, v, g, n});
  };
  std::size_t i = 0;
  for (Index l = 0; l < config_.rnn.layers; ++l) {
    auto& p = stack.params(l);
    const auto& g = stack.grads(l);
    add(i++, p.w_ih.data(), g.w_ih.data(), p.w_ih.size());
    add(i++, p.w_hh.data(), g.w_hh.data(), p.w_hh.size());
    add(i++, p.b_ih.data(), g.b_ih.data(), p.b_ih.size());
    add(i++, p.b_hh.data(), g.b_hh.data(), p.b_hh.size());
    if (config_.rnn.proj > 0) add(i++, p.w_hr.data(), g.w_hr.data(), p.w_hr.size());
  }
  add(i++, linear.weight.data(), linear.grad_weight.data(), linear.weight.size());
  add(i++, linear.bias.data(), linear.grad_bias.data(), linear.bias.size());
  return out;
}

template <class T>
TensorFile SequenceClassifier<T>::state_dict() const {
  TensorFile f = params_to_tensors(const_cast<SequenceClassifier<T>*>(this)->parameters());
  f.metadata["bppsa.model"] = to_string(config_.rnn.cell);
  f.metadata["bppsa.head"] = to_string(config_.head);
  f.metadata["bppsa.loss"] = to_string(config_.loss);
  return f;
}

template <class T>
void SequenceClassifier<T>::load_state_dict(const TensorFile& file) {
  load_params(file, parameters(), describe(config_));
}

namespace detail {
template <class T>
ClassifierHalf<T>& ClassifierAccess<T>::half(SequenceClassifier<T>& model) {
  return *model.impl_->half;
}
template <class T>
ClassifierHalf<T>& ClassifierAccess<T>::pass_half(SequenceClassifier<T>& model, const SequenceDataset& data) {
  const Index I = model.config_.rnn.input;
  if (data.features != I || data.steps < 1 ||
      static_cast<Index>(data.x.size()) != data.size() * data.steps * data.features)
    raise<ShapeError>("data", data.name + " holds " + std::to_string(data.x.size()) + " values for " +
                                  std::to_string(data.size()) + " sequences of " + std::to_string(data.steps) +
                                  " steps × " + std::to_string(data.features) + " features; the model takes " +
                                  std::to_string(I) + " features per step");
  if (!data.lengths.empty() && static_cast<Index>(data.lengths.size()) != data.size())
    raise<ShapeError>("data", data.name + " has " + std::to_string(data.lengths.size()) + " lengths for " +
                                  std::to_string(data.size()) + " sequences (one per sequence, or none)");
  for (std::size_t i = 0; i < data.lengths.size(); ++i)
    if (data.lengths[i] < 1 || data.lengths[i] > data.steps)
      raise<InvalidArgument>("data", "length " + std::to_string(data.lengths[i]) + " of sequence " + std::to_string(i) +
                                         " of " + data.name + " is outside 1.." + std::to_string(data.steps));
  model.stored_ = 0;
  model.batch_ = 0;
  return *model.impl_->half;
}
template struct ClassifierAccess<float>;
template struct ClassifierAccess<double>;
}  // namespace detail

template class SequenceClassifier<float>;
template class SequenceClassifier<double>;

}  // namespace bppsa
