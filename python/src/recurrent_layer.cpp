// LayerEngine: bppsa.nn's layer engine (recurrent_layer.hpp). It checks every tensor of a call
// (dtype, shape, layout, device) and hands the raw pointers to bppsa::Recurrent, whose front
// picks its CPU or CUDA half; the tensors' CUDA device is current for the call.
#include "recurrent_layer.hpp"

#include "bppsa/core/device.hpp"
#include "bppsa/core/error.hpp"

namespace bppsa::python {

namespace {
constexpr const char* kOp = "bppsa.nn";

RecurrentConfig make_config(const std::string& cell, Index input, Index hidden, const std::string& nonlinearity,
                            Index proj, const Place& place) {
  RecurrentConfig c;
  c.cell = parse_cell(cell);
  c.input = input;
  c.hidden = hidden;
  c.layers = 1;
  c.nonlinearity = parse_nonlinearity(nonlinearity);
  c.proj = proj;
  if (place.device == "cuda") {
    if (!cuda_built())
      detail::raise<UnsupportedError>(
          kOp,
          "this build of bppsa has no CUDA backend (it was built without nvcc): move the module and its "
          "inputs to the CPU with .cpu(), or reinstall bppsa with its CUDA backend (docs/pytorch.md)");
    if (proj > 0)
      detail::raise<UnsupportedError>(kOp,
                                      "an LSTM with proj_size runs on the CPU only (the CUDA kernels have no "
                                      "projection yet): move this module and its inputs to the CPU with .cpu()");
    c.device = Device::cuda;
  }
  return c;
}

Place make_place(const std::string& device, int index) {
  if (device == "cpu") return Place{};
  if (device == "cuda") {
    if (index < 0) detail::raise<InvalidArgument>(kOp, "a CUDA engine needs a device index (cuda:0, cuda:1, …)");
    return Place{device, index};
  }
  detail::raise<UnsupportedError>(kOp, "tensors on " + device +
                                           ": bppsa runs on the CPU and on CUDA devices; move "
                                           "the module and its inputs with .cpu() or .cuda()");
}
}  // namespace

template <class T>
LayerEngine<T>::LayerEngine(const std::string& cell, Index input, Index hidden, const std::string& nonlinearity,
                            Index proj, const std::string& device, int device_index)
    : place_(make_place(device, device_index)),
      config_(make_config(cell, input, hidden, nonlinearity, proj, place_)),
      gates_(gate_count(config_.cell) * hidden) {
  const CudaDeviceScope scope(cuda_index());  // a stack's buffers, streams and handles belong to its device
  rnn_ = std::make_unique<Recurrent<T>>(config_);
}

template <class T>
LayerEngine<T>::~LayerEngine() {
  try {
    const CudaDeviceScope scope(cuda_index());
    rnn_.reset();
  } catch (...) {  // a destructor never throws; the stack frees what it can on the current device
  }
}

template <class T>
const T* LayerEngine<T>::in(const TensorRef& t, const std::vector<Index>& shape, const std::string& what) const {
  return checked_data<T>(t, shape, kOp, what, place_);
}
template <class T>
const T* LayerEngine<T>::in(const OptRef& t, const std::vector<Index>& shape, const std::string& what) const {
  return t ? in(*t, shape, what) : nullptr;
}
template <class T>
T* LayerEngine<T>::out(const OptRef& t, const std::vector<Index>& shape, const std::string& what) const {
  return t ? checked_data<T>(*t, shape, kOp, what, place_) : nullptr;
}

template <class T>
void LayerEngine<T>::forward(const TensorRef& x, const OptRef& h0, const OptRef& c0, const TensorRef& w_ih,
                             const TensorRef& w_hh, const OptRef& b_ih, const OptRef& b_hh, const OptRef& w_hr,
                             const std::vector<Index>& lengths, const TensorRef& out_t, const TensorRef& h_n,
                             const OptRef& c_n, std::uintptr_t stream, bool record) {
  const Index I = config_.input, H = config_.hidden, P = output_size(config_), G = gates_;
  const bool lstm = config_.cell == CellType::lstm;
  if (x.shape.size() != 3)
    detail::raise<ShapeError>(
        kOp, "input has shape " + shape_text(x.shape) + ", expected (steps, batch, " + std::to_string(I) + ")");
  const Index steps = x.shape[0], batch = x.shape[1];
  LayerForwardIo<T> io;
  io.record = record;
  io.x = in(x, {steps, batch, I}, "input");
  io.w_ih = in(w_ih, {G, I}, "weight_ih");
  io.w_hh = in(w_hh, {G, P}, "weight_hh");
  io.b_ih = in(b_ih, {G}, "bias_ih");
  io.b_hh = in(b_hh, {G}, "bias_hh");
  if (config_.proj > 0) {
    if (!w_hr) detail::raise<InvalidArgument>(kOp, "an LSTM with proj_size needs weight_hr");
    io.w_hr = in(w_hr, {P, H}, "weight_hr");
  } else if (w_hr) {
    detail::raise<InvalidArgument>(kOp, "weight_hr given to a layer without a projection (proj_size 0)");
  }
  io.h0 = in(h0, {batch, P}, "h_0");
  if (c0 && !lstm) detail::raise<InvalidArgument>(kOp, "c_0 given to a cell without a cell state");
  io.c0 = in(c0, {batch, H}, "c_0");
  io.out = out(out_t, {steps, batch, P}, "output");
  io.h_n = out(h_n, {batch, P}, "h_n");
  if (lstm) {
    if (!c_n) detail::raise<InvalidArgument>(kOp, "an LSTM layer needs a c_n buffer");
    io.c_n = out(c_n, {batch, H}, "c_n");
  }
  const CudaDeviceScope scope(cuda_index());
  rnn_->forward_io(io, steps, batch, lengths, stream);
}

template <class T>
std::string LayerEngine<T>::backward(const TensorRef& w_ih, const TensorRef& w_hh, const OptRef& b_ih,
                                     const OptRef& b_hh, const OptRef& w_hr, const OptRef& grad_out,
                                     const OptRef& grad_hn, const OptRef& grad_cn, const std::string& method,
                                     int threads, int chunks, const OptRef& grad_x, const OptRef& grad_h0,
                                     const OptRef& grad_c0, const OptRef& grad_w_ih, const OptRef& grad_w_hh,
                                     const OptRef& grad_b_ih, const OptRef& grad_b_hh, const OptRef& grad_w_hr,
                                     bool check_finite, std::uintptr_t stream) {
  const Index H = config_.hidden, I = config_.input, P = output_size(config_), G = gates_;
  const Index steps = rnn_->steps(), batch = rnn_->batch();
  const bool lstm = config_.cell == CellType::lstm;
  if (steps == 0) detail::raise<InvalidArgument>(kOp, "backward without a forward");
  BackwardOptions options;
  options.method = parse_backward(method);
  if (chunks < 0)
    detail::raise<InvalidArgument>(kOp, "chunks must be ≥ 0 (0 = automatic), got " + std::to_string(chunks));
  options.threads = checked_threads(threads, kOp);
  options.chunks = chunks;
  options.check_finite = check_finite;

  LayerBackwardIo<T> io;
  io.w_ih = in(w_ih, {G, I}, "weight_ih");
  io.w_hh = in(w_hh, {G, P}, "weight_hh");
  io.b_ih = in(b_ih, {G}, "bias_ih");
  io.b_hh = in(b_hh, {G}, "bias_hh");
  if (config_.proj > 0) io.w_hr = in(w_hr, {P, H}, "weight_hr");
  io.grad_out = in(grad_out, {steps, batch, P}, "grad of output");
  io.grad_hn = in(grad_hn, {batch, P}, "grad of h_n");
  if ((grad_cn || grad_c0) && !lstm)
    detail::raise<InvalidArgument>(kOp, "a gradient of c_n or c_0 given to a cell without a cell state");
  io.grad_cn = in(grad_cn, {batch, H}, "grad of c_n");
  io.grad_x = out(grad_x, {steps, batch, I}, "grad of input");
  io.grad_h0 = out(grad_h0, {batch, P}, "grad of h_0");
  io.grad_c0 = out(grad_c0, {batch, H}, "grad of c_0");
  io.grad_w_ih = out(grad_w_ih, {G, I}, "grad of weight_ih");
  io.grad_w_hh = out(grad_w_hh, {G, P}, "grad of weight_hh");
  io.grad_b_ih = out(grad_b_ih, {G}, "grad of bias_ih");
  io.grad_b_hh = out(grad_b_hh, {G}, "grad of bias_hh");
  if (config_.proj > 0) io.grad_w_hr = out(grad_w_hr, {P, H}, "grad of weight_hr");
  const CudaDeviceScope scope(cuda_index());
  return rnn_->backward_io(io, options, stream);
}

template <class T>
void LayerEngine<T>::set_forward(const std::string& method, int threads) {
  const ForwardMethod m = parse_forward(method);
  threads = checked_threads(threads, kOp);
  if (m == rnn_->forward_options().method && threads == rnn_->forward_options().threads) return;
  if (m == ForwardMethod::newton && place_.device == "cuda")  // auto: sequential there
    detail::raise<UnsupportedError>(kOp, "forward='" + method +
                                             "' runs on the CPU only for now: use forward='sequential' on CUDA "
                                             "tensors, or move the module and its inputs with .cpu()");
  ForwardOptions o = rnn_->forward_options();
  o.method = m;
  o.threads = threads;
  rnn_->set_forward_options(o);
}

template <class T>
std::tuple<std::string, int, int, double, bool, Index> LayerEngine<T>::forward_report() const {
  const ForwardReport& r = rnn_->forward_report();
  if (r.iterations.empty()) return {"sequential", 0, 0, 0.0, false, 0};
  return {to_string(r.ran.front()),
          r.max_iterations.front(),
          r.iterations.front(),
          r.residual.front(),
          static_cast<bool>(r.fell_back.front()),
          r.fallback_step.front()};
}

template class LayerEngine<float>;
template class LayerEngine<double>;

}  // namespace bppsa::python
