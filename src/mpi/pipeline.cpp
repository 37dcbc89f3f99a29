// The model-parallel driver (bppsa/mpi/pipeline.hpp): topology, stage partition, the
// configuration handshake, the forward pipeline, both backward modes, gradient reduction
// and checkpoint assembly.
#include "bppsa/mpi/pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iterator>
#include <numeric>
#include <sstream>

#include "bppsa/core/error.hpp"
#include "mpi/stage.hpp"

namespace bppsa::mpi {

const char* to_string(PipelineBackward b) { return b == PipelineBackward::bp ? "bp" : "bppsa"; }

PipelineBackward parse_pipeline_backward(std::string_view name) {
  if (name == "bp") return PipelineBackward::bp;
  if (name == "bppsa") return PipelineBackward::bppsa;
  throw InvalidArgument("[model-parallel] unknown backward '" + std::string(name) + "'; use bp or bppsa");
}

std::vector<Index> partition_stages(std::span<const double> costs, int stages, const std::string& units) {
  const auto n = static_cast<Index>(costs.size());
  if (stages < 1 || n < stages)
    throw InvalidArgument("[model-parallel] " + std::to_string(stages) + " stages need at least as many " + units +
                          ", but the model has " + std::to_string(n) + ": run fewer ranks (-np) or more --replicas");
  // Binary search on the largest stage cost; a greedy pass (each stage takes units while
  // they fit, leaving one for every later stage) decides whether a cap is feasible.
  auto pack = [&](double cap, std::vector<Index>& bounds) {
    bounds.assign(1, 0);
    Index i = 0;
    for (int s = 0; s < stages; ++s) {
      const Index limit = n - (stages - 1 - s);  // later stages keep at least one unit each
      double sum = costs[static_cast<std::size_t>(i++)];
      while (i < limit && (s == stages - 1 || sum + costs[static_cast<std::size_t>(i)] <= cap))
        sum += costs[static_cast<std::size_t>(i++)];
      if (sum > cap) return false;
      bounds.push_back(i);
    }
    return true;
  };
  std::vector<Index> bounds;
  double lo = *std::max_element(costs.begin(), costs.end()), hi = std::accumulate(costs.begin(), costs.end(), 0.0);
  for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (pack(mid, bounds) ? hi : lo) = mid;
  }
  pack(hi * (1 + 1e-12), bounds);
  return bounds;
}

namespace {

constexpr int kForwardTag = 1000;   // + micro-batch
constexpr int kBackwardTag = 3000;  // + micro-batch
constexpr int kScanTag = 5000;      // + 64·pass + level
constexpr int kGatherTag = 9000;

/// Multiply-adds of one sample through each layer: what the stage partition balances.
std::vector<double> layer_costs(const ConvNetConfig& config) {
  ConvNet<float> probe(config);
  std::vector<double> c;
  for (Index i = 0; i < probe.size(); ++i) {
    const Layer<float>& l = probe.layer(i);
    double work = static_cast<double>(l.out_shape().size());
    if (l.type() == LayerType::conv)
      work *= static_cast<double>(l.in_shape().c * l.spec().window.kh * l.spec().window.kw);
    else if (l.type() == LayerType::linear)
      work *= static_cast<double>(l.in_shape().size());
    c.push_back(std::max(1.0, work));
  }
  return c;
}

/// Activations and gradients travel as one constant transfer (the scan's wire format).
template <class T>
std::vector<std::byte> encode_matrix(const Matrix<T>& m) {
  const std::vector<Transfer<T>> t{Transfer<T>::vector(m)};
  return encode<T>(t);
}
template <class T>
Matrix<T> decode_matrix(std::span<const std::byte> b) {
  auto t = decode<T>(b);
  if (t.size() != 1 || !t[0].constant) throw CommError("[model-parallel] malformed activation or gradient message");
  return std::move(*t[0].v);
}

}  // namespace

template <class T>
ModelParallel<T>::ModelParallel(const Comm& world, ConvNetConfig config, PipelineOptions options)
    : world_(world), pipe_(world), data_(world), options_(std::move(options)) {
  init(describe(config));
  const std::vector<double> costs = layer_costs(config);
  bounds_ = partition_stages(costs, stages_, "layers");
  impl_ = detail::make_cnn_stage<T>(config, bounds_[static_cast<std::size_t>(stage_)],
                                    bounds_[static_cast<std::size_t>(stage_) + 1], stage_ == stages_ - 1,
                                    options_.threads);
}

template <class T>
ModelParallel<T>::ModelParallel(const Comm& world, ModelConfig config, Index steps, PipelineOptions options)
    : world_(world), pipe_(world), data_(world), options_(std::move(options)) {
  init(describe(config) + " steps=" + std::to_string(steps));
  const std::vector<double> costs(static_cast<std::size_t>(std::max<Index>(steps, 0)), 1.0);
  bounds_ = partition_stages(costs, stages_, "time steps");
  impl_ = detail::make_rnn_stage<T>(config, steps, bounds_[static_cast<std::size_t>(stage_)],
                                    bounds_[static_cast<std::size_t>(stage_) + 1], stage_ == stages_ - 1,
                                    options_.threads);
}

template <class T>
ModelParallel<T>::~ModelParallel() = default;

template <class T>
void ModelParallel<T>::init(const std::string& model) {
  const int world_size = world_.size();
  if (options_.replicas < 1) throw InvalidArgument("[model-parallel] --replicas must be ≥ 1");
  if (options_.micro_batches < 1) throw InvalidArgument("[model-parallel] --micro-batches must be ≥ 1");
  stages_ = options_.stages > 0 ? options_.stages : world_size / options_.replicas;
  replicas_ = options_.replicas;
  if (stages_ < 1 || stages_ * replicas_ != world_size)
    throw InvalidArgument("[model-parallel] " + std::to_string(world_size) + " ranks cannot be " +
                          std::to_string(stages_) + " stages × " + std::to_string(replicas_) +
                          " replicas: start stages × replicas ranks (mpirun -np)");
  stage_ = world_.rank() % stages_;
  replica_ = world_.rank() / stages_;
  pipe_ = world_.split(replica_, stage_);
  data_ = world_.split(stage_, replica_);

  // Handshake: every rank must run the same model and options, or the first message would
  // be misread (or never come). Rank 0's description goes to all; each rank compares.
  std::ostringstream fp;
  fp << model << " | stages=" << stages_ << " replicas=" << replicas_ << " micro-batches=" << options_.micro_batches
     << " backward=" << to_string(options_.backward) << " scan=" << to_string(options_.scan)
     << " scalar=" << sizeof(T) << " | " << options_.job;
  const std::string mine = fp.str();
  const std::string root = to_string(world_.broadcast(to_bytes(mine), 0, "the job configuration"));
  std::vector<std::int64_t> differs(static_cast<std::size_t>(world_size), 0);
  differs[static_cast<std::size_t>(world_.rank())] = mine != root;
  world_.allreduce_max(differs, "configuration check");
  std::string ranks;
  for (int r = 0; r < world_size; ++r)
    if (differs[static_cast<std::size_t>(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty()) {
    // The words (flag=value, stages=K) where this rank and rank 0 differ, first: the lines are long.
    std::istringstream a(root), b(mine);
    const std::vector<std::string> theirs{std::istream_iterator<std::string>(a), {}},
        ours{std::istream_iterator<std::string>(b), {}};
    std::string differ;
    for (const std::string& w : ours)
      if (std::find(theirs.begin(), theirs.end(), w) == theirs.end()) differ += " " + w;
    throw CommError("[model-parallel] the ranks were started with different configurations (rank(s) " + ranks +
                    " differ from rank 0" + (differ.empty() ? std::string() : "; this rank has" + differ) +
                    "): every rank must get the same flags and data.\n  rank 0:    " + root +
                    "\n  this rank: " + mine);
  }
}

template <class T>
std::pair<Index, Index> ModelParallel<T>::owned() const {
  return {bounds_[static_cast<std::size_t>(stage_)], bounds_[static_cast<std::size_t>(stage_) + 1]};
}

template <class T>
std::string ModelParallel<T>::describe_stage() const {
  const auto [a, b] = owned();
  return std::string(impl_->shared_weights() ? "steps " : "layers ") + std::to_string(a) + "–" +
         std::to_string(b - 1) + " of " + std::to_string(bounds_.back());
}

template <class T>
void ModelParallel<T>::reset_parameters(std::uint64_t seed) {
  impl_->reset_parameters(seed);
}

template <class T>
void ModelParallel<T>::load_state_dict(const TensorFile& file) {
  impl_->load_state_dict(file);
}

template <class T>
void ModelParallel<T>::gather(bool grads, const std::function<void(const NamedParam<T>&, const T*)>& take) {
  const std::string what = grads ? "gradients" : "parameters";
  auto mine = parameters();
  if (world_.rank() == 0)
    for (const auto& p : mine) take(p, grads ? p.grad : p.value);
  // A CNN's stages own disjoint layers: replica 0's stage owners send theirs to world rank 0
  // (replica 0's stage 0). A recurrent model's ranks all hold every parameter.
  if (impl_->shared_weights() || replica_ != 0) return;
  if (stage_ > 0) {
    std::vector<std::byte> bytes;
    for (const auto& p : mine) {
      const auto* b = reinterpret_cast<const std::byte*>(grads ? p.grad : p.value);
      bytes.insert(bytes.end(), b, b + static_cast<std::size_t>(p.size) * sizeof(T));
    }
    pipe_.send(bytes, 0, kGatherTag, "stage " + std::to_string(stage_) + "'s " + what);
    return;
  }
  for (int s = 1; s < stages_; ++s) {
    const auto bytes = pipe_.recv(s, kGatherTag, "stage " + std::to_string(s) + "'s " + what);
    const auto params = impl_->params(0, bounds_[static_cast<std::size_t>(s)], bounds_[static_cast<std::size_t>(s) + 1]);
    std::size_t need = 0;
    for (const auto& p : params) need += static_cast<std::size_t>(p.size) * sizeof(T);
    if (need != bytes.size())
      throw CommError("[model-parallel] stage " + std::to_string(s) + " sent " + std::to_string(bytes.size()) +
                      " bytes of " + what + ", expected " + std::to_string(need) + ": the ranks disagree about the model");
    std::vector<T> values(need / sizeof(T));
    if (need > 0) std::memcpy(values.data(), bytes.data(), need);  // a stage of parameter-free layers sends none
    std::size_t off = 0;
    for (const auto& p : params) {
      take(p, values.data() + off);
      off += static_cast<std::size_t>(p.size);
    }
  }
}

template <class T>
TensorFile ModelParallel<T>::state_dict() {
  // Rank 0 copies every stage's current values into its own (slot 0) model, then writes that.
  gather(false, [](const NamedParam<T>& p, const T* v) {
    if (v != p.value) std::copy(v, v + p.size, p.value);
  });
  return world_.rank() == 0 ? impl_->state_dict() : TensorFile{};
}

template <class T>
TensorFile ModelParallel<T>::gradients() {
  TensorFile f;
  gather(true, [&](const NamedParam<T>& p, const T* g) {
    std::vector<float> v(g, g + p.size);
    f.tensors[p.name] = Tensor::from_f32(v, p.shape);
  });
  return f;
}

template <class T>
std::vector<NamedParam<T>> ModelParallel<T>::parameters() {
  auto [a, b] = owned();
  auto params = impl_->params(0, a, b);
  if (grads_.size() == params.size())
    for (std::size_t i = 0; i < params.size(); ++i) params[i].grad = grads_[i].data();
  return params;
}

template <class T>
void ModelParallel<T>::parameters_changed() {
  auto [a, b] = owned();
  const auto from = impl_->params(0, a, b);
  for (int m = 1; m < options_.micro_batches; ++m) detail::copy_values(from, impl_->params(m, a, b));
}

namespace {
/// This replica's share of a batch, then its micro-batches: [first, last) sample ranges.
std::vector<std::pair<Index, Index>> micro_ranges(Index batch, int replicas, int replica, int micro) {
  const Index r0 = batch * replica / replicas, r1 = batch * (replica + 1) / replicas;
  if (r1 - r0 < micro)
    throw InvalidArgument("[model-parallel] a batch of " + std::to_string(batch) + " cannot feed " +
                          std::to_string(replicas) + " replica(s) × " + std::to_string(micro) +
                          " micro-batches with at least one sample each: raise --batch or lower --micro-batches");
  std::vector<std::pair<Index, Index>> out;
  for (int m = 0; m < micro; ++m) out.push_back({r0 + (r1 - r0) * m / micro, r0 + (r1 - r0) * (m + 1) / micro});
  return out;
}

/// The mean of the lengths over the whole batch (0 without lengths: see detail::Micro).
double mean_length(std::span<const Index> lengths) {
  double sum = 0;
  for (const Index n : lengths) sum += static_cast<double>(n);
  return lengths.empty() ? 0.0 : sum / static_cast<double>(lengths.size());
}
}  // namespace

template <class T>
T ModelParallel<T>::forward_loss(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                                 std::span<const Index> lengths) {
  if (batch < 1 || static_cast<Index>(labels.size()) != batch || x.size() % static_cast<std::size_t>(batch) != 0)
    throw ShapeError("[model-parallel] " + std::to_string(x.size()) + " input values and " +
                     std::to_string(labels.size()) + " labels do not make a batch of " + std::to_string(batch));
  impl_->check_lengths(lengths, batch);
  const double mean = mean_length(lengths);
  const Index per_sample = static_cast<Index>(x.size()) / batch;
  const auto ranges = micro_ranges(batch, replicas_, replica_, options_.micro_batches);
  impl_->ensure_slots(options_.micro_batches);
  double loss_sum = 0;
  Index correct = 0;
  for (int m = 0; m < options_.micro_batches; ++m) {
    const auto [s0, s1] = ranges[static_cast<std::size_t>(m)];
    const detail::Micro mb{x.data() + s0 * per_sample, labels.data() + s0, s1 - s0,
                           lengths.empty() ? nullptr : lengths.data() + s0, mean};
    Matrix<T> in;
    if (stage_ > 0)
      in = decode_matrix<T>(pipe_.recv(stage_ - 1, kForwardTag + m, "the activations of micro-batch " + std::to_string(m)));
    Matrix<T> out = impl_->forward(m, mb, stage_ > 0 ? &in : nullptr, true,
                                   static_cast<double>(s1 - s0) / static_cast<double>(batch), &loss_sum, &correct);
    if (stage_ < stages_ - 1)
      pipe_.post_send(encode_matrix(out), stage_ + 1, kForwardTag + m,
                      "the activations of micro-batch " + std::to_string(m));
  }
  pipe_.finish_sends();
  micro_used_ = options_.micro_batches;
  double total[2] = {loss_sum, static_cast<double>(correct)};  // one all-reduce: the loss and the correct count
  world_.allreduce_sum(std::span<double>(total, 2), "loss");
  last_correct_ = static_cast<Index>(total[1] + 0.5);
  return static_cast<T>(total[0]);
}

template <class T>
void ModelParallel<T>::backward(PipelineStats* stats) {
  if (micro_used_ == 0) throw InvalidArgument("[model-parallel] backward needs a forward_loss first");
  PipelineStats st;
  st.backward_start = Comm::now();
  const int M = static_cast<int>(micro_used_);
  if (options_.backward == PipelineBackward::bp) {
    // The baseline: gradients hop stage to stage; micro-batches pipeline behind each other.
    for (int m = 0; m < M; ++m) {
      Matrix<T> g;
      if (stage_ < stages_ - 1) {
        g = decode_matrix<T>(pipe_.recv(stage_ + 1, kBackwardTag + m, "the gradient of micro-batch " + std::to_string(m)));
        ++st.rounds;
      }
      Matrix<T> g_in = impl_->backward_bp(m, stage_ < stages_ - 1 ? &g : nullptr);
      if (stage_ > 0) {
        auto bytes = encode_matrix(g_in);
        st.bytes_sent += static_cast<std::int64_t>(bytes.size());
        pipe_.post_send(std::move(bytes), stage_ - 1, kBackwardTag + m, "the gradient of micro-batch " + std::to_string(m));
      }
    }
    pipe_.finish_sends();
  } else {
    for (int p = 0; p < impl_->passes(); ++p) {
      std::vector<Transfer<T>> mine;
      for (int m = 0; m < M; ++m) mine.push_back(impl_->transfer(m, p));
      RankScanStats rs;
      auto incoming = exclusive_scan(pipe_, std::move(mine), options_.scan, kScanTag + 64 * p, &rs);
      st.rounds += rs.rounds;
      st.bytes_sent += rs.bytes_sent;
      for (int m = 0; m < static_cast<int>(incoming.size()); ++m) impl_->push(m, p, incoming[static_cast<std::size_t>(m)]);
    }
  }
  st.backward_end = Comm::now();
  st.backward = st.backward_end - st.backward_start;
  if (stats) *stats = st;
}

template <class T>
void ModelParallel<T>::reduce_gradients() {
  auto [a, b] = owned();
  const auto first = impl_->params(0, a, b);
  grads_.resize(first.size());
  for (std::size_t i = 0; i < first.size(); ++i) grads_[i].assign(first[i].grad, first[i].grad + first[i].size);
  for (int m = 1; m < static_cast<int>(micro_used_); ++m) {
    const auto ps = impl_->params(m, a, b);
    for (std::size_t i = 0; i < ps.size(); ++i)
      for (Index j = 0; j < ps[i].size; ++j) grads_[i][static_cast<std::size_t>(j)] += ps[i].grad[j];
  }
  // One flat buffer per all-reduce: replicas of a stage always; all stages too when the
  // stages share the weights (a recurrent model's time steps).
  std::vector<T> flat;
  for (const auto& g : grads_) flat.insert(flat.end(), g.begin(), g.end());
  const Comm& group = impl_->shared_weights() ? world_ : data_;
  if (group.size() > 1) group.allreduce_sum(std::span<T>(flat), "parameter gradients");
  std::size_t off = 0;
  for (auto& g : grads_) {
    std::copy(flat.begin() + static_cast<std::ptrdiff_t>(off), flat.begin() + static_cast<std::ptrdiff_t>(off + g.size()), g.begin());
    off += g.size();
  }
}

template <class T>
T ModelParallel<T>::loss_and_grad(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                                  PipelineStats* stats, std::span<const Index> lengths) {
  const double t0 = Comm::now();
  const T l = forward_loss(x, batch, labels, lengths);
  const double t1 = Comm::now();
  PipelineStats st;
  backward(&st);
  const double t2 = Comm::now();
  reduce_gradients();
  st.forward = t1 - t0;
  st.reduce = Comm::now() - t2;
  if (stats) *stats = st;
  return l;
}

template <class T>
std::pair<double, Index> ModelParallel<T>::evaluate(std::span<const float> x, Index batch,
                                                    std::span<const std::int64_t> labels,
                                                    std::span<const Index> lengths) {
  if (batch < 1 || static_cast<Index>(labels.size()) != batch || x.size() % static_cast<std::size_t>(batch) != 0)
    throw ShapeError("[model-parallel] evaluation input does not make a batch of " + std::to_string(batch));
  impl_->check_lengths(lengths, batch);
  const Index per_sample = static_cast<Index>(x.size()) / batch;
  // Replicas split the batch; no micro-batching (nothing to overlap with a backward).
  const Index r0 = batch * replica_ / replicas_, r1 = batch * (replica_ + 1) / replicas_;
  double loss_sum = 0;
  Index correct = 0;
  if (r1 > r0) {
    const detail::Micro mb{x.data() + r0 * per_sample, labels.data() + r0, r1 - r0,
                           lengths.empty() ? nullptr : lengths.data() + r0, mean_length(lengths)};
    Matrix<T> in;
    if (stage_ > 0) in = decode_matrix<T>(pipe_.recv(stage_ - 1, kForwardTag, "evaluation activations"));
    Matrix<T> out = impl_->forward(0, mb, stage_ > 0 ? &in : nullptr, false, static_cast<double>(r1 - r0), &loss_sum,
                                   &correct);
    if (stage_ < stages_ - 1) pipe_.send(encode_matrix(out), stage_ + 1, kForwardTag, "evaluation activations");
  }
  micro_used_ = 0;  // slot 0's record is no longer a training forward
  double totals[2] = {loss_sum, static_cast<double>(correct)};
  world_.allreduce_sum(std::span<double>(totals, 2), "evaluation totals");
  return {totals[0], static_cast<Index>(totals[1] + 0.5)};
}

template class ModelParallel<float>;
template class ModelParallel<double>;

}  // namespace bppsa::mpi
