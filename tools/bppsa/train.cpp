// `bppsa train`: trains a recurrent classifier with BP or BPPSA, with progress, per-epoch
// metrics, JSON-lines logs, atomic checkpoints (safetensors, PyTorch names) and --resume.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "bppsa/bppsa.hpp"
#include "bppsa/io/file.hpp"
#include "bppsa/io/safetensors.hpp"
#include "bppsa/nn/cost_model.hpp"
#include "bppsa/train/trainer.hpp"
#include "checkpoint.hpp"
#include "commands.hpp"
#include "model_parallel.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "run_flags.hpp"
#include "train_loop.hpp"

namespace bppsa::cli {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

TrainConfig train_config(const TrainArgs& a) {
  TrainConfig tc;
  tc.batch = a.batch;
  tc.seed = a.seed;
  tc.backward = to_options(a.backward);
  return tc;
}

OptimizerConfig optimizer_config(const TrainArgs& a, Index train_size) {
  OptimizerConfig oc;
  oc.type = parse_optimizer(a.optimizer);
  oc.lr = a.lr;
  oc.momentum = a.momentum;
  oc.weight_decay = a.weight_decay;
  oc.clip_grad_norm = a.clip;
  oc.schedule = parse_lr_schedule(a.lr_schedule);
  oc.total_steps = a.epochs * ((train_size + a.batch - 1) / a.batch);
  return oc;
}

namespace {

using Args = TrainArgs;

std::vector<std::vector<float>> copy_grads(const std::vector<NamedParam<float>>& params) {
  std::vector<std::vector<float>> g;
  for (const auto& p : params) g.emplace_back(p.grad, p.grad + p.size);
  return g;
}

void check_save_folder(const Args& a) {
  if (a.save.empty()) {
    if (!a.resume.empty())
      std::cerr << "note: --resume " << a.resume << " without --save: the epochs of this run are not saved (add --save "
                << a.resume << " to continue the checkpoint)\n";
    return;
  }  // fail before training, not after the first epoch
  const std::filesystem::path dir = std::filesystem::path(a.save).parent_path();
  std::error_code ec;
  if (std::filesystem::is_directory(a.save, ec))
    detail::raise<InvalidArgument>("train", "--save " + a.save + " is a folder; give a file name (e.g. " +
                                                (std::filesystem::path(a.save) / "model.safetensors").string() + ")");
  if (std::filesystem::exists(a.save, ec) && !std::filesystem::is_regular_file(a.save, ec))
    detail::raise<InvalidArgument>("train",
                                   "--save " + a.save +
                                       " is not a regular file (a device, pipe or socket): a checkpoint must be "
                                       "a file that --resume can read back; give a file name, or leave out "
                                       "--save to save nothing");
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
    detail::raise<InvalidArgument>(
        "train", "--save " + a.save + ": the folder " + dir.string() + " does not exist; create it first");
  if (access(dir.empty() ? "." : dir.c_str(), W_OK) != 0)
    detail::raise<InvalidArgument>("train", "--save " + a.save + ": the folder " +
                                                (dir.empty() ? std::string(".") : dir.string()) + " is not writable");
}

/// Weight decay above this is named in divergence messages.
constexpr double kLargeWeightDecay = 1.0;

/// Empty training or test data, with the flags that made it so.
void check_split(const DataArgs& d, Index train, Index test) {
  if (train > 0 && test > 0) return;
  const std::string which = train == 0 ? "training" : "test";
  std::string why = "--data " + d.data + (d.dir.empty() ? "" : " --data-dir " + d.dir) + " gives " +
                    std::to_string(train) + " training and " + std::to_string(test) + " test samples";
  if (d.data == "irmas")
    why += " (--test-fraction " + number(d.test_fraction) + " of them are held out): " +
           (train == 0 ? "lower --test-fraction or add files" : "raise --test-fraction (e.g. 0.2) or add files");
  else
    why += ": use a data set with more samples";
  detail::raise<InvalidArgument>("data", "the " + which + " data is empty: " + why);
}

/// A flag given explicitly must agree with the checkpoint being resumed.
void require_same(const Args& a, const char* flag, const std::string& given, const std::string& saved) {
  if (a.app->count(flag) && given != saved)
    detail::raise<InvalidArgument>("resume", std::string(flag) + " " + given + " conflicts with the checkpoint " +
                                                 (a.resume.empty() ? a.init : a.resume) + " (" + saved +
                                                 "); drop the flag or start afresh");
}

/// A copy of a model with the same weights (and pruning masks): what --compare-bp trains.
SequenceClassifier<float> copy_of(const SequenceClassifier<float>& model) {
  SequenceClassifier<float> copy(model.config());
  copy.load_state_dict(model.state_dict());
  return copy;
}
ConvNet<float> copy_of(const ConvNet<float>& model) {
  ConvNet<float> copy(model.config());
  copy.load_state_dict(model.state_dict());
  std::vector<std::vector<std::uint8_t>> masks;
  for (Index i = 0; i < model.size(); ++i) masks.push_back(model.layer(i).mask());
  copy.set_masks(masks);
  copy.apply_masks();
  return copy;
}

/// --compare-bp: one more epoch, with sequential BP, on a copy of the trained model and its
/// optimizer, over the same batches as the last epoch (same shuffle); the run's model, its
/// checkpoints and the gradient check are untouched. Returns that epoch's report.
template <class Model, class Data>
EpochReport time_bp_epoch(const Args& a, const Model& model, const Optimizer<float>& optimizer,
                          const std::vector<NamedParam<float>>& params, const Data& train, Index epoch,
                          const TrainConfig& tc) {
  Model copy = copy_of(model);
  Optimizer<float> opt(optimizer.config());
  opt.load_state(optimizer.state(params), copy.parameters());
  TrainConfig bp = tc;
  bp.backward.method = BackwardMethod::bp;
  ProgressBar bar("timing bp", "batch", !a.no_progress);
  const EpochReport r = train_epoch(copy, opt, train, epoch, bp,
                                    [&](Index done, Index total, double loss) { bar.update(done, total, loss); });
  bar.finish();
  return r;
}

/// --check's two gradient sets for one batch from the same weights: `got` by the run's backward
/// (a scan; blelloch when the run's resolves to BP) and `ref` by sequential BP. A Device::cuda
/// model: its GPU gradients by the run's method against the CPU engine's BP on a CPU copy.
/// Returns what was compared ("blelloch vs bp").
template <class Model, class Data>
std::string check_batch(Model& model, const Data& train, std::span<const Index> idx, std::span<const float> x,
                        std::span<const std::int64_t> y, const BackwardOptions& run,
                        std::vector<std::vector<float>>& got, std::vector<std::vector<float>>& ref) {
  BackwardOptions bp = run;
  bp.method = BackwardMethod::bp;
  if constexpr (std::is_same_v<Model, SequenceClassifier<float>>) {
    if (model.device() == Device::cuda) {
      batch_loss(model, train, idx, x, y, &run, nullptr, nullptr);
      got = copy_grads(model.parameters());
      ModelConfig c = model.config();
      c.rnn.device = Device::cpu;
      SequenceClassifier<float> cpu(c);
      cpu.load_state_dict(model.state_dict());
      batch_loss(cpu, train, idx, x, y, &bp, nullptr, nullptr);
      ref = copy_grads(cpu.parameters());
      return std::string("cuda ") + to_string(run.method) + " vs the CPU engine's bp";
    }
  }
  BackwardOptions scan = run;
  if (resolve_backward(scan, static_cast<Index>(idx.size())) == BackwardMethod::bp)
    scan.method = BackwardMethod::blelloch;
  batch_loss(model, train, idx, x, y, &bp, nullptr, nullptr);
  ref = copy_grads(model.parameters());
  batch_loss(model, train, idx, x, y, &scan, nullptr, nullptr);
  got = copy_grads(model.parameters());
  return std::string(to_string(scan.method)) + " vs bp";
}

/// A single process's words on its backward for the model line: the method asked for, and
/// what `auto` resolves to for the first batch.
std::string backward_words(const Args& a, const TrainConfig& tc, Index train_size) {
  const BackwardMethod resolved = resolve_backward(tc.backward, std::min(a.batch, train_size));
  return "backward " + a.backward.backward +
         (tc.backward.method == BackwardMethod::automatic
              ? std::string(resolved == BackwardMethod::bp ? " (→ bp: the batch keeps every thread busy)"
                                                           : " (→ scan, algorithm by the cost model)")
              : std::string());
}

/// A single process's run of the loop, with its tail: --compare-bp (BP's epoch time beside the
/// scan's, measured in this run on the same batches) and --check (one batch's gradients by the
/// run's backward against BP's).
template <class Model, class Data>
int train_single(const Args& a, Model& model, const std::string& description, const Data& train, const Data& test,
                 const TensorFile& resumed, const std::map<std::string, std::string>& metadata) {
  LoopMode mode;
  mode.backward = backward_words(a, train_config(a), train.size());
  mode.record_backward = a.backward.backward;
  return train_loop(a, model, description, train, test, resumed, metadata, mode, [&](const LoopEnd& end) {
    const TrainConfig& tc = end.config;
    const EpochReport& last = end.last;
    const BackwardMethod resolved = resolve_backward(tc.backward, std::min(a.batch, train.size()));
    std::string comparison;
    if (a.compare_bp) {
      if (resolved == BackwardMethod::bp)
        comparison = "epoch time: the run's backward is bp; --compare-bp compares a scan with BP (use a scan backward)";
      else if (last.steps == 0)
        comparison = "epoch time: no epoch was trained in this run; nothing to compare";
      else {
        std::cerr << "timing one epoch of bp on a copy of the trained model (the same batches as epoch " << last.epoch
                  << "; the model is unchanged)\n";
        const EpochReport bp = time_bp_epoch(a, model, end.optimizer, end.params, train, last.epoch, tc);
        char line[512];
        std::snprintf(line, sizeof line,
                      "epoch time, this run, same %lld batches, %d threads: bp %.1f s (backward %.1f) vs %s %.1f s "
                      "(backward %.1f, of which Jacobians %.1f): the scan takes %.2f× BP's time",
                      static_cast<long long>(last.steps), resolve_threads(tc.backward.threads), bp.seconds,
                      bp.backward_seconds, a.backward.backward.c_str(), last.seconds, last.backward_seconds,
                      last.jacobian_seconds, last.seconds / std::max(bp.seconds, 1e-9));
        comparison = line;
        end.log.write(nlohmann::json{{"event", "compare_bp"},
                                     {"epoch", last.epoch},
                                     {"steps", last.steps},
                                     {"bp_seconds", bp.seconds},
                                     {"bp_backward_seconds", bp.backward_seconds},
                                     {"scan_seconds", last.seconds},
                                     {"scan_backward_seconds", last.backward_seconds},
                                     {"scan_jacobian_seconds", last.jacobian_seconds}});
      }
    }
    auto print_comparison = [&] {
      if (!comparison.empty()) std::printf("%s\n", comparison.c_str());
      std::fflush(stdout);
    };

    if (a.check) {
      const Index n = std::min<Index>(a.batch, train.size());
      std::vector<Index> idx(static_cast<std::size_t>(n));
      for (Index i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
      std::vector<float> x;
      std::vector<std::int64_t> y;
      gather_batch(train, idx, x, y);
      std::vector<std::vector<float>> got, ref;
      const std::string what = check_batch(model, train, idx, x, y, tc.backward, got, ref);
      std::string where;
      std::vector<std::string> names;
      for (const auto& p : end.params) names.push_back(p.name);
      const double err = max_relative_error(got, ref, names, &where);
      std::printf("gradient check (one batch of %lld): %s, largest relative error %.3g (%s)\n",
                  static_cast<long long>(n), what.c_str(), err, where.c_str());
      print_comparison();
      if (!(err <= 1e-3)) {
        std::fprintf(stderr, "bppsa: error: gradient check failed (%.3g > 1e-3)\n", err);
        return 3;
      }
      return 0;
    }
    print_comparison();
    return 0;
  });
}

/// `resumed`: the --resume or --init file, read (and checked against the flags) by run().
int run_recurrent(const Args& a, const TensorFile& resumed) {
  const auto [train, test] = load_data(a.data, false);
  const bool from_checkpoint = !a.resume.empty() || !a.init.empty();
  ModelConfig config = recurrent_train_config(a, train, test, from_checkpoint ? &resumed : nullptr);
  config.rnn.device = parse_device(a.device);
  SequenceClassifier<float> model(config);
  if (from_checkpoint)
    model.load_state_dict(resumed);
  else
    model.reset_parameters(a.seed);
  ForwardOptions forward;
  forward.method = parse_forward(a.forward);
  forward.threads = a.backward.threads;
  model.rnn().set_forward_options(forward);
  std::map<std::string, std::string> meta;
  if (!a.init.empty()) meta["bppsa.init"] = utf8_text(a.init);
  // What runs: newton when asked, or when auto picks it for the first layer at the training batches' shape.
  const ForwardPlan plan = resolve_forward(forward,
                                           StepShape{.cell = config.rnn.cell,
                                                     .input = config.rnn.input,
                                                     .hidden = config.rnn.hidden,
                                                     .proj = config.rnn.proj,
                                                     .steps = train.steps,
                                                     .batch = std::min(a.batch, train.size()),
                                                     .threads = forward.threads},
                                           config.rnn.device);
  const std::string description = describe(config) + (forward.method == ForwardMethod::newton ? " forward=newton"
                                                      : plan.method == ForwardMethod::newton  ? " forward=newton (auto)"
                                                                                              : "");
  return train_single(a, model, description, train, test, a.resume.empty() ? TensorFile{} : resumed, meta);
}

/// `file`: the --resume or --init file, read (and checked against the flags) by run().
int run_cnn(const Args& a, const TensorFile& file) {
  const auto [train, test] = load_images(a.data, false);
  const std::string source = !a.resume.empty() ? a.resume : a.init;
  const ConvNetConfig config = cnn_train_config(a, train, test, source.empty() ? nullptr : &file);
  ConvNet<float> model(config);
  std::map<std::string, std::string> meta;
  if (source.empty()) {
    model.reset_parameters(a.seed);
  } else {
    model.load_state_dict(file);
  }
  if (a.prune >= 0) {
    const PruneReport r = prune_global_magnitude(model, a.prune);
    std::cerr << "prune: " << r.str() << "\n";
    meta[kSparsityKey] = std::to_string(r.sparsity());
  } else if (!a.resume.empty()) {
    if (const auto r = restore_masks(model, file)) {  // a pruned run: keep its masks
      std::cerr << "prune: masks restored from " << a.resume << ": " << r->str() << "\n";
      meta[kSparsityKey] = file.metadata_or(kSparsityKey);
    }
  }
  const std::string init = !a.init.empty() ? utf8_text(a.init) : file.metadata_or("bppsa.init", "");
  if (!init.empty()) meta["bppsa.init"] = init;
  return train_single(a, model, describe(config), train, test, a.resume.empty() ? TensorFile{} : file, meta);
}

/// Flags that cannot work together, refused before any file or data is read.
void check_flags(const Args& a) {
  const bool cnn = a.model.model == "cnn";
  if (!cnn && (a.app->count("--arch") || a.app->count("--prune")))
    detail::raise<InvalidArgument>("train", "--arch and --prune are for --model cnn");
  if (!a.resume.empty() && (!a.init.empty() || a.prune >= 0))
    detail::raise<InvalidArgument>("train", std::string("--resume continues a run as it was saved") +
                                                (cnn ? " (its masks included)" : "") + "; --init" +
                                                (cnn ? " and --prune start" : " starts") + " a new one");
  // --proj of a new run (a checkpoint's own projection is checked against it later).
  if (a.model.proj != 0 && a.resume.empty() && a.init.empty()) {
    const std::string proj = "--proj " + std::to_string(a.model.proj);
    if (a.model.model != "lstm")
      detail::raise<InvalidArgument>("train", proj + " is an LSTM's projection; --model " + a.model.model +
                                                  " has none: drop --proj or use --model lstm");
    if (a.model.proj >= a.model.hidden)
      detail::raise<InvalidArgument>("train", proj + " must be smaller than --hidden (" +
                                                  std::to_string(a.model.hidden) +
                                                  "): the projection maps the hidden state to fewer features");
    if (a.device != "cpu")
      detail::raise<UnsupportedError>("train", proj + " runs on the CPU only: drop --device " + a.device);
  }
  if (a.forward == "newton") {  // auto: sequential where newton would not run
    const std::string f = "--forward " + a.forward;
    if (cnn) detail::raise<InvalidArgument>("train", f + " is for recurrent models (rnn, gru, lstm): drop it");
    if (a.device != "cpu")
      detail::raise<UnsupportedError>(
          "train", f + " runs on the CPU only for now: drop --device " + a.device + " or use --forward sequential");
    if (a.mp.enabled)
      detail::raise<InvalidArgument>("train", f + " with --model-parallel: a stage runs the sequential forward; "
                                                  "drop one of them");
  }
}

int run(const Args& a) {
  check_flags(a);
  check_save_folder(a);
  check_log_path(
      a.log, a.save, {a.init, a.resume},  // the mnist sets default to default_mnist_dir()
      {a.data.dir.empty() && a.data.data.rfind("mnist", 0) == 0 ? default_mnist_dir().string() : a.data.dir});
  if (require_device(a.device) == Device::cuda) {  // fails fast: before any data is loaded
    if (a.mp.enabled)
      detail::raise<InvalidArgument>("train",
                                     "--device cuda with --model-parallel: model-parallel training runs "
                                     "on the CPU (one process per stage); drop one of them");
    if (a.model.model == "cnn")
      detail::raise<InvalidArgument>("train",
                                     "--device cuda is for recurrent models (rnn, gru, lstm); CNNs train "
                                     "on the CPU");
  }
  if (a.mp.enabled) return run_train_model_parallel(a);  // takes the lock on rank 0
  std::optional<CheckpointLock> lock;
  if (!a.save.empty()) lock.emplace(a.save);
  TensorFile from;  // --resume or --init
  if (!a.resume.empty() || !a.init.empty())
    from = a.resume.empty() ? read_safetensors(a.init) : read_resumed_checkpoint(a.resume);
  // Before the data is loaded: the same data and arithmetic as the run resumed (an omitted
  // --seed takes its value: the CLI binding sets a.seed).
  if (!a.resume.empty()) {
    if (a.model.model != "cnn") checkpoint_config(from, a.model.model);  // a CNN's checkpoint: say that first
    check_resume_flags(*a.app, from, a.resume);
  }
  return a.model.model == "cnn" ? run_cnn(a, from) : run_recurrent(a, from);
}

}  // namespace

ModelConfig recurrent_train_config(const TrainArgs& a, const SequenceDataset& train, const SequenceDataset& test,
                                   const TensorFile* checkpoint) {
  ModelConfig config;
  if (checkpoint) {
    config = checkpoint_config(*checkpoint, a.model.model);
    require_same(a, "--model", a.model.model, to_string(config.rnn.cell));
    require_same(a, "--hidden", std::to_string(a.model.hidden), std::to_string(config.rnn.hidden));
    require_same(a, "--proj", std::to_string(a.model.proj), std::to_string(config.rnn.proj));
    require_same(a, "--layers", std::to_string(a.model.layers), std::to_string(config.rnn.layers));
    if (!a.resume.empty()) {  // the head and the loss a resumed run trains with are the checkpoint's
      require_same(a, "--head", a.model.head, to_string(config.head));
      require_same(a, "--loss", a.model.loss, to_string(config.loss));
    }
  } else {
    config = model_config(a.model, train.features, train.classes);
  }
  check_split(a.data, train.size(), test.size());
  check_data_fits(config, train, "the training data");
  check_data_fits(config, test, "the test data");
  return config;
}

ConvNetConfig cnn_train_config(const TrainArgs& a, const ImageDataset& train, const ImageDataset& test,
                               const TensorFile* checkpoint) {
  ConvNetConfig config;
  if (checkpoint) {
    config = convnet_config_from_state_dict(*checkpoint);
    if (a.app->count("--arch") && parse_arch(a.model.arch) != config.layers)
      detail::raise<InvalidArgument>("train", "--arch " + a.model.arch + " differs from the architecture of " +
                                                  checkpoint->source + " (" + arch_string(config.layers) +
                                                  "); drop --arch");
  } else {
    if (a.model.arch.empty())
      detail::raise<InvalidArgument>("train",
                                     "--model cnn needs --arch (e.g. vgg11/8, or conv:8:3:1:1,relu,"
                                     "maxpool:2:2,flatten,linear:10), or --init/--resume from a cnn "
                                     "checkpoint");
    config.input = {train.channels, train.height, train.width};
    config.layers = parse_arch(a.model.arch);
  }
  if (a.resume.empty())
    config.loss = parse_loss(a.model.loss);
  else  // the checkpoint's loss (convnet_config_from_state_dict)
    require_same(a, "--loss", a.model.loss, to_string(config.loss));
  const Index classes = ConvNet<float>(config).classes();
  check_split(a.data, train.size(), test.size());
  check_data_fits(config, classes, train, "the training data");
  check_data_fits(config, classes, test, "the test data");
  return config;
}

DivergenceGuard::DivergenceGuard(const TensorFile* checkpoint)
    : first_(std::numeric_limits<double>::quiet_NaN()), last_(first_) {
  if (!checkpoint) return;
  for (auto [key, loss] :
       {std::pair<const char*, double*>{"bppsa.first_train_loss", &first_}, {"bppsa.train_loss", &last_}}) {
    const std::string v = checkpoint->metadata_or(key);
    if (v.empty()) continue;  // a checkpoint from before the relative check: the first epoch here is the reference
    char* end = nullptr;
    *loss = std::strtod(v.c_str(), &end);
    if (end != v.c_str() + v.size() || !(*loss >= 0) || !std::isfinite(*loss))
      detail::raise<FormatError>(
          "resume", checkpoint->source + ": metadata '" + key + "' = '" + v + "' is not a finite loss ≥ 0");
  }
}

void DivergenceGuard::check(const TrainArgs& a, Index epoch, double train_loss, double test_loss) {
  // kMargin: a loss that is small to start with (a fine-tune at 0.02) may rise by a few times
  // without diverging; only a rise past 5× and one loss unit counts.
  constexpr double kExploded = 1e6, kRise = 5, kMargin = 1;
  char what[240] = "";
  if (!(train_loss <= kExploded && test_loss <= kExploded))
    std::snprintf(what, sizeof what, "epoch %lld: the training loss %.3g / test loss %.3g exceeds %.0e",
                  static_cast<long long>(epoch), train_loss, test_loss, kExploded);
  else if (train_loss > kRise * first_ + kMargin && train_loss > last_)
    std::snprintf(what, sizeof what,
                  "epoch %lld: the training loss %.3g is more than %.0f× the first epoch's (%.3g) plus %.0f and above "
                  "the last epoch's (%.3g)",
                  static_cast<long long>(epoch), train_loss, kRise, first_, kMargin, last_);
  if (!*what) {
    if (std::isnan(first_)) first_ = train_loss;
    last_ = train_loss;
    return;
  }
  detail::raise<NonFiniteError>(
      "train", std::string(what) + ": training diverged, so this epoch is not saved" +
                   (a.save.empty() ? std::string() : " (" + a.save + " keeps the last good epoch)") +
                   "; lower --lr (now " + number(a.lr) + ")" +
                   (a.weight_decay > kLargeWeightDecay
                        ? " or --weight-decay (now " + number(a.weight_decay) + ", usually 1e-5 to 1e-2)"
                        : std::string()) +
                   (a.clip > 0 ? std::string() : " or add --clip-grad-norm 1"));
}

void DivergenceGuard::record(std::map<std::string, std::string>& metadata) const {
  if (std::isnan(first_)) return;
  metadata["bppsa.first_train_loss"] = shortest(first_);
  metadata["bppsa.train_loss"] = shortest(last_);
}

namespace loop {

void check_training_memory(const TrainArgs& a, const std::string& description, const OptimizerConfig& oc,
                           const std::vector<NamedParam<float>>& params) {
  double values = 0;  // the weights and gradients exist; Adam's two moments (SGD's momentum) come next
  for (const auto& p : params) values += static_cast<double>(p.size);
  check_memory("train", "training " + description,
               {{"weights and gradients", 2 * values * sizeof(float)},
                {a.optimizer + " state", (oc.type == OptimizerType::adam ? 2 : 1) * values * sizeof(float)}},
               "use a smaller model (--hidden, --layers, --arch)");
}

void resume_optimizer(const TrainArgs& a, const TensorFile& resumed, const std::string& data,
                      Optimizer<float>& optimizer, const std::vector<NamedParam<float>>& params) {
  const std::string saved_data = resumed.metadata_or("bppsa.data");
  if (!saved_data.empty() && saved_data != data)
    detail::raise<InvalidArgument>("resume", "--data gives " + data + " but " + a.resume + " was trained on " +
                                                 saved_data +
                                                 "; resume with the same --data (and its flags), or start a new "
                                                 "run from these weights with --init");
  optimizer.load_state(load_optimizer_state(a.resume, resumed), params);
}

void start(const TrainArgs& a, const LoopMode& mode, const std::string& description, const std::string& data,
           const OptimizerConfig& oc, Index first_epoch, const std::map<std::string, std::string>& metadata,
           JsonLog& log) {
  std::cerr << "model: " << description << ", " << mode.backward << ", " << a.optimizer << " lr " << a.lr
            << (oc.schedule == LrSchedule::cosine ? " (cosine to 0 over " + std::to_string(oc.total_steps) + " steps)"
                                                  : std::string())
            << ", batch " << a.batch << (a.resume.empty() ? "" : ", resumed from " + a.resume) << "\n";
  log.open(a.log, !a.resume.empty());
  if (log.is_open()) {
    nlohmann::json start{{"event", "start"},
                         {"model", description},
                         {"data", data},
                         {"backward", a.backward.backward},
                         {"optimizer", a.optimizer},
                         {"lr", a.lr},
                         {"lr_schedule", a.lr_schedule},
                         {"batch", a.batch},
                         {"seed", a.seed},
                         {"first_epoch", first_epoch}};
    for (auto it = mode.start.begin(); it != mode.start.end(); ++it) start[it.key()] = it.value();
    for (const auto& [k, v] : metadata) start[k] = v;
    log.write(start);
  }
  if (first_epoch > a.epochs)
    std::cerr << "the checkpoint already completed epoch " << first_epoch - 1 << " of " << a.epochs
              << "; nothing to train (raise --epochs)\n";
}

void diverged(const TrainArgs& a, const NonFiniteError& err) {
  if (a.weight_decay <= kLargeWeightDecay) throw;  // the error being handled, as it was thrown
  detail::raise<NonFiniteError>("train", std::string(err.what()) + "; note --weight-decay " + number(a.weight_decay) +
                                             " is large (usual values are "
                                             "1e-5 to 1e-2): lower it");
}

void report(const TrainArgs& a, const LoopMode& mode, Index epoch, const EpochReport& r, const EvalReport& e,
            std::int64_t steps, JsonLog& log) {
  char times[256];
  if (mode.rank_times)  // a model-parallel job: rank 0's share of the step, and its gradient all-reduce
    std::snprintf(times, sizeof times,
                  "rank 0: forward %.1f, backward %.1f, gradient all-reduce %.2f, optimizer %.2f; eval %.1f s",
                  r.forward_seconds, r.backward_seconds, r.reduce_seconds, r.optimizer_seconds, e.seconds);
  else
    std::snprintf(times, sizeof times,
                  "forward %.1f, backward %.1f of which Jacobians %.1f, optimizer %.2f; eval %.1f s", r.forward_seconds,
                  r.backward_seconds, r.jacobian_seconds, r.optimizer_seconds, e.seconds);
  std::printf("epoch %lld/%lld  train loss %.4f acc %5.2f%%  test loss %.4f acc %5.2f%%  %.1f s (%s)\n",
              static_cast<long long>(epoch), static_cast<long long>(a.epochs), r.train_loss, 100 * r.train_accuracy,
              e.loss, 100 * e.accuracy, r.seconds, times);
  std::fflush(stdout);
  nlohmann::json line{{"event", "epoch"},
                      {"epoch", epoch},
                      {"train_loss", r.train_loss},
                      {"train_accuracy", r.train_accuracy},
                      {"test_loss", e.loss},
                      {"test_accuracy", e.accuracy},
                      {"seconds", r.seconds},
                      {"forward_seconds", r.forward_seconds},
                      {"backward_seconds", r.backward_seconds},
                      {"jacobian_seconds", r.jacobian_seconds},
                      {"scan_seconds", r.scan_seconds},
                      {"optimizer_seconds", r.optimizer_seconds},
                      {"steps", steps},
                      {"samples", r.samples}};
  if (mode.rank_times) line["reduce_seconds"] = r.reduce_seconds;
  log.write(line);
}

void checkpoint_metadata(const TrainArgs&, const LoopMode& mode, Index epoch, std::int64_t steps,
                         const std::string& data, const std::map<std::string, std::string>& metadata,
                         const std::map<std::string, std::string>& record, const DivergenceGuard& guard,
                         TensorFile& ck) {
  ck.metadata["bppsa.epoch"] = std::to_string(epoch);
  ck.metadata["bppsa.step"] = std::to_string(steps);
  ck.metadata["bppsa.data"] = data;
  ck.metadata["bppsa.backward"] = mode.record_backward;
  for (const auto& [k, v] : metadata) ck.metadata[k] = v;
  for (const auto& [k, v] : record) ck.metadata[k] = v;
  guard.record(ck.metadata);
}

}  // namespace loop

double max_relative_error(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                          const std::vector<std::string>& names, std::string* where) {
  double global = 0;
  for (const auto& t : b)
    for (float v : t) global = std::max(global, std::abs(static_cast<double>(v)));
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double num = 0, den = 1e-7 * global;
    for (std::size_t k = 0; k < a[i].size(); ++k) {
      num = std::max(num, std::abs(static_cast<double>(a[i][k]) - b[i][k]));
      den = std::max(den, std::abs(static_cast<double>(b[i][k])));
    }
    const double e = den > 0 ? num / den : num;
    if (e >= worst) {
      worst = e;
      *where = names[i];
    }
  }
  return worst;
}

Command add_train(CLI::App& app) {
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("train", "train a recurrent or convolutional classifier with BP or BPPSA");
  a->app = sub;
  add_model_options(*sub, a->model);
  add_data_options(*sub, a->data);
  add_backward_options(*sub, a->backward);
  add_device_option(*sub, a->device);
  sub->add_option("--forward", a->forward,
                  "recurrent models: sequential, newton (Newton's method on the whole trajectory, each "
                  "iteration's linear recurrence solved by the scan; exact by certificate, else the sequential "
                  "forward; CPU only), or auto (per layer, newton where the cost model predicts it faster, else "
                  "sequential)")
      ->check(CLI::IsMember({"sequential", "newton", "auto"}))
      ->capture_default_str();
  sub->add_option("--epochs", a->epochs, "epochs in all (a resumed run continues up to this)")
      ->check(CLI::Range(Index{1}, Index{1000000}))
      ->capture_default_str();
  sub->add_option("--batch", a->batch, "batch size")
      ->check(CLI::Range(Index{1}, Index{1} << 24))
      ->capture_default_str();
  sub->add_option("--lr", a->lr, "learning rate")->check(positive())->capture_default_str();
  sub->add_option("--lr-schedule", a->lr_schedule,
                  "constant, or cosine: the learning rate falls from --lr to 0 along a half cosine over all "
                  "--epochs (torch's CosineAnnealingLR stepped every batch; a resumed run continues it)")
      ->check(CLI::IsMember({"constant", "cosine"}))
      ->capture_default_str();
  sub->add_option("--optimizer", a->optimizer, "adam or sgd")
      ->check(CLI::IsMember({"adam", "sgd"}))
      ->capture_default_str();
  sub->add_option("--momentum", a->momentum, "SGD momentum")->check(CLI::Range(0.0, 0.999999));
  sub->add_option("--weight-decay", a->weight_decay, "L2 weight decay")->check(non_negative());
  sub->add_option("--clip-grad-norm", a->clip,
                  "clip the global gradient norm (as torch.nn.utils.clip_grad_norm_; 0 = off)")
      ->check(non_negative());
  sub->add_option("--seed", a->seed, "seed of the initial weights and the epoch shuffles")->capture_default_str();
  sub->add_option("--save", a->save,
                  "checkpoint written after every epoch (safetensors, PyTorch names; the optimizer state goes "
                  "beside it as *.optim.GENERATION.safetensors; the pair is replaced atomically as a whole and "
                  "*.lock keeps a second run off it)")
      ->check(CLI::Validator(
          [](std::string& v) {
            return v.empty() ? std::string("an empty name saves nothing: give a file name, or leave out --save")
                             : std::string();
          },
          "FILE"));
  sub->add_option("--resume", a->resume, "continue from a checkpoint written by --save")->check(CLI::ExistingFile);
  sub->add_option("--log", a->log, "write per-epoch metrics as JSON lines");
  sub->add_flag("--no-progress", a->no_progress, "no progress bar");
  sub->add_option("--init", a->init,
                  "start from the weights of this checkpoint (e.g. a trained dense model to prune, or a checkpoint of "
                  "a model-parallel run)")
      ->check(CLI::ExistingFile);
  sub->add_option("--prune", a->prune,
                  "cnn: before training, prune this fraction of all conv and linear weights by global magnitude "
                  "(e.g. 0.9); the masks stay fixed while retraining")
      ->check(CLI::Range(0.0, 0.999999));
  sub->add_flag("--check", a->check, "at the end, compare one batch's BPPSA gradients with BP's and print the error");
  sub->add_flag("--compare-bp", a->compare_bp,
                "after training, time one epoch of sequential BP on a copy of the trained model (the same batches as "
                "the last epoch) and print its epoch time beside the scan's");
  add_model_parallel_options(*sub, a->mp);
  sub->parse_complete_callback([a] {  // a usage error (exit 2), not a flag ignored without a word
    if (a->app->count("--momentum") && a->optimizer != "sgd")
      throw CLI::ValidationError("--momentum", "is SGD's momentum; --optimizer " + a->optimizer +
                                                   " has none: drop --momentum or add --optimizer sgd");
  });
  return [a] {
    resolve_backward_flag(a->backward, a->device);
    return run(*a);
  };
}

}  // namespace bppsa::cli
