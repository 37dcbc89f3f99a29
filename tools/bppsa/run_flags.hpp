// The flags that define a run, derived from a subcommand's options: recorded in the checkpoints
// of `bppsa train`, checked against them on --resume, and compared across the ranks of a
// model-parallel job. Every flag defines the run unless flag_role() says otherwise, so a new
// flag is recorded and compared until someone decides it need not be.
#pragma once

#include <CLI/CLI.hpp>
#include <map>
#include <string>

#include "bppsa/io/safetensors.hpp"

namespace bppsa::cli {

/// What a flag is to a run.
enum class FlagRole {
  run,    ///< the data or the arithmetic (--samples, --lr, --seed): recorded, equal on --resume, equal on every rank
  model,  ///< the model's shape (--hidden): the checkpoint's tensors record it; equal on every rank
  job,    ///< what this invocation does (--epochs, --save, --backward): may change on --resume; equal on every rank
  local,  ///< this process only (--log, --threads, --mp-timeout): free everywhere
};
FlagRole flag_role(const std::string& flag);

/// `v` in the fewest digits that read back to it ("0.2", "2.3481692524699422"): numbers in metadata.
std::string shortest(double v);

/// Metadata key under which a checkpoint records the run flag `flag` ("--lr" → "bppsa.flag.lr").
std::string flag_key(const std::string& flag);

/// The run flags of the parsed subcommand `app` (FlagRole::run) with their values in a canonical
/// form (numbers as read, so "1e-2" and "0.01" agree; folders as canonical paths; an omitted
/// flag's default), keyed by flag_key(): what a checkpoint's metadata records.
std::map<std::string, std::string> run_record(CLI::App& app);

/// Every flag of `app` but the local ones, "--flag=value" in name order: what the ranks of a
/// model-parallel job must share (the handshake compares it).
std::string handshake_flags(CLI::App& app);

/// --resume `file`: every run flag `checkpoint` records must equal this run's. An omitted --seed
/// takes the recorded value (said on stderr); any other difference is an InvalidArgument naming
/// the flag, both values and the fix. Flags the checkpoint does not record (it predates them) pass.
void check_resume_flags(CLI::App& app, const TensorFile& checkpoint, const std::string& file);

}  // namespace bppsa::cli
