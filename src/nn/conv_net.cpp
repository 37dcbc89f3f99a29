// Sequential CNN: forward, loss, backward by sequential BP or by the scan over the layers'
// transposed Jacobians, parameters under nn.Sequential's names, pruning masks.
#include "bppsa/nn/conv_net.hpp"

#include <omp.h>

#include <cmath>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "core/random.hpp"

namespace bppsa {

std::string describe(const ConvNetConfig& c) {
  return "cnn " + c.input.str() + " [" + arch_string(c.layers) + "] loss=" + to_string(c.loss);
}

namespace {

// Memory estimates, in bytes as doubles (extents come from architecture strings and
// checkpoints: they can overflow Index), for checks made before anything is allocated.

/// Weights of a layer as make_layer sizes them (conv, linear; 0 for the others).
double layer_weights(const LayerSpec& s, const Shape3& in) {
  const double c = static_cast<double>(in.c), hw = static_cast<double>(in.h) * static_cast<double>(in.w);
  const double out = static_cast<double>(s.out);
  if (s.type == LayerType::conv)
    return out * c * static_cast<double>(s.window.kh) * static_cast<double>(s.window.kw) + out;
  if (s.type == LayerType::linear) return out * c * hw + out;
  return 0;
}

double size_of(const Shape3& s) {
  return static_cast<double>(s.c) * static_cast<double>(s.h) * static_cast<double>(s.w);
}

/// What a forward keeps per sample for a layer: its output, a convolution's im2col columns,
/// a max-pool's argmax taps.
template <class T>
double forward_bytes_per_sample(const Layer<T>& l) {
  const double taps = static_cast<double>(l.spec().window.kh) * static_cast<double>(l.spec().window.kw);
  double b = size_of(l.out_shape()) * sizeof(T);
  if (l.type() == LayerType::conv)
    b += static_cast<double>(l.out_shape().h) * static_cast<double>(l.out_shape().w) *
         static_cast<double>(l.in_shape().c) * taps * sizeof(T);
  if (l.type() == LayerType::maxpool) b += size_of(l.out_shape()) * sizeof(std::int32_t);
  return b;
}

/// A layer's J^T: values per sample (not shared by the batch), and what is held once
/// (shared values, the CSR pattern and its index map). Upper bounds (padding and masks only
/// remove entries).
struct JacobianBytes {
  double per_sample = 0, shared = 0;
};
template <class T>
JacobianBytes jacobian_bytes(const Layer<T>& l) {
  const double taps = static_cast<double>(l.spec().window.kh) * static_cast<double>(l.spec().window.kw);
  const double in = size_of(l.in_shape()), out = size_of(l.out_shape()), index = sizeof(std::int32_t);
  switch (l.type()) {
    case LayerType::conv: {
      const double nnz = out * static_cast<double>(l.in_shape().c) * taps;
      return {0, nnz * (sizeof(T) + 2 * index) + in * index};
    }
    case LayerType::maxpool:
      return {out * taps * sizeof(T), out * taps * index + in * index};
    case LayerType::avgpool:
      return {0, out * taps * (sizeof(T) + index) + in * index};
    case LayerType::relu:
    case LayerType::tanh:
      return {in * sizeof(T), 0};
    case LayerType::linear:
      return {0, in * out * sizeof(T)};
    case LayerType::flatten:
      break;
  }
  return {};
}

/// What a forward of `batch` samples keeps: the input and, per layer, forward_bytes_per_sample.
template <class T>
double forward_bytes(const std::vector<std::unique_ptr<Layer<T>>>& layers, const Shape3& input, Index batch) {
  double per_sample = size_of(input) * (sizeof(T) + sizeof(float));  // act_[0] and the caller's float batch
  for (const auto& l : layers) per_sample += forward_bytes_per_sample(*l);
  return per_sample * static_cast<double>(batch);
}

/// BP's gradients ∂ℓ/∂(output of every layer) for `batch` samples.
template <class T>
double bp_grad_bytes(const std::vector<std::unique_ptr<Layer<T>>>& layers, Index batch) {
  double per_sample = 0;
  for (const auto& l : layers) per_sample += size_of(l->out_shape()) * sizeof(T);
  return per_sample * static_cast<double>(batch);
}

}  // namespace

/// One batch size's scan: the chain (layouts fixed, values rewritten every step), the scanner
/// that keeps its plan (symbolic SpGEMM included) and the gradients.
template <class T>
struct ConvNet<T>::Scan {
  explicit Scan(Index batch) : chain(batch) {}
  Chain<T> chain;
  Scanner<T> scanner;
  Gradients<T> grads;
};

template <class T>
ConvNet<T>::ConvNet(ConvNetConfig config) : config_(std::move(config)) {
  if (config_.layers.empty()) detail::raise<InvalidArgument>("cnn", "the architecture has no layers");
  Shape3 shape = config_.input;
  bool flat = false;
  double weights = 0;
  for (std::size_t i = 0; i < config_.layers.size(); ++i) {
    const LayerSpec& spec = config_.layers[i];
    const std::string where = "layer " + std::to_string(i) + " (" + spec.str() + ")";
    weights += layer_weights(spec, shape);
    check_memory("cnn", "the network " + describe(config_) + " up to " + where,
                 {{"weights and their gradients", 2 * weights * sizeof(T)}},
                 "use fewer or narrower layers (e.g. vgg11/8) or a smaller input");
    layers_.push_back(make_layer<T>(spec, shape, flat, where));
    shape = layers_.back()->out_shape();
    flat = flat || spec.type == LayerType::flatten || spec.type == LayerType::linear;
    if (i > 0 && layers_.back()->has_jacobian()) chain_layers_.push_back(static_cast<Index>(i));
  }
  if (!flat)
    detail::raise<ShapeError>("cnn", "the network's output is " + shape.str() +
                                         ", not a vector of class scores: end the architecture with flatten and "
                                         "linear:CLASSES");
  act_.resize(layers_.size() + 1);
}

template <class T>
ConvNet<T>::~ConvNet() = default;
template <class T>
ConvNet<T>::ConvNet(ConvNet&&) noexcept = default;
template <class T>
ConvNet<T>& ConvNet<T>::operator=(ConvNet&&) noexcept = default;

template <class T>
void ConvNet<T>::reset_parameters(std::uint64_t seed) {
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i]->reset_parameters(detail::mix_seed(seed, i));
}

template <class T>
void ConvNet<T>::forward(std::span<const float> x, Index batch, std::span<const std::int64_t> labels) {
  const char* op = "cnn";
  const Index n = config_.input.size();
  if (batch < 1) detail::raise<ShapeError>(op, "need at least one sample (got batch " + std::to_string(batch) + ")");
  if (static_cast<Index>(x.size()) != batch * n)
    detail::raise<ShapeError>(op, "input holds " + std::to_string(x.size()) + " values, expected [" +
                                      std::to_string(batch) + ", " + std::to_string(config_.input.c) + ", " +
                                      std::to_string(config_.input.h) + ", " + std::to_string(config_.input.w) +
                                      "] = " + std::to_string(batch * n));
  if (static_cast<Index>(labels.size()) != batch)
    detail::raise<ShapeError>(op, std::to_string(labels.size()) + " labels for a batch of " + std::to_string(batch));
  check_memory(op, "a forward pass of batch " + std::to_string(batch) + " through " + describe(config_),
               {{"activations", forward_bytes(layers_, config_.input, batch)}},
               "use a smaller --batch or a smaller network");
  act_[0] = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>>(x.data(), n, batch).cast<T>();
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i]->forward(act_[i], act_[i + 1], 0);
}

namespace {
template <class T>
void argmax_columns(const Matrix<T>& logits, std::vector<std::int64_t>* predictions) {
  if (!predictions) return;
  predictions->resize(static_cast<std::size_t>(logits.cols()));
  for (Index b = 0; b < logits.cols(); ++b) {
    Index best = 0;
    logits.col(b).maxCoeff(&best);
    (*predictions)[static_cast<std::size_t>(b)] = best;
  }
}
}  // namespace

template <class T>
T ConvNet<T>::evaluate(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                       std::vector<std::int64_t>* predictions) {
  forward(x, batch, labels);
  batch_ = 0;
  const T l = loss<T>(config_.loss, act_.back(), labels, nullptr);
  argmax_columns(act_.back(), predictions);
  return l;
}

template <class T>
T ConvNet<T>::forward_loss(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                           std::vector<std::int64_t>* predictions) {
  forward(x, batch, labels);
  const T l = loss<T>(config_.loss, act_.back(), labels, &dlogits_);
  argmax_columns(act_.back(), predictions);
  batch_ = batch;
  return l;
}

template <class T>
typename ConvNet<T>::Scan& ConvNet<T>::scan_for(Index batch) {
  auto& s = scans_[batch];
  if (!s) {
    // The chain, before it is made: Jacobians of every chained layer for this batch, the scan's
    // gradients, the forward it runs with, and the chains other batch sizes already hold.
    double jacobians = 0, grads = size_of(config_.input), held = 0;
    for (Index li : chain_layers_) {
      const Layer<T>& l = *layers_[static_cast<std::size_t>(li)];
      const JacobianBytes j = jacobian_bytes(l);
      jacobians += j.per_sample * static_cast<double>(batch) + j.shared;
      grads += size_of(l.out_shape());
    }
    for (const auto& [b, other] : scans_)
      if (other)
        for (Index k = 1; k <= other->chain.size(); ++k)
          held += static_cast<double>(other->chain.jacobian(k).values().size()) * sizeof(T);
    check_memory("cnn", "the BPPSA scan of batch " + std::to_string(batch) + " through " + describe(config_),
                 {{"Jacobians", jacobians},
                  {"gradients", grads * static_cast<double>(batch) * sizeof(T)},
                  {"activations", forward_bytes(layers_, config_.input, batch)},
                  {"chains of other batch sizes", held}},
                 "use a smaller --batch, or --backward bp (which stores no Jacobians)");
    s = std::make_unique<Scan>(batch);
    for (Index li : chain_layers_) s->chain.push_back(layers_[static_cast<std::size_t>(li)]->make_jacobian(batch));
  }
  return *s;
}

template <class T>
void ConvNet<T>::backward(const BackwardOptions& options, BackwardTimes* times) {
  if (batch_ == 0)
    detail::raise<InvalidArgument>("ConvNet::backward",
                                   "no loss to differentiate: call forward_loss (or loss_and_grad) first");
  require_cpu_method(options.method, "ConvNet::backward");
  const int threads = resolve_threads(options.threads);
  const auto L = static_cast<Index>(layers_.size());
  BackwardTimes bt;
  if (resolve_backward(options, batch_) == BackwardMethod::bp || chain_layers_.empty()) {
    // Sequential BP: one vector-Jacobian product per layer, parameter gradients on the way.
    check_memory("cnn", "the BP backward of batch " + std::to_string(batch_) + " through " + describe(config_),
                 {{"gradients", bp_grad_bytes(layers_, batch_)},
                  {"activations", forward_bytes(layers_, config_.input, batch_)}},
                 "use a smaller --batch or a smaller network");
    grad_.resize(layers_.size());
    grad_.back() = dlogits_;
    for (Index i = L - 1; i >= 0; --i) {
      const auto u = static_cast<std::size_t>(i);
      double t0 = omp_get_wtime();
      layers_[u]->param_grads(act_[u], grad_[u], threads);
      double t1 = omp_get_wtime();
      if (i > 0) layers_[u]->backward_input(act_[u], act_[u + 1], grad_[u], grad_[u - 1], threads);
      bt.params += t1 - t0;
      bt.scan += omp_get_wtime() - t1;
    }
  } else {
    Scan& s = scan_for(batch_);
    double t0 = omp_get_wtime();
    for (Index k = 1; k <= s.chain.size(); ++k) {
      const auto li = static_cast<std::size_t>(chain_layers_[static_cast<std::size_t>(k - 1)]);
      layers_[li]->fill_jacobian(act_[li], act_[li + 1], s.chain.jacobian(k), threads);
    }
    double t1 = omp_get_wtime();
    ScanOptions so = scan_options(options);
    so.threads = threads;
    s.scanner.set_options(so);
    try {
      bt.last_scan = s.scanner.run(s.chain, dlogits_, s.grads);
    } catch (const NonFiniteError&) {  // the scan's own advice is for library users; a trainer's is BP's
      detail::raise<NonFiniteError>("ConvNet::backward", "layer gradients are not finite (NaN/Inf): the loss or the "
                                                         "weights diverged; lower the learning rate");
    }
    double t2 = omp_get_wtime();
    // ∂ℓ/∂(output of layer i) is g_k with k the number of chained layers up to i.
    Index k = 0;
    for (Index i = 0; i < L; ++i) {
      while (k < s.chain.size() && chain_layers_[static_cast<std::size_t>(k)] <= i) ++k;
      layers_[static_cast<std::size_t>(i)]->param_grads(act_[static_cast<std::size_t>(i)], s.grads.g(k), threads);
    }
    bt.jacobians = t1 - t0;
    bt.scan = t2 - t1;
    bt.params = omp_get_wtime() - t2;
  }
  if (times) *times = bt;
}

template <class T>
T ConvNet<T>::loss_and_grad(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                            const BackwardOptions& options, StepTimes* times, std::vector<std::int64_t>* predictions) {
  const double t0 = omp_get_wtime();
  const T l = forward_loss(x, batch, labels, predictions);
  const double t1 = omp_get_wtime();
  BackwardTimes bt;
  backward(options, &bt);
  if (times) {
    times->forward = t1 - t0;
    times->backward = omp_get_wtime() - t1;
    times->detail = bt;
  }
  return l;
}

template <class T>
std::vector<NamedParam<T>> ConvNet<T>::parameters() {
  std::vector<NamedParam<T>> out;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (const ParamRef<T>& p : layers_[i]->params())
      out.push_back({std::to_string(i) + "." + p.suffix, p.shape, p.value, p.grad, p.size});
  return out;
}

template <class T>
TensorFile ConvNet<T>::state_dict() const {
  TensorFile f = params_to_tensors(const_cast<ConvNet<T>*>(this)->parameters());
  f.metadata["bppsa.model"] = "cnn";
  f.metadata["bppsa.arch"] = arch_string(config_.layers);
  f.metadata["bppsa.input"] = std::to_string(config_.input.c) + "x" + std::to_string(config_.input.h) + "x" +
                              std::to_string(config_.input.w);
  f.metadata["bppsa.loss"] = to_string(config_.loss);
  return f;
}

template <class T>
void ConvNet<T>::load_state_dict(const TensorFile& file) {
  load_params(file, parameters(), describe(config_));
  apply_masks();
}

template <class T>
void ConvNet<T>::set_masks(const std::vector<std::vector<std::uint8_t>>& masks) {
  if (masks.size() != layers_.size())
    detail::raise<ShapeError>("prune", std::to_string(masks.size()) + " masks for " +
                                           std::to_string(layers_.size()) + " layers");
  for (std::size_t i = 0; i < layers_.size(); ++i)
    if (!masks[i].empty() || !layers_[i]->mask().empty()) layers_[i]->set_mask(masks[i]);
  scans_.clear();  // the patterns changed: new chains and plans
}

template <class T>
void ConvNet<T>::apply_masks() {
  for (auto& l : layers_) l->apply_mask();
}

template <class T>
const Chain<T>& ConvNet<T>::chain(Index batch) {
  return scan_for(batch).chain;
}

template <class T>
Index ConvNet<T>::chain_layer(Index k) const {
  if (k < 1 || k > static_cast<Index>(chain_layers_.size()))
    detail::raise<InvalidArgument>("cnn", "chain element " + std::to_string(k) + " is outside 1.." +
                                              std::to_string(chain_layers_.size()));
  return chain_layers_[static_cast<std::size_t>(k - 1)];
}

ConvNetConfig convnet_config_from_state_dict(const TensorFile& file) {
  const char* op = "cnn";
  ConvNetConfig c;
  const std::string arch = file.metadata_or("bppsa.arch", "");
  const std::string input = file.metadata_or("bppsa.input", "");
  if (arch.empty() || input.empty())
    detail::raise<FormatError>(op, file.source + " does not record the architecture (metadata bppsa.arch and "
                                                 "bppsa.input, written by bppsa train --model cnn); pass --arch");
  c.layers = parse_arch(arch);
  Index v[3] = {0, 0, 0};
  if (std::sscanf(input.c_str(), "%ldx%ldx%ld", &v[0], &v[1], &v[2]) != 3 || v[0] < 1 || v[1] < 1 || v[2] < 1)
    detail::raise<FormatError>(op, file.source + ": metadata bppsa.input '" + input + "' is not CxHxW");
  c.input = {v[0], v[1], v[2]};
  c.loss = parse_loss(file.metadata_or("bppsa.loss", "ce"));
  return c;
}

template class ConvNet<float>;
template class ConvNet<double>;

}  // namespace bppsa
