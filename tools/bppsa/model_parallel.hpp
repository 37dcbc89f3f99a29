// Model-parallel training and gradients across MPI ranks (`mpirun -np K bppsa train
// --model-parallel …`): the flags, and the commands' arguments they join. Built from
// model_parallel.cpp with MPI, or model_parallel_none.cpp (a clear error) without.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bppsa/io/safetensors.hpp"
#include "bppsa/nn/conv_net.hpp"
#include "bppsa/train/optimizer.hpp"
#include "options.hpp"

namespace bppsa::cli {

struct MpArgs {
  bool enabled = false;
  int stages = 0;
  int replicas = 1;
  int micro_batches = 1;
  std::string backward = "bppsa";
  std::string scan = "doubling";
  double timeout = 120;
};
/// --model-parallel, --stages, --replicas, --micro-batches, --mp-backward, --mp-scan, --mp-timeout.
void add_model_parallel_options(CLI::App& app, MpArgs& a);

struct TrainArgs {
  ModelArgs model;
  DataArgs data;
  BackwardArgs backward;
  Index epochs = 1;
  Index batch = 16;
  double lr = 3e-5;
  std::string lr_schedule = "constant";
  std::string optimizer = "adam";
  double momentum = 0;
  double weight_decay = 0;
  double clip = 0;
  std::uint64_t seed = 4202;
  std::string save, resume, log;
  bool no_progress = false;
  bool check = false;
  bool compare_bp = false;       ///< after training, time one epoch of BP on a copy (scripts/run.sh)
  std::string init;              ///< cnn: start from these weights (e.g. a dense model to prune)
  double prune = -1;             ///< cnn: global magnitude pruning to this sparsity before training
  std::string device = "cpu";    ///< --device: recurrent models on the CPU or the GPU
  std::string forward = "auto";  ///< --forward: the recurrent forward's method
  MpArgs mp;
  CLI::App* app = nullptr;
};

/// The optimizer a training run's flags ask for; a cosine schedule spans --epochs × the batches
/// per epoch of a training set of `train_size` samples.
OptimizerConfig optimizer_config(const TrainArgs& a, Index train_size);

struct GradArgs {
  std::string model;
  std::string arch;
  std::string weights, batch, out;
  BackwardArgs backward;
  std::string device = "cpu";
  MpArgs mp;
  CLI::App* app = nullptr;
};

/// Shared by single-process and model-parallel training (train.cpp):
/// The recurrent model a run trains: from `checkpoint` (--model/--hidden/--layers, when given,
/// must agree with it) or from the flags and the data; checked against both data sets.
ModelConfig recurrent_train_config(const TrainArgs& a, const SequenceDataset& train, const SequenceDataset& test,
                                   const TensorFile* checkpoint);
/// The CNN a run trains: from `checkpoint` (--arch, when given, must agree) or from --arch and
/// the images' shape; --loss; checked against both data sets.
ConvNetConfig cnn_train_config(const TrainArgs& a, const ImageDataset& train, const ImageDataset& test,
                               const TensorFile* checkpoint);
/// Stops a run whose loss diverged before the epoch is saved over the last good checkpoint. An
/// epoch diverged when a loss is not finite or above 1e6, or when its training loss is more
/// than 5× the run's first epoch's plus 1 and above the epoch before's. The first and the last
/// training losses travel in the checkpoint's metadata, so a resumed run keeps its reference.
class DivergenceGuard {
 public:
  /// A new run, or (`checkpoint`) one resumed from the losses it records.
  explicit DivergenceGuard(const TensorFile* checkpoint = nullptr);
  /// Epoch `epoch`'s losses: NonFiniteError (the flags to change, --save's file kept) when the run
  /// diverged, else they become the reference.
  void check(const TrainArgs& a, Index epoch, double train_loss, double test_loss);
  /// The reference, for a checkpoint's metadata.
  void record(std::map<std::string, std::string>& metadata) const;

 private:
  double first_, last_;  ///< training losses of the run's first epoch and of the last one; NaN: none yet
};

/// --check's measure: the largest over tensors of max|a − b| / max|b| (b the reference), and
/// which tensor (names[i]). The denominator is floored at 1e-7 × the largest |b| of any
/// tensor: a tensor whose gradient has vanished below float resolution of the whole gradient
/// (e.g. W_ih after hundreds of zero-padded steps, ~1e-45) would otherwise compare denormals.
double max_relative_error(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                          const std::vector<std::string>& names, std::string* where);

/// `bppsa grad`'s optional 'lengths' tensor of its --batch file (`file`): each sample's length,
/// I64 [B], each in 1..T (the steps of 'x'); empty when the file has none. ShapeError or
/// FormatError naming the file otherwise. Shared by single-process and model-parallel grad.
std::vector<Index> batch_lengths(const TensorFile& batch, Index B, Index T, const std::string& file);

/// Runs `body`, which reads and uses `bppsa grad`'s --batch file `batch`: an error whose message
/// does not name the flag and the file is thrown again, as the same type, with "--batch FILE: "
/// in front, so that every failure the batch causes says where it came from.
void naming_batch(const std::string& batch, const std::function<void()>& body);

/// `bppsa train --model-parallel`: one rank of the job.
int run_train_model_parallel(const TrainArgs& a);
/// `bppsa grad --model-parallel`: the batch's loss and gradients, written by rank 0.
int run_grad_model_parallel(const GradArgs& a);

}  // namespace bppsa::cli
