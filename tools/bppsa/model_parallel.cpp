// `bppsa train --model-parallel` and `bppsa grad --model-parallel`: one rank of an MPI job.
// Training builds the model split across ranks and runs the loop of every mode (train_loop.hpp)
// over it: the library's epoch driver runs the pipeline's pass (bppsa/mpi/train.hpp). Rank 0
// prints, logs and writes files; an error on any rank ends the whole job (MPI_Abort) with the
// message, instead of leaving its peers waiting.
#include "model_parallel.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <type_traits>
#include <variant>
#include <vector>

#include "bppsa/bppsa.hpp"
#include "bppsa/io/file.hpp"
#include "bppsa/io/safetensors.hpp"
#include "bppsa/mpi/pipeline.hpp"
#include "bppsa/mpi/train.hpp"
#include "bppsa/train/trainer.hpp"
#include "checkpoint.hpp"
#include "progress.hpp"
#include "run_flags.hpp"
#include "train_loop.hpp"

namespace bppsa::cli {
namespace {

using mpi::Comm;
using mpi::ModelParallel;
using mpi::PipelineOptions;

mpi::PipelineOptions pipeline_options(const MpArgs& m, int threads, std::string job) {
  PipelineOptions o;
  o.stages = m.stages;
  o.replicas = m.replicas;
  o.micro_batches = m.micro_batches;
  o.backward = mpi::parse_pipeline_backward(m.backward);
  o.scan = mpi::parse_rank_scan(m.scan);
  o.threads = threads > 0 ? threads : 1;
  o.job = std::move(job);
  return o;
}

/// Runs one rank: MPI up, the command, and on an error the message (rank-tagged) and an
/// abort of the whole job so that no peer waits for this rank until its timeout.
template <class F>
int as_rank(double timeout, F&& body) {
  mpi::Environment env(nullptr, nullptr);
  Comm world = Comm::world(timeout);
  try {
    return body(world);
  } catch (const std::exception& e) {
    std::cerr << "bppsa: error (rank " << world.rank() << " of " << world.size() << "): " << e.what() << std::endl;
    if (world.size() > 1) mpi::Environment::abort(1);
    return 1;
  }
}

/// A model-parallel model for either family, plus what the loop needs to know about it.
struct Job {
  std::unique_ptr<ModelParallel<float>> model;
  std::string description;
  std::variant<SequenceDataset, ImageDataset> train, test;
};

/// --check: one batch, the distributed gradients against a single-process BP on rank 0, from
/// the same (assembled) weights. Returns 3, on every rank, when they differ.
template <class Data>
int check_gradients(const TrainArgs& a, ModelParallel<float>& mp, Comm& world, const Data& train) {
  const bool root = world.rank() == 0;
  const Index n = std::min<Index>(a.batch, train.size());
  std::vector<Index> idx(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
  std::vector<float> x;
  std::vector<std::int64_t> y;
  gather_batch(train, idx, x, y);
  const std::vector<Index> lengths = sample_lengths(train, idx);
  const TensorFile weights = mp.state_dict();
  mp.loss_and_grad(x, n, y, nullptr, lengths);
  const TensorFile got = mp.gradients();
  int failed = 0;
  if (root) {
    TensorFile ref;
    BackwardOptions bp{BackwardMethod::bp, a.backward.threads, 0};
    if constexpr (std::is_same_v<Data, ImageDataset>) {
      ConvNet<float> single(convnet_config_from_state_dict(weights));
      single.load_state_dict(weights);
      single.loss_and_grad(x, n, y, bp);
      for (const auto& p : single.parameters())
        ref.tensors[p.name] =
            Tensor::from_f32(std::span<const float>(p.grad, static_cast<std::size_t>(p.size)), p.shape);
    } else {
      SequenceClassifier<float> single(checkpoint_config(weights, a.model.model));
      single.load_state_dict(weights);
      single.loss_and_grad(x, n, train.steps, y, bp, nullptr, nullptr, lengths);
      for (const auto& p : single.parameters())
        ref.tensors[p.name] =
            Tensor::from_f32(std::span<const float>(p.grad, static_cast<std::size_t>(p.size)), p.shape);
    }
    std::vector<std::vector<float>> g, r;
    std::vector<std::string> names;
    for (const auto& [name, t] : ref.tensors) {
      names.push_back(name);
      r.push_back(t.to_f32(name));
      g.push_back(got.at(name, "check").to_f32(name));
    }
    std::string where;
    const double err = max_relative_error(g, r, names, &where);
    std::printf(
        "gradient check (one batch of %lld): model-parallel %s over %d stages vs single-process bp, largest "
        "relative error %.3g (%s)\n",
        static_cast<long long>(n), a.mp.backward.c_str(), mp.stages(), err, where.c_str());
    if (!(err <= 1e-4)) {
      std::fprintf(stderr, "bppsa: error: gradient check failed (%.3g > 1e-4)\n", err);
      failed = 1;
    }
  }
  std::int64_t flag[1] = {failed};
  world.allreduce_max(flag, "the gradient check");
  return flag[0] ? 3 : 0;
}

int train_rank(const TrainArgs& a, Comm& world) {
  const bool root = world.rank() == 0;
  if (!a.resume.empty())
    detail::raise<InvalidArgument>("train",
                                   "--resume is not supported with --model-parallel (the optimizer state is "
                                   "not sharded yet); start from the weights with --init CKPT");
  if (a.prune >= 0) detail::raise<InvalidArgument>("train", "--prune is not supported with --model-parallel");
  if (a.clip > 0)
    detail::raise<InvalidArgument>("train",
                                   "--clip-grad-norm is not supported with --model-parallel (the norm "
                                   "would need every stage's gradients)");
  if (a.compare_bp)
    detail::raise<InvalidArgument>("train",
                                   "--compare-bp is not supported with --model-parallel (compare "
                                   "--mp-backward bp and bppsa runs instead)");
  const bool cnn = a.model.model == "cnn";
  // Every flag but the local ones (run_flags.hpp): the ranks must share them, or they compute
  // different things together.
  const PipelineOptions po = pipeline_options(a.mp, a.backward.threads, handshake_flags(*a.app));
  TensorFile init;
  if (!a.init.empty()) init = read_safetensors(a.init);

  Job job;
  if (cnn) {
    auto [train, test] = load_images(a.data, !root);
    const ConvNetConfig config = cnn_train_config(a, train, test, a.init.empty() ? nullptr : &init);
    job.model = std::make_unique<ModelParallel<float>>(world, config, po);
    job.description = describe(config);
    job.train = std::move(train);
    job.test = std::move(test);
  } else {
    auto [train, test] = load_data(a.data, !root);
    const ModelConfig config = recurrent_train_config(a, train, test, a.init.empty() ? nullptr : &init);
    job.model = std::make_unique<ModelParallel<float>>(world, config, train.steps, po);
    job.description = describe(config);
    job.train = std::move(train);
    job.test = std::move(test);
  }
  ModelParallel<float>& mp = *job.model;
  if (a.init.empty())
    mp.reset_parameters(a.seed);
  else
    mp.load_state_dict(init);

  // Who does what, one line per rank, in rank order (gathered to rank 0).
  {
    const std::string line = "rank " + std::to_string(world.rank()) + ": stage " + std::to_string(mp.stage()) + "/" +
                             std::to_string(mp.stages()) + ", replica " + std::to_string(mp.replica()) + "/" +
                             std::to_string(mp.replicas()) + ", " + mp.describe_stage();
    for (int r = 1; r < world.size(); ++r) {
      if (world.rank() == r) world.send(mpi::to_bytes(line), 0, 77, "the stage summary");
      if (root) std::cerr << mpi::to_string(world.recv(r, 77, "the stage summary")) << "\n";
    }
    if (root) std::cerr << line << "\n";
  }

  std::optional<CheckpointLock> lock;  // rank 0 writes the checkpoint: it holds the lock
  if (root && !a.save.empty()) lock.emplace(a.save);

  // The loop of every mode (train_loop.hpp), by this rank's rules: rank 0 prints, logs, checks
  // for divergence and writes the checkpoints (the weights, gathered from every stage; the
  // optimizer's state stays with the ranks that own it, so none is saved); every rank trains.
  LoopMode mode;
  mode.root = root;
  mode.backward = "model-parallel " + std::to_string(mp.stages()) + " stages × " + std::to_string(mp.replicas()) +
                  " replicas, " + std::to_string(a.mp.micro_batches) + " micro-batches, backward " + a.mp.backward +
                  (a.mp.backward == "bppsa"
                       ? " (" + a.mp.scan + ", " + std::to_string(mpi::scan_rounds(po.scan, mp.stages())) + " rounds)"
                       : " (" + std::to_string(mp.stages() - 1) + " hops)");
  mode.record_backward = "model-parallel " + a.mp.backward;
  mode.start = {{"backward", a.mp.backward},
                {"stages", mp.stages()},
                {"replicas", mp.replicas()},
                {"micro_batches", a.mp.micro_batches},
                {"scan", a.mp.scan}};
  mode.rank_times = true;
  mode.gathered = [&](Index epoch) { world.barrier("the checkpoint of epoch " + std::to_string(epoch)); };
  mode.write = [&](TensorFile&& ck) {
    remove_stale_temporaries(a.save);
    write_safetensors(a.save, ck);
  };
  mode.saved = ", assembled from " + std::to_string(mp.stages()) + " stages";
  std::map<std::string, std::string> metadata{{"bppsa.stages", std::to_string(mp.stages())}};
  if (!a.init.empty()) metadata["bppsa.init"] = utf8_text(a.init);
  // --clip-grad-norm was refused above: a.clip is 0; --resume too: the loop starts at epoch 1.
  return std::visit(
      [&](const auto& train) {
        using Data = std::decay_t<decltype(train)>;
        const Data& test = std::get<Data>(job.test);
        return train_loop(a, mp, job.description, train, test, TensorFile{}, metadata, mode,
                          [&](const LoopEnd&) { return a.check ? check_gradients(a, mp, world, train) : 0; });
      },
      job.train);
}

int grad_rank(const GradArgs& a, Comm& world) {
  const char* op = "grad";
  const bool cnn = a.model == "cnn";
  const TensorFile w = read_safetensors(a.weights);
  TensorFile xb;
  Index B = 0;
  std::vector<float> x;
  std::vector<std::int64_t> y;
  naming_batch(a.batch, [&] {
    xb = read_safetensors(a.batch);
    const Tensor& xt = xb.at("x", op);
    B = xt.shape.empty() ? 0 : xt.shape[0];
    xb.require("y", {B}, op);
    x = xt.to_f32("x");
    for (float v : x)
      if (!std::isfinite(v)) detail::raise<NonFiniteError>(op, "tensor 'x' in " + a.batch + " holds NaN/Inf");
    y = xb.at("y", op).to_i64("y");
  });
  const Tensor& xt = xb.at("x", op);
  const PipelineOptions po = pipeline_options(a.mp, a.backward.threads, handshake_flags(*a.app));
  std::unique_ptr<ModelParallel<float>> mp;
  std::string description;
  std::vector<Index> lengths;  // recurrent: optional, each sample's length (the rest is padding)
  if (cnn) {
    if (xt.shape.size() != 4)
      detail::raise<ShapeError>(op, "tensor 'x' in " + a.batch + " has shape " + shape_list(xt.shape) +
                                        ", expected [batch, channels, height, width]");
    ConvNetConfig config;
    config.input = {xt.shape[1], xt.shape[2], xt.shape[3]};
    const std::string arch = !a.arch.empty() ? a.arch : w.metadata_or("bppsa.arch", "");
    if (arch.empty()) detail::raise<InvalidArgument>(op, "--model cnn needs --arch SPEC");
    config.layers = parse_arch(arch);
    mp = std::make_unique<ModelParallel<float>>(world, config, po);
    description = describe(config);
  } else {
    const ModelConfig config = config_from_state_dict(w, parse_cell(a.model));
    if (xt.shape.size() != 3)
      detail::raise<ShapeError>(op, "tensor 'x' in " + a.batch + " has shape " + shape_list(xt.shape) +
                                        ", expected [batch, steps, " + std::to_string(config.rnn.input) + "]");
    xb.require("x", {-1, -1, config.rnn.input}, op);
    lengths = batch_lengths(xb, B, xt.shape[1], a.batch);
    mp = std::make_unique<ModelParallel<float>>(world, config, xt.shape[1], po);
    description = describe(config);
  }
  mp->load_state_dict(w);
  mpi::PipelineStats st;
  float loss = 0;
  naming_batch(a.batch, [&] { loss = mp->loss_and_grad(x, B, y, &st, lengths); });
  TensorFile g = mp->gradients();
  if (world.rank() == 0) {
    g.tensors["loss"] = Tensor::from_f32(std::vector<float>{loss}, {});
    g.metadata["bppsa.model"] = description;
    g.metadata["bppsa.backward"] = "model-parallel " + a.mp.backward + " (" + a.mp.scan + ")";
    g.metadata["bppsa.stages"] = std::to_string(mp->stages());
    write_safetensors(a.out, g);
    std::printf("loss %.6f; %zu gradients written to %s (%s; %d stages × %d replicas, %d micro-batches, backward %s)\n",
                loss, g.tensors.size() - 1, a.out.c_str(), description.c_str(), mp->stages(), mp->replicas(),
                a.mp.micro_batches, a.mp.backward.c_str());
  }
  world.barrier("the end of the job");
  return 0;
}

}  // namespace

int run_train_model_parallel(const TrainArgs& a) {
  return as_rank(a.mp.timeout, [&](Comm& world) { return train_rank(a, world); });
}

int run_grad_model_parallel(const GradArgs& a) {
  return as_rank(a.mp.timeout, [&](Comm& world) { return grad_rank(a, world); });
}

}  // namespace bppsa::cli
