// bench_cnn: bppsa's half of the CNN pruning benchmark (bench/cnn/cnn.py runs it and
// bench/cnn/torch_cnn.py, PyTorch's half, on the same files).
//
//   bench_cnn export …  prunes a trained checkpoint by global magnitude and writes what PyTorch
//                       needs to retrain the identical model on the identical batches:
//                       DIR/init.safetensors (pruned weights, nn.Sequential names),
//                       DIR/data.safetensors (x_train, y_train, x_test, y_test as bppsa loads
//                       them) and DIR/order.safetensors (epoch_e: the trainer's sample order).
//   bench_cnn time …    one backward method on the first batch of epoch 1: warm-up, then timed
//                       forward / backward (Jacobian generation, scan, parameter gradients)
//                       in fresh processes; JSON on stdout.
//
// Definitions (docs/method.md, end of §5): forward = up to the loss value; backward = from the loss to
// every parameter gradient, Jacobian generation included (also reported on its own).
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bppsa/bppsa.hpp"

namespace {

using namespace bppsa;
using json = nlohmann::json;

struct Args {
  std::string init, out, data_dir, method = "bp";
  double prune = 0;
  Index batch = 32, epochs = 1, limit_train = 0;
  int threads = 2, reps = 5, warmup = 2;
  std::uint64_t seed = 4202;
};

json stats(std::vector<double> v) {
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  const double med = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  return {{"median", med}, {"min", s.front()}, {"max", s.back()}, {"samples", v}};
}

/// The MNIST-format set as `bppsa train --data mnist [--limit-train N]` loads it (1×32×32,
/// standardised by the whole training set's statistics, the published train/test split).
std::pair<ImageDataset, ImageDataset> mnist(const Args& a) {
  const auto dir = a.data_dir.empty() ? default_mnist_dir() : std::filesystem::path(a.data_dir);
  return mnist_cnn_data(mnist_head(read_mnist(dir), a.limit_train, 0));
}

ConvNet<float> pruned_model(const Args& a, PruneReport* report) {
  const TensorFile file = read_safetensors(a.init);
  ConvNet<float> model(convnet_config_from_state_dict(file));
  model.load_state_dict(file);
  *report = prune_global_magnitude(model, a.prune);
  return model;
}

Tensor images(const ImageDataset& d) {
  return Tensor::from_f32(d.x, {d.size(), d.channels, d.height, d.width});
}

int run_export(const Args& a) {
  PruneReport r;
  ConvNet<float> model = pruned_model(a, &r);
  std::filesystem::create_directories(a.out);
  TensorFile init = model.state_dict();
  init.metadata[kSparsityKey] = std::to_string(r.sparsity());
  write_safetensors(std::filesystem::path(a.out) / "init.safetensors", init);
  const auto [train, test] = mnist(a);
  TensorFile data;
  data.tensors["x_train"] = images(train);
  data.tensors["y_train"] = Tensor::from_i64(train.y, {train.size()});
  data.tensors["x_test"] = images(test);
  data.tensors["y_test"] = Tensor::from_i64(test.y, {test.size()});
  write_safetensors(std::filesystem::path(a.out) / "data.safetensors", data);
  TensorFile order;
  for (Index e = 1; e <= a.epochs; ++e) {  // the trainer's shuffle: permutation(n, seed + epoch)
    const auto p = permutation(train.size(), a.seed + static_cast<std::uint64_t>(e));
    order.tensors["epoch_" + std::to_string(e)] =
        Tensor::from_i64(std::vector<std::int64_t>(p.begin(), p.end()), {train.size()});
  }
  write_safetensors(std::filesystem::path(a.out) / "order.safetensors", order);
  std::cout << json{{"out", a.out}, {"pruning", r.str()}, {"sparsity", r.sparsity()}}.dump() << "\n";
  return 0;
}

int run_time(const Args& a) {
  PruneReport r;
  ConvNet<float> model = pruned_model(a, &r);
  const auto [train, test] = mnist(a);
  const auto order = permutation(train.size(), a.seed + 1);
  std::vector<float> x;
  std::vector<std::int64_t> y;
  gather_batch(train, std::span<const Index>(order).first(static_cast<std::size_t>(a.batch)), x, y);
  const BackwardOptions o{parse_backward(a.method), a.threads, 0};
  std::vector<double> fw, bw, jac, scan, par;
  double first_loss = 0;
  for (int it = 0; it < a.warmup + a.reps; ++it) {
    StepTimes t;
    const float loss = model.loss_and_grad(x, a.batch, y, o, &t);
    if (it == 0) first_loss = loss;
    if (it < a.warmup) continue;
    fw.push_back(t.forward);
    bw.push_back(t.backward);
    jac.push_back(t.detail.jacobians);
    scan.push_back(t.detail.scan);
    par.push_back(t.detail.params);
  }
  std::cout << json{{"method", a.method},
                    {"threads", a.threads},
                    {"batch", a.batch},
                    {"pruning", r.str()},
                    {"sparsity", r.sparsity()},
                    {"loss", first_loss},
                    {"forward", stats(fw)},
                    {"backward", stats(bw)},
                    {"jacobians", stats(jac)},
                    {"scan", stats(scan)},
                    {"params", stats(par)}}
                   .dump()
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cnn: bppsa's half of the CNN pruning benchmark (bench/cnn/cnn.py)"};
  app.require_subcommand(1);
  Args a;
  for (CLI::App* sub : {app.add_subcommand("export", "write pruned weights, data and batch order for PyTorch"),
                        app.add_subcommand("time", "time forward/backward of one backward method")}) {
    sub->add_option("--init", a.init, "trained cnn checkpoint (bppsa train --model cnn --save)")
        ->required()
        ->check(CLI::ExistingFile);
    sub->add_option("--prune", a.prune, "global magnitude sparsity")->check(CLI::Range(0.0, 0.999999));
    sub->add_option("--batch", a.batch, "batch size")->check(CLI::Range(Index{1}, Index{1} << 16));
    sub->add_option("--seed", a.seed, "the trainer's shuffle seed (bppsa train --seed)");
    sub->add_option("--limit-train", a.limit_train, "only the first N training images (0 = all), as bppsa train's")
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--data-dir", a.data_dir, "folder of MNIST-format IDX files (default $BPPSA_MNIST or /usr/share/datasets/fashion-mnist)");
  }
  CLI::App* exp = app.get_subcommand("export");
  exp->add_option("--out", a.out, "output folder")->required();
  exp->add_option("--epochs", a.epochs, "epochs of batch order to write")->check(CLI::Range(Index{1}, Index{1000}));
  CLI::App* tim = app.get_subcommand("time");
  tim->add_option("--method", a.method, "bp, blelloch, hybrid, linear, auto");
  tim->add_option("--threads", a.threads, "OpenMP threads");
  tim->add_option("--reps", a.reps, "timed iterations")->check(CLI::Range(1, 10000));
  tim->add_option("--warmup", a.warmup, "warm-up iterations")->check(CLI::Range(0, 10000));
  CLI11_PARSE(app, argc, argv);
  try {
    return app.got_subcommand("export") ? run_export(a) : run_time(a);
  } catch (const bppsa::Error& e) {
    std::cerr << "bench_cnn: error: " << e.what() << "\n";
    return 1;
  }
}
