// The training loop (bppsa/train/trainer.hpp) for a model split across MPI ranks: the same
// epoch driver and evaluation as a single process's, over a pass whose steps run through the
// pipeline (src/mpi/train.cpp). Every rank of the job calls them together, with the same data
// and configuration; every rank gets the same report (the loss and the counts are summed
// across ranks; the times are this rank's).
#pragma once

#include "bppsa/mpi/pipeline.hpp"
#include "bppsa/train/trainer.hpp"

namespace bppsa {

/// One epoch of `model` (a SequenceDataset for a recurrent model, an ImageDataset for a CNN):
/// the shuffle and batches of train_epoch; each step forward, backward (the pipeline's mode;
/// config.backward is not used) and the optimizer's step on the parameters this rank owns.
/// NonFiniteError, on every rank, when a batch's loss is not finite (before the step). The
/// report's reduce_seconds is this rank's time in the gradient all-reduce.
template <class T, class Data>
EpochReport train_epoch(mpi::ModelParallel<T>& model, Optimizer<T>& optimizer, const Data& train, Index epoch,
                        const TrainConfig& config, const ProgressFn& progress = {});

/// Mean loss and accuracy on `data`, forward only through the pipeline (batches of `batch`).
template <class T, class Data>
EvalReport evaluate(mpi::ModelParallel<T>& model, const Data& data, Index batch = 256);

}  // namespace bppsa
