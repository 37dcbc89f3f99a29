// Writes the fuzz targets' seed corpora, small valid files made by the project's own writers
// (models' state_dict, the optimizer's state, serialize_safetensors), libsndfile and zlib:
//   build-fuzz/bppsa_fuzz_make_corpus fuzz/corpus      (deterministic: reruns give the same bytes)
#include <sndfile.h>
#define ZLIB_CONST
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bppsa/io/file.hpp"
#include "bppsa/io/safetensors.hpp"
#include "bppsa/nn/conv_net.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/train/optimizer.hpp"
#include "bppsa/train/prune.hpp"
#include "targets.hpp"

namespace fs = std::filesystem;
using namespace bppsa;

namespace {

using fuzz::kCacheKey;
using fuzz::kSeparator;

fs::path root;

void put(const std::string& target, const std::string& name, const std::vector<unsigned char>& bytes) {
  fs::create_directories(root / target);
  write_file_atomic(root / target / name, bytes);
}
void put(const std::string& target, const std::string& name, const std::string& text) {
  put(target, name, std::vector<unsigned char>(text.begin(), text.end()));
}

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.7f * static_cast<float>(i) + 0.3f);
  return v;
}

// ---- safetensors: every dtype, a scalar, an empty tensor, metadata, and an empty file.
void safetensors() {
  TensorFile f;
  f.tensors["weight"] = Tensor::from_f32(ramp(6, 1.0f), {2, 3});
  f.tensors["double"] = Tensor::from_f64(std::vector<double>{0.5, -2.25, 1e-300}, {3});
  f.tensors["labels"] = Tensor::from_i64(std::vector<std::int64_t>{0, 9, -1}, {3, 1});
  f.tensors["scalar"] = Tensor::from_i32(std::vector<std::int32_t>{42}, {});
  f.tensors["empty"] = Tensor::from_f32(std::vector<float>{}, {0, 4});
  f.metadata["format"] = "pt";
  f.metadata["note"] = "bppsa fuzz seed";
  put("safetensors", "dtypes.safetensors", serialize_safetensors(f));
  put("safetensors", "empty.safetensors", serialize_safetensors(TensorFile{}));
  TensorFile one;
  one.tensors["x"] = Tensor::from_f32(ramp(8, 0.5f), {2, 2, 2});
  put("safetensors", "one.safetensors", serialize_safetensors(one));
}

// ---- IDX: MNIST-format images and labels, plain and gzip (one and two members), as published.
std::vector<unsigned char> ring(float radius) {
  std::vector<unsigned char> img(784, 0);
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x) {
      const float d = std::abs(std::hypot(static_cast<float>(x) - 13.5f, static_cast<float>(y) - 13.5f) - radius);
      if (d < 2.0f) img[static_cast<std::size_t>(y * 28 + x)] = static_cast<unsigned char>(255.0f * (1.0f - d / 2.0f));
    }
  return img;
}

/// `bytes` as one gzip member (zlib's deflate with a gzip wrapper: mtime 0, so reruns match).
std::vector<unsigned char> gzip(const std::vector<unsigned char>& bytes) {
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("zlib: deflateInit2 failed");
  std::vector<unsigned char> out(deflateBound(&z, static_cast<uLong>(bytes.size())));
  z.next_in = bytes.data();
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("zlib: deflate did not finish");
  return out;
}

void idx() {
  std::vector<unsigned char> images = ring(8.0f), bar(784, 0);
  for (int y = 4; y < 24; ++y) bar[static_cast<std::size_t>(y * 28 + 14)] = 255;
  images.insert(images.end(), bar.begin(), bar.end());
  const std::vector<unsigned char> labels = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};  // Fashion-MNIST's first ten
  put("idx", "images.idx3-ubyte", fuzz::idx_file({2, 28, 28}, images));
  put("idx", "labels.idx1-ubyte", fuzz::idx_file({10}, labels));
  put("idx", "images.idx3-ubyte.gz", gzip(fuzz::idx_file({2, 28, 28}, images)));
  put("idx", "labels.idx1-ubyte.gz", gzip(fuzz::idx_file({10}, labels)));
  // `cat a.gz b.gz`: the header in one member, the labels in another.
  const std::vector<unsigned char> file = fuzz::idx_file({10}, labels);
  std::vector<unsigned char> two = gzip({file.begin(), file.begin() + 8});
  const std::vector<unsigned char> rest = gzip({file.begin() + 8, file.end()});
  two.insert(two.end(), rest.begin(), rest.end());
  put("idx", "two_members.idx1-ubyte.gz", two);
  put("idx", "no_images.idx3-ubyte", fuzz::idx_file({0, 28, 28}, {}));
}

// ---- CIFAR-10: 3073-byte records (label, then R, G, B planes of 32×32).
void cifar10() {
  auto records = [](int n) {
    std::vector<unsigned char> b;
    for (int r = 0; r < n; ++r) {
      b.push_back(static_cast<unsigned char>((3 * r + 1) % 10));
      for (int i = 0; i < 3072; ++i) b.push_back(static_cast<unsigned char>((i * (r + 1) + i / 1024 * 85) % 256));
    }
    return b;
  };
  put("cifar10", "one_record.bin", records(1));
  put("cifar10", "three_records.bin", records(3));
}

// ---- WAV (and the other formats libsndfile decodes from a .wav name): short clips.
void sound(const std::string& name, int format, int rate, int channels, int frames) {
  fs::create_directories(root / "wav");
  const fs::path path = root / "wav" / name;
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  if (!sf_format_check(&info)) {
    std::cerr << "make_corpus: this libsndfile cannot write " << name << "; skipped\n";
    return;
  }
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!f) throw std::runtime_error("cannot write " + path.string() + ": " + sf_strerror(nullptr));
  const std::vector<float> s = ramp(static_cast<std::size_t>(frames * channels), 0.8f);
  sf_writef_float(f, s.data(), frames);
  sf_close(f);
}

void wav() {
  sound("pcm16_mono.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 8000, 1, 300);
  sound("pcm16_stereo.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 2, 200);
  sound("float_mono.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 22050, 1, 150);
  sound("u8_mono.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 11025, 1, 300);
  sound("pcm24_extensible.wav", SF_FORMAT_WAVEX | SF_FORMAT_PCM_24, 48000, 2, 100);
  sound("aiff.wav", SF_FORMAT_AIFF | SF_FORMAT_PCM_16, 16000, 1, 200);
  sound("au.wav", SF_FORMAT_AU | SF_FORMAT_PCM_16, 16000, 1, 200);
  sound("flac.wav", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 44100, 1, 400);
}

// ---- MFCC cache: load_irmas's format for 3 files (labels 1, 0, 10), 4 features.
void mfcc_cache() {
  auto cache = [](Index steps, const std::string& key) {
    TensorFile f;
    f.tensors["x"] = Tensor::from_f32(ramp(static_cast<std::size_t>(3 * steps * fuzz::kCacheFeatures), 1.5f),
                                      {3, steps, fuzz::kCacheFeatures});
    f.tensors["y"] = Tensor::from_i64(fuzz::kCacheLabels, {3});
    f.metadata["format"] = "bppsa-mfcc-2";
    f.metadata["key"] = key;
    f.metadata["preset"] = "custom";
    f.metadata["folder"] = "/data/irmas";
    return serialize_safetensors(f);
  };
  put("mfcc_cache", "steps2.safetensors", cache(2, kCacheKey));
  put("mfcc_cache", "steps5.safetensors", cache(5, kCacheKey));
  put("mfcc_cache", "other_inputs.safetensors", cache(1, "0123456789abcdef"));
}

// ---- Architecture strings.
void arch() {
  put("arch", "small_cnn.txt", "conv:8:3:1:1,relu,maxpool:2:2,flatten,linear:10");
  put("arch", "vgg11_16.txt", "vgg11/16");
  put("arch", "vgg11.txt", "vgg11");
  put("arch", "rectangular.txt", "conv:4:3x5:1x2:1x2:2,tanh,avgpool:2x2:2:1,flatten,linear:3,relu,linear:2");
  put("arch", "mlp.txt", "flatten, linear:16, tanh, linear:10");
}

// ---- Checkpoints as `bppsa train --save` writes them, with the optimizer state after the separator.
std::vector<unsigned char> join(const TensorFile& weights, const TensorFile* optimizer) {
  std::vector<unsigned char> b = serialize_safetensors(weights);
  if (optimizer) {
    b.insert(b.end(), kSeparator, kSeparator + sizeof kSeparator - 1);
    const auto o = serialize_safetensors(*optimizer);
    b.insert(b.end(), o.begin(), o.end());
  }
  return b;
}

template <class Model>
TensorFile trained_checkpoint(Model& model, Optimizer<float>& optimizer, Index epoch) {
  optimizer.step(model.parameters());
  TensorFile ck = model.state_dict();
  ck.metadata["bppsa.epoch"] = std::to_string(epoch);
  ck.metadata["bppsa.step"] = std::to_string(optimizer.steps());
  ck.metadata["bppsa.data"] = "fuzz seed";
  ck.metadata["bppsa.backward"] = "blelloch";
  return ck;
}

void recurrent(const std::string& name, CellType cell, Index layers, OptimizerType opt, bool with_optimizer) {
  ModelConfig c;
  c.rnn = {cell, 2, 3, layers};
  c.classes = 3;
  SequenceClassifier<float> model(c);
  model.reset_parameters(11);
  const std::vector<float> x = ramp(2 * 4 * 2, 1.0f);
  const std::vector<std::int64_t> y = {2, 0};
  model.loss_and_grad(x, 2, 4, y, BackwardOptions{});
  OptimizerConfig oc;
  oc.type = opt;
  oc.lr = 1e-2;
  oc.momentum = opt == OptimizerType::sgd ? 0.9 : 0.0;
  Optimizer<float> optimizer(oc);
  const TensorFile ck = trained_checkpoint(model, optimizer, 1);
  const TensorFile os = optimizer.state(model.parameters());
  put("checkpoint", name, join(ck, with_optimizer ? &os : nullptr));
}

void cnn(const std::string& name, double sparsity) {
  ConvNetConfig c{{1, 6, 6}, parse_arch("conv:2:3:1:1,relu,maxpool:2:2,flatten,linear:3"), LossType::cross_entropy};
  ConvNet<float> model(c);
  model.reset_parameters(5);
  if (sparsity > 0) prune_global_magnitude(model, sparsity);
  const std::vector<float> x = ramp(2 * 36, 1.0f);
  const std::vector<std::int64_t> y = {1, 2};
  model.loss_and_grad(x, 2, y, BackwardOptions{});
  Optimizer<float> optimizer(OptimizerConfig{});
  trained_checkpoint(model, optimizer, 2);
  model.apply_masks();  // as the trainer does after every step of a pruned model
  TensorFile ck = model.state_dict();
  ck.metadata["bppsa.epoch"] = "2";
  ck.metadata["bppsa.step"] = std::to_string(optimizer.steps());
  if (sparsity > 0) ck.metadata[kSparsityKey] = std::to_string(sparsity);
  const TensorFile os = optimizer.state(model.parameters());
  put("checkpoint", name, join(ck, &os));
}

void checkpoint() {
  recurrent("rnn_adam.safetensors", CellType::rnn, 1, OptimizerType::adam, true);
  recurrent("gru2_sgd.safetensors", CellType::gru, 2, OptimizerType::sgd, true);
  recurrent("lstm_weights_only.safetensors", CellType::lstm, 1, OptimizerType::adam, false);
  cnn("cnn_adam.safetensors", 0.0);
  cnn("cnn_pruned.safetensors", 0.5);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: bppsa_fuzz_make_corpus <corpus folder, e.g. fuzz/corpus>\n";
    return 2;
  }
  root = argv[1];
  try {
    safetensors();
    idx();
    cifar10();
    wav();
    mfcc_cache();
    arch();
    checkpoint();
  } catch (const std::exception& e) {
    std::cerr << "make_corpus: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
