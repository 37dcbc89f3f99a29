// `bppsa train --model-parallel` and `bppsa grad --model-parallel`: one rank of an MPI job.
// Rank 0 prints, logs and writes files; an error on any rank ends the whole job
// (MPI_Abort) with the message, instead of leaving its peers waiting.
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
#include "bppsa/train/trainer.hpp"
#include "checkpoint.hpp"
#include "progress.hpp"
#include "run_flags.hpp"

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

/// The lengths of samples idx of a recurrent data set that has them (else empty: every
/// sample has every step, as for images).
template <class Data>
std::vector<Index> lengths_of(const Data& d, std::span<const Index> idx) {
  std::vector<Index> lengths;
  if constexpr (std::is_same_v<Data, SequenceDataset>)
    if (!d.lengths.empty())
      for (const Index i : idx) lengths.push_back(d.length(i));
  return lengths;
}

/// A model-parallel model for either family, plus what the loop needs to know about it.
struct Job {
  std::unique_ptr<ModelParallel<float>> model;
  std::string description;
  std::variant<SequenceDataset, ImageDataset> train, test;
};

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

  // --clip-grad-norm was refused above: a.clip is 0.
  Optimizer<float> optimizer(optimizer_config(a, std::visit([](const auto& d) { return d.size(); }, job.train)));

  JsonLog log;
  std::optional<CheckpointLock> lock;  // rank 0 writes the checkpoint: it holds the lock
  if (root && !a.save.empty()) lock.emplace(a.save);
  const std::string data_name = utf8_text(std::visit([](const auto& d) { return d.name; }, job.train));
  if (root) {
    std::cerr << "model: " << job.description << ", model-parallel " << mp.stages() << " stages × " << mp.replicas()
              << " replicas, " << a.mp.micro_batches << " micro-batches, backward " << a.mp.backward
              << (a.mp.backward == "bppsa"
                      ? " (" + a.mp.scan + ", " + std::to_string(mpi::scan_rounds(po.scan, mp.stages())) + " rounds)"
                      : " (" + std::to_string(mp.stages() - 1) + " hops)")
              << ", " << a.optimizer << " lr " << a.lr << ", batch " << a.batch << "\n";
    if (!a.log.empty()) {
      log.open(a.log, false);
      log.write(nlohmann::json{{"event", "start"},
                               {"model", job.description},
                               {"data", data_name},
                               {"stages", mp.stages()},
                               {"replicas", mp.replicas()},
                               {"micro_batches", a.mp.micro_batches},
                               {"backward", a.mp.backward},
                               {"scan", a.mp.scan},
                               {"optimizer", a.optimizer},
                               {"lr", a.lr},
                               {"batch", a.batch},
                               {"seed", a.seed}});
    }
  }

  std::vector<float> x;
  std::vector<std::int64_t> y;
  DivergenceGuard guard;  // rank 0's: its error ends the job before the epoch is saved
  for (Index epoch = 1; epoch <= a.epochs; ++epoch) {
    const Index n = std::visit([](const auto& d) { return d.size(); }, job.train);
    const std::vector<Index> order = permutation(n, a.seed + static_cast<std::uint64_t>(epoch));
    const Index batches = (n + a.batch - 1) / a.batch;
    ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(a.epochs), "batch", root && !a.no_progress);
    double loss_sum = 0, forward = 0, backward = 0, reduce = 0;
    const double t0 = Comm::now();
    for (Index b = 0; b < batches; ++b) {
      const Index s0 = b * a.batch, s1 = std::min(n, s0 + a.batch);
      const std::span<const Index> idx(order.data() + s0, static_cast<std::size_t>(s1 - s0));
      std::visit([&](const auto& d) { gather_batch(d, idx, x, y); }, job.train);
      const std::vector<Index> lengths = std::visit([&](const auto& d) { return lengths_of(d, idx); }, job.train);
      mpi::PipelineStats st;
      const float loss = mp.loss_and_grad(x, s1 - s0, y, &st, lengths);
      if (!std::isfinite(loss))
        detail::raise<NonFiniteError>("train", "the loss became " + std::to_string(loss) + " at epoch " +
                                                   std::to_string(epoch) + ", batch " + std::to_string(b + 1) +
                                                   ": lower the learning rate");
      optimizer.step(mp.parameters());
      mp.parameters_changed();
      loss_sum += static_cast<double>(loss) * static_cast<double>(s1 - s0);
      forward += st.forward;
      backward += st.backward;
      reduce += st.reduce;
      bar.update(b + 1, batches, loss_sum / static_cast<double>(s1));
    }
    bar.finish();
    const double seconds = Comm::now() - t0;
    // Test set through the pipeline, forward only.
    const Index nt = std::visit([](const auto& d) { return d.size(); }, job.test);
    double test_loss = 0;
    Index correct = 0;
    for (Index s0 = 0; s0 < nt; s0 += 256) {
      const Index s1 = std::min(nt, s0 + 256);
      std::vector<Index> idx(static_cast<std::size_t>(s1 - s0));
      for (Index i = s0; i < s1; ++i) idx[static_cast<std::size_t>(i - s0)] = i;
      std::visit([&](const auto& d) { gather_batch(d, idx, x, y); }, job.test);
      const std::vector<Index> lengths = std::visit([&](const auto& d) { return lengths_of(d, idx); }, job.test);
      const auto [l, c] = mp.evaluate(x, s1 - s0, y, lengths);
      test_loss += l;
      correct += c;
    }
    if (root) {
      guard.check(a, epoch, loss_sum / static_cast<double>(n), test_loss / static_cast<double>(nt));
      std::printf(
          "epoch %lld/%lld  train loss %.4f  test loss %.4f acc %5.2f%%  %.1f s (rank 0: forward %.1f, "
          "backward %.1f, gradient all-reduce %.2f)\n",
          static_cast<long long>(epoch), static_cast<long long>(a.epochs), loss_sum / static_cast<double>(n),
          test_loss / static_cast<double>(nt), 100.0 * static_cast<double>(correct) / static_cast<double>(nt), seconds,
          forward, backward, reduce);
      std::fflush(stdout);
      log.write(nlohmann::json{{"event", "epoch"},
                               {"epoch", epoch},
                               {"train_loss", loss_sum / static_cast<double>(n)},
                               {"test_loss", test_loss / static_cast<double>(nt)},
                               {"test_accuracy", static_cast<double>(correct) / static_cast<double>(nt)},
                               {"seconds", seconds},
                               {"forward_seconds", forward},
                               {"backward_seconds", backward},
                               {"reduce_seconds", reduce},
                               {"steps", optimizer.steps()}});
    }
    if (!a.save.empty()) {
      // Every stage's weights to rank 0, then one atomic write of the whole model.
      TensorFile ck = mp.state_dict();
      world.barrier("the checkpoint of epoch " + std::to_string(epoch));
      if (root) {
        ck.metadata["bppsa.epoch"] = std::to_string(epoch);
        ck.metadata["bppsa.step"] = std::to_string(optimizer.steps());
        ck.metadata["bppsa.data"] = data_name;
        ck.metadata["bppsa.backward"] = "model-parallel " + a.mp.backward;
        ck.metadata["bppsa.stages"] = std::to_string(mp.stages());
        if (!a.init.empty()) ck.metadata["bppsa.init"] = utf8_text(a.init);
        for (const auto& [k, v] : run_record(*a.app)) ck.metadata[k] = v;
        guard.record(ck.metadata);
        remove_stale_temporaries(a.save);
        write_safetensors(a.save, ck);
        std::cerr << "saved " << a.save << " (epoch " << epoch << ", assembled from " << mp.stages() << " stages)\n";
      }
    }
  }

  if (a.check) {
    // One batch: the distributed gradients against a single-process BP on rank 0, from the
    // same (assembled) weights.
    const Index n = std::min<Index>(a.batch, std::visit([](const auto& d) { return d.size(); }, job.train));
    std::vector<Index> idx(static_cast<std::size_t>(n));
    for (Index i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = i;
    std::visit([&](const auto& d) { gather_batch(d, idx, x, y); }, job.train);
    const std::vector<Index> lengths = std::visit([&](const auto& d) { return lengths_of(d, idx); }, job.train);
    const TensorFile weights = mp.state_dict();
    mp.loss_and_grad(x, n, y, nullptr, lengths);
    const TensorFile got = mp.gradients();
    int failed = 0;
    if (root) {
      TensorFile ref;
      BackwardOptions bp{BackwardMethod::bp, a.backward.threads, 0};
      if (cnn) {
        ConvNet<float> single(convnet_config_from_state_dict(weights));
        single.load_state_dict(weights);
        single.loss_and_grad(x, n, y, bp);
        for (const auto& p : single.parameters())
          ref.tensors[p.name] =
              Tensor::from_f32(std::span<const float>(p.grad, static_cast<std::size_t>(p.size)), p.shape);
      } else {
        SequenceClassifier<float> single(checkpoint_config(weights, a.model.model));
        single.load_state_dict(weights);
        const auto& d = std::get<SequenceDataset>(job.train);
        single.loss_and_grad(x, n, d.steps, y, bp, nullptr, nullptr, lengths);
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
    if (flag[0]) return 3;
  }
  return 0;
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
