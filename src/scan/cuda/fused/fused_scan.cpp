// Host side of the fused chunked scan (fused_scan.hpp): planning against the device's limits,
// the plan's device memory, the launch sequence and its CUDA Graph.
#include "scan/cuda/fused/fused_scan.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "bppsa/core/error.hpp"
#include "core/cuda/buffer.hpp"
#include "core/cuda/check.hpp"
#include "scan/cuda/fused/plan.hpp"

namespace bppsa::detail::gpu {
namespace {

constexpr const char* kOp = "FusedScan";

std::string sizes(const std::string& label, Idx H, Idx T, Idx B) {
  return label + " hidden " + std::to_string(H) + ", " + std::to_string(T) + " steps, batch " + std::to_string(B);
}

/// The device's limits for the planner; the chunk totals may take half of the free memory.
FusedLimits device_limits(int* device) {
  int dev = 0, sms = 0, smem_block = 0, smem_sm = 0;
  BPPSA_CUDA_CHECK(cudaGetDevice(&dev));
  BPPSA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  BPPSA_CUDA_CHECK(cudaDeviceGetAttribute(&smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  BPPSA_CUDA_CHECK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  std::size_t free_bytes = 0, total_bytes = 0;
  BPPSA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (device) *device = dev;
  FusedLimits lim;
  lim.sms = sms;
  lim.smem_block = smem_block;
  lim.smem_sm = smem_sm;
  lim.totals_bytes = 0.5 * static_cast<double>(free_bytes);
  return lim;
}

/// The plan for the request, or InvalidArgument/ResourceError naming the problem and the fix.
template <class T>
FusedChoice plan_or_raise(const FusedStepInfo& step, std::int32_t variant, const std::string& label, Idx H, Idx T_,
                          Idx B, const FusedScanOptions& o, const FusedLimits& lim) {
  const FusedRequest q = fused_request(step, variant, H, T_, B, sizeof(T), o);
  FusedLimits with = lim;
  with.model = o.model;
  const FusedChoice p = fused_plan(q, with);
  const std::string what = sizes(label, H, T_, B);
  switch (p.error) {
    case kPlanOk:
      return p;
    case kPlanBadSize:
      raise<InvalidArgument>(kOp, "need hidden size, steps and batch ≥ 1 and a chunk length ≥ 0 (got " + what +
                                      ", chunk length " + std::to_string(o.chunk_length) + ")");
    case kPlanBadStep:
      raise<InvalidArgument>(kOp, "the step '" + label + "' has " + std::to_string(step.gates) + " gates and " +
                                      std::to_string(step.parts) +
                                      " state parts; a Step needs ≥ 1 gate and 1 or 2 parts (fused_step_info)");
    case kPlanBadTile:
      raise<InvalidArgument>(kOp, "tile " + std::to_string(o.reduce_tile) + "/" + std::to_string(o.push_tile) +
                                      " (reduce/push) is not compiled; use 0 (cost model) or one of 4, 8, 16, 20, 32" +
                                      (sizeof(T) == 4 ? ", 64" : " (double)"));
    case kPlanBadColumns:
      raise<InvalidArgument>(kOp, "columns per reduce thread " + std::to_string(o.reduce_columns) +
                                      " is not compiled with tile " + std::to_string(o.reduce_tile) +
                                      "; use 0 (cost model), 1, or 4 (float; tile ≤ " + std::to_string(step.max_tile4) +
                                      " for " + label + ")");
    default:
      raise<ResourceError>(kOp, "no mapping of " + what + " fits this GPU (" + std::to_string(lim.smem_block) +
                                    " bytes of shared memory per block" +
                                    (o.w_shared == 1 ? ", W forced into shared memory" : "") +
                                    (o.carry_ring == 1 ? ", the carry's ring of totals forced" : "") +
                                    (o.record_ring == 1 ? ", the record's ring forced" : "") +
                                    " and the chunk totals within half the free memory); use a smaller hidden size" +
                                    (o.chunk_length > 0 ? " or let the cost model choose the chunk length" : ""));
  }
}

/// BPPSA_FUSED_GRAPHS (never, always, auto) over the plan's option; InvalidArgument otherwise.
FusedGraphs graphs_policy(FusedGraphs option) {
  const char* e = std::getenv("BPPSA_FUSED_GRAPHS");
  if (e == nullptr || *e == 0) return option;
  const std::string v(e);
  if (v == "never") return FusedGraphs::never;
  if (v == "always") return FusedGraphs::always;
  if (v == "auto") return FusedGraphs::automatic;
  raise<InvalidArgument>(kOp, "BPPSA_FUSED_GRAPHS='" + v + "'; use never, always or auto (or unset it)");
}

template <class T>
FusedScanStats stats_of(const FusedChoice& p, const FusedStepInfo& step) {
  const FusedShape& s = p.shape;
  const bool scan = s.C > 1;
  FusedScanStats st;
  st.chunk_length = s.L;
  st.chunks = s.C;
  st.first_chunk_length = s.len0;
  if (scan) {
    st.reduce_tile = static_cast<int>(p.reduce.tile);
    st.reduce_columns = static_cast<int>(p.reduce.nc);
    st.reduce_threads_per_column = static_cast<int>(p.reduce.ntile);
    st.carry_stages = static_cast<int>(p.carry.stages);
    st.v_tile = p.reduce_v.groups > 0 ? static_cast<int>(p.reduce_v.tile) : 0;
    st.reduce_stages = static_cast<int>(p.reduce.stages);
  }
  st.push_stages = static_cast<int>(p.push.stages);
  st.push_tile = static_cast<int>(p.push.tile);
  st.push_threads_per_column = static_cast<int>(p.push.ntile);
  st.w_shared = p.push.w_shared && (!scan || (p.reduce.w_shared && (st.v_tile == 0 || p.reduce_v.w_shared)));
  st.launches = scan ? (st.v_tile > 0 ? 5 : 4) : 2;
  const double Sz = static_cast<double>(sizeof(T)), S = static_cast<double>(s.S), B = static_cast<double>(s.B),
               H = static_cast<double>(s.H), GH = static_cast<double>(s.GH);
  const double totals = fused_totals_bytes(s, 1);  // values
  st.device_bytes = static_cast<std::size_t>((totals + GH * static_cast<double>(s.ldw)) * Sz);
  // Flops: 2·GH·H per column-step of W^T y (padding not counted), 2·S² per carry mat-vec.
  const double reduce_cols = static_cast<double>(s.C - 1) * B * static_cast<double>(s.ncols);
  const double push_col_steps =
      B * (static_cast<double>(s.len0) + static_cast<double>(s.C - 1) * static_cast<double>(s.L - 1));
  st.flops = 2 * GH * H * (reduce_cols * static_cast<double>(s.L) + push_col_steps) +
             2 * S * S * B * static_cast<double>(s.C - 1);
  // Bytes: the record of a step and the injection, read once by the reduce and once by the push;
  // g written; totals written and read.
  const double per_step = step.record_per_unit * H + (s.inject ? H : 0);
  const double reduce_steps = static_cast<double>(s.C - 1) * static_cast<double>(s.L) * B;
  st.bytes = Sz * (per_step * (reduce_steps + push_col_steps) + S * static_cast<double>(s.steps + 1) * B + S * B +
                   2 * totals + GH * H + GH * static_cast<double>(s.ldw));
  st.estimate_us = p.cycles / kFusedCyclesPerMicro;
  return st;
}

}  // namespace

template <class T>
struct FusedScan<T>::Impl {
  FusedStep<T> step;
  FusedChoice plan;
  FusedScanOptions options;
  int device = 0;
  cuda::DeviceBuffer<T> wp, totals;
  FusedScanStats stats;
  // CUDA Graphs of the launch sequence (see FusedGraphs): captured on a private stream for the
  // pointers in `captured`, replayed on the caller's stream. One for runs without lengths and
  // one for runs with (other kernels), so that batches alternating between full-length and
  // shorter samples replay both instead of capturing at each switch.
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    FusedChainPtrs<T> captured{}, previous{};
    bool have_previous = false;
  };
  std::unique_ptr<cuda::Stream> capture_stream;
  Graph graphs[2];
  // The v column's launch apart (plan.reduce_v): forked onto `aux` and joined back by events,
  // which a capture (ours or the caller's) records as a fork and a join of its graph.
  std::unique_ptr<cuda::Stream> aux;
  std::unique_ptr<cuda::Event> fork, join;

  ~Impl() {
    for (Graph& g : graphs)
      if (g.exec) cudaGraphExecDestroy(g.exec);
  }

  FusedArgs<T> args(const FusedChainPtrs<T>& p) const {
    FusedArgs<T> a;
    a.shape = plan.shape;
    a.carry = plan.carry;
    a.w = p.w;
    a.wp = wp.data();
    for (int i = 0; i < kFusedRecordArrays; ++i) a.record[i] = p.record[i];
    a.g_last = p.g_last;
    a.above = p.above;
    a.g = p.g;
    a.totals = totals.data();
    a.len = p.len;
    a.y_out = p.y_out;
    a.yi_out = p.yi_out;
    return a;
  }

  void launch_all(const FusedChainPtrs<T>& p, cudaStream_t stream) const {
    FusedArgs<T> a = args(p);
    launch_fused_prepare(a, stream);
    if (plan.shape.C > 1) {
      if (aux) {
        BPPSA_CUDA_CHECK(cudaEventRecord(*fork, stream));
        BPPSA_CUDA_CHECK(cudaStreamWaitEvent(aux->get(), *fork, 0));
        a.launch = plan.reduce_v;
        step.columns(a, aux->get(), 0);
        BPPSA_CUDA_CHECK(cudaEventRecord(*join, aux->get()));
      }
      a.launch = plan.reduce;
      step.columns(a, stream, 0);
      if (aux) BPPSA_CUDA_CHECK(cudaStreamWaitEvent(stream, *join, 0));
      launch_fused_carry(a, stream);
    }
    a.launch = plan.push;
    step.columns(a, stream, 0);
  }

  /// (Re)captures the launch sequence for pointers p into gr: updates its executable graph in place
  /// when the topology allows (it always does: only kernel arguments change), else instantiates anew.
  void capture(const FusedChainPtrs<T>& p, Graph& gr) {
    if (!capture_stream) capture_stream = std::make_unique<cuda::Stream>();
    const cudaStream_t s = capture_stream->get();
    BPPSA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      launch_all(p, s);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(s, &broken);
      if (broken) cudaGraphDestroy(broken);
      cudaGetLastError();
      throw;
    }
    cudaGraph_t graph = nullptr;
    BPPSA_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    if (gr.exec) {
      cudaGraphExecUpdateResultInfo info;
      if (cudaGraphExecUpdate(gr.exec, graph, &info) != cudaSuccess) {
        cudaGetLastError();
        cudaGraphExecDestroy(gr.exec);
        gr.exec = nullptr;
      }
    }
    if (!gr.exec) {
      const cudaError_t e = cudaGraphInstantiate(&gr.exec, graph, 0);
      cudaGraphDestroy(graph);
      BPPSA_CUDA_CHECK(e);
    } else {
      cudaGraphDestroy(graph);
    }
    gr.captured = p;
  }
};

namespace {
template <class T>
bool same(const FusedChainPtrs<T>& a, const FusedChainPtrs<T>& b) {
  for (int i = 0; i < kFusedRecordArrays; ++i)
    if (a.record[i] != b.record[i]) return false;
  return a.w == b.w && a.g_last == b.g_last && a.above == b.above && a.g == b.g && a.len == b.len &&
         a.y_out == b.y_out && a.yi_out == b.yi_out;
}
}  // namespace

template <class T>
FusedScan<T> FusedScan<T>::plan(const FusedStep<T>& step, std::int32_t variant, Idx hidden, Idx steps, Idx batch,
                                const FusedScanOptions& options, const std::string& label) {
  const std::string name = label.empty() ? std::string(step.info.name) : label;
  if (step.columns == nullptr)
    raise<InvalidArgument>(kOp,
                           "the step '" + name + "' has no column kernels; make it with make_fused_step<T, Step>()");
  auto impl = std::make_unique<Impl>();
  impl->step = step;
  const FusedLimits lim = device_limits(&impl->device);
  impl->plan = plan_or_raise<T>(step.info, variant, name, hidden, steps, batch, options, lim);
  impl->options = options;
  impl->options.graphs = graphs_policy(options.graphs);
  impl->stats = stats_of<T>(impl->plan, step.info);
  const FusedShape& s = impl->plan.shape;
  const double Sz = static_cast<double>(sizeof(T));
  const double totals = fused_totals_bytes(s, 1);  // values
  const double wp = static_cast<double>(s.GH * s.ldw);
  cuda::require_device_memory(kOp, "the fused scan of " + sizes(name, hidden, steps, batch),
                              {{"chunk totals", totals * Sz}, {"padded W", wp * Sz}},
                              "use a smaller batch or hidden size, or a longer chunk length");
  impl->wp = cuda::DeviceBuffer<T>(static_cast<std::size_t>(wp));
  impl->totals = cuda::DeviceBuffer<T>(static_cast<std::size_t>(totals));
  FusedArgs<T> a = impl->args(FusedChainPtrs<T>{});
  a.launch = impl->plan.push;
  allow_fused_smem(step, a, static_cast<int>(lim.smem_block));
  if (s.C > 1) {
    a.launch = impl->plan.reduce;
    allow_fused_smem(step, a, static_cast<int>(lim.smem_block));
  }
  if (impl->plan.reduce_v.groups > 0) {  // only planned with chunks (C > 1)
    a.launch = impl->plan.reduce_v;
    allow_fused_smem(step, a, static_cast<int>(lim.smem_block));
    impl->aux = std::make_unique<cuda::Stream>();
    impl->fork = std::make_unique<cuda::Event>(false);
    impl->join = std::make_unique<cuda::Event>(false);
  }
  return FusedScan(std::move(impl));
}

template <class T>
FusedScanStats FusedScan<T>::estimate(const FusedStep<T>& step, std::int32_t variant, Idx hidden, Idx steps, Idx batch,
                                      const FusedScanOptions& options, const std::string& label) {
  const FusedLimits lim = device_limits(nullptr);
  const std::string name = label.empty() ? std::string(step.info.name) : label;
  return stats_of<T>(plan_or_raise<T>(step.info, variant, name, hidden, steps, batch, options, lim), step.info);
}

template <class T>
FusedScan<T>::FusedScan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
template <class T>
FusedScan<T>::FusedScan(FusedScan&&) noexcept = default;
template <class T>
FusedScan<T>& FusedScan<T>::operator=(FusedScan&&) noexcept = default;
template <class T>
FusedScan<T>::~FusedScan() = default;

template <class T>
const FusedScanStats& FusedScan<T>::stats() const {
  return impl_->stats;
}

template <class T>
void FusedScan<T>::run(cudaStream_t stream, const FusedChainPtrs<T>& p) {
  Impl& m = *impl_;
  const FusedShape& s = m.plan.shape;
  int dev = 0;
  BPPSA_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev != m.device)
    raise<InvalidArgument>("FusedScan::run", "planned on device " + std::to_string(m.device) + " but device " +
                                                 std::to_string(dev) +
                                                 " is current; cudaSetDevice back, or plan again");
  std::string missing;
  if (!p.w) missing += " w";
  for (int i = 0; i < kFusedRecordArrays; ++i)
    if ((m.step.info.record_needed >> i & 1u) != 0 && !p.record[i]) missing += " record[" + std::to_string(i) + "]";
  if (!p.g_last) missing += " g_last";
  if (!p.g) missing += " g";
  if (s.inject && !p.above) missing += " above (planned with injections)";
  if (p.y_out && m.step.info.input_side && !p.yi_out) missing += " yi_out (with y_out: the step has an input side)";
  if (!missing.empty()) raise<InvalidArgument>("FusedScan::run", "null device pointers:" + missing);
  if (p.yi_out && (!p.y_out || !m.step.info.input_side))
    raise<InvalidArgument>("FusedScan::run", std::string("yi_out given ") +
                                                 (p.y_out ? "to a step without an input side" : "without y_out") +
                                                 "; give y_out alone, or both for a step with an input side");
  if (!s.inject && p.above)
    raise<InvalidArgument>("FusedScan::run",
                           "injections (above) given to a plan made without them; plan with "
                           "FusedScanOptions::injections = true");

  bool graph = false;
  typename Impl::Graph& gr = m.graphs[p.len ? 1 : 0];
  switch (m.options.graphs) {
    case FusedGraphs::always:
      graph = true;
      break;
    case FusedGraphs::never:
      break;
    case FusedGraphs::automatic:
      // From the second run with the same pointers on: a caller that changes them every run
      // would otherwise pay a capture per run.
      graph = m.stats.estimate_us < kFusedGraphMaxMicros && gr.have_previous && same(p, gr.previous);
      break;
  }
  gr.previous = p;
  gr.have_previous = true;
  // Inside the caller's capture (torch.cuda.graph) the kernels join the caller's graph: a capture
  // of our own, or its instantiation, may not start then.
  cudaStreamCaptureStatus outer = cudaStreamCaptureStatusNone;
  BPPSA_CUDA_CHECK(cudaStreamIsCapturing(stream, &outer));
  if (outer != cudaStreamCaptureStatusNone) graph = false;
  if (graph) {
    if (!gr.exec || !same(p, gr.captured)) m.capture(p, gr);
    BPPSA_CUDA_CHECK(cudaGraphLaunch(gr.exec, stream));
  } else {
    m.launch_all(p, stream);
  }
  m.stats.graph = graph;
}

template class FusedScan<float>;
template class FusedScan<double>;

}  // namespace bppsa::detail::gpu
