// mfcc: per-channel MFCC as librosa.feature.mfcc computes it by default, with aubio doing the
// signal processing: centred frames (zero padding, as librosa ≥ 0.10), periodic Hann window
// and FFT (aubio's phase vocoder), power spectrum through n_filters (128) Slaney-scale mel
// bands from 0 Hz to Nyquist with unit-area triangles (aubio_filterbank_set_mel_coeffs),
// power_to_db (10·log10(max(1e-10, S)), clipped at 80 dB below the clip's maximum), and the
// orthonormal DCT-II; then standardised per coefficient over time (docs/method.md §5). Float arithmetic.
#include <aubio/aubio.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/data/irmas.hpp"

namespace bppsa {

namespace {

// RAII for the aubio objects: every mfcc() call owns its own, so calls on several threads
// share nothing (aubio serialises FFTW's non-thread-safe planner with its own mutex).
struct PvocDeleter {
  void operator()(aubio_pvoc_t* p) const { del_aubio_pvoc(p); }
};
struct FilterbankDeleter {
  void operator()(aubio_filterbank_t* p) const { del_aubio_filterbank(p); }
};
struct FvecDeleter {
  void operator()(fvec_t* p) const { del_fvec(p); }
};
struct CvecDeleter {
  void operator()(cvec_t* p) const { del_cvec(p); }
};

template <class T, class D>
std::unique_ptr<T, D> checked(T* p, const char* what, const MfccPreset& preset) {
  if (p == nullptr)
    detail::raise<Error>("mfcc", std::string("aubio could not create its ") + what + " (n_fft " +
                                     std::to_string(preset.n_fft) + ", hop " + std::to_string(preset.hop) +
                                     ", n_filters " + std::to_string(preset.n_filters) + ", n_mfcc " +
                                     std::to_string(preset.n_mfcc) + ")");
  return std::unique_ptr<T, D>(p);
}

// librosa.power_to_db's defaults: power floor (amin) and dynamic range kept (top_db).
constexpr double power_floor = 1e-10;
constexpr double top_db = 80.0;

}  // namespace

std::vector<float> detail::mfcc_unnormalised(std::span<const float> mono, int sample_rate, const MfccPreset& preset) {
  const std::string op = "mfcc";
  check_mfcc_preset(op, preset);
  if (sample_rate <= 0) raise<InvalidArgument>(op, "sample rate must be > 0, got " + std::to_string(sample_rate));
  for (std::size_t i = 0; i < mono.size(); ++i)
    if (!std::isfinite(mono[i]))
      raise<NonFiniteError>(op, "sample " + std::to_string(i) + " is " + std::to_string(mono[i]));

  const auto n = static_cast<Index>(preset.n_fft);
  const auto hop = static_cast<Index>(preset.hop);
  const auto length = static_cast<Index>(mono.size());
  const Index frames = 1 + length / hop;
  const Index coeffs = preset.n_mfcc;

  // Alignment. librosa (center=True) pads n/2 zeros on both sides and takes frame t from
  // padded[t·hop, t·hop + n), i.e. centred on sample t·hop. aubio_pvoc_do keeps the last
  // n − hop samples it was given (initially zeros) and appends the hop new ones, so its k-th
  // call (k = 0, 1, …) windows stream[(k+1)·hop − n, (k+1)·hop) of the stream fed to it,
  // negative positions being its initial zeros. Feeding stream = z zeros ‖ padded, with
  // m = ⌈n / hop⌉ and z = m·hop − n ≥ 0, makes call k = t + m − 1 window exactly padded[t·hop,
  // t·hop + n): the first m − 1 calls are warm-up and are discarded.
  const Index m = (n + hop - 1) / hop;
  const Index z = m * hop - n;
  const Index calls = frames + m - 1;
  const Index lead = z + n / 2;  // stream position of mono[0]

  auto pvoc = checked<aubio_pvoc_t, PvocDeleter>(new_aubio_pvoc(static_cast<uint_t>(n), static_cast<uint_t>(hop)),
                                                 "phase vocoder", preset);
  const Index bands = preset.n_filters;
  auto fb = checked<aubio_filterbank_t, FilterbankDeleter>(
      new_aubio_filterbank(static_cast<uint_t>(bands), static_cast<uint_t>(n)), "mel filterbank", preset);
  aubio_filterbank_set_norm(fb.get(), 1);   // unit-area triangles (librosa's norm="slaney")
  aubio_filterbank_set_power(fb.get(), 2);  // power spectrum
  if (aubio_filterbank_set_mel_coeffs(fb.get(), static_cast<smpl_t>(sample_rate), 0,
                                      static_cast<smpl_t>(sample_rate) / 2) != 0)
    raise<InvalidArgument>(op, "aubio could not build " + std::to_string(bands) + " mel bands for " +
                                   std::to_string(sample_rate) + " Hz and n_fft " + std::to_string(n));
  auto in = checked<fvec_t, FvecDeleter>(new_fvec(static_cast<uint_t>(hop)), "input buffer", preset);
  auto grain = checked<cvec_t, CvecDeleter>(new_cvec(static_cast<uint_t>(n)), "spectrum buffer", preset);
  auto energy = checked<fvec_t, FvecDeleter>(new_fvec(static_cast<uint_t>(bands)), "band buffer", preset);

  // Mel power in dB for every frame, then the clip-wide top_db floor.
  std::vector<double> db(static_cast<std::size_t>(frames * bands));
  for (Index k = 0; k < calls; ++k) {
    for (Index j = 0; j < hop; ++j) {
      const Index i = k * hop + j - lead;
      in->data[j] = (i >= 0 && i < length) ? mono[static_cast<std::size_t>(i)] : 0.0f;
    }
    aubio_pvoc_do(pvoc.get(), in.get(), grain.get());
    const Index t = k - (m - 1);
    if (t < 0) continue;
    aubio_filterbank_do(fb.get(), grain.get(), energy.get());
    for (Index b = 0; b < bands; ++b)
      db[static_cast<std::size_t>(t * bands + b)] =
          10.0 * std::log10(std::max(power_floor, static_cast<double>(energy->data[b])));
  }
  const double floor_db = *std::max_element(db.begin(), db.end()) - top_db;
  for (double& v : db) v = std::max(v, floor_db);

  // Orthonormal DCT-II over the bands, first n_mfcc coefficients.
  std::vector<double> dct(static_cast<std::size_t>(coeffs * bands));
  for (Index c = 0; c < coeffs; ++c)
    for (Index b = 0; b < bands; ++b)
      dct[static_cast<std::size_t>(c * bands + b)] =
          std::cos(std::numbers::pi * static_cast<double>(c) * (static_cast<double>(b) + 0.5) /
                   static_cast<double>(bands)) *
          std::sqrt((c == 0 ? 1.0 : 2.0) / static_cast<double>(bands));
  std::vector<float> result(static_cast<std::size_t>(frames * coeffs));
  for (Index t = 0; t < frames; ++t)
    for (Index c = 0; c < coeffs; ++c) {
      double acc = 0;
      for (Index b = 0; b < bands; ++b)
        acc += dct[static_cast<std::size_t>(c * bands + b)] * db[static_cast<std::size_t>(t * bands + b)];
      result[static_cast<std::size_t>(t * coeffs + c)] = static_cast<float>(acc);
    }
  return result;
}

std::vector<float> mfcc(std::span<const float> mono, int sample_rate, const MfccPreset& preset) {
  const std::vector<float> raw = detail::mfcc_unnormalised(mono, sample_rate, preset);
  const Index all = preset.n_mfcc;
  const Index kept = all - 1;
  const Index frames = static_cast<Index>(raw.size()) / all;
  std::vector<float> result(static_cast<std::size_t>(frames * kept));
  for (Index c = 0; c < kept; ++c) {
    double sum = 0.0, max_abs = 0.0;
    for (Index t = 0; t < frames; ++t) {
      const double v = raw[t * all + c + 1];
      sum += v;
      max_abs = std::max(max_abs, std::abs(v));
    }
    const double mean = sum / static_cast<double>(frames);
    double ss = 0.0;
    for (Index t = 0; t < frames; ++t) {
      const double d = raw[t * all + c + 1] - mean;
      ss += d * d;
    }
    const double sd = std::sqrt(ss / static_cast<double>(frames));
    // A coefficient that is constant over time (silence, a single frame) has a std made of
    // float rounding only; dividing by it would amplify noise, so it is only centred.
    const double scale = sd > 1e-6 * std::max(1.0, max_abs) ? 1.0 / sd : 1.0;
    for (Index t = 0; t < frames; ++t) result[t * kept + c] = static_cast<float>((raw[t * all + c + 1] - mean) * scale);
  }
  return result;
}

}  // namespace bppsa
