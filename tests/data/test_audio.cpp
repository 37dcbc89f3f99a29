// Audio path (docs/method.md §5 GRU/IRMAS): WAV decoding, MFCC against a plain DFT oracle, and
// load_irmas on generated IRMAS-layout folders, its cache and its error messages.
#include <gtest/gtest.h>
#include <omp.h>
#include <sndfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/data/irmas.hpp"
#include "bppsa/io/safetensors.hpp"
#include "expect_error.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using bppsa::Index;
using bppsa::MfccPreset;

namespace {

using testutil::expect_error;
using testutil::message_of;

// ---------------------------------------------------------------- test inputs

/// A hand-written RIFF/WAVE PCM16 writer (independent of libsndfile, the code under test).
/// `samples` interleaved in [-1, 1].
std::vector<unsigned char> wav_bytes(int rate, int channels, const std::vector<float>& samples) {
  std::vector<unsigned char> b;
  const auto u32 = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
  };
  const auto u16 = [&](std::uint16_t v) {
    b.push_back(static_cast<unsigned char>(v));
    b.push_back(static_cast<unsigned char>(v >> 8));
  };
  const auto tag = [&](const char* s) { b.insert(b.end(), s, s + 4); };
  const auto data_size = static_cast<std::uint32_t>(samples.size() * 2);
  tag("RIFF");
  u32(36 + data_size);
  tag("WAVE");
  tag("fmt ");
  u32(16);
  u16(1);  // PCM
  u16(static_cast<std::uint16_t>(channels));
  u32(static_cast<std::uint32_t>(rate));
  u32(static_cast<std::uint32_t>(rate * channels * 2));
  u16(static_cast<std::uint16_t>(channels * 2));
  u16(16);
  tag("data");
  u32(data_size);
  for (float s : samples) {
    const long q = std::lround(std::clamp(s, -1.0f, 1.0f) * 32767.0f);
    u16(static_cast<std::uint16_t>(static_cast<std::int16_t>(q)));
  }
  return b;
}

using testutil::write_bytes;

void write_wav(const fs::path& path, int rate, int channels, const std::vector<float>& samples) {
  write_bytes(path, wav_bytes(rate, channels, samples));
}

std::vector<float> sine(double freq, int rate, Index n, double amp = 0.5, double phase = 0.0) {
  std::vector<float> s(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i)
    s[i] = static_cast<float>(amp * std::sin(2 * std::numbers::pi * freq * static_cast<double>(i) / rate + phase));
  return s;
}

/// Deterministic white noise in [-amp, amp] (a 64-bit LCG, no std:: distributions).
std::vector<float> noise(Index n, std::uint64_t seed, double amp = 0.5) {
  std::vector<float> s(static_cast<std::size_t>(n));
  std::uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (Index i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    s[i] = static_cast<float>(amp * (static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0));
  }
  return s;
}

std::vector<float> interleave(const std::vector<float>& l, const std::vector<float>& r) {
  std::vector<float> s;
  for (std::size_t i = 0; i < l.size(); ++i) {
    s.push_back(l[i]);
    s.push_back(r[i]);
  }
  return s;
}

/// A fresh folder per test, removed afterwards.
class TempDir : public ::testing::Test {
 protected:
  testutil::TempDir tmp_;
  const fs::path& dir_ = tmp_.path;
};

/// Lowers the memory limit for one scope.
struct MemoryLimit {
  explicit MemoryLimit(double bytes) { bppsa::set_memory_limit(bytes); }
  ~MemoryLimit() { bppsa::set_memory_limit(0); }
};

constexpr int k_rate = 22050;
constexpr Index k_half_second = k_rate / 2;

/// Small and fast, still with Slaney's 40 bands (lowest 133 Hz > one 86-Hz bin).
MfccPreset tiny_preset() { return {"tiny", 5, 256, 128, 40}; }

// ---------------------------------------------------------------- read_audio

using ReadAudio = TempDir;

TEST_F(ReadAudio, ReturnsTheWrittenStereoAndMonoSamples) {
  const auto l = sine(440, k_rate, k_half_second), r = noise(k_half_second, 7);
  write_wav(dir_ / "s.wav", k_rate, 2, interleave(l, r));
  write_wav(dir_ / "m.wav", 44100, 1, l);

  const bppsa::Audio s = bppsa::read_audio(dir_ / "s.wav");
  EXPECT_EQ(s.sample_rate, k_rate);
  EXPECT_EQ(s.channels, 2);
  ASSERT_EQ(s.frames(), k_half_second);
  // The writer stores round(v·32767); libsndfile reads a PCM16 value q back as q / 32768.
  const auto pcm16 = [](float v) { return static_cast<float>(std::lround(v * 32767.0f)) / 32768.0f; };
  for (Index i = 0; i < k_half_second; ++i) {
    ASSERT_FLOAT_EQ(s.samples[2 * i], pcm16(l[i])) << i;
    ASSERT_FLOAT_EQ(s.samples[2 * i + 1], pcm16(r[i])) << i;
    ASSERT_NEAR(s.samples[2 * i], l[i], 1.0f / 32768.0f) << i;
  }
  const bppsa::Audio m = bppsa::read_audio(dir_ / "m.wav");
  EXPECT_EQ(m.sample_rate, 44100);
  EXPECT_EQ(m.channels, 1);
  ASSERT_EQ(m.frames(), k_half_second);
  for (Index i = 0; i < k_half_second; ++i) ASSERT_FLOAT_EQ(m.samples[i], pcm16(l[i])) << i;
}

TEST_F(ReadAudio, BrokenFilesGiveClearErrors) {
  expect_error<bppsa::IoError>([&] { bppsa::read_audio(dir_ / "missing.wav"); },
                               {"[read_audio]", "missing.wav", "does not exist"});

  write_bytes(dir_ / "junk.wav", std::vector<unsigned char>(300, 'x'));
  expect_error<bppsa::FormatError>([&] { bppsa::read_audio(dir_ / "junk.wav"); },
                                   {"junk.wav", "cannot decode", "recognised"});

  const auto good = wav_bytes(k_rate, 2, interleave(sine(440, k_rate, 1000), sine(220, k_rate, 1000)));
  write_bytes(dir_ / "cut_header.wav", std::vector<unsigned char>(good.begin(), good.begin() + 30));
  expect_error<bppsa::FormatError>([&] { bppsa::read_audio(dir_ / "cut_header.wav"); },
                                   {"cut_header.wav", "cannot decode"});

  write_bytes(dir_ / "cut_data.wav", std::vector<unsigned char>(good.begin(), good.begin() + 44 + 2000));
  expect_error<bppsa::FormatError>([&] { bppsa::read_audio(dir_ / "cut_data.wav"); },
                                   {"cut_data.wav", "truncated", "4000", "2000"});

  write_wav(dir_ / "empty.wav", k_rate, 1, {});
  expect_error<bppsa::FormatError>([&] { bppsa::read_audio(dir_ / "empty.wav"); }, {"empty.wav", "no audio frames"});

  expect_error<bppsa::IoError>([&] { bppsa::read_audio(dir_); }, {"folder"});
}

// Issue 44: a 200-byte WAV claiming 2^28 Hz made every clip 6 million steps long. Rates outside
// [1 kHz, 768 kHz] are refused, naming the file; the ends of the range are read.
TEST_F(ReadAudio, SampleRatesOutsideRealRecordingsAreRefused) {
  const auto clip = sine(440, k_rate, 200);
  for (int rate : {1 << 28, bppsa::kMaxSampleRate + 1, bppsa::kMinSampleRate - 1, 1}) {
    write_wav(dir_ / "odd.wav", rate, 1, clip);
    expect_error<bppsa::FormatError>(
        [&] { bppsa::read_audio(dir_ / "odd.wav"); },
        {"[read_audio]", "odd.wav", "sample rate of " + std::to_string(rate) + " Hz", "outside the 1000–768000 Hz"});
  }
  for (int rate : {bppsa::kMinSampleRate, bppsa::kMaxSampleRate}) {
    write_wav(dir_ / "edge.wav", rate, 1, clip);
    EXPECT_EQ(bppsa::read_audio(dir_ / "edge.wav").sample_rate, rate);
  }
}

// Compressed audio decodes to many times its bytes (a FLAC of silence: about 1000 times): what is
// decoded meets the memory guard as it grows, not only the file's size.
TEST_F(ReadAudio, DecodedSamplesMeetTheMemoryGuard) {
  const fs::path flac = dir_ / "silence.flac";
  SF_INFO info{};
  info.samplerate = k_rate;
  info.channels = 1;
  info.format = SF_FORMAT_FLAC | SF_FORMAT_PCM_16;
  SNDFILE* f = sf_open(flac.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << sf_strerror(nullptr);
  const std::vector<float> zeros(1 << 20, 0.0f);  // 4 MB as floats
  ASSERT_EQ(sf_writef_float(f, zeros.data(), static_cast<sf_count_t>(zeros.size())),
            static_cast<sf_count_t>(zeros.size()));
  sf_close(f);
  ASSERT_LT(fs::file_size(flac), 200000u);
  {
    const MemoryLimit limit(2e6);  // the file fits, its 4 MB of samples do not
    expect_error<bppsa::ResourceError>([&] { bppsa::read_audio(flac); },
                                       {"[read_audio] decoding", "silence.flac", "its samples as floats"});
  }
  EXPECT_EQ(bppsa::read_audio(flac).frames(), 1 << 20);
}

// ---------------------------------------------------------------- MFCC

/// librosa.feature.mfcc(y, sr, n_mfcc, n_fft, hop_length, n_mels = n_filters) with librosa's
/// defaults, written in double from librosa's definitions (independent of aubio): centred
/// frames with zero padding, periodic Hann window, |DFT|² by the definition, the mel matrix
/// of librosa.filters.mel (Slaney mel scale, fmin 0, fmax sr/2, norm="slaney"), power_to_db
/// (amin 1e-10, ref 1, top_db 80 below the clip's maximum), orthonormal DCT-II.
/// [T][n_mfcc], coefficient 0 included.
double hz_to_mel(double f) {
  const double f_sp = 200.0 / 3, min_log_hz = 1000, min_log_mel = min_log_hz / f_sp, logstep = std::log(6.4) / 27;
  return f >= min_log_hz ? min_log_mel + std::log(f / min_log_hz) / logstep : f / f_sp;
}
double mel_to_hz(double m) {
  const double f_sp = 200.0 / 3, min_log_hz = 1000, min_log_mel = min_log_hz / f_sp, logstep = std::log(6.4) / 27;
  return m >= min_log_mel ? min_log_hz * std::exp(logstep * (m - min_log_mel)) : f_sp * m;
}

std::vector<double> oracle_mfcc(const std::vector<float>& x, int rate, const MfccPreset& p) {
  const Index n = p.n_fft, hop = p.hop, len = static_cast<Index>(x.size()), bins = n / 2 + 1;
  const Index frames = 1 + len / hop, mels = p.n_filters;
  // librosa.filters.mel
  std::vector<double> mel_f(static_cast<std::size_t>(mels + 2));
  const double top = hz_to_mel(rate / 2.0);
  for (Index i = 0; i < mels + 2; ++i)
    mel_f[i] = mel_to_hz(top * static_cast<double>(i) / static_cast<double>(mels + 1));
  std::vector<std::vector<double>> w(static_cast<std::size_t>(mels),
                                     std::vector<double>(static_cast<std::size_t>(bins)));
  for (Index i = 0; i < mels; ++i)
    for (Index k = 0; k < bins; ++k) {
      const double f = static_cast<double>(k) * rate / static_cast<double>(n);
      const double lower = (f - mel_f[i]) / (mel_f[i + 1] - mel_f[i]);
      const double upper = (mel_f[i + 2] - f) / (mel_f[i + 2] - mel_f[i + 1]);
      w[i][k] = std::max(0.0, std::min(lower, upper)) * 2.0 / (mel_f[i + 2] - mel_f[i]);
    }
  std::vector<double> cosv(static_cast<std::size_t>(n)), sinv(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) {
    cosv[i] = std::cos(2 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(n));
    sinv[i] = std::sin(2 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(n));
  }
  std::vector<double> db(static_cast<std::size_t>(frames * mels));
  std::vector<double> frame(static_cast<std::size_t>(n)), power(static_cast<std::size_t>(bins));
  for (Index t = 0; t < frames; ++t) {
    for (Index i = 0; i < n; ++i) {
      const Index j = t * hop + i - n / 2;  // centred on sample t·hop, zeros outside
      frame[i] = (j >= 0 && j < len) ? 0.5 * (1 - cosv[i]) * x[j] : 0.0;
    }
    for (Index k = 0; k < bins; ++k) {
      double re = 0, im = 0;
      for (Index i = 0; i < n; ++i) {
        re += frame[i] * cosv[(k * i) % n];
        im -= frame[i] * sinv[(k * i) % n];
      }
      power[k] = re * re + im * im;
    }
    for (Index i = 0; i < mels; ++i) {
      double s = 0;
      for (Index k = 0; k < bins; ++k) s += w[i][k] * power[k];
      db[t * mels + i] = 10 * std::log10(std::max(1e-10, s));
    }
  }
  const double floor_db = *std::max_element(db.begin(), db.end()) - 80;
  for (double& v : db) v = std::max(v, floor_db);
  std::vector<double> out(static_cast<std::size_t>(frames * p.n_mfcc));
  for (Index t = 0; t < frames; ++t)
    for (int c = 0; c < p.n_mfcc; ++c) {
      double s = 0;
      for (Index i = 0; i < mels; ++i) s += db[t * mels + i] * std::cos(std::numbers::pi * c * (i + 0.5) / mels);
      out[t * p.n_mfcc + c] = s * std::sqrt((c == 0 ? 1.0 : 2.0) / mels);
    }
  return out;
}

TEST(Mfcc, PresetsAndClasses) {
  const auto s = bppsa::mfcc_preset("s"), m = bppsa::mfcc_preset("m"), l = bppsa::mfcc_preset("l");
  EXPECT_EQ(std::vector<int>({s.n_mfcc, s.n_fft, s.hop}), std::vector<int>({20, 4096, 512}));
  EXPECT_EQ(std::vector<int>({m.n_mfcc, m.n_fft, m.hop}), std::vector<int>({13, 2048, 256}));
  EXPECT_EQ(std::vector<int>({l.n_mfcc, l.n_fft, l.hop}), std::vector<int>({7, 1024, 128}));
  // docs/method.md §5.3's T for a 3-s clip at 44.1 kHz.
  EXPECT_EQ(1 + 3 * 44100 / s.hop, 259);
  EXPECT_EQ(1 + 3 * 44100 / m.hop, 517);
  EXPECT_EQ(1 + 3 * 44100 / l.hop, 1034);
  expect_error<bppsa::InvalidArgument>([] { bppsa::mfcc_preset("xl"); }, {"[mfcc_preset]", "'xl'", "s, m, l"});
  const auto& classes = bppsa::irmas_classes();
  ASSERT_EQ(classes.size(), 11u);
  EXPECT_EQ(classes.front(), "cel");
  EXPECT_EQ(classes[3], "gac");
  EXPECT_EQ(classes.back(), "voi");
}

TEST(Mfcc, FrameCountCoefficientsAndStandardisation) {
  // n_fft a multiple of hop (the presets) and not (300 = 2·128 + 44) to hit both alignments.
  for (const MfccPreset& p : {bppsa::mfcc_preset("l"), MfccPreset{"odd", 6, 300, 128, 40}}) {
    for (Index n : {Index{0}, Index{1}, Index{127}, Index{128}, k_half_second}) {
      std::vector<float> x = noise(n, 3);
      const auto f = bppsa::mfcc(x, k_rate, p);
      const Index frames = 1 + n / p.hop, kept = p.n_mfcc - 1;
      ASSERT_EQ(static_cast<Index>(f.size()), frames * kept) << p.name << " n=" << n;
      for (Index c = 0; c < kept; ++c) {
        double mean = 0, var = 0;
        for (Index t = 0; t < frames; ++t) mean += f[t * kept + c];
        mean /= static_cast<double>(frames);
        for (Index t = 0; t < frames; ++t) var += (f[t * kept + c] - mean) * (f[t * kept + c] - mean);
        var /= static_cast<double>(frames);
        EXPECT_NEAR(mean, 0.0, 1e-5) << p.name << " n=" << n << " c=" << c;
        // One frame (or all-zero input) has no variation: centred only, never NaN.
        EXPECT_NEAR(std::sqrt(var), frames > 1 && n > 0 ? 1.0 : 0.0, 1e-4) << p.name << " n=" << n << " c=" << c;
      }
    }
  }
}

TEST(Mfcc, SilenceIsFiniteAndCentred) {
  const auto f = bppsa::mfcc(std::vector<float>(5000, 0.0f), k_rate, tiny_preset());
  for (float v : f) ASSERT_EQ(v, 0.0f);
}

TEST(Mfcc, MatchesThePlainOracle) {
  // A tone plus noise (every band carries energy), and a tone followed by digital silence
  // (power_to_db's 80-dB floor and the 1e-10 power floor both act); two framings.
  const Index n = 4000;
  std::vector<float> mixed = noise(n, 11, 0.2);
  const auto tone = sine(1000, k_rate, n, 0.5);
  for (Index i = 0; i < n; ++i) mixed[i] += tone[i];
  std::vector<float> gated = tone;
  std::fill(gated.begin() + n / 2, gated.end(), 0.0f);
  for (const auto& [label, x] : {std::pair{"tone+noise", mixed}, std::pair{"tone then silence", gated}})
    for (const MfccPreset& p : {MfccPreset{"a", 13, 512, 128, 40}, MfccPreset{"b", 20, 1024, 300, 128}}) {
      const auto got = bppsa::detail::mfcc_unnormalised(x, k_rate, p);
      const auto want = oracle_mfcc(x, k_rate, p);
      ASSERT_EQ(got.size(), want.size()) << p.name;
      double worst = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        // aubio's spectrum and bands are float: dB values carry ~1e-6 relative error.
        const double err = std::abs(got[i] - want[i]) / (1.0 + std::abs(want[i]));
        worst = std::max(worst, err);
        ASSERT_LT(err, 2e-4) << label << ", preset " << p.name << ", frame " << i / p.n_mfcc << " coeff "
                             << i % p.n_mfcc << ": ours " << got[i] << " oracle " << want[i];
      }
      RecordProperty(std::string("worst_rel_err_") + p.name, std::to_string(worst));
    }
}

TEST(Mfcc, ToneAndNoiseDiffer) {
  const MfccPreset p = bppsa::mfcc_preset("l");
  const auto a = bppsa::detail::mfcc_unnormalised(sine(440, k_rate, k_half_second), k_rate, p);
  const auto b = bppsa::detail::mfcc_unnormalised(noise(k_half_second, 5), k_rate, p);
  ASSERT_EQ(a.size(), b.size());
  // Average cepstra over the interior frames: a tone's spectrum is a peak, noise's is flat.
  const Index frames = static_cast<Index>(a.size()) / p.n_mfcc;
  double diff = 0;
  for (int c = 1; c < p.n_mfcc; ++c) {
    double ma = 0, mb = 0;
    for (Index t = 8; t < frames - 8; ++t) {
      ma += a[t * p.n_mfcc + c];
      mb += b[t * p.n_mfcc + c];
    }
    diff += std::abs(ma - mb) / static_cast<double>(frames - 16);
  }
  EXPECT_GT(diff, 10.0);  // dB
  // And the standardised sequences differ too.
  const auto sa = bppsa::mfcc(sine(440, k_rate, k_half_second), k_rate, p);
  const auto sb = bppsa::mfcc(noise(k_half_second, 5), k_rate, p);
  double d2 = 0;
  for (std::size_t i = 0; i < sa.size(); ++i) d2 += (sa[i] - sb[i]) * (sa[i] - sb[i]);
  EXPECT_GT(d2 / static_cast<double>(sa.size()), 0.1);
}

TEST(Mfcc, ThreadSafeAndDeterministic) {
  const MfccPreset p = tiny_preset();
  std::vector<std::vector<float>> inputs;
  for (int i = 0; i < 8; ++i) inputs.push_back(noise(6000 + 100 * i, static_cast<std::uint64_t>(i)));
  std::vector<std::vector<float>> serial, parallel(inputs.size());
  for (const auto& x : inputs) serial.push_back(bppsa::mfcc(x, k_rate, p));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    threads.emplace_back([&, i] { parallel[i] = bppsa::mfcc(inputs[i], k_rate, p); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(serial, parallel);
}

TEST(Mfcc, RejectsBadArguments) {
  const std::vector<float> x(1000, 0.1f);
  expect_error<bppsa::InvalidArgument>(
      [&] {
        bppsa::mfcc(x, k_rate, MfccPreset{"h", 5, 256, 512, 40});
      },
      {"[mfcc]", "hop"});
  expect_error<bppsa::InvalidArgument>([&] { bppsa::mfcc(x, k_rate, MfccPreset{"c", 1, 256, 128, 40}); }, {"n_mfcc"});
  expect_error<bppsa::InvalidArgument>([&] { bppsa::mfcc(x, k_rate, MfccPreset{"c", 41, 256, 128, 40}); }, {"n_mfcc"});
  expect_error<bppsa::InvalidArgument>([&] { bppsa::mfcc(x, 0, tiny_preset()); }, {"sample rate"});
  std::vector<float> bad = x;
  bad[17] = std::nanf("");
  expect_error<bppsa::NonFiniteError>([&] { bppsa::mfcc(bad, k_rate, tiny_preset()); }, {"sample 17"});
}

// ---------------------------------------------------------------- load_irmas

using Irmas = TempDir;

/// Half-second clips in the training set's layout: <code>/<name>.wav, one mono.
void make_training_tree(const fs::path& root) {
  write_wav(root / "voi" / "b.wav", k_rate, 2, interleave(sine(300, k_rate, k_half_second), noise(k_half_second, 1)));
  write_wav(root / "cel" / "z.wav", k_rate, 2, interleave(noise(k_half_second, 2), sine(200, k_rate, k_half_second)));
  write_wav(root / "gac" / "a.wav", k_rate, 1, sine(500, k_rate, k_half_second));
  write_wav(root / "cel" / "sub" / "cel" / "deep.WAV", k_rate, 2,
            interleave(noise(k_half_second, 3), noise(k_half_second, 4)));
  write_bytes(root / "cel" / "notes.txt", {'h', 'i'});     // ignored: not a WAV
  write_bytes(root / "cel" / "._z.wav", {'M', 'a', 'c'});  // ignored: macOS resource fork
}

TEST_F(Irmas, TrainingLayoutLabelsShapesAndOrder) {
  make_training_tree(dir_);
  const MfccPreset p = tiny_preset();
  const auto data = bppsa::load_irmas(dir_, p);
  const Index f = 2 * (p.n_mfcc - 1), steps = 1 + 3 * k_rate / p.hop;
  ASSERT_EQ(data.size(), 4);
  EXPECT_EQ(data.steps, steps);
  EXPECT_EQ(data.features, f);
  EXPECT_EQ(data.classes, 11);
  EXPECT_EQ(data.class_names, bppsa::irmas_classes());
  EXPECT_EQ(data.name, "irmas tiny (" + dir_.string() + ")");
  ASSERT_EQ(static_cast<Index>(data.x.size()), 4 * steps * f);
  // Sorted relative paths: cel/sub/cel/deep.WAV, cel/z.wav, gac/a.wav, voi/b.wav.
  EXPECT_EQ(data.y, (std::vector<std::int64_t>{0, 0, 3, 10}));

  // Sample 1 = cel/z.wav: L then R features per frame, zero-padded after T frames.
  const Index frames = 1 + k_half_second / p.hop, half = f / 2;
  const bppsa::Audio z = bppsa::read_audio(dir_ / "cel" / "z.wav");
  std::vector<float> zl, zr;
  for (Index i = 0; i < z.frames(); ++i) {
    zl.push_back(z.samples[2 * i]);
    zr.push_back(z.samples[2 * i + 1]);
  }
  const auto l = bppsa::mfcc(zl, k_rate, p), r = bppsa::mfcc(zr, k_rate, p);
  const float* s1 = data.x.data() + 1 * steps * f;
  for (Index t = 0; t < frames; ++t)
    for (Index c = 0; c < half; ++c) {
      ASSERT_EQ(s1[t * f + c], l[t * half + c]) << t << " " << c;
      ASSERT_EQ(s1[t * f + half + c], r[t * half + c]) << t << " " << c;
    }
  for (Index i = frames * f; i < steps * f; ++i) ASSERT_EQ(s1[i], 0.0f) << i;
  // Every clip is shorter than the 3-s default: each keeps its length, `frames` (what it filled).
  ASSERT_LT(frames, steps);
  data.validate("test");
  EXPECT_EQ(data.lengths, std::vector<Index>(4, frames));
  // Sample 2 = the mono gac/a.wav: both halves equal.
  const float* s2 = data.x.data() + 2 * steps * f;
  for (Index t = 0; t < frames; ++t)
    for (Index c = 0; c < half; ++c) ASSERT_EQ(s2[t * f + c], s2[t * f + half + c]);

  // Deterministic whatever the thread count: recomputed (cache removed) on 1 and 3 threads.
  const int threads = omp_get_max_threads();
  for (int n : {1, 3}) {
    omp_set_num_threads(n);
    fs::remove(dir_ / ".bppsa-mfcc-tiny.safetensors");
    const auto again = bppsa::load_irmas(dir_, p);
    EXPECT_EQ(again.x, data.x) << n << " threads";
    EXPECT_EQ(again.y, data.y) << n << " threads";
  }
  omp_set_num_threads(threads);
}

TEST_F(Irmas, FlatFolderWithBracketNamesAndExplicitSteps) {
  write_wav(dir_ / "[flu][jaz]0001__1.wav", k_rate, 2, interleave(noise(k_half_second, 1), noise(k_half_second, 2)));
  write_wav(dir_ / "[jaz][sax]0002__2.wav", k_rate, 1, noise(k_half_second, 3));  // jaz is a genre, sax the class
  write_wav(dir_ / "[PIA][cla]0003__1.wav", k_rate, 1, noise(k_half_second, 4));
  const MfccPreset p = tiny_preset();
  const auto data = bppsa::load_irmas(dir_, p, 40, dir_ / "features.safetensors");
  EXPECT_TRUE(fs::exists(dir_ / "features.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / ".bppsa-mfcc-tiny.safetensors"));
  EXPECT_EQ(data.steps, 40);  // cut from 87 frames
  EXPECT_EQ(data.x.size(), 3u * 40 * 8);
  EXPECT_TRUE(data.lengths.empty()) << "every clip fills the 40 steps";
  // Sorted: "[PIA]…" < "[flu]…" < "[jaz]…" (byte order).
  EXPECT_EQ(data.y, (std::vector<std::int64_t>{6, 2, 7}));
}

TEST_F(Irmas, CacheIsWrittenReusedAndInvalidated) {
  make_training_tree(dir_);
  const MfccPreset p = tiny_preset();
  const fs::path cache = dir_ / ".bppsa-mfcc-tiny.safetensors";
  const auto first = bppsa::load_irmas(dir_, p);
  ASSERT_TRUE(fs::exists(cache));
  const auto stored = bppsa::read_safetensors(cache);
  EXPECT_EQ(stored.metadata.at("format"), "bppsa-mfcc-3");
  EXPECT_EQ(stored.at("x").shape, (std::vector<Index>{4, first.steps, 8}));
  EXPECT_EQ(stored.at("y").dtype, bppsa::DType::i64);
  EXPECT_EQ(stored.at("lengths").shape, (std::vector<Index>{4}));
  ASSERT_FALSE(first.lengths.empty());
  const auto mtime = fs::last_write_time(cache);

  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto second = bppsa::load_irmas(dir_, p);
  EXPECT_EQ(fs::last_write_time(cache), mtime) << "a matching cache must be reused, not rewritten";
  EXPECT_EQ(second.x, first.x);
  EXPECT_EQ(second.y, first.y);
  EXPECT_EQ(second.steps, first.steps);
  EXPECT_EQ(second.name, first.name);
  EXPECT_EQ(second.lengths, first.lengths) << "the cache keeps the lengths";

  // Another preset or steps is another key; the same cache path is recomputed.
  const auto cut = bppsa::load_irmas(dir_, p, 30, cache);
  EXPECT_EQ(cut.steps, 30);
  EXPECT_NE(fs::last_write_time(cache), mtime);

  // A changed file changes the key: recomputed and overwritten.
  const auto before = bppsa::load_irmas(dir_, p);
  const auto mtime2 = fs::last_write_time(cache);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write_wav(dir_ / "gac" / "a.wav", k_rate, 1, noise(k_half_second + 100, 9));
  const auto after = bppsa::load_irmas(dir_, p);
  EXPECT_NE(fs::last_write_time(cache), mtime2);
  EXPECT_NE(after.x, before.x);
  const Index n = before.steps * before.features;
  EXPECT_TRUE(std::equal(after.x.begin(), after.x.begin() + 2 * n, before.x.begin()));  // others unchanged
  EXPECT_FALSE(std::equal(after.x.begin() + 2 * n, after.x.begin() + 3 * n, before.x.begin() + 2 * n));
}

TEST_F(Irmas, BrokenCacheTellsTheUserToDeleteIt) {
  make_training_tree(dir_);
  const MfccPreset p = tiny_preset();
  const fs::path cache = dir_ / ".bppsa-mfcc-tiny.safetensors";
  bppsa::load_irmas(dir_, p);
  std::vector<unsigned char> bytes(fs::file_size(cache));
  {
    std::ifstream f(cache, std::ios::binary);
    f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  write_bytes(cache, std::vector<unsigned char>(bytes.begin(), bytes.begin() + static_cast<long>(bytes.size() / 2)));
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); },
                                   {"[load_irmas]", "cache", cache.string(), "delete it"});

  write_bytes(cache, std::vector<unsigned char>(64, 0xff));
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); }, {"cache", "delete it"});

  // Parsable, the right key, but tensors that do not fit the folder.
  write_bytes(cache, bytes);
  auto file = bppsa::read_safetensors(cache);
  file.tensors["x"] = bppsa::Tensor::from_f32(std::vector<float>(3 * 5 * 8, 0.0f), {3, 5, 8});
  bppsa::write_safetensors(cache, file);
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); },
                                   {"cache", "is malformed", "F32 [3, 5, 8]", "delete it"});
  // Lengths that do not fit its steps.
  write_bytes(cache, bytes);
  file = bppsa::read_safetensors(cache);
  const Index steps = file.at("x").shape[1];
  file.tensors["lengths"] = bppsa::Tensor::from_i64(std::vector<std::int64_t>{1, 2, steps + 1, 3}, {4});
  bppsa::write_safetensors(cache, file);
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); },
                                   {"is malformed", "length of " + std::to_string(steps + 1), "delete it"});
  file.tensors.erase("lengths");
  bppsa::write_safetensors(cache, file);
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); }, {"lacks tensor", "'lengths'"});

  // Deleting it, as told, recomputes.
  fs::remove(cache);
  EXPECT_EQ(bppsa::load_irmas(dir_, p).size(), 4);
}

// Issue 44: the features were sized from the first file's rate without the memory guard, and the
// cache made two more copies. All three are checked before anything is allocated.
TEST_F(Irmas, FeaturesAndTheirCacheCopiesAreCheckedBeforeAllocating) {
  make_training_tree(dir_);
  const MfccPreset p = tiny_preset();
  const Index steps = 1 + 3 * k_rate / p.hop;
  const double copy = 4.0 * static_cast<double>(steps) * 8 * sizeof(float);  // 4 clips, F 8: 66.2 kB
  {
    const MemoryLimit limit(2 * copy / bppsa::kMemoryShare);  // one copy fits, three do not
    const std::string e = message_of<bppsa::ResourceError>([&] { bppsa::load_irmas(dir_, p); });
    for (const std::string& part : std::vector<std::string>{"[load_irmas] the MFCC features of 4 WAV files in " + dir_.string(),
                                   std::to_string(steps) + " steps of 8 features each", "22050 Hz",
                                   "the features 66.2 kB", "their copy for the cache 66.2 kB",
                                   "the cache file's bytes 66.2 kB", "--preset s"})
      EXPECT_NE(e.find(part), std::string::npos) << part << " in: " << e;
    EXPECT_FALSE(fs::exists(dir_ / ".bppsa-mfcc-tiny.safetensors"));
  }
  // Reading the cache holds the file's tensor and its floats: two copies, checked too.
  const auto computed = bppsa::load_irmas(dir_, p);
  {
    const MemoryLimit limit(1.5 * copy / bppsa::kMemoryShare);
    const std::string e = message_of<bppsa::ResourceError>([&] { bppsa::load_irmas(dir_, p); });
    EXPECT_NE(e.find("reading the feature cache " + (dir_ / ".bppsa-mfcc-tiny.safetensors").string()),
              std::string::npos)
        << e;
  }
  EXPECT_EQ(bppsa::load_irmas(dir_, p).x, computed.x);
}

// A cache that cannot be written (a full disk) is an IoError, or, given `warn`, a warning naming the
// file, its folder and the reason, and the features computed are returned.
TEST_F(Irmas, ACacheThatCannotBeWrittenIsAWarningWhenAsked) {
  make_training_tree(dir_);
  const MfccPreset p = tiny_preset();
  const fs::path cache = dir_ / "no-such-folder" / "features.safetensors";
  expect_error<bppsa::IoError>([&] { bppsa::load_irmas(dir_, p, 0, cache); },
                               {"[load_irmas]", "cannot write the feature cache", cache.string()});
  std::vector<std::string> warnings;
  const auto data = bppsa::load_irmas(dir_, p, 0, cache, [&](const std::string& m) { warnings.push_back(m); });
  ASSERT_EQ(warnings.size(), 1u);
  for (const std::string& part : std::vector<std::string>{cache.string(), (dir_ / "no-such-folder").string(), "going on without it"})
    EXPECT_NE(warnings[0].find(part), std::string::npos) << part << " in: " << warnings[0];
  EXPECT_EQ(data.size(), 4);
  EXPECT_EQ(data.x, bppsa::load_irmas(dir_, p).x);
}

// A FIFO or a link to a device named .wav is not skipped (the data set would silently lose a clip)
// nor read (a FIFO blocks): it is named as what it is.
TEST_F(Irmas, AWavThatIsNotARegularFileIsNamed) {
  make_training_tree(dir_);
  const MfccPreset p = tiny_preset();
  ASSERT_EQ(mkfifo((dir_ / "cel" / "pipe.wav").c_str(), 0600), 0);
  expect_error<bppsa::IoError>([&] { bppsa::load_irmas(dir_, p); },
                               {"[load_irmas]", "pipe.wav' is a FIFO (named pipe), not a regular file"});
  fs::remove(dir_ / "cel" / "pipe.wav");
  fs::create_symlink("/dev/zero", dir_ / "cel" / "zero.wav");
  expect_error<bppsa::IoError>([&] { bppsa::load_irmas(dir_, p); },
                               {"zero.wav' is a link to '/dev/zero', a character device"});
}

TEST_F(Irmas, BrokenInputsGiveClearErrors) {
  const MfccPreset p = tiny_preset();
  expect_error<bppsa::IoError>([&] { bppsa::load_irmas(dir_ / "nope", p); },
                               {"[load_irmas]", "nope", "does not exist"});
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); }, {"no .wav files", dir_.string()});
  expect_error<bppsa::InvalidArgument>(
      [&] {
        bppsa::load_irmas(dir_, MfccPreset{"bad", 1, 256, 128, 40});
      },
      {"n_mfcc"});
  expect_error<bppsa::InvalidArgument>([&] { bppsa::load_irmas(dir_, p, -1); }, {"steps"});

  const auto clip = sine(440, k_rate, 3000);
  write_wav(dir_ / "cel" / "ok.wav", k_rate, 1, clip);
  write_wav(dir_ / "jazz" / "[xyz]1.wav", k_rate, 1, clip);
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); },
                                   {"cannot tell the class", "[xyz]1.wav", "'jazz' is not an IRMAS code", "[code]"});
  fs::remove_all(dir_ / "jazz");

  write_bytes(dir_ / "gac" / "junk.wav", std::vector<unsigned char>(500, 'j'));
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); }, {"junk.wav", "cannot decode"});
  fs::remove(dir_ / "gac" / "junk.wav");

  const auto good = wav_bytes(k_rate, 1, clip);
  write_bytes(dir_ / "gac" / "cut.wav", std::vector<unsigned char>(good.begin(), good.begin() + 1000));
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); }, {"cut.wav", "truncated"});
  fs::remove(dir_ / "gac" / "cut.wav");

  write_wav(dir_ / "gac" / "fast.wav", 44100, 1, clip);
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); },
                                   {"fast.wav", "44100 Hz", "ok.wav", "22050 Hz", "one sample rate"});
  fs::remove(dir_ / "gac" / "fast.wav");

  std::vector<float> three;
  for (float s : clip) three.insert(three.end(), {s, s, s});
  write_wav(dir_ / "gac" / "three.wav", k_rate, 3, three);
  expect_error<bppsa::FormatError>([&] { bppsa::load_irmas(dir_, p); }, {"three.wav", "3 channels"});
  fs::remove(dir_ / "gac" / "three.wav");

  EXPECT_EQ(bppsa::load_irmas(dir_, p).size(), 1);
}

}  // namespace
