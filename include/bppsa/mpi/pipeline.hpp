// Model-parallel training across MPI ranks: the chain of a model (a CNN's layers, or a
// recurrent model's time steps) split into contiguous pipeline stages, one per rank, with
// optional data-parallel replicas of the pipeline (world = stages × replicas).
//
// One training step:
//   forward   micro-batches flow stage to stage (GPipe-style: stage s works on micro-batch m
//             while stage s + 1 works on m − 1); the last stage computes the loss.
//   backward  bp:    the gradient hops rank to rank, K − 1 sequential hops (the baseline);
//             bppsa: every rank reduces its stage to one affine transfer (its Jacobians'
//                    product) at the same time, the ranks scan the transfers in ⌈log2 K⌉
//                    (doubling) or 2⌈log2 K⌉ − 1 (Blelloch) rounds (rank_scan.hpp), then each
//                    rank pushes the gradient it received through its own stage.
//   gradients every rank computes its own stage's parameter gradients; they are summed
//             across replicas (and, for a recurrent model, across stages: its time steps
//             share weights), and every rank steps the optimizer on the parameters it owns.
//
// Every rank holds the whole model's shapes (so any rank can load or assemble a full
// checkpoint), but works only on its stage. Both backward modes give the single-process
// gradients (to floating-point reassociation).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bppsa/mpi/comm.hpp"
#include "bppsa/mpi/rank_scan.hpp"
#include "bppsa/nn/conv_net.hpp"
#include "bppsa/nn/model.hpp"

namespace bppsa::mpi {

enum class PipelineBackward { bp, bppsa };
const char* to_string(PipelineBackward b);
/// "bp", "bppsa"; InvalidArgument otherwise.
PipelineBackward parse_pipeline_backward(std::string_view name);

struct PipelineOptions {
  int stages = 0;         ///< 0: world size / replicas
  int replicas = 1;       ///< data-parallel copies of the pipeline
  int micro_batches = 1;  ///< per replica and step
  PipelineBackward backward = PipelineBackward::bppsa;
  RankScan scan = RankScan::doubling;
  int threads = 1;  ///< OpenMP threads per rank
  /// Anything else every rank must agree on (the CLI passes its flags); compared at start.
  std::string job;
};

/// Contiguous split of `costs` (one per layer or step) into `stages` non-empty ranges that
/// minimises the most expensive stage. Returns stages + 1 boundaries (0 … costs.size()).
/// InvalidArgument when there are fewer units than stages.
std::vector<Index> partition_stages(std::span<const double> costs, int stages, const std::string& units);

/// Timings and traffic of the last step on this rank.
struct PipelineStats {
  double forward = 0, backward = 0, reduce = 0;  ///< seconds
  double backward_start = 0, backward_end = 0;   ///< Comm::now() at this rank's backward's ends
  int rounds = 0;                                ///< messages this rank waited for in the backward
  std::int64_t bytes_sent = 0;                   ///< in the backward
};

namespace detail {
template <class T>
class Stage;
}

template <class T>
class ModelParallel {
 public:
  /// A CNN split by layers (balanced by each layer's multiply-adds).
  ModelParallel(const Comm& world, ConvNetConfig config, PipelineOptions options);
  /// A recurrent classifier split by time steps (sequences of `steps`, or shorter with lengths).
  ModelParallel(const Comm& world, ModelConfig config, Index steps, PipelineOptions options);
  ~ModelParallel();
  ModelParallel(const ModelParallel&) = delete;
  ModelParallel& operator=(const ModelParallel&) = delete;

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }
  const PipelineOptions& options() const { return options_; }
  /// Layers (cnn) or steps (rnn) [first, last) of this rank's stage, and every stage's boundaries.
  std::pair<Index, Index> owned() const;
  const std::vector<Index>& boundaries() const { return bounds_; }
  /// "layers 3–5 of 11" / "steps 196–391 of 784".
  std::string describe_stage() const;

  void reset_parameters(std::uint64_t seed);
  /// Every rank loads the whole checkpoint (strict, as the single-process models).
  void load_state_dict(const TensorFile& file);
  /// The whole model's state_dict, assembled on world rank 0 from every stage's owner
  /// (replica 0); other ranks get an empty file. Collective.
  TensorFile state_dict();
  /// Every parameter's gradient of the last loss_and_grad under the state_dict's names (F32),
  /// assembled on world rank 0 the same way. Collective.
  TensorFile gradients();

  /// One step's forward, loss and gradients for the full batch (every rank passes the same
  /// batch; replica r takes its share). Returns the batch's mean loss on every rank.
  /// Afterwards parameters() carries the complete gradients of the parameters this rank owns.
  ///
  /// lengths (recurrent models; empty = every sample has every step): each sample's length,
  /// 1..steps, in any order, with SequenceClassifier's semantics (the same loss and gradients).
  /// Sample b runs steps 1..lengths[b] only: the stage where it ends stops it there, and the
  /// stages after it pass its final state on unchanged (and its gradient back), computing
  /// nothing for it. A CNN refuses lengths (InvalidArgument).
  T loss_and_grad(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                  PipelineStats* stats = nullptr, std::span<const Index> lengths = {});
  /// The three parts of loss_and_grad, for measuring them apart (bench/).
  T forward_loss(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                 std::span<const Index> lengths = {});
  /// Correct predictions of the last forward_loss (or loss_and_grad) over the whole batch, on
  /// every rank: what the training loop reports as the training accuracy.
  Index last_correct() const { return last_correct_; }
  void backward(PipelineStats* stats = nullptr);
  void reduce_gradients();

  /// Loss sum and correct predictions of a batch, forward only (every rank gets the totals);
  /// lengths as loss_and_grad's.
  std::pair<double, Index> evaluate(std::span<const float> x, Index batch, std::span<const std::int64_t> labels,
                                    std::span<const Index> lengths = {});

  /// The parameters this rank updates, with their complete gradients after loss_and_grad.
  std::vector<NamedParam<T>> parameters();
  /// After the optimizer stepped parameters(): copies them into the micro-batch copies.
  void parameters_changed();

  const Comm& world() const { return world_; }
  const Comm& pipe() const { return pipe_; }

 private:
  void init(const std::string& model);
  /// World rank 0 sees every owned parameter (its values or gradients) once, in stage order.
  void gather(bool grads, const std::function<void(const NamedParam<T>&, const T*)>& take);
  Comm world_, pipe_, data_;
  PipelineOptions options_;
  int stage_ = 0, stages_ = 1, replica_ = 0, replicas_ = 1;
  std::vector<Index> bounds_;
  std::unique_ptr<detail::Stage<T>> impl_;
  std::vector<std::vector<T>> grads_;  ///< summed over micro-batches, per owned parameter
  Index micro_used_ = 0;               ///< micro-batches of the last forward
  Index last_correct_ = 0;             ///< correct predictions of the last training forward
};

extern template class ModelParallel<float>;
extern template class ModelParallel<double>;

}  // namespace bppsa::mpi
