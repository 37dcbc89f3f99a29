// The CUDA half of Optimizer<T> (optimizer_half.hpp): the state and the step of
// gpu::OptimizerGpu on the model's GPU half.
#include "nn/cuda/gpu_model.hpp"
#include "train/optimizer_half.hpp"
#include "train/step_constants.hpp"

namespace bppsa::detail {
namespace {

template <class T>
class OptimizerCuda final : public OptimizerHalf<T> {
 public:
  explicit OptimizerCuda(SequenceClassifier<T>& model) : state_(gpu::make_optimizer_gpu(*model.gpu())) {}
  void step(SequenceClassifier<T>& model, const OptimizerConfig& config, std::int64_t step) override {
    state_->step(*model.gpu(), step_constants<T>(config, step));
  }
  void upload(const std::vector<std::vector<T>>& m, const std::vector<std::vector<T>>& v) override {
    state_->upload(m, v);
  }
  void download(std::vector<std::vector<T>>& m, std::vector<std::vector<T>>& v) override { state_->download(m, v); }

 private:
  std::unique_ptr<gpu::OptimizerGpu<T>> state_;
};

}  // namespace

template <class T>
std::unique_ptr<OptimizerHalf<T>> make_optimizer_cuda(SequenceClassifier<T>& model) {
  return std::make_unique<OptimizerCuda<T>>(model);
}
template std::unique_ptr<OptimizerHalf<float>> make_optimizer_cuda(SequenceClassifier<float>&);
template std::unique_ptr<OptimizerHalf<double>> make_optimizer_cuda(SequenceClassifier<double>&);

}  // namespace bppsa::detail
