// The CUDA half of bppsa.nn's layer engine: the CUDA half of bppsa::Recurrent (one layer, one
// direction: nn/cuda/recurrent_stack.hpp's device API) reading and writing PyTorch's device memory directly, every call queued on the
// caller's stream (PyTorch's current stream): no host copy and no device synchronisation, except
// for the gradients' finiteness check when asked for (check_finite).
#include "bppsa/core/error.hpp"
#include "cuda/device_scope.hpp"
#include "layer_half.hpp"
#include "nn/cuda/recurrent_stack.hpp"

namespace bppsa::python {
namespace {

constexpr const char* kOp = "bppsa.nn";

template <class T>
class LayerGpu final : public LayerHalf<T> {
 public:
  LayerGpu(const RecurrentConfig& config, int index) : index_(index) {
    if (config.proj > 0)
      detail::raise<UnsupportedError>(kOp,
                                      "an LSTM with proj_size runs on the CPU only (the CUDA kernels have no "
                                      "projection yet): move this module and its inputs to the CPU with .cpu()");
    DeviceScope scope(index_);
    RecurrentConfig c = config;
    c.device = Device::cuda;
    stack_ = std::make_unique<detail::gpu::RecurrentStack<T>>(c);
  }

  void forward(const LayerForwardIo<T>& io, Index steps, Index batch, const std::vector<Index>& lengths,
               std::uintptr_t stream) override {
    DeviceScope scope(index_);
    auto& st = *stack_;
    st.use_stream(reinterpret_cast<cudaStream_t>(stream));
    st.upload_layer_device(0, {io.w_ih, io.w_hh, io.b_ih, io.b_hh});
    st.resize(steps, batch);
    st.set_lengths(lengths);  // a PackedSequence: each sample's length, longest first
    st.copy_input_device(io.x);
    st.forward_device({{io.h0, io.c0}});
    st.copy_output(io.out);
    st.copy_final_state(0, {io.h_n, io.c_n});
  }

  std::string backward(const LayerBackwardIo<T>& io, const BackwardOptions& options, std::uintptr_t stream) override {
    if (io.grad_out == nullptr)
      detail::raise<InvalidArgument>(kOp, "the CUDA half needs the output's gradient (zeros when none flows back)");
    DeviceScope scope(index_);
    auto& st = *stack_;
    st.use_stream(reinterpret_cast<cudaStream_t>(stream));
    // Every step's gradient is injected: telling a many-to-one gradient apart would read it on the host.
    st.backward_begin_device(io.grad_out, true);
    st.backward_layer_device(0, options, {io.grad_hn, io.grad_cn}, 0);
    if (options.check_finite) {
      st.check_grads(0);
      const detail::gpu::DeviceStatus status = st.read_status();  // waits for the stream
      if ((status.flags & detail::gpu::kGradNotFinite) != 0) {
        st.clear_flags();
        detail::raise<NonFiniteError>(kOp,
                                      "the layer's parameter gradients are not finite (NaN/Inf): the loss, "
                                      "the incoming gradients or the weights diverged");
      }
    }
    st.copy_layer_grads(0, {io.grad_w_ih, io.grad_w_hh, io.grad_b_ih, io.grad_b_hh});
    if (io.grad_x != nullptr) st.copy_input_grad(io.grad_x);
    st.copy_state0_grad(0, {io.grad_h0, io.grad_c0});
    return st.state_grads_method(0);
  }

  ~LayerGpu() override {
    try {
      DeviceScope scope(index_);  // the stack's buffers, streams and handles belong to its device
      stack_.reset();
    } catch (...) {  // a destructor never throws; the stack frees what it can on the current device
    }
  }
  LayerGpu(const LayerGpu&) = delete;
  LayerGpu& operator=(const LayerGpu&) = delete;

  Index steps() const override { return stack_->steps(); }
  Index batch() const override { return stack_->batch(); }

 private:
  int index_;
  std::unique_ptr<detail::gpu::RecurrentStack<T>> stack_;
};

}  // namespace

template <class T>
std::unique_ptr<LayerHalf<T>> make_layer_gpu(const RecurrentConfig& config, int index) {
  return std::make_unique<LayerGpu<T>>(config, index);
}
template std::unique_ptr<LayerHalf<float>> make_layer_gpu(const RecurrentConfig&, int);
template std::unique_ptr<LayerHalf<double>> make_layer_gpu(const RecurrentConfig&, int);

}  // namespace bppsa::python
