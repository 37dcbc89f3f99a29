// `bppsa eval` (accuracy of a checkpoint on a data set) and `bppsa grad` (one batch's loss
// and gradients, in safetensors, for checking against PyTorch autograd).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bppsa/bppsa.hpp"
#include "bppsa/io/file.hpp"
#include "bppsa/io/safetensors.hpp"
#include "bppsa/train/trainer.hpp"
#include "commands.hpp"
#include "model_parallel.hpp"
#include "options.hpp"

namespace bppsa::cli {
namespace {

struct EvalArgs {
  std::string checkpoint;
  std::string model = "rnn";
  DataArgs data;
  std::string split = "test";
  Index batch = 256;
  bool json = false;
  std::string device = "cpu";
};

/// Prints an evaluation report (text or one JSON object).
void print_eval(const EvalArgs& a, const EvalReport& r, const std::string& model, const std::string& data) {
  if (a.json) {
    std::cout << nlohmann::json{{"checkpoint", utf8_text(a.checkpoint)},
                                {"model", model},
                                {"data", utf8_text(data)},
                                {"split", a.split},
                                {"samples", r.samples},
                                {"loss", r.loss},
                                {"accuracy", r.accuracy},
                                {"seconds", r.seconds}}
                     .dump()
              << "\n";
  } else {
    std::printf("%s: %s accuracy %.2f%% (loss %.4f) on %lld %s samples of %s [%s], %.1f s\n", a.checkpoint.c_str(),
                a.split.c_str(), 100 * r.accuracy, r.loss, static_cast<long long>(r.samples), a.split.c_str(),
                data.c_str(), model.c_str(), r.seconds);
  }
}

int run_eval(const EvalArgs& a) {
  const Device device = require_device(a.device);
  const TensorFile file = read_safetensors(a.checkpoint);
  if (file.metadata_or("bppsa.model", a.model) == "cnn") {
    if (device == Device::cuda)
      detail::raise<InvalidArgument>(
          "eval", "--device cuda is for recurrent models; " + a.checkpoint + " holds a CNN, which runs on the CPU");
    ConvNet<float> model(convnet_config_from_state_dict(file));
    model.load_state_dict(file);
    auto [train, test] = load_images(a.data, a.json);
    const ImageDataset* data = a.split == "train" ? &train : &test;
    check_data_fits(model.config(), model.classes(), *data, "the " + a.split + " data");
    print_eval(a, evaluate(model, *data, a.batch), describe(model.config()), data->name);
    return 0;
  }
  ModelConfig config = checkpoint_config(file, a.model);
  config.rnn.device = device;
  SequenceClassifier<float> model(config);
  model.load_state_dict(file);
  auto [train, test] = load_data(a.data, a.json);
  const SequenceDataset* data = a.split == "train" ? &train : &test;
  check_data_fits(config, *data, "the " + a.split + " data");
  print_eval(a, evaluate(model, *data, a.batch), describe(config), data->name);
  return 0;
}

/// Writes loss and gradients (atomically) and prints a summary.
template <class Model>
void write_grads(const GradArgs& a, Model& model, float loss, const std::string& description) {
  TensorFile g;
  g.tensors["loss"] = Tensor::from_f32(std::vector<float>{loss}, {});
  for (const auto& p : model.parameters())
    g.tensors[p.name] = Tensor::from_f32(std::span<const float>(p.grad, static_cast<std::size_t>(p.size)), p.shape);
  g.metadata["bppsa.model"] = description;
  g.metadata["bppsa.backward"] = a.backward.backward;
  write_safetensors(a.out, g);
  std::printf("loss %.6f; %zu gradients written to %s (%s, backward %s)\n", loss, g.tensors.size() - 1, a.out.c_str(),
              description.c_str(), a.backward.backward.c_str());
}

void require_finite(const std::vector<float>& x, const GradArgs& a) {
  for (float v : x)
    if (!std::isfinite(v)) detail::raise<NonFiniteError>("grad", "tensor 'x' in " + a.batch + " holds NaN/Inf");
}

/// Every label of the batch file in [0, classes), else an error naming the file and the sample.
void require_labels(const std::vector<std::int64_t>& y, Index classes, const GradArgs& a) {
  for (std::size_t i = 0; i < y.size(); ++i)
    if (y[i] < 0 || y[i] >= classes)
      detail::raise<InvalidArgument>("grad", "tensor 'y' in --batch " + a.batch + ": label " + std::to_string(y[i]) +
                                                 " (sample " + std::to_string(i) + ") is outside [0, " +
                                                 std::to_string(classes) + "), the classes of --weights " + a.weights);
}

int run_grad_cnn(const GradArgs& a) {
  const char* op = "grad";
  const TensorFile w = read_safetensors(a.weights);
  ConvNetConfig config;
  if (!a.arch.empty()) {
    config.layers = parse_arch(a.arch);
  } else {
    const std::string arch = w.metadata_or("bppsa.arch", "");
    if (arch.empty())
      detail::raise<InvalidArgument>(
          op, "--model cnn needs --arch SPEC (" + a.weights + " does not record its architecture)");
    config.layers = parse_arch(arch);
  }
  naming_batch(a.batch, [&] {
    const TensorFile xb = read_safetensors(a.batch);
    const Tensor& xt = xb.at("x", op);
    if (xt.shape.size() != 4)
      detail::raise<ShapeError>(op, "tensor 'x' in " + a.batch + " has shape " + shape_list(xt.shape) +
                                        ", expected [batch, channels, height, width]");
    const Index B = xt.shape[0];
    xb.require("y", {B}, op);
    config.input = {xt.shape[1], xt.shape[2], xt.shape[3]};
    ConvNet<float> model(config);
    model.load_state_dict(w);
    const std::vector<float> x = xt.to_f32("x");
    require_finite(x, a);
    const std::vector<std::int64_t> y = xb.at("y", op).to_i64("y");
    require_labels(y, model.classes(), a);
    const float loss = model.loss_and_grad(x, B, y, to_options(a.backward));
    write_grads(a, model, loss, describe(config));
  });
  return 0;
}

int run_grad(const GradArgs& a) {
  const char* op = "grad";
  const Device device = require_device(a.device);
  if (device == Device::cuda && (a.mp.enabled || a.model == "cnn"))
    detail::raise<InvalidArgument>(op,
                                   "--device cuda is for single-process recurrent models (rnn, gru, lstm); "
                                   "drop --device cuda for --model cnn or --model-parallel");
  for (const auto& [flag, file] :
       {std::pair<const char*, const std::string*>{"--weights", &a.weights}, {"--batch", &a.batch}}) {
    std::error_code ec;
    if (std::filesystem::equivalent(a.out, *file, ec))
      detail::raise<InvalidArgument>(op, "--out " + a.out + " is the " + flag +
                                             " file; writing the gradients "
                                             "would replace it: give --out another name");
  }
  if (a.mp.enabled || a.model == "cnn") {
    // Samples of different lengths run through recurrent layers only.
    if (a.model == "cnn" && read_safetensors(a.batch).contains("lengths"))
      detail::raise<InvalidArgument>(op, "--batch " + a.batch +
                                             " holds 'lengths' (samples of different lengths), which --model cnn "
                                             "does not take; remove the tensor");
    return a.mp.enabled ? run_grad_model_parallel(a) : run_grad_cnn(a);
  }
  if (!a.arch.empty()) detail::raise<InvalidArgument>(op, "--arch is for --model cnn");
  const TensorFile w = read_safetensors(a.weights);
  if (w.metadata_or("bppsa.model") == "cnn")
    detail::raise<InvalidArgument>(op, "--weights " + a.weights +
                                           " holds a CNN (metadata bppsa.model = cnn); "
                                           "use --model cnn");
  ModelConfig config = config_from_state_dict(w, parse_cell(a.model));
  config.rnn.device = device;
  SequenceClassifier<float> model(config);
  model.load_state_dict(w);
  naming_batch(a.batch, [&] {
    const TensorFile xb = read_safetensors(a.batch);
    const Tensor& xt = xb.at("x", op);
    if (xt.shape.size() != 3)
      detail::raise<ShapeError>(op, "tensor 'x' in " + a.batch + " has shape " + shape_list(xt.shape) +
                                        ", expected [batch, steps, " + std::to_string(config.rnn.input) + "]");
    xb.require("x", {-1, -1, config.rnn.input}, op);
    const Index B = xt.shape[0], T = xt.shape[1];
    xb.require("y", {B}, op);
    const std::vector<float> x = xt.to_f32("x");
    const std::vector<std::int64_t> y = xb.at("y", op).to_i64("y");
    require_finite(x, a);
    require_labels(y, config.classes, a);
    const std::vector<Index> lengths = batch_lengths(xb, B, T, a.batch);  // optional (the rest is padding)
    const float loss = model.loss_and_grad(x, B, T, y, to_options(a.backward), nullptr, nullptr, lengths);
    write_grads(a, model, loss, describe(config));
  });
  return 0;
}

/// Throws `e`'s type (the first of Es it is) with message `what`.
template <class... Es>
[[noreturn]] void rethrow_as(const Error& e, const std::string& what) {
  ((dynamic_cast<const Es*>(&e) ? throw Es(what) : void()), ...);
  throw Error(what);
}

}  // namespace

void naming_batch(const std::string& batch, const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("--batch " + batch) != std::string::npos) throw;
    rethrow_as<ShapeError, InvalidArgument, NonFiniteError, IoError, FormatError, ResourceError, DeviceError,
               UnsupportedError>(e, "[grad] --batch " + batch + ": " + what);
  }
}

std::vector<Index> batch_lengths(const TensorFile& batch, Index B, Index T, const std::string& file) {
  const char* op = "grad";
  std::vector<Index> lengths;
  if (!batch.contains("lengths")) return lengths;
  batch.require("lengths", {B}, op);
  for (const std::int64_t n : batch.at("lengths", op).to_i64("lengths")) {
    if (n < 1 || n > T)
      detail::raise<FormatError>(op, "tensor 'lengths' in " + file + " holds " + std::to_string(n) + ", outside 1.." +
                                         std::to_string(T) + " (the steps of 'x')");
    lengths.push_back(static_cast<Index>(n));
  }
  return lengths;
}

Command add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand("eval", "accuracy of a checkpoint on a data set");
  sub->add_option("--checkpoint", a->checkpoint, "safetensors checkpoint (from bppsa train --save)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--model", a->model, "cell type when the checkpoint does not record it (rnn, gru, lstm)")
      ->check(CLI::IsMember({"rnn", "gru", "lstm", "cnn"}));
  add_data_options(*sub, a->data);
  sub->add_option("--split", a->split, "which part of the data: test or train")
      ->check(CLI::IsMember({"test", "train"}))
      ->capture_default_str();
  sub->add_option("--batch", a->batch, "evaluation batch size")->check(CLI::Range(Index{1}, Index{1} << 24));
  sub->add_flag("--json", a->json, "print one JSON object");
  add_device_option(*sub, a->device);
  return [a] { return run_eval(*a); };
}

Command add_grad(CLI::App& app) {
  auto a = std::make_shared<GradArgs>();
  CLI::App* sub = a->app =
      app.add_subcommand("grad",
                         "loss and gradients of one batch for the PyTorch module rnn = nn.RNN|GRU|LSTM(I, H, layers, "
                         "batch_first=True), head = nn.Linear(H, C), output head(out[:, -1]), or (--model cnn) "
                         "nn.Sequential(*layers of --arch); mean cross-entropy");
  sub->add_option("--model", a->model, "rnn, gru, lstm or cnn")
      ->required()
      ->check(CLI::IsMember({"rnn", "gru", "lstm", "cnn"}));
  sub->add_option("--arch", a->arch,
                  "cnn: conv:OUT:K:S:P[:D], maxpool:K:S[:P], avgpool:K:S[:P], relu, tanh, flatten, linear:OUT, "
                  "comma-separated, or vgg11, vgg11/N (default: the weights' bppsa.arch metadata)");
  sub->add_option("--weights", a->weights, "state_dict (F32) under PyTorch's names")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--batch", a->batch,
                  "x: F32 [B, T, I] (cnn: [B, C, H, W]), y: I64 [B], and optionally lengths: I64 [B], each "
                  "sample's length 1..T (recurrent, CPU)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--out", a->out, "written atomically: loss (F32 []) and each parameter's gradient")->required();
  add_backward_options(*sub, a->backward);
  add_device_option(*sub, a->device);
  add_model_parallel_options(*sub, a->mp);
  return [a] {
    resolve_backward_flag(a->backward, a->device);
    return run_grad(*a);
  };
}

}  // namespace bppsa::cli
