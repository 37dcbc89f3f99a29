// `bppsa train`'s loop, one for every mode: a single process (train.cpp: a recurrent model on
// the CPU or the GPU, a CNN) and one rank of a model-parallel job (model_parallel.cpp). The
// optimizer and its resumed state, the model line, the JSON-lines log, the epochs (the
// library's train_epoch and evaluate, which drive the model's pass), the divergence check, the
// epoch line and the checkpoints are the same code; a LoopMode says what a mode does its own
// way (who prints and writes, how a checkpoint is gathered and written), and the tail
// (--compare-bp, --check) is the caller's.
#pragma once

#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bppsa/bppsa.hpp"
#include "bppsa/io/safetensors.hpp"
#include "bppsa/train/trainer.hpp"
#include "checkpoint.hpp"
#include "model_parallel.hpp"
#include "progress.hpp"
#include "run_flags.hpp"

namespace bppsa::cli {

/// "1e+06", "0.01": a flag's value for messages.
std::string number(double v);

/// What differs between the modes the loop runs.
struct LoopMode {
  /// Prints, logs, checks for divergence and writes the checkpoints: the process of a single
  /// run, rank 0 of a model-parallel job (every rank trains, evaluates and gathers).
  bool root = true;
  std::string backward;         ///< the model line's words on the backward ("backward bppsa (→ …)")
  std::string record_backward;  ///< bppsa.backward of the checkpoints
  nlohmann::json start;         ///< the log's start event: this mode's fields (over the common ones)
  /// The epoch line's times are this rank's, with its gradient all-reduce (a model-parallel job).
  bool rank_times = false;
  /// After every rank took part in model.state_dict() for a checkpoint (a job's barrier); may be empty.
  std::function<void(Index epoch)> gathered;
  /// Writes a checkpoint (root only); empty: the weights with the optimizer's state (save_checkpoint).
  std::function<void(TensorFile&&)> write;
  std::string saved;  ///< said after "saved FILE (epoch N": ", assembled from 3 stages"
};

/// What the loop hands its tail (--compare-bp, --check) when the epochs are done.
struct LoopEnd {
  Optimizer<float>& optimizer;
  const std::vector<NamedParam<float>>& params;  ///< model.parameters() (a rank's: the ones it owns)
  const EpochReport& last;                       ///< the last epoch trained here (steps 0: none)
  const TrainConfig& config;
  JsonLog& log;  ///< open on the root when --log is given
};

/// --batch, --seed and the backward flags as the library's TrainConfig.
TrainConfig train_config(const TrainArgs& a);

namespace loop {  // the loop's steps that need no model (train.cpp)
/// The memory guard: weights, gradients and the optimizer's state of `params`.
void check_training_memory(const TrainArgs& a, const std::string& description, const OptimizerConfig& oc,
                           const std::vector<NamedParam<float>>& params);
/// --resume: the same data as the checkpoint's, and its optimizer state into `optimizer`.
void resume_optimizer(const TrainArgs& a, const TensorFile& resumed, const std::string& data,
                      Optimizer<float>& optimizer, const std::vector<NamedParam<float>>& params);
/// The model line, the log's start event and (a finished checkpoint) a note; on the root.
void start(const TrainArgs& a, const LoopMode& mode, const std::string& description, const std::string& data,
           const OptimizerConfig& oc, Index first_epoch, const std::map<std::string, std::string>& metadata,
           JsonLog& log);
/// NonFiniteError again with a note on a large --weight-decay.
[[noreturn]] void diverged(const TrainArgs& a, const NonFiniteError& err);
/// The epoch's line on stdout and its record in the log.
void report(const TrainArgs& a, const LoopMode& mode, Index epoch, const EpochReport& r, const EvalReport& e,
            std::int64_t steps, JsonLog& log);
/// A checkpoint's metadata: the epoch, the step, the data, the backward, `metadata`, the run's
/// flags and the divergence guard's reference.
void checkpoint_metadata(const TrainArgs& a, const LoopMode& mode, Index epoch, std::int64_t steps,
                         const std::string& data, const std::map<std::string, std::string>& metadata,
                         const std::map<std::string, std::string>& record, const DivergenceGuard& guard,
                         TensorFile& ck);
}  // namespace loop

/// The loop: `model` trained on `train` for the epochs --epochs asks for (a resumed run from
/// the one after `resumed`'s), evaluated on `test` after each; `metadata` goes into the log's
/// start event and every checkpoint. Returns tail(LoopEnd), the exit code.
template <class Model, class Data, class Tail>
int train_loop(const TrainArgs& a, Model& model, const std::string& description, const Data& train,
               const Data& test, const TensorFile& resumed, const std::map<std::string, std::string>& metadata,
               const LoopMode& mode, Tail&& tail) {
  const Index first_epoch = a.resume.empty() ? 1 : checkpoint_count(resumed, "bppsa.epoch") + 1;
  const OptimizerConfig oc = optimizer_config(a, train.size());
  Optimizer<float> optimizer(oc);
  const std::vector<NamedParam<float>> params = model.parameters();
  loop::check_training_memory(a, description, oc, params);
  DivergenceGuard guard(a.resume.empty() ? nullptr : &resumed);
  const std::map<std::string, std::string> record = run_record(*a.app);  // the flags that define the run
  const std::string data = utf8_text(train.name);
  if (!a.resume.empty()) loop::resume_optimizer(a, resumed, data, optimizer, params);
  const TrainConfig tc = train_config(a);
  JsonLog log;
  if (mode.root) loop::start(a, mode, description, data, oc, first_epoch, metadata, log);

  EpochReport last;  // the last epoch trained here
  for (Index epoch = first_epoch; epoch <= a.epochs; ++epoch) {
    ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(a.epochs), "batch",
                    mode.root && !a.no_progress);
    EpochReport r;
    try {
      r = train_epoch(model, optimizer, train, epoch, tc,
                      [&](Index done, Index total, double loss) { bar.update(done, total, loss); });
    } catch (const NonFiniteError& err) {
      loop::diverged(a, err);
    }
    bar.finish();
    last = r;
    const EvalReport e = evaluate(model, test, 256);
    if (mode.root) {  // a job's losses are the same on every rank: rank 0's error ends the job
      guard.check(a, epoch, r.train_loss, e.loss);
      loop::report(a, mode, epoch, r, e, optimizer.steps(), log);
    }
    if (!a.save.empty()) {
      TensorFile ck = model.state_dict();
      if (mode.gathered) mode.gathered(epoch);
      if (mode.root) {
        loop::checkpoint_metadata(a, mode, epoch, optimizer.steps(), data, metadata, record, guard, ck);
        if (mode.write)
          mode.write(std::move(ck));
        else
          save_checkpoint(a.save, std::move(ck), optimizer.state(params));
        std::cerr << "saved " << a.save << " (epoch " << epoch << mode.saved << ")\n";
      }
    }
  }
  return tail(LoopEnd{optimizer, params, last, tc, log});
}

}  // namespace bppsa::cli
