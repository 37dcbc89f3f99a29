// The two halves of SequenceClassifier<T>. The front (src/nn/model.cpp) validates batches and
// call order and holds the Recurrent stack and the Linear head; a ClassifierHalf runs the batch,
// the loss and the backward: the CPU half (src/nn/cpu/classifier.cpp) through the stack's and
// the head's host API, the CUDA half (src/nn/cuda/classifier_cuda.hpp) on the device over the
// stack's CUDA half.
// The front picks the half by device (make_classifier_cpu or make_classifier_cuda); cuda/ defines
// the CUDA factory, no_gpu/ its stub.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "bppsa/nn/model.hpp"

namespace bppsa::detail {

template <class T>
class ClassifierHalf {
 public:
  virtual ~ClassifierHalf() = default;

  /// Stores a batch the front has checked (x: [batch][steps][I], one label per sample; lengths
  /// empty or one per sample in 1..steps, any order).
  virtual void set_batch(std::span<const float> x, Index batch, Index steps, std::span<const std::int64_t> labels,
                         std::span<const Index> lengths) = 0;
  /// Forward and loss of the stored batch (∂loss/∂logits kept when grad); the last step's predictions.
  virtual T forward_loss(bool grad, std::vector<std::int64_t>* predictions) = 0;
  virtual void backward(const BackwardOptions& options, BackwardTimes* times) = 0;
  /// backward() after a forward_loss that took `forward_seconds` on the host's clock, returning
  /// when it is done, with the step's times: the host's clock on the CPU, CUDA events on the GPU.
  virtual void backward_timed(const BackwardOptions& options, double forward_seconds, StepTimes* times) = 0;
  virtual void head_backward(const Matrix<T>& dlogits, Matrix<T>& dout) = 0;

  /// Brings the host copies of every parameter and gradient up to date (raising what the
  /// device reported); host_written: the head's host copy is the newest.
  virtual void pull() = 0;
  virtual void host_written() = 0;
  /// Waits for the queued work and raises what it reported (NonFiniteError).
  virtual void synchronize() = 0;
  virtual std::size_t device_bytes() const = 0;
};

/// The half of a model, for the other halves of its device (the training pass and the
/// optimizer step reach the CUDA half through it: src/nn/cuda/classifier_cuda.hpp's cuda_half).
template <class T>
struct ClassifierAccess {
  static ClassifierHalf<T>& half(SequenceClassifier<T>& model);
};

/// The CPU half (src/nn/cpu/classifier.cpp) and the CUDA half (src/nn/cuda/classifier_cuda.cpp;
/// without CUDA, src/nn/no_gpu/halves.cpp throws UnsupportedError); rnn and head outlive them.
template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cpu(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head);
template <class T>
std::unique_ptr<ClassifierHalf<T>> make_classifier_cuda(const ModelConfig& config, Recurrent<T>& rnn, Linear<T>& head);

}  // namespace bppsa::detail
