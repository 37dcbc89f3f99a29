// bench_paper: bppsa's half of the paper-reproduction benchmark (bench/paper/paper.py runs it and
// bench/paper/torch_paper.py, PyTorch's half, on the same files).
//
//   bench_paper time  …  one model / batch / backward method: a memory-probe iteration, then
//                        warm-up and timed iterations (forward, backward with its Jacobian /
//                        scan / parameter parts, optimizer step); JSON on stdout.
//   bench_paper curve …  trains for --iters iterations over a fixed batch order and records
//                        the running loss against wall-clock time; JSON on stdout.
//
// With --export DIR both first write what PyTorch needs to run the identical iteration:
// DIR/init.safetensors (the initial weights under PyTorch's names) and DIR/data.safetensors
// (x [N][T][F] float32 batch-first, y [N] int64, in the order the iterations use them).
//
// Definitions (docs/method.md, end of §5): forward = up to the loss value; backward = from the loss to
// every parameter gradient, Jacobian generation included (also reported on its own).
// Memory: the growth of the process's peak resident set (VmHWM, reset through
// /proc/self/clear_refs) during the first backward pass of a fresh process, above the
// resident set when it started; the same probe runs in bench/paper/torch_paper.py.
#include <malloc.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "bppsa/bppsa.hpp"

namespace {

using namespace bppsa;
using json = nlohmann::json;

struct Args {
  std::string cell = "rnn";
  Index hidden = 20, layers = 1, classes = 10;
  std::string data = "bitstream";  // bitstream | mnist | irmas
  Index steps = 1000, features = 1, batch = 16;
  std::string data_dir, preset = "s";
  std::string method = "bp";
  int threads = 2, chunks = 0, reps = 5, warmup = 2;
  Index iters = 100, log_every = 10;
  double lr = 3e-5;
  std::uint64_t seed = 4202;
  std::string export_dir;
};

// ---- memory probe ------------------------------------------------------------------------

/// VmRSS or VmHWM of this process in bytes.
std::int64_t status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  throw IoError("bench_paper: /proc/self/status has no " + key + " (Linux only)");
}

/// Returns the free heap to the system and makes VmHWM start again from the current VmRSS.
std::int64_t reset_peak() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  return status_bytes("VmRSS");
}

// ---- data --------------------------------------------------------------------------------

/// Bilinear resampling of an image's rows layout (28 steps × 28 features) to steps × features
/// (time along the image's rows, features along its columns).
std::vector<float> resample(std::span<const float> img, Index in_t, Index in_f, Index steps, Index features) {
  std::vector<float> out(static_cast<std::size_t>(steps * features));
  auto coord = [](Index i, Index n_out, Index n_in) {
    return n_out == 1 ? 0.0 : static_cast<double>(i) * static_cast<double>(n_in - 1) / static_cast<double>(n_out - 1);
  };
  for (Index t = 0; t < steps; ++t) {
    const double u = coord(t, steps, in_t);
    const Index t0 = std::min<Index>(static_cast<Index>(u), in_t - 1), t1 = std::min(t0 + 1, in_t - 1);
    const double a = u - static_cast<double>(t0);
    for (Index f = 0; f < features; ++f) {
      const double v = coord(f, features, in_f);
      const Index f0 = std::min<Index>(static_cast<Index>(v), in_f - 1), f1 = std::min(f0 + 1, in_f - 1);
      const double b = v - static_cast<double>(f0);
      auto at = [&](Index tt, Index ff) { return static_cast<double>(img[static_cast<std::size_t>(tt * in_f + ff)]); };
      out[static_cast<std::size_t>(t * features + f)] = static_cast<float>(
          (1 - a) * ((1 - b) * at(t0, f0) + b * at(t0, f1)) + a * ((1 - b) * at(t1, f0) + b * at(t1, f1)));
    }
  }
  return out;
}

/// `count` sample indices in a seeded shuffled order (cycling when count > n).
std::vector<Index> pick_order(Index n, Index count, std::uint64_t seed) {
  const std::vector<Index> order = permutation(n, seed);
  std::vector<Index> pick;
  for (Index i = 0; i < count; ++i) pick.push_back(order[static_cast<std::size_t>(i % n)]);
  return pick;
}

SequenceDataset load_samples_unchecked(const Args& a, Index count);

/// `count` samples of the benchmark's data set, in iteration order.
SequenceDataset load_samples(const Args& a, Index count) {
  SequenceDataset d = load_samples_unchecked(a, count);
  if (d.classes > a.classes)
    throw InvalidArgument("bench_paper: the data has " + std::to_string(d.classes) + " classes; pass --classes " +
                          std::to_string(d.classes));
  return d;
}

SequenceDataset load_samples_unchecked(const Args& a, Index count) {
  if (a.data == "bitstream") {
    if (a.features != 1) throw InvalidArgument("bench_paper: bitstream has 1 feature; pass --features 1");
    return make_bitstream(count, a.steps, a.seed);
  }
  if (a.data == "irmas") {
    const SequenceDataset src = load_irmas(a.data_dir, mfcc_preset(a.preset), a.steps);
    if (src.features != a.features)
      throw InvalidArgument("bench_paper: preset " + a.preset + " has " + std::to_string(src.features) +
                            " features; pass --features " + std::to_string(src.features));
    return subset(src, pick_order(src.size(), count, a.seed));
  }
  if (a.data != "mnist")
    throw InvalidArgument("bench_paper: unknown --data '" + a.data + "'; expected bitstream, mnist or irmas");
  // The training split of the MNIST-format set (Fashion-MNIST by default), rows resampled to T × F.
  const SequenceDataset rows =
      load_mnist(a.data_dir.empty() ? default_mnist_dir() : std::filesystem::path(a.data_dir), MnistLayout::rows)
          .first;
  SequenceDataset out;
  out.steps = a.steps;
  out.features = a.features;
  out.classes = rows.classes;
  out.name = rows.name + " resampled to " + std::to_string(a.steps) + " x " + std::to_string(a.features);
  for (Index i : pick_order(rows.size(), count, a.seed)) {
    const auto s = resample(rows.sample(i), rows.steps, rows.features, a.steps, a.features);
    out.x.insert(out.x.end(), s.begin(), s.end());
    out.y.push_back(rows.y[static_cast<std::size_t>(i)]);
  }
  return out;
}

void export_files(const Args& a, SequenceClassifier<float>& model, const SequenceDataset& d) {
  if (a.export_dir.empty()) return;
  const std::filesystem::path dir(a.export_dir);
  std::filesystem::create_directories(dir);
  write_safetensors(dir / "init.safetensors", model.state_dict());
  TensorFile f;
  f.tensors.emplace("x", Tensor::from_f32(d.x, {d.size(), d.steps, d.features}));
  f.tensors.emplace("y", Tensor::from_i64(d.y, {d.size()}));
  write_safetensors(dir / "data.safetensors", f);
}

// ---- statistics --------------------------------------------------------------------------

json stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return {{"median", median}, {"min", v.front()}, {"max", v.back()}, {"samples", v}};
}

ModelConfig model_config(const Args& a) {
  ModelConfig c;
  c.rnn = {parse_cell(a.cell), a.features, a.hidden, a.layers};
  c.classes = a.classes;
  return c;
}

BackwardOptions backward_options(const Args& a) { return {parse_backward(a.method), a.threads, a.chunks}; }

json header(const Args& a, const BackwardOptions& o, Index batch) {
  return {{"impl", "bppsa"},
          {"cell", a.cell},
          {"hidden", a.hidden},
          {"layers", a.layers},
          {"classes", a.classes},
          {"data", a.data},
          {"steps", a.steps},
          {"features", a.features},
          {"batch", batch},
          {"method", a.method},
          {"resolved", to_string(resolve_backward(o, batch))},
          {"threads", a.threads},
          {"lr", a.lr}};
}

/// What both modes start from: the data, the seeded model (exported for PyTorch when asked)
/// and Adam.
struct Session {
  Session(const Args& a, Index samples)
      : data(load_samples(a, samples)), model(model_config(a)), optimizer(optimizer_config(a)),
        options(backward_options(a)) {
    omp_set_num_threads(a.threads);
    model.reset_parameters(a.seed);
    export_files(a, model, data);
    params = model.parameters();
  }
  static OptimizerConfig optimizer_config(const Args& a) {
    OptimizerConfig oc;
    oc.lr = a.lr;
    return oc;
  }
  SequenceDataset data;
  SequenceClassifier<float> model;
  Optimizer<float> optimizer;
  BackwardOptions options;
  std::vector<NamedParam<float>> params;
};

int run_time(const Args& a) {
  Session s(a, a.batch);
  const SequenceDataset& d = s.data;
  SequenceClassifier<float>& model = s.model;
  Optimizer<float>& optimizer = s.optimizer;
  const BackwardOptions& bo = s.options;
  const auto& params = s.params;

  // Memory probe: the first iteration of a fresh process.
  const std::int64_t rss_start = reset_peak();
  const double loss0 = model.forward_loss(d.x, a.batch, a.steps, d.y);
  const std::int64_t rss_forward = reset_peak();
  model.backward(bo);
  const std::int64_t hwm_backward = status_bytes("VmHWM");
  optimizer.step(params);

  std::vector<double> fw, bw, jac, scan, par, opt, total;
  for (int r = 0; r < a.warmup - 1 + a.reps; ++r) {
    const double t0 = omp_get_wtime();
    model.forward_loss(d.x, a.batch, a.steps, d.y);
    const double t1 = omp_get_wtime();
    BackwardTimes bt;
    model.backward(bo, &bt);
    const double t2 = omp_get_wtime();
    optimizer.step(params);
    const double t3 = omp_get_wtime();
    if (r < a.warmup - 1) continue;
    fw.push_back(t1 - t0);
    bw.push_back(t2 - t1);
    jac.push_back(bt.jacobians);
    scan.push_back(bt.scan);
    par.push_back(bt.params);
    opt.push_back(t3 - t2);
    total.push_back(t3 - t0);
  }
  json out = header(a, bo, a.batch);
  out["loss0"] = loss0;
  out["reps"] = a.reps;
  out["warmup"] = a.warmup;
  out["forward"] = stats(fw);
  out["backward"] = stats(bw);
  out["jacobians"] = stats(jac);
  out["scan"] = stats(scan);
  out["param_grads"] = stats(par);
  out["optimizer"] = stats(opt);
  out["total"] = stats(total);
  out["memory"] = {{"backward_peak_bytes", hwm_backward - rss_forward},
                   {"forward_bytes", rss_forward - rss_start},
                   {"rss_before_bytes", rss_start}};
  std::cout << out.dump() << "\n";
  return 0;
}

int run_curve(const Args& a) {
  Session s(a, a.iters * a.batch);
  const SequenceDataset& d = s.data;
  SequenceClassifier<float>& model = s.model;
  Optimizer<float>& optimizer = s.optimizer;
  const BackwardOptions& bo = s.options;
  const auto& params = s.params;
  const Index per = a.batch * a.steps * a.features;
  std::vector<double> times, losses;
  std::vector<Index> iters;
  double clock = 0, running = 0;
  for (Index it = 0; it < a.iters; ++it) {
    const std::span<const float> x(d.x.data() + it * per, static_cast<std::size_t>(per));
    const std::span<const std::int64_t> y(d.y.data() + it * a.batch, static_cast<std::size_t>(a.batch));
    const double t0 = omp_get_wtime();
    const double l = model.loss_and_grad(x, a.batch, a.steps, y, bo);
    optimizer.step(params);
    clock += omp_get_wtime() - t0;
    running += l;
    if ((it + 1) % a.log_every == 0 || it + 1 == a.iters) {
      const Index span = (it % a.log_every) + 1;
      times.push_back(clock);
      losses.push_back(running / static_cast<double>(span));
      iters.push_back(it + 1);
      running = 0;
    }
  }
  json out = header(a, bo, a.batch);
  out["iters"] = iters;
  out["seconds"] = times;
  out["loss"] = losses;
  std::cout << out.dump() << "\n";
  return 0;
}

void add_common(CLI::App& c, Args& a) {
  c.add_option("--cell", a.cell, "rnn | gru | lstm")->check(CLI::IsMember({"rnn", "gru", "lstm"}));
  c.add_option("--hidden", a.hidden)->check(CLI::PositiveNumber);
  c.add_option("--layers", a.layers)->check(CLI::PositiveNumber);
  c.add_option("--classes", a.classes)->check(CLI::PositiveNumber);
  c.add_option("--data", a.data,
               "bitstream | mnist (MNIST-format training images resampled to steps × features) | irmas")
      ->check(CLI::IsMember({"bitstream", "mnist", "irmas"}));
  c.add_option("--data-dir", a.data_dir, "folder of MNIST-format IDX files (default: Fashion-MNIST) or IRMAS WAVs");
  c.add_option("--preset", a.preset, "IRMAS MFCC preset s | m | l");
  c.add_option("--steps", a.steps)->check(CLI::PositiveNumber);
  c.add_option("--features", a.features)->check(CLI::PositiveNumber);
  c.add_option("--batch", a.batch)->check(CLI::PositiveNumber);
  c.add_option("--method", a.method, "bp | linear | blelloch | hybrid | auto");
  c.add_option("--threads", a.threads)->check(CLI::PositiveNumber);
  c.add_option("--chunks", a.chunks);
  c.add_option("--lr", a.lr);
  c.add_option("--seed", a.seed);
  c.add_option("--export", a.export_dir, "write init.safetensors and data.safetensors here");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_paper: bppsa's side of the paper-reproduction benchmark (run by bench/paper/paper.py)"};
  app.require_subcommand(1);
  Args a;
  CLI::App* time = app.add_subcommand("time", "time one configuration; JSON on stdout");
  add_common(*time, a);
  time->add_option("--reps", a.reps, "timed iterations (≥ 1)")->check(CLI::PositiveNumber);
  time->add_option("--warmup", a.warmup, "untimed iterations first, the memory probe included (≥ 1)")
      ->check(CLI::PositiveNumber);
  CLI::App* curve = app.add_subcommand("curve", "loss against wall-clock time; JSON on stdout");
  add_common(*curve, a);
  curve->add_option("--iters", a.iters)->check(CLI::PositiveNumber);
  curve->add_option("--log-every", a.log_every)->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return time->parsed() ? run_time(a) : run_curve(a);
  } catch (const std::exception& e) {
    std::cerr << "bench_paper: error: " << e.what() << "\n";
    return 1;
  }
}
