// Flags shared by train, eval and grad: the model, the data set and the backward method.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>

#include "bppsa/data/dataset.hpp"
#include "bppsa/data/image.hpp"
#include "bppsa/nn/model.hpp"

namespace bppsa::cli {

/// The most threads any subcommand runs (--threads, and OMP_NUM_THREADS behind --threads 0).
inline constexpr int kMaxThreads = 4096;

/// Makes every numeric option of every subcommand of `app` take only a number: CLI11 alone
/// reads "" as 0, NaN and ±inf as floats that pass range checks, "-1" for an unsigned option
/// as 2^64 − 1 and integers past the type's range as its limit. Invalid values exit 2.
void require_numbers(CLI::App& app);

/// CLI11's PositiveNumber and NonNegativeNumber with a short message ("must be > 0, got 0"):
/// theirs prints the range's end, DBL_MAX, in 309 digits.
CLI::Validator positive();
CLI::Validator non_negative();
/// A number ≥ `min`, else "must be ≥ MIN (why), got V".
CLI::Validator at_least(double min, const std::string& why);

struct ModelArgs {
  std::string model = "rnn";
  std::string arch;  ///< cnn: SPEC or a named architecture (bppsa/nn/arch.hpp)
  Index hidden = 20;
  Index proj = 0;  ///< lstm: projection size (PyTorch's proj_size), 0 = none
  Index layers = 1;
  std::string head = "last";
  std::string loss = "ce";
};
void add_model_options(CLI::App& app, ModelArgs& a);

struct DataArgs {
  std::string data = "bitstream";
  Index steps = 1000;          ///< bitstream
  Index min_steps = 0;         ///< bitstream: each sample's length uniform in [min_steps, steps]; 0 = all steps
  Index samples = 50000;       ///< bitstream total (train 64 %, test 36 %)
  std::string dir;             ///< mnist* (IDX files) / irmas / cifar10 folder
  std::string preset = "s";    ///< irmas
  double test_fraction = 0.2;  ///< irmas
  Index limit_train = 0, limit_test = 0;
  std::uint64_t data_seed = 4202;  ///< bitstream, irmas (mnist* keep their published split)
  std::string cache_dir;           ///< irmas: feature caches (default: irmas_cache_dir())
};
/// Where --data irmas keeps its feature caches without --cache-dir:
/// $XDG_CACHE_HOME/bppsa/irmas-features, else ~/.cache/bppsa/irmas-features.
std::filesystem::path irmas_cache_dir();
void add_data_options(CLI::App& app, DataArgs& a);
/// Loads and splits the data set; prints a one-line summary unless quiet ("data: Fashion-MNIST
/// (<folder>): 60000 train + 10000 test images, rows: T = 28, …", which set, where, how many).
std::pair<SequenceDataset, SequenceDataset> load_data(const DataArgs& a, bool quiet);
/// Image data for CNNs: --data mnist (1×32×32, zero-padded, standardised by the training set's
/// pixel statistics) or cifar10 (binary batches in --data-dir, CIFAR-10's usual statistics);
/// same summary and limits.
std::pair<ImageDataset, ImageDataset> load_images(const DataArgs& a, bool quiet);
/// True for the data sets load_images serves.
bool image_data(const std::string& data);

struct BackwardArgs {
  std::string backward;  ///< empty: the device's default (resolve_backward_flag)
  int threads = 0;
  int chunks = 0;
};
void add_backward_options(CLI::App& app, BackwardArgs& a);
BackwardOptions to_options(const BackwardArgs& a);
/// Fills in --backward's default for --device `device` (blelloch on the CPU, fused on cuda);
/// InvalidArgument, naming both flags, for fused on the CPU.
void resolve_backward_flag(BackwardArgs& a, const std::string& device);

/// --device cpu|cuda (default cpu): where a recurrent model runs.
void add_device_option(CLI::App& app, std::string& device);
/// The device named by --device; for cuda, that this build has CUDA and this machine a GPU
/// (UnsupportedError "built without CUDA: …", DeviceError "no CUDA device …": exit 1).
Device require_device(const std::string& name);

/// ModelConfig from flags, with input size and classes from the data.
ModelConfig model_config(const ModelArgs& a, Index input, Index classes);

/// Loads a checkpoint's config: the cell from its metadata (or `fallback_cell` when absent),
/// shapes from its tensors.
ModelConfig checkpoint_config(const TensorFile& file, const std::string& fallback_cell);

}  // namespace bppsa::cli
