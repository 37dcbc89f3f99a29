// Sequence classifier: recurrent stack + Linear head + loss, with PyTorch state_dict names.
#include "bppsa/nn/model.hpp"

#include <omp.h>


#include "bppsa/core/error.hpp"

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
         " H=" + std::to_string(c.rnn.hidden) + " layers=" + std::to_string(c.rnn.layers) +
         " C=" + std::to_string(c.classes) + " head=" + to_string(c.head) + " loss=" + to_string(c.loss);
}

std::vector<std::pair<std::string, std::vector<Index>>> expected_state_dict(const ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<Index>>> out;
  const Index gh = gate_count(c.rnn.cell) * c.rnn.hidden;
  for (Index l = 0; l < c.rnn.layers; ++l) {
    const std::string s = std::to_string(l);
    out.push_back({"rnn.weight_ih_l" + s, {gh, l == 0 ? c.rnn.input : c.rnn.hidden}});
    out.push_back({"rnn.weight_hh_l" + s, {gh, c.rnn.hidden}});
    out.push_back({"rnn.bias_ih_l" + s, {gh}});
    out.push_back({"rnn.bias_hh_l" + s, {gh}});
  }
  out.push_back({"head.weight", {c.classes, c.rnn.hidden}});
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
  c.rnn.layers = layers;
  c.rnn.hidden = w.shape[0] / g;
  c.rnn.input = w.shape[1];
  const Tensor& hw = file.at("rnn.weight_hh_l0", op);
  if (hw.shape.size() != 2 || hw.shape[1] * g != hw.shape[0])
    detail::raise<ShapeError>(op, "tensor 'rnn.weight_hh_l0' in " + file.source + " has shape " + shape_list(hw.shape) +
                                      ", expected [" + std::to_string(w.shape[0]) + ", " +
                                      std::to_string(c.rnn.hidden) + "] for a " + to_string(cell) +
                                      " (is --model right?)");
  const Tensor& hd = file.at("head.weight", op);
  if (hd.shape.size() != 2)
    detail::raise<ShapeError>(op, "tensor 'head.weight' in " + file.source + " has shape " + shape_list(hd.shape) +
                                      ", expected [classes, " + std::to_string(c.rnn.hidden) + "]");
  c.classes = hd.shape[0];
  return c;
}

template <class T>
SequenceClassifier<T>::SequenceClassifier(ModelConfig config)
    : config_(config), rnn_(config.rnn), head_(config.rnn.hidden, config.classes) {}

template <class T>
void SequenceClassifier<T>::reset_parameters(std::uint64_t seed) {
  rnn_.reset_parameters(seed);
  head_.reset_parameters(seed ^ 0x9E3779B97F4A7C15ull);
}

template <class T>
void SequenceClassifier<T>::forward(std::span<const float> x, Index batch, Index steps,
                                    std::span<const std::int64_t> labels) {
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
  x_.resize(I, steps * batch);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < steps; ++t)
      for (Index i = 0; i < I; ++i)
        x_(i, t * batch + b) = static_cast<T>(x[static_cast<std::size_t>((b * steps + t) * I + i)]);
  rnn_.forward(x_, steps, batch);
  if (config_.head == HeadMode::every) {
    head_.forward(rnn_.output(), logits_);
    col_labels_.resize(static_cast<std::size_t>(steps * batch));
    for (Index t = 0; t < steps; ++t)
      for (Index b = 0; b < batch; ++b)
        col_labels_[static_cast<std::size_t>(t * batch + b)] = labels[static_cast<std::size_t>(b)];
  } else {
    head_.forward(rnn_.output().rightCols(batch), logits_);
    col_labels_.assign(labels.begin(), labels.end());
  }
}

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
}  // namespace

template <class T>
T SequenceClassifier<T>::evaluate(std::span<const float> x, Index batch, Index steps,
                                  std::span<const std::int64_t> labels, std::vector<std::int64_t>* predictions) {
  forward(x, batch, steps, labels);
  batch_ = 0;  // the recorded forward is no longer the one a loss gradient was taken of
  const T l = loss<T>(config_.loss, logits_, col_labels_, nullptr);
  argmax_last(logits_, batch, predictions);
  return l;
}

template <class T>
T SequenceClassifier<T>::forward_loss(std::span<const float> x, Index batch, Index steps,
                                      std::span<const std::int64_t> labels, std::vector<std::int64_t>* predictions) {
  forward(x, batch, steps, labels);
  const T l = loss<T>(config_.loss, logits_, col_labels_, &dlogits_);
  argmax_last(logits_, batch, predictions);
  batch_ = batch;
  return l;
}

template <class T>
void SequenceClassifier<T>::backward(const BackwardOptions& options, BackwardTimes* times) {
  if (batch_ == 0)
    detail::raise<InvalidArgument>("SequenceClassifier::backward",
                                   "no loss to differentiate: call forward_loss (or loss_and_grad) first");
  head_backward(dlogits_, dout_);
  BackwardTimes bt;
  rnn_.backward(dout_, config_.head == HeadMode::every, options, &bt);
  if (times) *times = bt;
}

template <class T>
void SequenceClassifier<T>::head_backward(const Matrix<T>& dlogits, Matrix<T>& dout) {
  if (config_.head == HeadMode::every) {
    head_.backward(rnn_.output(), dlogits, dout);
  } else {
    const Index batch = dlogits.cols();
    head_.backward(rnn_.output().rightCols(batch), dlogits, dh_);
    dout.setZero(config_.rnn.hidden, rnn_.output().cols());
    dout.rightCols(batch) = dh_;
  }
}

template <class T>
T SequenceClassifier<T>::loss_and_grad(std::span<const float> x, Index batch, Index steps,
                                       std::span<const std::int64_t> labels, const BackwardOptions& options,
                                       StepTimes* times, std::vector<std::int64_t>* predictions) {
  const double t0 = omp_get_wtime();
  const T l = forward_loss(x, batch, steps, labels, predictions);
  const double t1 = omp_get_wtime();
  BackwardTimes bt;
  backward(options, &bt);
  const double t2 = omp_get_wtime();
  if (times) {
    times->forward = t1 - t0;
    times->backward = t2 - t1;
    times->detail = bt;
  }
  return l;
}

template <class T>
std::vector<NamedParam<T>> SequenceClassifier<T>::parameters() {
  std::vector<NamedParam<T>> out;
  const auto names = expected_state_dict(config_);
  auto add = [&](std::size_t i, T* v, const T* g, Index n) {
    out.push_back({names[i].first, names[i].second, v, g, n});
  };
  std::size_t i = 0;
  for (Index l = 0; l < config_.rnn.layers; ++l) {
    auto& p = rnn_.params(l);
    const auto& g = rnn_.grads(l);
    add(i++, p.w_ih.data(), g.w_ih.data(), p.w_ih.size());
    add(i++, p.w_hh.data(), g.w_hh.data(), p.w_hh.size());
    add(i++, p.b_ih.data(), g.b_ih.data(), p.b_ih.size());
    add(i++, p.b_hh.data(), g.b_hh.data(), p.b_hh.size());
  }
  add(i++, head_.weight.data(), head_.grad_weight.data(), head_.weight.size());
  add(i++, head_.bias.data(), head_.grad_bias.data(), head_.bias.size());
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

template class SequenceClassifier<float>;
template class SequenceClassifier<double>;

}  // namespace bppsa
