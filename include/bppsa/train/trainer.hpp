// The training loop: seeded epoch shuffles, mini-batches, backward by BP or BPPSA, the
// optimizer step, and evaluation; progress is reported through a callback.
#pragma once

#include <cstdint>
#include <functional>

#include "bppsa/data/dataset.hpp"
#include "bppsa/data/image.hpp"
#include "bppsa/nn/conv_net.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/train/batch.hpp"
#include "bppsa/train/optimizer.hpp"

namespace bppsa {

struct TrainConfig {
  Index batch = 16;
  std::uint64_t seed = 4202;  ///< epoch e shuffles with permutation(n, seed + e)
  BackwardOptions backward;
  Index eval_batch = 256;
};

struct EvalReport {
  double loss = 0;
  double accuracy = 0;
  Index samples = 0;
  double seconds = 0;
};

struct EpochReport {
  Index epoch = 0;
  Index samples = 0;
  Index steps = 0;            ///< optimizer steps
  double train_loss = 0;      ///< mean over the epoch's batches, weighted by batch size
  double train_accuracy = 0;  ///< of the predictions made during training
  double seconds = 0;         ///< whole epoch (training only)
  double forward_seconds = 0, backward_seconds = 0, jacobian_seconds = 0, scan_seconds = 0, optimizer_seconds = 0;
  double reduce_seconds = 0;  ///< summing gradients across processes (a model-parallel run; else 0)
};

/// Called after every optimizer step: batches done, batches in the epoch, running loss.
using ProgressFn = std::function<void(Index done, Index total, double running_loss)>;

/// The models and data sets the loop serves: a SequenceClassifier on a SequenceDataset, or a
/// ConvNet on an ImageDataset (pruned ConvNets keep their masked weights at zero); with
/// bppsa::mpi, a model split across MPI ranks (bppsa/mpi/train.hpp: the same loop over its pass).
///
/// Mean loss and accuracy of the model on a data set (batches of `batch`).
template <class Model, class Data>
EvalReport evaluate(Model& model, const Data& data, Index batch = 256);

/// One epoch over `train` (all samples, last batch partial). Throws what the model throws
/// (NonFiniteError when the loss diverges) before any parameter is updated with bad values.
///
/// A SequenceClassifier on Device::cuda trains and evaluates on the GPU: the data set is
/// uploaded once and kept there while the same SequenceDataset (same object, same sizes) is
/// passed again (ResourceError, with the numbers, when it does not fit); every batch is gathered
/// on the device in the same shuffled order as on the CPU (so CPU and GPU runs from one seed see
/// the same batches); forward, loss, backward and the optimizer step are queued without waiting,
/// and the host reads the previous step's status (loss, correct count, errors) through pinned
/// memory while the next runs. Times come from CUDA events. The model's host copies are stale
/// until read (parameters(), state_dict(): they download what changed).
template <class Model, class Data, class T>
EpochReport train_epoch(Model& model, Optimizer<T>& optimizer, const Data& train, Index epoch,
                        const TrainConfig& config, const ProgressFn& progress = {});

/// Checks that the data fits the model (features = input size, labels < classes); ShapeError
/// / InvalidArgument saying which flag to change.
void check_data_fits(const ModelConfig& model, const SequenceDataset& data, const std::string& what);

/// Checks that images fit a CNN (C×H×W = the model's input, labels < its outputs).
void check_data_fits(const ConvNetConfig& model, Index classes, const ImageDataset& data, const std::string& what);

}  // namespace bppsa
