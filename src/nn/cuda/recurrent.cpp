// The CUDA half of Recurrent<T> (recurrent.hpp): device buffers per layer sized once per
// (steps, batch) and reused; the forward (the input projections of all steps as one cuBLAS
// GEMM, then one persistent kernel for the recurrence); the backward (the BP kernel, the fused
// chunked scan or the generic GPU scan for the state gradients, then the pre-activation
// gradients and every parameter gradient as GEMMs over all T·B columns, and W_ih^T·δ for the
// layer below); and the front's host-memory calls over them. Also the CUDA factory of the front.
#include "nn/cuda/recurrent.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <span>
#include <string>

#include "bppsa/core/device.hpp"
#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "jacobian/cuda/library.hpp"
#include "nn/cuda/blas.hpp"
#include "nn/cuda/classifier.hpp"
#include "nn/lengths.hpp"

namespace bppsa::detail::gpu {
namespace {

using cuda::DeviceBuffer;

/// The config, once a CUDA device is known to be there (DeviceError otherwise).
const RecurrentConfig& require_gpu(const RecurrentConfig& config) {
  if (cuda_device_count() == 0)
    raise<DeviceError>("Recurrent", "no CUDA device: Device::cuda needs an NVIDIA GPU and its driver (" +
                                        cuda_summary() + "); use Device::cpu (--device cpu)");
  return config;
}

int device_attribute(cudaDeviceAttr attr) {
  int device = 0, value = 0;
  BPPSA_CUDA_CHECK(cudaGetDevice(&device));
  BPPSA_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

/// BPPSA_CUDA_RECURRENCE: which persistent kernels a layer runs (auto, warp, block or cluster;
/// unset is auto), for comparisons.
std::string recurrence_choice() {
  const char* env = std::getenv("BPPSA_CUDA_RECURRENCE");
  const std::string v = env != nullptr ? env : "auto";
  if (v.empty()) return "auto";
  if (v != "auto" && v != "warp" && v != "block" && v != "cluster")
    raise<InvalidArgument>("Recurrent",
                           "BPPSA_CUDA_RECURRENCE is '" + v + "'; expected auto, warp, block or cluster (or unset it)");
  return v;
}

/// Whether a layer's persistent kernels (forward, BP) are the warp-per-sample ones: where its H
/// fits (warp_forward_max_hidden), unless BPPSA_CUDA_RECURRENCE says otherwise (auto: where it
/// fits; warp: everywhere, UnsupportedError where it does not fit; block, cluster: never).
template <class T>
bool use_warp_kernels(std::int32_t cell, Idx H) {
  const bool fits = H <= warp_forward_max_hidden<T>(cell);
  const std::string v = recurrence_choice();
  if (v == "auto") return fits;
  if (v != "warp") return false;
  if (!fits)
    raise<UnsupportedError>("Recurrent",
                            "BPPSA_CUDA_RECURRENCE=warp: the warp-per-sample kernels take a hidden size up "
                            "to " +
                                std::to_string(warp_forward_max_hidden<T>(cell)) +
                                " for this cell and precision, not " + std::to_string(H) +
                                "; unset it or set it to auto");
  return true;
}

template <class T>
void ensure(DeviceBuffer<T>& b, Idx n) {
  if (b.size() < static_cast<std::size_t>(n)) b = DeviceBuffer<T>(static_cast<std::size_t>(n));
}

/// Grows to their sizes the buffers that `for_each` names (it calls its argument with (buffer,
/// elements) for each). What must grow is freed first and its bytes passed to `check` (which throws
/// when the device lacks them), so that the check sees the memory it may reuse; the rest are kept.
template <class T, class ForEach, class Check>
void grow(ForEach&& for_each, Check&& check) {
  double need = 0;
  for_each([&](DeviceBuffer<T>& b, Idx n) {
    if (b.size() >= static_cast<std::size_t>(n)) return;
    b = DeviceBuffer<T>();
    need += static_cast<double>(n) * sizeof(T);
  });
  if (need > 0) check(need);
  for_each([](DeviceBuffer<T>& b, Idx n) { ensure(b, n); });
}

/// How Device::cuda computes a layer's state gradients for a backward method;
/// automatic: the fused scan, or bp when its plan has one chunk (RecurrentCuda::state_grads).
StateGrads state_grads_for(BackwardMethod m) {
  switch (m) {
    case BackwardMethod::bp:
      return StateGrads::bp;
    case BackwardMethod::linear:
    case BackwardMethod::blelloch:
    case BackwardMethod::hybrid:
      return StateGrads::generic;
    case BackwardMethod::fused:
    case BackwardMethod::automatic:
      return StateGrads::fused;
  }
  return StateGrads::fused;
}
/// The fused scan's plan as the scan statistics a backward reports (algorithm fused).
ScanStats fused_stats(const FusedScanStats& f) {
  ScanStats st;
  st.algorithm = Algorithm::fused;
  st.chunks = static_cast<int>(f.chunks);
  st.flops = f.flops;
  st.workspace_bytes = f.device_bytes;
  st.device = Device::cuda;
  st.launches = f.launches;
  return st;
}

}  // namespace

template <class T>
RecurrentCuda<T>::RecurrentCuda(const RecurrentConfig& config)
    : config_(require_gpu(config)),
      cell_(config.cell == CellType::gru                ? kGru
            : config.cell == CellType::lstm             ? kLstm
            : config.nonlinearity == Nonlinearity::relu ? kRnnRelu
                                                        : kRnnTanh),
      H_(config.hidden),
      GH_(gate_count(config.cell) * config.hidden),
      S_(state_size(config.cell, config.hidden)),
      sms_(device_attribute(cudaDevAttrMultiProcessorCount)),
      smem_optin_(device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin)) {
  blas_ = std::make_unique<BlasHandle>(run_stream_);
  Idx count = 0;
  layers_.resize(static_cast<std::size_t>(config.layers));
  for (Index l = 0; l < config.layers; ++l) {
    Layer& L = layers_[static_cast<std::size_t>(l)];
    L.input = l == 0 ? config.input : config.hidden;
    L.w_ih = count;
    L.w_hh = L.w_ih + GH_ * L.input;
    L.b_ih = L.w_hh + GH_ * H_;
    L.b_hh = L.b_ih + GH_;
    count = L.b_hh + GH_;
  }
  cuda::require_device_memory("Recurrent",
                              "the weights of a " + std::string(to_string(config.cell)) + " with hidden " +
                                  std::to_string(H_) + " and " + std::to_string(config.layers) + " layers",
                              {{"weights and their gradients", 2.0 * static_cast<double>(count) * sizeof(T)}},
                              "use a smaller --hidden or fewer --layers");
  params_ = DeviceBuffer<T>(static_cast<std::size_t>(count));
  grads_ = DeviceBuffer<T>(static_cast<std::size_t>(count));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(params_.data(), 0, params_.bytes(), run_stream_));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), run_stream_));
  status_ = DeviceBuffer<DeviceStatus>(1);
  const DeviceStatus fresh;
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(status_.data(), &fresh, sizeof fresh, cudaMemcpyHostToDevice, run_stream_));
  allow_persistent_smem<T>(smem_optin_);
  synchronize();
}

template <class T>
RecurrentCuda<T>::~RecurrentCuda() = default;

template <class T>
DeviceStatus RecurrentCuda<T>::read_status() {
  DeviceStatus s;
  BPPSA_CUDA_CHECK(cudaMemcpyAsync(&s, status_.data(), sizeof s, cudaMemcpyDeviceToHost, run_stream_));
  synchronize();
  return s;
}

template <class T>
void RecurrentCuda<T>::clear_flags() {
  DeviceStatus* d = status_.data();
  BPPSA_CUDA_CHECK(cudaMemsetAsync(&d->flags, 0, sizeof d->flags, run_stream_));
  BPPSA_CUDA_CHECK(cudaMemsetAsync(&d->bad_param, 0xFF, sizeof d->bad_param, run_stream_));
}

template <class T>
void RecurrentCuda<T>::to_device(T* dst, const T* host, Idx n) const {
  if (n == 0) return;
  BPPSA_CUDA_CHECK(
      cudaMemcpyAsync(dst, host, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyHostToDevice, run_stream_));
  synchronize();
}

template <class T>
void RecurrentCuda<T>::to_host(T* host, const T* src, Idx n) const {
  if (n == 0) return;
  BPPSA_CUDA_CHECK(
      cudaMemcpyAsync(host, src, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToHost, run_stream_));
  synchronize();
}

template <class T>
void RecurrentCuda<T>::upload_layers(const LayerParamsList<T>& host) {
  std::vector<T> all(params_.size());
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const auto& p = host[l];
    std::copy_n(p.w_ih.data(), p.w_ih.size(), all.data() + L.w_ih);
    std::copy_n(p.w_hh.data(), p.w_hh.size(), all.data() + L.w_hh);
    std::copy_n(p.b_ih.data(), p.b_ih.size(), all.data() + L.b_ih);
    std::copy_n(p.b_hh.data(), p.b_hh.size(), all.data() + L.b_hh);
  }
  to_device(params_.data(), all.data(), static_cast<Idx>(all.size()));
}

template <class T>
void RecurrentCuda<T>::download_layers(const DeviceBuffer<T>& packed, LayerParamsList<T>& host) const {
  std::vector<T> all(packed.size());
  to_host(all.data(), packed.data(), static_cast<Idx>(all.size()));
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    auto& p = host[l];
    std::copy_n(all.data() + L.w_ih, p.w_ih.size(), p.w_ih.data());
    std::copy_n(all.data() + L.w_hh, p.w_hh.size(), p.w_hh.data());
    std::copy_n(all.data() + L.b_ih, p.b_ih.size(), p.b_ih.data());
    std::copy_n(all.data() + L.b_hh, p.b_hh.size(), p.b_hh.data());
  }
}

template <class T>
void RecurrentCuda<T>::resize(Index steps, Index batch) {
  const char* op = "Recurrent::forward";
  const double TB = static_cast<double>(steps) * static_cast<double>(batch);
  if (TB * static_cast<double>(std::max<Idx>(GH_, config_.input)) > 4e18 || TB > 2147483647.0)
    raise<InvalidArgument>(op, std::to_string(steps) + " steps × batch " + std::to_string(batch) +
                                   " columns exceed what the GPU path indexes (2^31 − 1 columns); use a smaller "
                                   "batch or shorter sequences");
  const Idx T_ = steps, B = batch, TBi = steps * batch;
  const bool lstm = cell_ == kLstm, rnn = cell_ == kRnnTanh || cell_ == kRnnRelu;
  // No record until the buffers have their sizes: a failed check leaves some of them freed.
  steps_ = 0;
  batch_ = 0;
  has_len_ = false;  // lengths belong to a shape: set_lengths after resize
  // The forward record; ones_ is filled with 1 when it grows.
  const bool grew_ones = ones_.size() < static_cast<std::size_t>(TBi);
  grow<T>(
      [&](auto&& buffer) {
        buffer(x_, config_.input * TBi);
        buffer(ones_, TBi);
        for (Layer& L : layers_) {
          buffer(L.h, H_ * (T_ + 1) * B);
          if (lstm) buffer(L.c, H_ * (T_ + 1) * B);
          if (!rnn) buffer(L.gates, GH_ * TBi);
          if (!rnn) buffer(L.aux, H_ * TBi);
          buffer(L.ax, GH_ * TBi);
          buffer(L.w_col, GH_ * H_);
        }
      },
      [&](double need) {
        cuda::require_device_memory(op,
                                    "a forward pass of " + std::to_string(steps) + " steps × batch " +
                                        std::to_string(batch) + " through " + to_string(config_.cell) + " hidden " +
                                        std::to_string(H_) + " × " + std::to_string(config_.layers) + " layers",
                                    {{"forward record", need}},
                                    "use a smaller --batch, shorter sequences or a smaller --hidden");
      });
  if (grew_ones) launch_fill(ones_.data(), static_cast<Idx>(ones_.size()), T(1), run_stream_);
  steps_ = steps;
  batch_ = batch;
}

template <class T>
void RecurrentCuda<T>::set_lengths(std::span<const Index> lengths) {
  const char* op = "Recurrent::forward";
  has_len_ = false;
  if (lengths.empty()) return;
  check_sorted_lengths(op, lengths, batch_, steps_);
  if (lengths.back() == steps_) return;  // every sample runs every step: the plain path
  has_len_ = true;
  if (len_host_.size() == lengths.size() && std::equal(lengths.begin(), lengths.end(), len_host_.begin())) return;
  len_host_.clear();  // what len_ holds is unknown until the upload below is queued
  const std::vector<Idx> host(lengths.begin(), lengths.end());
  ensure(len_, static_cast<Idx>(host.size()));
  uploads_.upload(len_.data(), host.data(), host.size() * sizeof(Idx), run_stream_);
  len_host_ = host;
}

template <class T>
LayerArgs<T> RecurrentCuda<T>::args(Index l) {
  Layer& L = layers_[static_cast<std::size_t>(l)];
  LayerArgs<T> a;
  a.cell = cell_;
  a.H = H_;
  a.GH = GH_;
  a.S = S_;
  a.B = batch_;
  a.steps = steps_;
  a.b_ih = L.weights.b_ih;
  a.b_hh = L.weights.b_hh;
  a.ax = L.ax.data();
  a.h = L.h.data();
  a.c = L.c.data();
  a.gates = L.gates.data();
  a.aux = L.aux.data();
  a.g = L.g.data();
  a.dx = L.dx.data();
  a.dh = L.dh.data();
  a.len = device_lengths();
  return a;
}

template <class T>
void RecurrentCuda<T>::check_state_shape(const Matrix<T>& m, Index l, const char* what, const char* op) const {
  if (m.rows() != S_ || m.cols() != batch_)
    raise<ShapeError>(op, std::string(what) + " of layer " + std::to_string(l) + " is " +
                              shape_string(m.rows(), m.cols()) + ", expected " + shape_string(S_, batch_) +
                              " (state size × batch)");
}

template <class T>
DeviceLayerParams<T> RecurrentCuda<T>::arena_params(Index l) const {
  const Layer& L = layers_.at(static_cast<std::size_t>(l));
  const T* d = params_.data();
  return {d + L.w_ih, d + L.w_hh, d + L.b_ih, d + L.b_hh};
}

template <class T>
DeviceLayerGrads<T> RecurrentCuda<T>::grad_targets(Index l, const DeviceLayerGrads<T>& given) {
  const Layer& L = layers_.at(static_cast<std::size_t>(l));
  T* d = grads_.data();
  return {given.w_ih != nullptr ? given.w_ih : d + L.w_ih, given.w_hh != nullptr ? given.w_hh : d + L.w_hh,
          given.b_ih != nullptr ? given.b_ih : d + L.b_ih, given.b_hh != nullptr ? given.b_hh : d + L.b_hh};
}

template <class T>
void RecurrentCuda<T>::check_grad_targets(const DeviceLayerGrads<T>& g, Idx input) {
  for (const auto& [p, n] : {std::pair<const T*, Idx>{g.w_ih, GH_ * input}, std::pair<const T*, Idx>{g.w_hh, GH_ * H_},
                             std::pair<const T*, Idx>{g.b_ih, GH_}, std::pair<const T*, Idx>{g.b_hh, GH_}})
    launch_check_finite(p, n, kGradNotFinite, status_.data(), run_stream_);
}

template <class T>
void RecurrentCuda<T>::forward_device(const std::vector<DeviceState<T>>& s0, const T* x0,
                                      const DeviceLayerParams<T>* w0) {
  // The caller's input in place, unless its padding must be zeroed (lengths): then a copy.
  if (x0 != nullptr && has_len_) copy_input_device(x0);
  x0_ = x0 != nullptr && !has_len_ ? x0 : x_.data();
  for (Index l = 0; l < config_.layers; ++l) layers_[static_cast<std::size_t>(l)].weights = arena_params(l);
  if (w0 != nullptr) {
    if (w0->w_ih == nullptr || w0->w_hh == nullptr)
      raise<InvalidArgument>("Recurrent::forward", "a layer's weights in device memory need weight_ih and weight_hh");
    if ((w0->b_ih == nullptr || w0->b_hh == nullptr) && zeros_.size() < static_cast<std::size_t>(GH_)) {
      ensure(zeros_, GH_);  // once: a bias the caller leaves out reads zeros
      BPPSA_CUDA_CHECK(cudaMemsetAsync(zeros_.data(), 0, zeros_.bytes(), run_stream_));
    }
    layers_.front().weights = {w0->w_ih, w0->w_hh, w0->b_ih != nullptr ? w0->b_ih : zeros_.data(),
                               w0->b_hh != nullptr ? w0->b_hh : zeros_.data()};
  }
  const ForwardMethod asked = report_.method;  // set_forward_options's
  report_ = ForwardReport{};
  report_.method = asked;
  report_.ran.assign(static_cast<std::size_t>(config_.layers), ForwardMethod::sequential);
  report_.max_iterations.assign(static_cast<std::size_t>(config_.layers), 0);
  report_.iterations.assign(static_cast<std::size_t>(config_.layers), 0);
  report_.residual.assign(static_cast<std::size_t>(config_.layers), 0.0);
  report_.fell_back.assign(static_cast<std::size_t>(config_.layers), false);
  report_.fallback_step.assign(static_cast<std::size_t>(config_.layers), 0);
  forward_from([&](Index l, T* h, T* c) {
    const DeviceState<T> d =
        static_cast<std::size_t>(l) < s0.size() ? s0[static_cast<std::size_t>(l)] : DeviceState<T>{};
    copy_part(h, H_, d.h, d.ld);
    if (c != nullptr) copy_part(c, H_, d.c, d.ld);
  });
}

template <class T>
std::vector<DeviceState<T>> RecurrentCuda<T>::stage_states(const LayerMatrices<T>& host, const char* what,
                                                           const char* op, Index first) {
  std::vector<DeviceState<T>> d(host.size());
  if (std::all_of(host.begin(), host.end(), [](const Matrix<T>* m) { return m == nullptr; })) return d;
  const Idx n = S_ * batch_;
  ensure(staged_, n * static_cast<Idx>(host.size()));
  for (std::size_t l = 0; l < host.size(); ++l) {
    if (host[l] == nullptr) continue;
    check_state_shape(*host[l], first + static_cast<Index>(l), what, op);
    T* at = staged_.data() + static_cast<Idx>(l) * n;
    to_device(at, host[l]->data(), n);
    d[l] = {at, cell_ == kLstm ? at + H_ : nullptr, S_};  // S × B: h rows over c rows
  }
  return d;
}

template <class T>
template <class Init>
void RecurrentCuda<T>::forward_from(Init&& init) {
  const cudaStream_t s = run_stream_;
  const Idx B = batch_, TB = steps_ * batch_;
  for (Index l = 0; l < config_.layers; ++l) {
    Layer& L = layers_[static_cast<std::size_t>(l)];
    const T* x = l == 0 ? x0_ : layers_[static_cast<std::size_t>(l - 1)].h.data() + H_ * B;
    // The caller's padding is never used, but the parameter-gradient GEMMs read it (times zero):
    // zeros there (the layers above read zeros from the forward; layer 0 reads x_ then).
    if (l == 0 && has_len_) launch_zero_padding(x_.data(), config_.input, B, steps_, device_lengths(), s);
    run(blas_->get(), input_projection(GH_, L.input, TB, L.weights.w_ih, x, L.ax.data()));
    init(l, L.h.data(), cell_ == kLstm ? L.c.data() : nullptr);
    launch_transpose(L.weights.w_hh, GH_, H_, L.w_col.data(), s);
    LayerArgs<T> a = args(l);
    a.w = L.w_col.data();
    L.warp = use_warp_kernels<T>(cell_, H_);
    L.cluster = false;
    if (L.warp) {
      a.spb = warp_forward_spb(B, sms_);
      launch_forward_warp(a, s);
      continue;
    }
    const PersistentLaunch p = launch_for(H_, false);
    ClusterLaunch cl;
    L.cluster = cluster_plan(false, p.w_shared, cl);
    if (L.cluster) {
      launch_cluster(a, cl, false, s);
      continue;
    }
    a.spb = p.spb;
    a.w_shared = p.w_shared;
    launch_forward(a, forward_threads(H_, p.spb, kPersistentThreads), p.smem_bytes, s);
  }
}

template <class T>
bool RecurrentCuda<T>::cluster_plan(bool backward, bool w_shared, ClusterLaunch& out) const {
  const std::string v = recurrence_choice();
  const bool forced = v == "cluster";
  if (v == "block" || (!forced && w_shared)) return false;  // W_hh fits one block: the block kernel
  ClusterPlan& c = cluster_[backward ? 1 : 0];
  if (c.batch != batch_) {  // planned and asked of the device once per batch size
    const auto plan = [&](Idx min_ctas, Idx resident) {
      return cluster_launch(GH_ / H_, H_, batch_, sizeof(T), sms_, static_cast<std::size_t>(smem_optin_),
                            kClusterMaxBlocks, backward, min_ctas, resident);
    };
    ClusterLaunch l = plan(2, 0);
    const int resident = l.fits ? cluster_capacity<T>(cell_, l, backward) : 0;
    if (resident >= 1 && resident < sms_ / l.ctas) {  // fewer clusters at once than SMs / blocks: more samples each
      const ClusterLaunch more = plan(l.ctas, resident);
      if (more.fits && more.ctas == l.ctas && cluster_capacity<T>(cell_, more, backward) >= 1) l = more;
    }
    l.fits = l.fits && resident >= 1;
    c.launch = l;
    c.batch = batch_;
  }
  if (c.launch.fits) {
    out = c.launch;
    return true;
  }
  if (forced)
    raise<UnsupportedError>(
        "Recurrent", "BPPSA_CUDA_RECURRENCE=cluster: no cluster of up to " + std::to_string(kClusterMaxBlocks) +
                         " blocks holds W_hh of hidden size " + std::to_string(H_) + " on this GPU for the " +
                         (backward ? "backward" : "forward") + " (clusters need sm_90); unset it or set it to auto");
  return false;
}

template <class T>
void RecurrentCuda<T>::copy(T* dst, const T* src, Idx n) const {
  if (dst == nullptr || n == 0) return;
  BPPSA_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, run_stream_));
}

template <class T>
void RecurrentCuda<T>::copy_part(T* dst, Idx dst_ld, const T* src, Idx src_ld) const {
  if (dst == nullptr) return;
  const std::size_t width = static_cast<std::size_t>(H_) * sizeof(T), rows = static_cast<std::size_t>(batch_);
  const std::size_t dpitch = static_cast<std::size_t>(dst_ld > 0 ? dst_ld : H_) * sizeof(T);
  if (src == nullptr) {
    BPPSA_CUDA_CHECK(cudaMemset2DAsync(dst, dpitch, 0, width, rows, run_stream_));
    return;
  }
  const std::size_t spitch = static_cast<std::size_t>(src_ld > 0 ? src_ld : H_) * sizeof(T);
  BPPSA_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, run_stream_));
}

template <class T>
void RecurrentCuda<T>::use_stream(cudaStream_t stream) {
  if (stream == run_stream_) return;
  // What is queued on the old stream still reads and writes this stack's buffers: the new stream
  // waits for it on the device (the host does not), also within one CUDA graph capture. A stream
  // being captured cannot wait for work outside its capture (nor join another stream to it): its
  // caller orders the capture after what ran before (torch.cuda.graph synchronises first).
  cudaStreamCaptureStatus from = cudaStreamCaptureStatusNone, to = cudaStreamCaptureStatusNone;
  unsigned long long from_id = 0, to_id = 0;
  BPPSA_CUDA_CHECK(cudaStreamGetCaptureInfo(run_stream_, &from, &from_id));
  BPPSA_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &to, &to_id));
  const bool neither = from == cudaStreamCaptureStatusNone && to == cudaStreamCaptureStatusNone;
  const bool one_capture =
      from == cudaStreamCaptureStatusActive && to == cudaStreamCaptureStatusActive && from_id == to_id;
  if (neither || one_capture) {
    BPPSA_CUDA_CHECK(cudaEventRecord(switch_event_, run_stream_));
    BPPSA_CUDA_CHECK(cudaStreamWaitEvent(stream, switch_event_, 0));
  }
  blas_->set_stream(stream);
  run_stream_ = stream;
}

template <class T>
void RecurrentCuda<T>::copy_output(T* out) {
  copy(out, device_output(), H_ * steps_ * batch_);
}

template <class T>
void RecurrentCuda<T>::copy_state(Index l, Index t, const DeviceStateOut<T>& st) {
  const Layer& L = layers_.at(static_cast<std::size_t>(l));
  if (t < 0 || t > steps_)
    raise<InvalidArgument>("Recurrent", "state of step " + std::to_string(t) + " of " + std::to_string(steps_));
  const Idx n = H_ * batch_;
  copy_part(st.h, st.ld, L.h.data() + t * n, H_);
  if (cell_ == kLstm) copy_part(st.c, st.ld, L.c.data() + t * n, H_);
}

template <class T>
void RecurrentCuda<T>::copy_final_state(Index l, const DeviceStateOut<T>& st) {
  const Layer& L = layers_.at(static_cast<std::size_t>(l));
  const Idx ld = st.ld > 0 ? st.ld : H_;
  if (st.h != nullptr) launch_final_state(L.h.data(), device_lengths(), H_, batch_, steps_, st.h, ld, run_stream_);
  if (cell_ == kLstm && st.c != nullptr)
    launch_final_state(L.c.data(), device_lengths(), H_, batch_, steps_, st.c, ld, run_stream_);
}

template <class T>
PersistentLaunch RecurrentCuda<T>::launch_for(Idx rows, bool gate_vector) const {
  const PersistentLaunch p = persistent_launch(GH_, H_, rows, batch_, sizeof(T), sms_,
                                               static_cast<std::size_t>(smem_optin_), kPersistentThreads, gate_vector);
  if (!p.fits)
    raise<UnsupportedError>(
        "Recurrent", "hidden size " + std::to_string(H_) + " needs " + format_bytes(static_cast<double>(p.smem_bytes)) +
                         " of shared memory per sample in the GPU's persistent kernels, more "
                         "than this GPU's " +
                         format_bytes(smem_optin_) + " per block; use a smaller --hidden or --device cpu");
  return p;
}

// ---------------------------------------------------------------------------------------------
// Backward

template <class T>
StateGrads RecurrentCuda<T>::state_grads(BackwardMethod m, Index l, bool inject) {
  if (m != BackwardMethod::automatic) return state_grads_for(m);
  return fused_plan(l, inject).scan->stats().chunks > 1 ? StateGrads::fused : StateGrads::bp;
}

template <class T>
void RecurrentCuda<T>::check_backward_memory(Index steps, Index batch, const BackwardOptions& options) const {
  const double TB = static_cast<double>(steps) * static_cast<double>(batch), T1B = TB + static_cast<double>(batch);
  const double H = static_cast<double>(H_), GH = static_cast<double>(GH_), S = static_cast<double>(S_);
  const double size = sizeof(T);
  double grads = 0, jacobians = 0, workspace = 0;
  for (const Layer& L : layers_) {
    grads += (S * T1B + GH * TB * (cell_ == kGru ? 2 : 1) + static_cast<double>(L.input) * TB) * size;
    if (state_grads_for(options.method) == StateGrads::generic) {
      // Jacobians, prefixes and affine parts; Blelloch's up-sweep keeps about as many products again.
      const double per = static_cast<double>(jacobian_values(cell_, H_));
      jacobians += (TB * per * (options.method == BackwardMethod::blelloch ? 2 : 1) + S * T1B * 2) * size;
    } else if (state_grads_for(options.method) == StateGrads::fused) {
      FusedScanOptions o;
      o.injections = true;  // the larger of the two plans
      workspace += static_cast<double>(FusedRecurrentScan<T>::estimate(cell_, H_, steps, batch, o).device_bytes) +
                   S * static_cast<double>(batch) * size;
    }
  }
  (void)H;
  // What this stack already holds for a backward is memory the check may count as its own.
  const double held = backward_held();
  grads = std::max(0.0, grads - held);
  cuda::require_device_memory("Recurrent::backward",
                              std::string("the ") + to_string(options.method) + " backward of " +
                                  std::to_string(steps) + " steps × batch " + std::to_string(batch) + " through " +
                                  to_string(config_.cell) + " hidden " + std::to_string(H_) + " × " +
                                  std::to_string(config_.layers) + " layers on the GPU",
                              {{"Jacobians", jacobians}, {"scan workspace", workspace}, {"gradients", grads}},
                              "use a smaller --batch, --backward bp or fused (they store no Jacobians), or "
                              "--device cpu");
}

template <class T>
double RecurrentCuda<T>::backward_held() const {
  double n = 0;
  for (const Layer& L : layers_) {
    for (const DeviceBuffer<T>* b : {&L.g, &L.dx, &L.dh, &L.gx, &L.g_last}) n += static_cast<double>(b->bytes());
    for (const auto* g : {&L.generic.recent, &L.generic.older})
      if (*g) n += static_cast<double>((*g)->device_bytes());
    for (const auto* f : {&L.fused.recent, &L.fused.older})
      if (f->scan) n += static_cast<double>(f->scan->stats().device_bytes);
  }
  return n;
}

template <class T>
void RecurrentCuda<T>::prepare_backward(bool fused) {
  const Idx T_ = steps_, B = batch_, TB = steps_ * batch_;
  grow<T>(
      [&](auto&& buffer) {
        for (Layer& L : layers_) {
          buffer(L.g, S_ * (T_ + 1) * B);
          buffer(L.dx, GH_ * TB);
          if (cell_ == kGru) buffer(L.dh, GH_ * TB);
          buffer(L.gx, L.input * TB);
          if (fused) buffer(L.g_last, S_ * B);
        }
      },
      [&](double need) {
        cuda::require_device_memory("Recurrent::backward",
                                    "the gradients of " + std::to_string(T_) + " steps × batch " + std::to_string(B) +
                                        " through " + to_string(config_.cell) + " hidden " + std::to_string(H_) +
                                        " × " + std::to_string(config_.layers) + " layers on the GPU",
                                    {{"state, pre-activation and input gradients", need}},
                                    "use a smaller --batch, shorter sequences or --device cpu");
      });
}

template <class T>
void RecurrentCuda<T>::backward_begin_device(const T* top, bool inject) {
  top_ = top;
  inject_top_ = inject;
}

template <class T>
void RecurrentCuda<T>::backward_layer_device(Index l, const BackwardOptions& options, const DeviceState<T>& final_grad,
                                             int slot, const DeviceLayerGrads<T>& grads, T* grad_x) {
  const bool given = final_grad.h != nullptr || final_grad.c != nullptr;
  if (given) {
    // g_final is S × B: column b holds h's H rows over c's (LSTM).
    Layer& L = layers_.at(static_cast<std::size_t>(l));
    ensure(L.g_final, S_ * batch_);
    copy_part(L.g_final.data(), S_, final_grad.h, final_grad.ld);
    if (cell_ == kLstm) copy_part(L.g_final.data() + H_, S_, final_grad.c, final_grad.ld);
  }
  backward_from(l, options, given, slot, grads, grad_x);
}

template <class T>
const char* RecurrentCuda<T>::state_grads_method(Index l) const {
  const Layer& L = layers_.at(static_cast<std::size_t>(l));
  switch (L.how) {
    case StateGrads::bp:
      return "bp";
    case StateGrads::fused:
      return "fused";
    case StateGrads::generic:
      break;
  }
  return to_string(L.method);
}

template <class T>
void RecurrentCuda<T>::copy_state0_grad(Index l, const DeviceStateOut<T>& g0) {
  const Layer& L = layers_.at(static_cast<std::size_t>(l));
  if (L.g.size() < static_cast<std::size_t>(S_ * (steps_ + 1) * batch_))
    raise<InvalidArgument>("Recurrent::backward", "no initial-state gradient: no backward of this shape has run");
  // Block 0 of g is S × B (h rows over c rows).
  copy_part(g0.h, g0.ld, L.g.data(), S_);
  if (cell_ == kLstm) copy_part(g0.c, g0.ld, L.g.data() + H_, S_);
}

template <class T>
void RecurrentCuda<T>::backward_from(Index l, const BackwardOptions& options, bool final_grad, int slot,
                                     const DeviceLayerGrads<T>& grads, T* grad_x) {
  const cudaStream_t s = run_stream_;
  Layer& L = layers_[static_cast<std::size_t>(l)];
  const Idx T_ = steps_, B = batch_, TB = steps_ * batch_;
  const bool top = l == config_.layers - 1;
  LayerEvents& ev = L.events[static_cast<std::size_t>(slot)];
  if (top) timed_[static_cast<std::size_t>(slot)].clear();
  timed_[static_cast<std::size_t>(slot)].push_back(l);
  BPPSA_CUDA_CHECK(cudaEventRecord(ev.e[0], s));

  if (top) prepare_backward(state_grads(options.method, l, inject_top_) == StateGrads::fused);

  // The gradient on this layer's outputs: from the head (top) or the layer above (its gx).
  const T* above = top ? top_ : layers_[static_cast<std::size_t>(l + 1)].gx.data();
  const bool inject = top ? inject_top_ : true;
  const T* last = inject ? above + (T_ - 1) * B * H_ : above;
  const T* gfinal = final_grad ? L.g_final.data() : nullptr;
  LayerArgs<T> a = args(l);
  const StateGrads how = state_grads(options.method, l, inject);
  L.how = how;
  L.method = options.method;
  if (how == StateGrads::fused) ensure(L.g_last, S_ * B);  // (layers may change method midway: S × B only)
  // With lengths, sample b's g_T is its gradient at step len[b] (`last` with injections is
  // above's block T; without them the caller gave each sample's own last-step gradient).
  launch_final_grad(H_, S_, B, T_, last, inject ? a.len : nullptr, gfinal,
                    how == StateGrads::fused ? L.g_last.data() : a.g + T_ * B * S_, s);
  a.above = inject ? above : nullptr;
  a.w = L.weights.w_hh;  // row-major

  switch (how) {
    case StateGrads::bp: {
      BPPSA_CUDA_CHECK(cudaEventRecord(ev.e[1], s));
      if (L.warp) {  // decided once, by the forward
        a.spb = warp_forward_spb(B, sms_);
        launch_backward_warp(a, s);  // g_{T−1} … g_0, dx (and dh)
      } else {
        const PersistentLaunch p = launch_for(S_, true);
        ClusterLaunch cl;
        if (L.cluster && cluster_plan(true, p.w_shared, cl)) {  // the forward ran a cluster: so does BP
          launch_cluster(a, cl, true, s);
        } else {
          a.spb = p.spb;
          a.w_shared = p.w_shared;
          launch_backward_bp(a, p.threads, p.smem_bytes, s);
        }
      }
      BPPSA_CUDA_CHECK(cudaEventRecord(ev.e[2], s));
      break;
    }
    case StateGrads::fused: {  // its push writes the pre-activation gradients (dx, dh) too
      BPPSA_CUDA_CHECK(cudaEventRecord(ev.e[1], s));
      run_fused(l, a, s);
      BPPSA_CUDA_CHECK(cudaEventRecord(ev.e[2], s));
      break;
    }
    case StateGrads::generic: {
      const Algorithm algo = scan_algorithm(options.method);
      const int chunks = algo == Algorithm::hybrid ? options.chunks : 0;
      const bool affine = inject || has_len_;  // lengths restart each sample's chain by an injection
      auto& plan = L.generic.get(
          [&](const auto& p) { return p && p->matches(T_, B, affine, algo, chunks); },
          [&] { return std::make_unique<GenericLayerScan<T>>(cell_, H_, T_, B, affine, algo, chunks); }, false);
      plan->run(a, s, ev.e[1]);
      BPPSA_CUDA_CHECK(cudaEventRecord(ev.e[2], s));
      launch_preact(a, s);
      break;
    }
  }

  // Parameter gradients over all T·B columns (row-major PyTorch weights = column-major transposes).
  const T* x = l == 0 ? x0_ : layers_[static_cast<std::size_t>(l - 1)].h.data() + H_ * B;
  const T* dhh = cell_ == kGru ? L.dh.data() : L.dx.data();
  const DeviceLayerGrads<T> g = grad_targets(l, grads);
  const LayerGradProducts<T> p =
      layer_grad_products(L.input, H_, GH_, TB, x, L.h.data(), L.dx.data(), dhh, L.weights.w_ih, ones_.data(), g.w_ih,
                          g.w_hh, g.b_ih, g.b_hh, l == 0 && grad_x != nullptr ? grad_x : L.gx.data());
  cublasHandle_t h = blas_->get();
  for (const Gemm<T>* m : {&p.w_ih, &p.w_hh, &p.input}) run(h, *m);
  for (const Gemv<T>* v : {&p.b_ih, &p.b_hh}) run(h, *v);
  BPPSA_CUDA_CHECK(cudaEventRecord(ev.e[3], s));
}

template <class T>
FusedPlan<T>& RecurrentCuda<T>::fused_plan(Index l, bool inject) {
  const Idx steps = steps_, batch = batch_;
  return layers_[static_cast<std::size_t>(l)].fused.get(
      [&](const FusedPlan<T>& p) { return p.matches(steps, batch, inject); },
      [&] {
        FusedScanOptions o;
        o.injections = inject;
        FusedPlan<T> p;
        p.scan = std::make_unique<FusedRecurrentScan<T>>(FusedRecurrentScan<T>::plan(cell_, H_, steps, batch, o));
        p.steps = steps;
        p.batch = batch;
        p.inject = inject;
        return p;
      },
      true);
}

template <class T>
void RecurrentCuda<T>::run_fused(Index l, const LayerArgs<T>& a, cudaStream_t s) {
  Layer& L = layers_[static_cast<std::size_t>(l)];
  FusedPlan<T>& plan = fused_plan(l, a.above != nullptr);
  FusedDevicePtrs<T> p;
  p.w_hh = a.w;
  p.h = a.h;
  p.c = a.c;
  p.gates = a.gates;
  p.aux = a.aux;
  p.g_last = L.g_last.data();
  p.above = a.above;
  p.g = a.g;
  p.len = a.len;
  p.dx = a.dx;
  p.dh = cell_ == kGru ? a.dh : nullptr;
  plan.scan->run(s, p);
}

template <class T>
BackwardTimes RecurrentCuda<T>::backward_times(int slot, Index only) {
  BackwardTimes t;
  for (const Index l : timed_[static_cast<std::size_t>(slot)]) {
    if (only >= 0 && l != only) continue;
    const LayerEvents& ev = layers_[static_cast<std::size_t>(l)].events[static_cast<std::size_t>(slot)];
    BPPSA_CUDA_CHECK(cudaEventSynchronize(ev.e[3]));
    float jac = 0, scan = 0, params = 0;
    BPPSA_CUDA_CHECK(cudaEventElapsedTime(&jac, ev.e[0], ev.e[1]));
    BPPSA_CUDA_CHECK(cudaEventElapsedTime(&scan, ev.e[1], ev.e[2]));
    BPPSA_CUDA_CHECK(cudaEventElapsedTime(&params, ev.e[2], ev.e[3]));
    t.jacobians += 1e-3 * jac;
    t.scan += 1e-3 * scan;
    t.params += 1e-3 * params;
    const Layer& L = layers_[static_cast<std::size_t>(l)];
    if (L.how == StateGrads::generic && L.generic.recent) t.last_scan = L.generic.recent->stats();
    if (L.how == StateGrads::fused && L.fused.recent.scan) t.last_scan = fused_stats(L.fused.recent.scan->stats());
  }
  return t;
}

template <class T>
void RecurrentCuda<T>::check_grads(Index only) {
  // A layer's parameters are one run of the arena: w_ih, w_hh, b_ih, b_hh.
  const Idx begin = only < 0 ? 0 : layers_[static_cast<std::size_t>(only)].w_ih;
  const Idx end = only < 0 ? static_cast<Idx>(grads_.size()) : layers_[static_cast<std::size_t>(only)].b_hh + GH_;
  launch_check_finite(grads_.data() + begin, end - begin, kGradNotFinite, status_.data(), run_stream_);
}

template <class T>
std::size_t RecurrentCuda<T>::device_bytes() const {
  std::size_t n = params_.bytes() + grads_.bytes() + x_.bytes() + ones_.bytes() + zeros_.bytes() + grad_out_.bytes() +
                  status_.bytes() + len_.bytes() + staged_.bytes() + readback_.bytes();
  for (const Layer& L : layers_) {
    for (const DeviceBuffer<T>* b :
         {&L.h, &L.c, &L.gates, &L.aux, &L.ax, &L.w_col, &L.g, &L.dx, &L.dh, &L.gx, &L.g_final})
      n += b->bytes();
    for (const auto* g : {&L.generic.recent, &L.generic.older})
      if (*g) n += (*g)->device_bytes();
    for (const auto* f : {&L.fused.recent, &L.fused.older})
      if (f->scan) n += f->scan->stats().device_bytes;
    n += L.g_last.bytes();
  }
  return n;
}

template <class T>
void RecurrentCuda<T>::synchronize() const {
  BPPSA_CUDA_CHECK(cudaStreamSynchronize(run_stream_));
}

template <class T>
std::vector<Index> RecurrentCuda<T>::lengths() const {
  return has_len_ ? std::vector<Index>(len_host_.begin(), len_host_.end()) : std::vector<Index>();
}

// ---------------------------------------------------------------------------------------------
// RecurrentHalf: the front's host-memory calls over the device API

template <class T>
void RecurrentCuda<T>::make_current(const LayerParamsList<T>& params) {
  if (!sync.host_newer) return;
  upload_layers(params);
  sync.host_newer = false;
}

template <class T>
void RecurrentCuda<T>::pull(LayerParamsList<T>& params, LayerParamsList<T>& grads) const {
  Coherence& s = sync;
  if (s.device_newer) {
    download_layers(params_, params);
    s.device_newer = false;
  }
  if (s.grads_newer) {
    download_layers(grads_, grads);
    s.grads_newer = false;
  }
}

template <class T>
std::unique_ptr<ClassifierHalf<T>> RecurrentCuda<T>::make_classifier(const ModelConfig& config, Recurrent<T>& rnn,
                                                                     Linear<T>& head) {
  return make_classifier_cuda<T>(config, rnn, head, *this);
}

template <class T>
void RecurrentCuda<T>::set_forward_options(const ForwardOptions& options) {
  if (options.method == ForwardMethod::newton)  // automatic: sequential (resolve_forward)
    raise<UnsupportedError>("Recurrent::set_forward_options",
                            std::string("the ") + to_string(options.method) +
                                " forward runs on the CPU only for now; use ForwardMethod::sequential on Device::cuda "
                                "(--forward sequential) or Device::cpu");
  report_.method = options.method;
}

template <class T>
void RecurrentCuda<T>::host_written() {
  sync.host_newer = true;
  sync.device_newer = false;
}

template <class T>
void RecurrentCuda<T>::forward(const Eigen::Ref<const Matrix<T>>& x, Index steps, Index batch,
                               const LayerParamsList<T>& params, const LayerMatrices<T>& initial_states,
                               std::span<const Index> lengths) {
  make_current(params);
  resize(steps, batch);
  set_lengths(lengths);
  if (x.outerStride() == x.rows()) {
    to_device(x_.data(), x.data(), config_.input * steps * batch);
  } else {
    const Matrix<T> packed = x;
    to_device(x_.data(), packed.data(), config_.input * steps * batch);
  }
  forward_device(stage_states(initial_states, "initial state", "Recurrent::forward"));
}

template <class T>
Matrix<T> RecurrentCuda<T>::state(Index layer, Index t) const {
  auto& self = const_cast<RecurrentCuda&>(*this);  // queues copies only: nothing of the record changes
  ensure(readback_, S_ * batch_);
  self.copy_state(layer, t, {readback_.data(), cell_ == kLstm ? readback_.data() + H_ : nullptr, S_});
  Matrix<T> s(S_, batch_);
  to_host(s.data(), readback_.data(), s.size());
  return s;
}

template <class T>
Matrix<T> RecurrentCuda<T>::final_state(Index layer) const {
  auto& self = const_cast<RecurrentCuda&>(*this);  // queues a kernel only: nothing of the record changes
  ensure(readback_, S_ * batch_);
  self.copy_final_state(layer, {readback_.data(), cell_ == kLstm ? readback_.data() + H_ : nullptr, S_});
  Matrix<T> s(S_, batch_);
  to_host(s.data(), readback_.data(), s.size());
  return s;
}

template <class T>
Eigen::Block<const Matrix<T>, Eigen::Dynamic, Eigen::Dynamic, true> RecurrentCuda<T>::output() const {
  out_.resize(H_, steps_ * batch_);
  to_host(out_.data(), device_output(), out_.size());
  const Matrix<T>& out = out_;
  return out.rightCols(out.cols());
}

template <class T>
void RecurrentCuda<T>::backward_begin(const Eigen::Ref<const Matrix<T>>& grad_out, bool every_step,
                                      const LayerParamsList<T>& params) {
  make_current(params);
  const Index T_ = steps_, B = batch_;
  const Matrix<T> packed = grad_out;  // contiguous, whatever the caller's strides
  // Only each sample's last step when every_step is false (many-to-one), as the CPU reads it.
  const std::vector<Index> len = lengths();
  Matrix<T> last(H_, B);
  for (Index b = 0; b < B && !every_step; ++b)
    last.col(b) = packed.col((len.empty() ? T_ - 1 : len[static_cast<std::size_t>(b)] - 1) * B + b);
  const Matrix<T>& top = every_step ? packed : last;
  ensure(grad_out_, static_cast<Idx>(top.size()));
  to_device(grad_out_.data(), top.data(), top.size());
  backward_begin_device(grad_out_.data(), every_step);
}

template <class T>
void RecurrentCuda<T>::backward_layer(Index l, const BackwardOptions& options, const LayerParamsList<T>& params,
                                      LayerParamsList<T>&, const Matrix<T>* final_grad, BackwardTimes* times) {
  make_current(params);
  const std::vector<DeviceState<T>> g = stage_states({final_grad}, "final-state gradient", "Recurrent::backward", l);
  backward_layer_device(l, options, g.front(), 0);
  check_grads(l);
  sync.grads_newer = true;
  const DeviceStatus st = read_status();  // waits: the layer is done when this returns
  if ((st.flags & kGradNotFinite) != 0) {
    clear_flags();
    raise<NonFiniteError>("Recurrent::backward", "gradients of layer " + std::to_string(l) +
                                                     " are not finite (NaN/Inf): the loss or the weights "
                                                     "diverged; lower the learning rate");
  }
  if (times) {
    const BackwardTimes t = backward_times(0, l);
    times->jacobians += t.jacobians;
    times->scan += t.scan;
    times->params += t.params;
    times->last_scan = t.last_scan;
  }
}

template <class T>
std::pair<Jacobian<T>, Matrix<T>> RecurrentCuda<T>::layer_transfer(Index, const BackwardOptions&,
                                                                   const LayerParamsList<T>&) {
  raise<UnsupportedError>("Recurrent::layer_transfer",
                          "layer_transfer (model-parallel stages) runs on the CPU; use Device::cpu");
}

template <class T>
const Matrix<T>& RecurrentCuda<T>::input_grad() const {
  const DeviceBuffer<T>& d = layers_.front().gx;
  if (steps_ == 0 || d.size() < static_cast<std::size_t>(config_.input * steps_ * batch_)) {
    input_grad_.resize(0, 0);  // no backward of this shape yet
    return input_grad_;
  }
  input_grad_.resize(config_.input, steps_ * batch_);
  to_host(input_grad_.data(), d.data(), input_grad_.size());
  return input_grad_;
}

template <class T>
const Matrix<T>& RecurrentCuda<T>::state0_grad(Index layer) const {
  if (g0_.size() != layers_.size()) g0_.resize(layers_.size());
  Matrix<T>& g0 = g0_.at(static_cast<std::size_t>(layer));
  const DeviceBuffer<T>& d = layers_[static_cast<std::size_t>(layer)].g;
  if (steps_ == 0) return g0;
  if (d.size() < static_cast<std::size_t>(S_ * (steps_ + 1) * batch_)) {
    g0.resize(0, 0);
    return g0;
  }
  g0.resize(S_, batch_);
  to_host(g0.data(), d.data(), g0.size());  // block 0 of g: S × B
  return g0;
}

template <class T>
void RecurrentCuda<T>::forward_io(const LayerForwardIo<T>& io, Index steps, Index batch, std::span<const Index> lengths,
                                  std::uintptr_t stream, LayerParamsList<T>&) {
  use_stream(reinterpret_cast<cudaStream_t>(stream));
  resize(steps, batch);
  set_lengths(lengths);  // a PackedSequence: each sample's length, longest first
  // The caller's weights and x read in place (the front checks the backward gets the same ones).
  const DeviceLayerParams<T> w{io.w_ih, io.w_hh, io.b_ih, io.b_hh};
  forward_device({{io.h0, io.c0}}, io.x, &w);
  copy_output(io.out);
  copy_final_state(0, {io.h_n, io.c_n});
}

template <class T>
std::string RecurrentCuda<T>::backward_io(const LayerBackwardIo<T>& io, const BackwardOptions& options,
                                          std::span<const Index>, std::uintptr_t stream, const LayerParamsList<T>&,
                                          LayerParamsList<T>&) {
  const char* op = "Recurrent::backward_io";
  if (io.grad_out == nullptr)
    raise<InvalidArgument>(op, "the CUDA half needs the output's gradient (zeros when none flows back)");
  if (options.check_finite) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    BPPSA_CUDA_CHECK(cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &capture));
    if (capture != cudaStreamCaptureStatusNone)
      raise<UnsupportedError>(op,
                              "check_finite reads the gradients' status on the host, which a CUDA graph "
                              "capture cannot wait for: capture with check_finite=False");
  }
  use_stream(reinterpret_cast<cudaStream_t>(stream));
  // Every step's gradient is injected: telling a many-to-one gradient apart would read it on the host.
  backward_begin_device(io.grad_out, true);
  // The parameter and input gradients written in place (those the caller does not want: into the
  // stack's own buffers).
  const DeviceLayerGrads<T> wanted{io.grad_w_ih, io.grad_w_hh, io.grad_b_ih, io.grad_b_hh};
  backward_layer_device(0, options, {io.grad_hn, io.grad_cn}, 0, wanted, io.grad_x);
  if (options.check_finite) {
    check_grad_targets(grad_targets(0, wanted), config_.input);
    const DeviceStatus status = read_status();  // waits for the stream
    if ((status.flags & kGradNotFinite) != 0) {
      clear_flags();
      raise<NonFiniteError>(op,
                            "the layer's parameter gradients are not finite (NaN/Inf): the loss, "
                            "the incoming gradients or the weights diverged");
    }
  }
  copy_state0_grad(0, {io.grad_h0, io.grad_c0});
  return state_grads_method(0);
}

template <class T>
const Chain<T>& RecurrentCuda<T>::chain(Index) const {
  raise<UnsupportedError>("Recurrent::chain",
                          "a Device::cuda layer generates its Jacobians on the GPU and "
                          "keeps no host chain; inspect chains with Device::cpu");
}

template class RecurrentCuda<float>;
template class RecurrentCuda<double>;

}  // namespace bppsa::detail::gpu

namespace bppsa::detail {

template <class T>
std::unique_ptr<RecurrentHalf<T>> make_recurrent_cuda(const RecurrentConfig& config) {
  return std::make_unique<gpu::RecurrentCuda<T>>(config);
}
template std::unique_ptr<RecurrentHalf<float>> make_recurrent_cuda<float>(const RecurrentConfig&);
template std::unique_ptr<RecurrentHalf<double>> make_recurrent_cuda<double>(const RecurrentConfig&);

}  // namespace bppsa::detail
