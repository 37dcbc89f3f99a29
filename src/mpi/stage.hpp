// One rank's part of a model-parallel model: the interface the pipeline driver
// (pipeline.cpp) runs, with a CNN half (cnn_stage.cpp: a range of layers) and a recurrent
// half (rnn_stage.cpp: a range of time steps). Adding a model family = one more Stage.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/mpi/pipeline.hpp"

namespace bppsa::mpi::detail {

/// A micro-batch of the data, as the CLI's batches are laid out (row-major samples).
struct Micro {
  const float* x = nullptr;  ///< [batch, …] (cnn: C·H·W per sample; rnn: steps·input)
  const std::int64_t* labels = nullptr;
  Index batch = 0;
  /// rnn: each sample's length (1..steps, any order), or nullptr: every sample has every step.
  const Index* lengths = nullptr;
  /// With lengths: their mean over the whole batch (every replica's and micro-batch's samples),
  /// which weighs a stage's per-step losses as single-process training does (the mean over the
  /// real steps of the batch).
  double mean_length = 0;
};

/// Micro-batch m of a step lives in slot m: a full copy of the model (its layers record the
/// forward that their backward needs), whose parameters are kept equal to slot 0's.
template <class T>
class Stage {
 public:
  virtual ~Stage() = default;
  /// Cross-rank scans per backward: 1 for a CNN, one per layer (top down) for a recurrent stack.
  virtual int passes() const = 0;
  virtual void ensure_slots(int count) = 0;
  virtual void reset_parameters(std::uint64_t seed) = 0;
  virtual void load_state_dict(const TensorFile& file) = 0;
  virtual TensorFile state_dict() = 0;  ///< slot 0's whole model
  /// Parameters of slot `slot` that the stage [first, last) owns (same order in every slot).
  virtual std::vector<NamedParam<T>> params(int slot, Index first, Index last) = 0;
  /// True when every stage owns every parameter (a recurrent model's steps share weights).
  virtual bool shared_weights() const = 0;
  /// Checks per-sample lengths (empty: none) for a batch of `batch` before any message is
  /// sent: every rank raises the same error. Only recurrent stages take lengths.
  virtual void check_lengths(std::span<const Index> lengths, Index) const {
    if (!lengths.empty())
      throw InvalidArgument(
          "[model-parallel] per-sample lengths are for recurrent models (rnn, gru, lstm), not this one; remove them");
  }

  /// Forward of micro-batch m from the previous stage's output (nullptr on stage 0). Returns
  /// this stage's output (empty on the last stage). Adds `weight` × this stage's mean loss
  /// to *loss_sum and (last stage) correct predictions to *correct. With train, the loss
  /// gradient is scaled by the same weight, so gradients come out as those of the whole
  /// batch's mean.
  virtual Matrix<T> forward(int m, const Micro& mb, const Matrix<T>* in, bool train, double weight, double* loss_sum,
                            Index* correct) = 0;
  /// Back-propagation through the stage from the gradient on its output (nullptr on the
  /// last stage); parameter gradients into slot m; returns the gradient on its input
  /// (empty on stage 0).
  virtual Matrix<T> backward_bp(int m, const Matrix<T>* g_out) = 0;
  /// The stage's affine transfer for pass p (the last stage: the constant gradient it
  /// passes on; stage 0: the identity, which no rank needs).
  virtual Transfer<T> transfer(int m, int pass) = 0;
  /// Finishes pass p of micro-batch m from the gradient that arrived on the stage's output.
  virtual void push(int m, int pass, const Matrix<T>& g_out) = 0;
};

/// Copies parameter values (same list, in the same order, of two copies of one model).
template <class T>
void copy_values(const std::vector<NamedParam<T>>& from, const std::vector<NamedParam<T>>& to) {
  for (std::size_t i = 0; i < from.size(); ++i) std::copy(from[i].value, from[i].value + from[i].size, to[i].value);
}

/// The micro-batch slots of a stage: each holds a whole model (`net`, with parameters()) and
/// what the stage records per micro-batch; a new slot starts from slot 0's parameters.
template <class Slot>
class Slots {
 public:
  template <class Config>
  void ensure(int count, const Config& config) {
    while (static_cast<int>(slots_.size()) < count) {
      auto s = std::make_unique<Slot>(config);
      if (!slots_.empty()) copy_values(slots_.front()->net.parameters(), s->net.parameters());
      slots_.push_back(std::move(s));
    }
  }
  void reset_parameters(std::uint64_t seed) {
    for (auto& s : slots_) s->net.reset_parameters(seed);
  }
  void load_state_dict(const TensorFile& file) {
    for (auto& s : slots_) s->net.load_state_dict(file);
  }
  TensorFile state_dict() const { return slots_.front()->net.state_dict(); }
  Slot& operator[](int m) { return *slots_.at(static_cast<std::size_t>(m)); }

 private:
  std::vector<std::unique_ptr<Slot>> slots_;
};

template <class T>
std::unique_ptr<Stage<T>> make_cnn_stage(const ConvNetConfig& config, Index first, Index last, bool is_last,
                                         int threads);
template <class T>
std::unique_ptr<Stage<T>> make_rnn_stage(const ModelConfig& config, Index steps, Index first, Index last,
                                         bool is_last, int threads);

}  // namespace bppsa::mpi::detail
