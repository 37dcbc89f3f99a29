// Checkpoints of `bppsa train`: a save of the weights and the optimizer state that is atomic
// as a pair, the lock that keeps two runs off one --save path, and the JSON-lines log.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bppsa/io/safetensors.hpp"

namespace bppsa::cli {

/// Weights metadata key naming the generation of the optimizer state saved with them.
inline constexpr const char* kOptimizerKey = "bppsa.optimizer";

/// "X.optim.GEN.safetensors" beside "X.safetensors" (for another name F: "F.optim.GEN"); an
/// empty generation gives the layout before generations, "X.optim.safetensors".
std::string optimizer_path(const std::string& checkpoint, const std::string& generation = "");

/// An exclusive lock (an open file description lock) on "<checkpoint>.lock", held for the
/// object's lifetime: a second run saving to the same checkpoint is refused with an IoError
/// that names the process holding it (its pid and command line are written into the file).
/// The lock file stays when the run ends (removing it would race with the next run's lock).
class CheckpointLock {
 public:
  explicit CheckpointLock(const std::string& checkpoint);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;
  static std::string path_for(const std::string& checkpoint) { return checkpoint + ".lock"; }

 private:
  int fd_ = -1;
};

/// Saves the pair atomically as a whole: the optimizer state to a new generation file, then
/// the weights (naming that generation under kOptimizerKey) by rename, and only then removes
/// the older generations and the temporaries of saves that were killed. Whenever the process
/// dies, `path` and the generation it names are the last complete save.
void save_checkpoint(const std::string& path, TensorFile weights, TensorFile optimizer_state);

/// The optimizer state saved with the weights `weights` read from `checkpoint`: the one
/// read_resumed_checkpoint kept for them, else read now: the generation they name, or (checkpoints written before generations) "X.optim.safetensors" when its step
/// matches. IoError when it is missing, FormatError when it does not belong to the weights.
TensorFile load_optimizer_state(const std::string& checkpoint, const TensorFile& weights);

/// The weights of `checkpoint` for --resume, and at once the optimizer state they name, kept
/// for load_optimizer_state: another process saving `checkpoint` (every epoch, while this run
/// loads its data) can then no longer take that state away. When saves replaced the pair
/// between the two reads, the new pair is read (up to 3 times).
TensorFile read_resumed_checkpoint(const std::string& checkpoint);

/// The weights metadata "bppsa.step"/"bppsa.epoch" as counts; FormatError naming the file,
/// the key and the malformed value.
std::int64_t checkpoint_count(const TensorFile& weights, const std::string& key);

/// Refuses (InvalidArgument) a --log that is one of the files the run reads or writes: `files`
/// (the --init/--resume checkpoints) and their optimizer state, the --save file, its optimizer
/// files and its lock, and any file under `folders` (the data set's folders).
void check_log_path(const std::string& log, const std::string& save, const std::vector<std::string>& files,
                    const std::vector<std::string>& folders = {});

/// The --log file: JSON lines, each written and flushed at once. Every failure to write
/// (a full disk, /dev/full) is an IoError naming the file. Strings in the records must be
/// UTF-8 (pass paths through utf8_text).
class JsonLog {
 public:
  JsonLog() = default;
  /// Opens `path` (empty: no log), truncating it unless `append`.
  JsonLog(const std::string& path, bool append) { open(path, append); }
  void open(const std::string& path, bool append);
  ~JsonLog();
  JsonLog(const JsonLog&) = delete;
  JsonLog& operator=(const JsonLog&) = delete;
  bool is_open() const { return fd_ >= 0; }
  void write(const nlohmann::json& record);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace bppsa::cli
