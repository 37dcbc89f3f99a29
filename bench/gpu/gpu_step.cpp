// bench_gpu_step: bppsa's side of the GPU benchmark (bench/gpu/run.sh runs it through
// bench/gpu/gpu.py; PyTorch's side is bench/gpu/torch_gpu.py, on the same files).
//
//   bench_gpu_step --plan PLAN.json --work DIR --out RECORDS.jsonl [--methods bp,fused,hybrid]
//                  [--reps 5] [--warmup 2] [--budget SECONDS] [--device cuda|cpu]
//
// For every configuration of the plan and every backward method: the model (the plan's cell,
// hidden size, classes; bppsa's GPU training API, bench/gpu/API.md) loads DIR/<id>/weights.safetensors
// and trains on DIR/<id>/batch.safetensors (the files torch_gpu.py export wrote; `bppsa grad`'s
// format), uploaded once. The first iteration allocates and plans (its loss is loss0, compared
// with PyTorch's by the driver, and the model's device memory is read after each of its phases),
// then --warmup − 1 untimed iterations, then --reps timed ones: median, min, max and every sample.
// Methods (API.md): bp = BP through time on the GPU; fused = the fused chunked scan; hybrid (and
// blelloch, linear) = Jacobians generated on the GPU and the generic GPU scan engine. Default: bp,
// fused, hybrid on cuda; bp, blelloch, hybrid on cpu (the CPU engine has no fused scan).
//
// Definitions as bench_paper's and torch_gpu.py's (docs/method.md §5): forward = forward and loss up to the
// loss value on the host; backward = from the loss to every parameter gradient (Jacobians, scan,
// parameter GEMMs); optimizer = Adam's step; iteration = the three. Timing: the host clock around
// regions that start and end synchronised (model.synchronize()), so a region includes its launch
// overhead, which is what a training loop waits for. One JSON line per (configuration, method),
// appended and flushed as it finishes; a method that throws gives a line with "error" instead.
// --device cpu runs the same on the CPU engine (to test this program where there is no GPU).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bppsa/bppsa.hpp"
#include "timing.hpp"

namespace {

using namespace bppsa;
using json = nlohmann::json;
using bppsa_bench::Clock;
using bppsa_bench::seconds_since;
using bppsa_bench::stats;

struct Args {
  std::string plan, work, out;
  std::vector<std::string> methods;  ///< empty: the device's default
  int reps = 5, warmup = 2;
  double budget = 1e9;
  std::string device = "cuda";
};

/// One configuration of the plan (bench/gpu/gpu.py writes it).
struct Config {
  std::string id, cell;
  Index hidden = 20, steps = 1, features = 1, batch = 1, classes = 10, layers = 1;
  double lr = 3e-5;
  json sweeps;
};

Config parse_config(const json& j) {
  Config c;
  c.id = j.at("id").get<std::string>();
  c.cell = j.at("cell").get<std::string>();
  c.hidden = j.at("hidden").get<Index>();
  c.steps = j.at("steps").get<Index>();
  c.features = j.at("features").get<Index>();
  c.batch = j.at("batch").get<Index>();
  c.classes = j.at("classes").get<Index>();
  c.layers = j.value("layers", Index{1});
  c.lr = j.value("lr", 3e-5);
  c.sweeps = j.value("sweeps", json::array());
  return c;
}

json time_method(const Args& a, const Config& c, const std::string& method) {
  const std::filesystem::path dir = std::filesystem::path(a.work) / c.id;
  const TensorFile batch = read_safetensors(dir / "batch.safetensors");
  const std::vector<float> x = batch.require("x", {c.batch, c.steps, c.features}, "bench_gpu_step").to_f32("x");
  const std::vector<std::int64_t> y = batch.require("y", {c.batch}, "bench_gpu_step").to_i64("y");

  ModelConfig mc;
  mc.rnn.cell = parse_cell(c.cell);
  mc.rnn.input = c.features;
  mc.rnn.hidden = c.hidden;
  mc.rnn.layers = c.layers;
  mc.rnn.device = parse_device(a.device);
  mc.classes = c.classes;
  SequenceClassifier<float> model(mc);
  model.load_state_dict(read_safetensors(dir / "weights.safetensors"));
  model.set_batch(x, c.batch, c.steps, y);
  OptimizerConfig oc;
  oc.type = OptimizerType::adam;
  oc.lr = c.lr;
  Optimizer<float> adam(oc);
  BackwardOptions bo;
  bo.method = parse_backward(method);

  // The first iteration: allocates and plans; the model's device memory after each phase.
  model.synchronize();
  const std::size_t bytes_start = model.device_bytes();
  auto t0 = Clock::now();
  const double loss0 = model.forward_loss();
  const double first_forward = seconds_since(t0);
  const std::size_t bytes_forward = model.device_bytes();
  t0 = Clock::now();
  model.backward(bo);
  model.synchronize();
  const double first_backward = seconds_since(t0);
  const std::size_t bytes_backward = model.device_bytes();
  adam.step(model);
  model.synchronize();
  const std::size_t bytes_step = model.device_bytes();

  std::vector<double> fw, bw, op, total;
  for (int r = 0; r < a.warmup - 1 + a.reps; ++r) {
    model.synchronize();
    const auto s0 = Clock::now();
    model.forward_loss();  // returns the loss on the host: synchronised
    const auto s1 = Clock::now();
    model.backward(bo);
    model.synchronize();
    const auto s2 = Clock::now();
    adam.step(model);
    model.synchronize();
    const auto s3 = Clock::now();
    if (r < a.warmup - 1) continue;
    fw.push_back(std::chrono::duration<double>(s1 - s0).count());
    bw.push_back(std::chrono::duration<double>(s2 - s1).count());
    op.push_back(std::chrono::duration<double>(s3 - s2).count());
    total.push_back(std::chrono::duration<double>(s3 - s0).count());
  }
  return {{"loss0", loss0},
          {"first_forward_s", first_forward},
          {"first_backward_s", first_backward},
          {"forward", stats(fw)},
          {"backward", stats(bw)},
          {"optimizer", stats(op)},
          {"total", stats(total)},
          {"memory",
           {{"model_bytes_before", bytes_start},
            {"model_bytes_after_forward", bytes_forward},
            {"model_bytes_after_backward", bytes_backward},
            {"model_bytes_after_step", bytes_step},
            {"backward_growth_bytes", static_cast<double>(bytes_backward) - static_cast<double>(bytes_forward)}}}};
}

int run(const Args& a) {
  std::ifstream in(a.plan);
  if (!in) detail::raise<IoError>("bench_gpu_step", "cannot read the plan " + a.plan);
  const json plan = json::parse(in);
  std::ofstream out(a.out, std::ios::app);
  if (!out) detail::raise<IoError>("bench_gpu_step", "cannot append to " + a.out);
  // Where it ran: "NVIDIA H100 …, sm_90, 132 SMs, …, driver 13.0, runtime 13.0, kernels for sm_90".
  const std::string where = a.device == "cuda" ? cuda_summary() : cpu_model();
  const auto start = Clock::now();
  int done = 0, failed = 0, skipped = 0;
  for (const json& jc : plan.at("configs")) {
    const Config c = parse_config(jc);
    for (const std::string& method : a.methods) {
      json rec = {{"impl", "bppsa"},    {"id", c.id},           {"method", method},   {"device", a.device},
                  {"cell", c.cell},     {"hidden", c.hidden},   {"steps", c.steps},   {"features", c.features},
                  {"batch", c.batch},   {"classes", c.classes}, {"sweeps", c.sweeps}, {"reps", a.reps},
                  {"warmup", a.warmup}, {"where", where}};
      if (seconds_since(start) > a.budget) {
        std::cout << "bench_gpu_step: skipped " << c.id << " " << method << ": time budget spent" << std::endl;
        ++skipped;
        continue;
      }
      const auto t0 = Clock::now();
      try {
        rec.update(time_method(a, c, method));
        ++done;
        std::cout << std::fixed << std::setprecision(1) << "  " << std::setw(6) << seconds_since(t0) << " s  bppsa "
                  << c.id << " " << method << std::setprecision(3) << ": backward "
                  << 1e3 * rec["backward"]["median"].get<double>() << " ms, iteration "
                  << 1e3 * rec["total"]["median"].get<double>() << " ms" << std::defaultfloat << std::endl;
      } catch (const std::exception& e) {
        rec["error"] = e.what();
        ++failed;
        std::cout << "  bppsa " << c.id << " " << method << " FAILED: " << e.what() << std::endl;
      }
      out << rec.dump() << "\n" << std::flush;
    }
  }
  std::cout << "bench_gpu_step: " << done << " timed, " << failed << " failed, " << skipped << " skipped" << std::endl;
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpu_step: bppsa's side of the GPU benchmark (bench/gpu/gpu.py runs it)"};
  Args a;
  app.add_option("--plan", a.plan, "the configurations (JSON)")->required();
  app.add_option("--work", a.work, "folder of DIR/<id>/{weights,batch}.safetensors (torch_gpu.py export)")->required();
  app.add_option("--out", a.out, "JSON lines, appended: one record per (configuration, method)")->required();
  app.add_option("--methods", a.methods,
                 "backward methods: bp, fused (the fused scan), hybrid, blelloch, linear (the generic scan), auto; "
                 "default bp,fused,hybrid (cpu: bp,blelloch,hybrid)")
      ->delimiter(',')
      ->check(CLI::IsMember({"bp", "linear", "blelloch", "hybrid", "auto", "fused"}));
  app.add_option("--reps", a.reps, "timed iterations")->check(CLI::Range(1, 1000));
  app.add_option("--warmup", a.warmup, "untimed iterations first, the first one included")->check(CLI::Range(1, 1000));
  app.add_option("--budget", a.budget, "seconds; what would start after it is skipped")->check(CLI::PositiveNumber);
  app.add_option("--device", a.device, "cuda (default) or cpu (to test this program without a GPU)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (a.methods.empty())
    a.methods = a.device == "cuda" ? std::vector<std::string>{"bp", "fused", "hybrid"}
                                   : std::vector<std::string>{"bp", "blelloch", "hybrid"};
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::cerr << "bench_gpu_step: error: " << e.what() << "\n";
    return 1;
  }
}
