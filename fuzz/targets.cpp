// The fuzz targets' bodies (targets.hpp): each file parser on the input, then what an accepted
// input must keep true (round trips, validation), with model sizes bounded for the fuzzer.
#include "targets.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string_view>

#include "bppsa/core/error.hpp"
#include "bppsa/data/cifar10.hpp"
#include "bppsa/data/irmas.hpp"
#include "bppsa/data/idx.hpp"
#include "bppsa/io/safetensors.hpp"
#include "bppsa/nn/arch.hpp"
#include "bppsa/nn/conv_net.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/train/optimizer.hpp"
#include "bppsa/train/prune.hpp"

namespace bppsa::fuzz {
namespace {

static_assert(std::is_same_v<std::uint8_t, unsigned char>, "the parsers take bytes as unsigned char");

void require(bool ok, const std::string& what) {
  if (!ok) throw Broken(what);
}

/// Runs f: "" when it returns, the message of the bppsa::Error that refused the input otherwise.
template <class F>
std::string outcome(F&& f) {
  try {
    f();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

/// Runs f, which must not refuse: a bppsa::Error here breaks an invariant.
template <class F>
void must(const std::string& what, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    throw Broken(what + ": " + e.what());
  }
}

bool same_tensors(const TensorFile& a, const TensorFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  return std::equal(a.tensors.begin(), a.tensors.end(), b.tensors.begin(), [](const auto& x, const auto& y) {
    return x.first == y.first && x.second.dtype == y.second.dtype && x.second.shape == y.second.shape &&
           x.second.bytes == y.second.bytes;
  });
}

/// Most parameters a model built by a target may have (4 MiB of floats, twice with gradients).
constexpr double kMaxParams = 1 << 20;
/// make_layer refuses, before allocating, inputs and weights of more elements than this.
constexpr double kMaxLayerElements = 2147483647.0;

/// Whether building `c` stays within kMaxParams, counted layer by layer on make_layer's own
/// shapes. A layer make_layer refuses ends the count: ConvNet's constructor refuses it too,
/// having built only the layers counted before it. A layer beyond make_layer's limit is
/// handed to it all the same: it must refuse without allocating.
bool affordable(const ConvNetConfig& c) {
  Shape3 shape = c.input;
  bool flat = false;
  double params = 0;
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    const LayerSpec& s = c.layers[i];
    const double in = static_cast<double>(shape.c) * static_cast<double>(shape.h) * static_cast<double>(shape.w);
    double weights = 0;
    if (s.type == LayerType::conv)
      weights = static_cast<double>(s.out) * static_cast<double>(shape.c) * static_cast<double>(s.window.kh) *
                static_cast<double>(s.window.kw);
    if (s.type == LayerType::linear) weights = static_cast<double>(s.out) * in;
    params += weights + (weights > 0 ? static_cast<double>(s.out) : 0.0);
    const bool refused_by_contract = weights > kMaxLayerElements || in > kMaxLayerElements;
    if (params > kMaxParams && !refused_by_contract) return false;
    std::unique_ptr<Layer<float>> layer;
    try {
      layer = make_layer<float>(s, shape, flat, "layer " + std::to_string(i));
    } catch (const Error&) {
      return true;
    }
    require(!refused_by_contract, "make_layer built " + layer->describe() + " (" + std::to_string(weights) +
                                      " weights, input " + std::to_string(in) + ") beyond its 2^31 − 1 limit");
    shape = layer->out_shape();
    flat = flat || s.type == LayerType::flatten || s.type == LayerType::linear;
  }
  return true;
}

/// A ConvNet of `c` (if affordable): its checkpoint must parse back to the same config and load.
void convnet_round_trip(const ConvNetConfig& c) {
  if (!affordable(c)) return;
  ConvNet<float> net(c);
  net.reset_parameters(7);
  const TensorFile saved = net.state_dict();
  must("a ConvNet's own checkpoint", [&] {
    const TensorFile file = parse_safetensors(serialize_safetensors(saved), "cnn.safetensors");
    const ConvNetConfig back = convnet_config_from_state_dict(file);
    require(back.input == c.input && back.layers == c.layers && back.loss == c.loss,
            "convnet_config_from_state_dict(state_dict()) differs from the config: " + describe(back) + " vs " +
                describe(c));
    ConvNet<float> again(back);
    again.load_state_dict(file);
    require(same_tensors(again.state_dict(), saved), "a ConvNet's checkpoint does not load to the same weights");
  });
}

std::string run_safetensors(Bytes data) {
  return outcome([&] {
    const TensorFile f = parse_safetensors(data, "fuzz.safetensors");
    for (const auto& entry : f.tensors) {
      const std::string& name = entry.first;
      const Tensor& t = entry.second;
      const auto n = static_cast<std::size_t>(t.numel());
      must("the typed view of accepted tensor '" + name + "'", [&] {
        const bool real = t.dtype == DType::f32 || t.dtype == DType::f64;
        require((real ? t.to_f64(name).size() : t.to_i64(name).size()) == n, "a typed view has the wrong length");
      });
    }
    TensorFile back;
    must("re-serialising an accepted file", [&] { back = parse_safetensors(serialize_safetensors(f), "round trip"); });
    require(same_tensors(f, back), "serialize_safetensors(parse_safetensors(x)) parses to another file");
  });
}

std::string run_idx(Bytes data) {
  return outcome([&] {
    const IdxArray a = detail::parse_idx(data, "fuzz.idx");
    bool empty = false;
    double values = 1;
    for (Index d : a.dims) {
      require(d >= 0, "an accepted array has a negative size");
      empty = empty || d == 0;
      values *= static_cast<double>(d);
    }
    require(!a.dims.empty() && a.dims.size() <= 255 && static_cast<double>(a.data.size()) == (empty ? 0.0 : values),
            "an accepted array's bytes do not fill its dimensions");
    // The array written plain parses back to itself; an accepted plain file is those very bytes.
    const std::vector<std::uint8_t> plain = idx_file(a.dims, a.data);
    must("re-parsing an accepted array written plain", [&] {
      const IdxArray back = detail::parse_idx(plain, "round trip");
      require(back.dims == a.dims && back.data == a.data, "parse_idx(idx_file(a)) differs from a");
    });
    if (data.size() < 2 || data[0] != 0x1f || data[1] != 0x8b)
      require(std::equal(data.begin(), data.end(), plain.begin(), plain.end()),
              "an accepted plain file differs from the file its array writes");
  });
}

std::string run_cifar10(Bytes data) {
  // batches.meta.txt's parser sees the same bytes; its refusals are as expected as the batch's.
  try {
    const std::vector<std::string> names = detail::parse_cifar10_class_names(data, "batches.meta.txt");
    require(names.size() == 10, "an accepted batches.meta.txt does not name 10 classes");
    for (const auto& s : names)
      require(!s.empty() && s.find('\n') == std::string::npos && !std::isspace(static_cast<unsigned char>(s.front())) &&
                  !std::isspace(static_cast<unsigned char>(s.back())),
              "a class name is empty, spans lines or keeps blanks: '" + s + "'");
  } catch (const Error&) {
  }
  return outcome([&] {
    ImageDataset d{.channels = 3, .height = 32, .width = 32, .classes = 10, .x = {}, .y = {}, .class_names = {},
                   .name = "fuzz"};
    detail::parse_cifar10_batch(data, "fuzz.bin", d);
    require(d.size() >= 1, "an accepted batch holds no image");
    must("validating an accepted batch", [&] { d.validate("fuzz"); });
  });
}

std::string run_wav(Bytes data) {
  return outcome([&] {
    const Audio a = decode_audio(data, "fuzz.wav");
    require(a.channels >= 1 && a.sample_rate >= 1 && a.frames() >= 1 &&
                a.samples.size() == static_cast<std::size_t>(a.frames() * a.channels),
            "decoded audio has no frames, or samples that do not fill its frames");
    // What load_irmas does next with a clip (compute_file): the MFCC of each channel, for
    // mono and stereo clips; short ones only, to keep the fuzzer fast.
    if (a.channels > 2 || a.frames() > (1 << 16)) return;
    const MfccPreset preset = mfcc_preset("l");
    std::vector<float> channel(static_cast<std::size_t>(a.frames()));
    for (int c = 0; c < a.channels; ++c) {
      for (Index i = 0; i < a.frames(); ++i)
        channel[static_cast<std::size_t>(i)] = a.samples[static_cast<std::size_t>(i * a.channels + c)];
      const std::vector<float> f = mfcc(channel, a.sample_rate, preset);
      require(f.size() == static_cast<std::size_t>((1 + a.frames() / preset.hop) * (preset.n_mfcc - 1)),
              "mfcc returned " + std::to_string(f.size()) + " values for " + std::to_string(a.frames()) + " samples");
      // Samples in [-1, 1] (every PCM file) must give finite features at any sample rate.
      if (std::all_of(channel.begin(), channel.end(), [](float v) { return v >= -1.0f && v <= 1.0f; }))
        require(std::all_of(f.begin(), f.end(), [](float v) { return std::isfinite(v); }),
                "mfcc of samples in [-1, 1] at " + std::to_string(a.sample_rate) + " Hz is not finite");
    }
  });
}

std::string run_mfcc_cache(Bytes data) {
  return outcome([&] {
    const TensorFile f = parse_safetensors(data, "fuzz.safetensors");
    // load_irmas without a fixed step count (steps 0), then with the count the cache holds.
    const auto d = detail::mfcc_cache_dataset(f, kCacheKey, kCacheLabels, 0, kCacheFeatures);
    if (!d) return;
    require(d->y == kCacheLabels && d->features == kCacheFeatures && d->steps >= 1 &&
                d->x.size() == kCacheLabels.size() * static_cast<std::size_t>(d->steps * kCacheFeatures),
            "an accepted cache does not have the shape asked for");
    must("the same cache asked for its own step count", [&] {
      const auto again = detail::mfcc_cache_dataset(f, kCacheKey, kCacheLabels, d->steps, kCacheFeatures);
      require(again && again->x == d->x, "the cache reads differently with steps = " + std::to_string(d->steps));
    });
    SequenceDataset s = *d;
    s.classes = static_cast<Index>(irmas_classes().size());
    must("validating an accepted cache", [&] { s.validate("fuzz"); });
  });
}

std::string run_arch(Bytes data) {
  const std::string spec(data.begin(), data.end());
  return outcome([&] {
    const std::vector<LayerSpec> layers = parse_arch(spec);
    must("re-parsing arch_string", [&] {
      require(parse_arch(arch_string(layers)) == layers, "parse_arch(arch_string(l)) != l for '" + spec + "'");
    });
    // Building the network where the shapes allow (a refusal there is the expected ShapeError).
    for (const Shape3 input : {Shape3{1, 28, 28}, Shape3{3, 32, 32}, Shape3{2, 5, 7}}) {
      try {
        convnet_round_trip(ConvNetConfig{input, layers, LossType::cross_entropy});
      } catch (const Error&) {
      }
    }
  });
}

std::string run_checkpoint(Bytes data) {
  const std::pair<Bytes, Bytes> files = split_input(data);
  const Bytes weights = files.first, optimizer_state = files.second;
  return outcome([&] {
    const TensorFile ck = parse_safetensors(weights, "fuzz.safetensors");
    // `bppsa train --resume` continues after the epoch the checkpoint records.
    const Index next_epoch = ck.metadata_count("bppsa.epoch", 0, "resume") + 1;
    require(next_epoch >= 1, "the resume epoch is not positive");
    // What bppsa train / eval / grad / jacobians do with a checkpoint's metadata and tensors.
    std::unique_ptr<ConvNet<float>> cnn;
    std::unique_ptr<SequenceClassifier<float>> rnn;
    std::vector<NamedParam<float>> params;
    const std::string model = ck.metadata_or("bppsa.model", "rnn");
    if (model == "cnn") {
      const ConvNetConfig c = convnet_config_from_state_dict(ck);
      if (!affordable(c)) return;
      cnn = std::make_unique<ConvNet<float>>(c);
      cnn->load_state_dict(ck);
      restore_masks(*cnn, ck);
      params = cnn->parameters();
    } else {
      const ModelConfig c = config_from_state_dict(ck, parse_cell(model), parse_head(ck.metadata_or("bppsa.head", "last")),
                                                   parse_loss(ck.metadata_or("bppsa.loss", "ce")));
      rnn = std::make_unique<SequenceClassifier<float>>(c);
      rnn->load_state_dict(ck);
      params = rnn->parameters();
    }
    if (optimizer_state.empty()) return;
    // The optimizer state saved beside it, restored and stepped once (gradients are zero).
    const TensorFile os = parse_safetensors(optimizer_state, "fuzz.optim.safetensors");
    OptimizerConfig oc;
    oc.type = parse_optimizer(os.metadata_or("optimizer", "adam"));
    oc.momentum = 0.9;
    Optimizer<float> optimizer(oc);
    optimizer.load_state(os, params);
    optimizer.step(params);
  });
}

}  // namespace

std::pair<Bytes, Bytes> split_input(Bytes data) {
  const std::string_view all(reinterpret_cast<const char*>(data.data()), data.size());
  const std::size_t at = all.find(kSeparator);
  if (at == std::string_view::npos) return {data, {}};
  const std::size_t rest = at + std::strlen(kSeparator);
  return {data.first(at), data.subspan(rest)};
}

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"safetensors", run_safetensors, 16384}, {"idx", run_idx, 16384},   {"cifar10", run_cifar10, 12800},
      {"wav", run_wav, 16384},                 {"mfcc_cache", run_mfcc_cache, 4096}, {"arch", run_arch, 2048},
      {"checkpoint", run_checkpoint, 16384},
  };
  return all;
}

const Target& target(const std::string& name) {
  std::string names;
  for (const Target& t : targets()) {
    if (name == t.name) return t;
    names += (names.empty() ? "" : ", ") + std::string(t.name);
  }
  throw std::invalid_argument("no fuzz target '" + name + "' (targets: " + names + ")");
}

}  // namespace bppsa::fuzz
