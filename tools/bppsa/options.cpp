// Shared flags and data loading for the training-related subcommands.
#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "bppsa/core/device.hpp"
#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/data/bitstream.hpp"
#include "bppsa/data/cifar10.hpp"
#include "bppsa/data/irmas.hpp"
#include "bppsa/data/mnist.hpp"

namespace bppsa::cli {

namespace {
/// A validator for CLI11's option type `type` (INT, UINT or FLOAT); no description, so that
/// --help shows the types and ranges as before.
CLI::Validator number(const std::string& type) {
  return CLI::Validator(
      [type](std::string& s) -> std::string {
        const char *b = s.data(), *e = b + s.size();
        bool ok = false;
        if (type == "FLOAT") {
          char* end = nullptr;
          const double v = std::strtod(s.c_str(), &end);
          ok = !s.empty() && end == e && std::isfinite(v);
        } else if (type == "UINT") {
          std::uint64_t v = 0;
          const auto r = std::from_chars(b, e, v);
          ok = !s.empty() && r.ec == std::errc() && r.ptr == e;
        } else {
          std::int64_t v = 0;
          const auto r = std::from_chars(b, e, v);
          ok = !s.empty() && r.ec == std::errc() && r.ptr == e;
        }
        if (ok) return {};
        return "'" + s + "' is not " +
               (type == "FLOAT"  ? "a finite number"
                : type == "UINT" ? "a whole number in [0, 2^64 − 1]"
                                 : "a whole number in [−2^63, 2^63 − 1]");
      },
      "");
}
}  // namespace

namespace {
/// Accepts a number v > bound (≥ when `inclusive`); otherwise "must be > 0, got S" with `why`.
CLI::Validator bound_check(double bound, bool inclusive, const std::string& why, const std::string& name) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", bound);
  const std::string shown = (inclusive ? "≥ " : "> ") + std::string(b);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return {};  // not a number: number() says so
        if (inclusive ? v >= bound : v > bound) return {};
        return "must be " + shown + why + ", got " + s;
      },
      name);
}
}  // namespace

CLI::Validator positive() { return bound_check(0, false, "", "POSITIVE"); }
CLI::Validator non_negative() { return bound_check(0, true, "", "NONNEGATIVE"); }
CLI::Validator at_least(double min, const std::string& why) {
  char b[32];
  std::snprintf(b, sizeof b, "≥ %g", min);
  return bound_check(min, true, " (" + why + ")", b);
}

void require_numbers(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    for (CLI::Option* opt : sub->get_options()) {
      const std::string type = opt->get_type_name();
      const std::string base = type.substr(0, type.find(':'));
      if (base == "INT" || base == "UINT" || base == "FLOAT") opt->check(number(base));
    }
}

void add_model_options(CLI::App& app, ModelArgs& a) {
  app.add_option("--model", a.model, "rnn (tanh), gru or lstm (recurrent), or cnn (needs --arch)")
      ->check(CLI::IsMember({"rnn", "gru", "lstm", "cnn"}))
      ->capture_default_str();
  app.add_option("--arch", a.arch,
                 "cnn: comma-separated layers conv:OUT:K:S:P[:D], maxpool:K:S[:P], avgpool:K:S[:P], relu, tanh, "
                 "flatten, linear:OUT, or vgg11, vgg11/N (channel widths / N)");
  app.add_option("--hidden", a.hidden, "hidden size H")
      ->check(CLI::Range(Index{1}, Index{1} << 20))
      ->capture_default_str();
  app.add_option("--proj", a.proj,
                 "lstm: projection size P (PyTorch's proj_size), 1 ≤ P < --hidden: h_t = W_hr (o_t ⊙ tanh c_t); "
                 "0 = none; CPU only")
      ->check(CLI::Range(Index{0}, Index{1} << 20))
      ->capture_default_str();
  app.add_option("--layers", a.layers, "stacked recurrent layers (num_layers)")
      ->check(CLI::Range(Index{1}, Index{64}))
      ->capture_default_str();
  app.add_option("--head", a.head, "last: Linear on the last step (many-to-one); every: on every step")
      ->check(CLI::IsMember({"last", "every"}))
      ->capture_default_str();
  app.add_option("--loss", a.loss, "ce (cross-entropy) or mse (against one-hot)")
      ->check(CLI::IsMember({"ce", "mse"}))
      ->capture_default_str();
}

void add_data_options(CLI::App& app, DataArgs& a) {
  app.add_option(
         "--data", a.data,
         "bitstream (docs/method.md §5), mnist-rows (T=28), mnist-pixels (T=784), irmas (folder of WAVs); for --model "
         "cnn: mnist (1×32×32 images) or cifar10 (binary batches in --data-dir). mnist*: an MNIST-format set "
         "of IDX files, Fashion-MNIST by default, with its official train/test split")
      ->check(CLI::IsMember({"bitstream", "mnist-rows", "mnist-pixels", "irmas", "mnist", "cifar10"}))
      ->capture_default_str();
  app.add_option("--steps", a.steps, "bitstream: sequence length T")
      ->check(CLI::Range(Index{1}, Index{10000000}))
      ->capture_default_str();
  app.add_option("--min-steps", a.min_steps,
                 "bitstream: samples of different lengths, each uniform in [MIN, --steps] (padded to --steps; "
                 "each sample runs and is scanned for its own length only); 0 = every sample --steps long")
      ->check(CLI::Range(Index{0}, Index{1} << 24))
      ->capture_default_str();
  app.add_option("--samples", a.samples, "bitstream: samples in all (64 % train, 36 % test)")
      ->check(CLI::Range(Index{2}, Index{100000000}))
      ->capture_default_str();
  app.add_option("--data-dir", a.dir,
                 "mnist*: a folder of IDX files (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
                 "t10k-*; default $BPPSA_MNIST or /usr/share/datasets/fashion-mnist, Debian's "
                 "dataset-fashion-mnist); irmas: the WAV folder; cifar10: cifar-10-batches-bin or its parent");
  app.add_option("--preset", a.preset, "irmas MFCC preset s, m or l (docs/method.md §5)")
      ->check(CLI::IsMember({"s", "m", "l"}))
      ->capture_default_str();
  app.add_option("--test-fraction", a.test_fraction, "irmas: held-out fraction")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  app.add_option("--limit-train", a.limit_train, "use only the first N training samples (0 = all)")
      ->check(non_negative());
  app.add_option("--limit-test", a.limit_test, "use only the first N test samples (0 = all)")->check(non_negative());
  app.add_option("--cache-dir", a.cache_dir,
                 "irmas: folder of the MFCC feature caches, one file per data folder and preset, written "
                 "atomically (default $XDG_CACHE_HOME/bppsa/irmas-features, else ~/.cache/bppsa/irmas-features); "
                 "the data folder is only read");
  app.add_option("--data-seed", a.data_seed,
                 "seed of the data generation and split (bitstream, irmas; mnist* keep the published split)")
      ->capture_default_str();
}

std::filesystem::path irmas_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return std::filesystem::path(xdg) / "bppsa" / "irmas-features";
  const char* home = std::getenv("HOME");
  if (!home || !*home)
    detail::raise<InvalidArgument>("data",
                                   "--data irmas: neither $XDG_CACHE_HOME nor $HOME is set, so there is no "
                                   "default folder for the feature cache; pass --cache-dir DIR");
  return std::filesystem::path(home) / ".cache" / "bppsa" / "irmas-features";
}

namespace {
/// The feature cache of --data-dir and --preset in --cache-dir (or irmas_cache_dir()): named
/// by a hash of the data folder's canonical path, so that folders and presets never share one
/// (the file's own key still checks the WAVs' names, sizes and times).
std::filesystem::path irmas_cache_file(const DataArgs& a) {
  const std::filesystem::path dir = a.cache_dir.empty() ? irmas_cache_dir() : std::filesystem::path(a.cache_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::filesystem::is_directory(dir))
    detail::raise<IoError>("data", "the feature cache folder " + dir.string() + " cannot be created" +
                                       (ec ? " (" + ec.message() + ")" : std::string()) +
                                       "; pass --cache-dir with a writable folder");
  const std::string folder = std::filesystem::weakly_canonical(a.dir, ec).string();
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (unsigned char c : ec ? a.dir : folder) h = (h ^ c) * 0x100000001b3ULL;
  char name[64];
  std::snprintf(name, sizeof name, "%016llx-%s.safetensors", static_cast<unsigned long long>(h), a.preset.c_str());
  return dir / name;
}

template <class Data>
Data head_of(Data d, Index limit) {
  if (limit <= 0 || limit >= d.size()) return d;
  std::vector<Index> idx(static_cast<std::size_t>(limit));
  for (Index i = 0; i < limit; ++i) idx[static_cast<std::size_t>(i)] = i;
  return subset(d, idx);
}

/// --data mnist*: the set in --data-dir (else default_mnist_dir()), cut to --limit-train and
/// --limit-test before it becomes floats. `source` gets the first words of the run's first line:
/// "Fashion-MNIST (<folder>): 200 train + 100 test images (the first of 60000 + 10000)".
MnistSet mnist_set(const DataArgs& a, std::string& source) {
  MnistSet set = read_mnist(a.dir.empty() ? default_mnist_dir() : std::filesystem::path(a.dir));
  const Index train = set.train_size(), test = set.test_size();
  set = mnist_head(std::move(set), a.limit_train, a.limit_test);
  const std::string folder = set.folder.string();
  source = set.name + (set.name.find(folder) == std::string::npos ? " (" + folder + ")" : "") + ": " +
           std::to_string(set.train_size()) + " train + " + std::to_string(set.test_size()) + " test images";
  if (set.train_size() < train || set.test_size() < test)
    source += " (the first of " + std::to_string(train) + " + " + std::to_string(test) + ")";
  return set;
}
}  // namespace

std::pair<SequenceDataset, SequenceDataset> load_data(const DataArgs& a, bool quiet) {
  std::pair<SequenceDataset, SequenceDataset> out;
  std::string source;  // MNIST-format sets: which one, where, how many images
  if (a.min_steps > 0 && a.data != "bitstream")
    detail::raise<InvalidArgument>("data",
                                   "--min-steps applies to --data bitstream only (IRMAS clips keep their own "
                                   "lengths); drop it for --data " +
                                       a.data);
  if (a.data == "bitstream") {
    const double samples = static_cast<double>(a.samples), steps = static_cast<double>(a.steps);
    check_memory(
        "data",
        "the bitstream data set (" + std::to_string(a.samples) + " sequences of " + std::to_string(a.steps) + " steps)",
        {{"samples × steps floats", samples * steps * sizeof(float)}, {"labels", samples * 8}},
        "use fewer --samples or --steps");
    if (a.min_steps > a.steps)
      detail::raise<InvalidArgument>("data", "--min-steps " + std::to_string(a.min_steps) + " is more than --steps " +
                                                 std::to_string(a.steps) + "; give at most --steps");
    out = bitstream_split(a.steps, a.data_seed, a.samples, a.min_steps);
  } else if (a.data == "mnist-rows" || a.data == "mnist-pixels") {
    const bool rows = a.data == "mnist-rows";
    out = mnist_sequences(mnist_set(a, source), rows ? MnistLayout::rows : MnistLayout::pixels);
    source += rows ? ", rows" : ", pixels";
  } else if (image_data(a.data)) {
    detail::raise<InvalidArgument>("data", "--data " + a.data +
                                               " holds images, for --model cnn; recurrent models "
                                               "take bitstream, mnist-rows, mnist-pixels or irmas");
  } else {
    if (a.dir.empty())
      detail::raise<InvalidArgument>("data", "--data irmas needs --data-dir pointing at a folder of IRMAS WAV files");
    // A cache that cannot be written (a full --cache-dir) costs only the next run's time.
    const SequenceDataset all = load_irmas(a.dir, mfcc_preset(a.preset), 0, irmas_cache_file(a),
                                           [](const std::string& m) { std::cerr << "warning: " << m << "\n"; });
    const Index test = static_cast<Index>(std::llround(a.test_fraction * static_cast<double>(all.size())));
    out = split(all, test, a.data_seed);
  }
  out.first = head_of(std::move(out.first), a.limit_train);
  out.second = head_of(std::move(out.second), a.limit_test);
  if (!quiet) {
    std::string shape = "T = " + std::to_string(out.first.steps);
    if (!out.first.lengths.empty()) {  // the real steps against the padded ones: what the lengths path saves
      double real = 0;
      for (const Index n : out.first.lengths) real += static_cast<double>(n);
      char buf[96];
      std::snprintf(buf, sizeof buf, " (lengths %lld..%lld, %.0f %% of the padded steps)",
                    static_cast<long long>(*std::min_element(out.first.lengths.begin(), out.first.lengths.end())),
                    static_cast<long long>(*std::max_element(out.first.lengths.begin(), out.first.lengths.end())),
                    100.0 * real / static_cast<double>(out.first.size() * out.first.steps));
      shape += buf;
    }
    shape += ", " + std::to_string(out.first.features) + " features, " + std::to_string(out.first.classes) + " classes";
    if (source.empty())
      std::cerr << "data: " << out.first.name << ": " << out.first.size() << " train / " << out.second.size()
                << " test sequences, " << shape << "\n";
    else
      std::cerr << "data: " << source << ": " << shape << "\n";
  }
  return out;
}

bool image_data(const std::string& data) { return data == "mnist" || data == "cifar10"; }

std::pair<ImageDataset, ImageDataset> load_images(const DataArgs& a, bool quiet) {
  std::pair<ImageDataset, ImageDataset> out;
  std::string source;  // as load_data's
  if (a.data == "mnist") {
    const MnistSet set = mnist_set(a, source);
    out = mnist_cnn_data(set);
    char stats[96];
    std::snprintf(stats, sizeof stats, " (zero-padded, standardised by the training set's mean %.4f and std %.4f)",
                  set.pixel_mean, set.pixel_std);
    source += ", " + std::to_string(out.first.channels) + "×" + std::to_string(out.first.height) + "×" +
              std::to_string(out.first.width) + stats;
  } else if (a.data == "cifar10") {
    if (a.dir.empty())
      detail::raise<InvalidArgument>("data",
                                     "--data cifar10 needs --data-dir pointing at cifar-10-batches-bin (the "
                                     "binary version from https://www.cs.toronto.edu/~kriz/cifar.html)");
    out = load_cifar10(a.dir);
    normalize_channels(out.first, kCifar10Mean, kCifar10Std);
    normalize_channels(out.second, kCifar10Mean, kCifar10Std);
  } else {
    detail::raise<InvalidArgument>("data", "--data " + a.data +
                                               " holds sequences; a cnn needs images: --data mnist "
                                               "or --data cifar10");
  }
  out.first = head_of(std::move(out.first), a.limit_train);
  out.second = head_of(std::move(out.second), a.limit_test);
  if (!quiet) {
    if (source.empty())
      source = out.first.name + ": " + std::to_string(out.first.size()) + " train / " +
               std::to_string(out.second.size()) + " test images of " + std::to_string(out.first.channels) + "×" +
               std::to_string(out.first.height) + "×" + std::to_string(out.first.width);
    std::cerr << "data: " << source << ", " << out.first.classes << " classes\n";
  }
  return out;
}

void add_backward_options(CLI::App& app, BackwardArgs& a) {
  app.add_option("--backward", a.backward,
                 "bp (sequential baseline) or a BPPSA scan: blelloch, hybrid, auto; fused (--device cuda: the fused "
                 "chunked scan, Jacobians formed on the fly). Default: blelloch on the CPU, fused on cuda")
      ->check(CLI::IsMember({"bp", "blelloch", "hybrid", "auto", "linear", "fused"}));
  app.add_option("--threads", a.threads, "OpenMP threads (0 = all cores)")->check(CLI::Range(0, kMaxThreads));
  app.add_option("--chunks", a.chunks, "hybrid: chunks per chain (0 = chosen by the cost model)")
      ->check(CLI::Range(0, 1 << 20));
}

BackwardOptions to_options(const BackwardArgs& a) { return {parse_backward(a.backward), a.threads, a.chunks}; }

void resolve_backward_flag(BackwardArgs& a, const std::string& device) {
  const bool cuda = parse_device(device) == Device::cuda;
  if (a.backward.empty()) a.backward = cuda ? "fused" : "blelloch";
  if (a.backward == "fused" && !cuda)
    detail::raise<InvalidArgument>("backward",
                                   "--backward fused is the recurrent layers' fused chunked scan on the "
                                   "GPU: add --device cuda, or use blelloch, hybrid, auto or bp on the CPU");
}

void add_device_option(CLI::App& app, std::string& device) {
  app.add_option("--device", device,
                 "cpu or cuda: where the recurrent model runs (cuda: forward, backward, loss and optimizer on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

Device require_device(const std::string& name) {
  const Device d = parse_device(name);
  if (d == Device::cuda && !cuda_built())
    detail::raise<UnsupportedError>("device",
                                    "built without CUDA: --device cuda needs bppsa built with "
                                    "-DBPPSA_WITH_CUDA=ON (the CUDA toolkit); use --device cpu");
  if (d == Device::cuda && cuda_device_count() == 0)
    detail::raise<DeviceError>("device",
                               cuda_summary() + "; --device cuda needs an NVIDIA GPU and its driver; use --device cpu");
  return d;
}

ModelConfig model_config(const ModelArgs& a, Index input, Index classes) {
  ModelConfig c;
  c.rnn.cell = parse_cell(a.model);
  c.rnn.input = input;
  c.rnn.hidden = a.hidden;
  c.rnn.proj = a.proj;
  c.rnn.layers = a.layers;
  c.classes = classes;
  c.head = parse_head(a.head);
  c.loss = parse_loss(a.loss);
  return c;
}

ModelConfig checkpoint_config(const TensorFile& file, const std::string& fallback_cell) {
  if (file.metadata_or("bppsa.model") == "cnn")
    detail::raise<InvalidArgument>("model", "the checkpoint '" + file.source +
                                                "' holds a CNN (metadata bppsa.model = "
                                                "cnn), not a recurrent model; use --model cnn");
  return config_from_state_dict(file, parse_cell(file.metadata_or("bppsa.model", fallback_cell)),
                                parse_head(file.metadata_or("bppsa.head", "last")),
                                parse_loss(file.metadata_or("bppsa.loss", "ce")));
}

}  // namespace bppsa::cli
