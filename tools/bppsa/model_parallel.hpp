// Model-parallel training and gradients across MPI ranks (`mpirun -np K bppsa train
// --model-parallel …`): the flags, and the commands' arguments they join. Built from
// model_parallel.cpp with MPI, or model_parallel_none.cpp (a clear error) without.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "bppsa/nn/conv_net.hpp"
#include "bppsa/io/safetensors.hpp"
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
  bool compare_bp = false;  ///< after training, time one epoch of BP on a copy (scripts/run.sh)
  std::string init;    ///< cnn: start from these weights (e.g. a dense model to prune)
  double prune = -1;   ///< cnn: global magnitude pruning to this sparsity before training
  std::string device = "cpu";  ///< --device: recurrent models on the CPU or the GPU
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

/// `bppsa train --model-parallel`: one rank of the job.
int run_train_model_parallel(const TrainArgs& a);
/// `bppsa grad --model-parallel`: the batch's loss and gradients, written by rank 0.
int run_grad_model_parallel(const GradArgs& a);

}  // namespace bppsa::cli
