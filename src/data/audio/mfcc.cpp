// mfcc: per-channel MFCC with aubio (phase vocoder → Slaney mel filterbank → log → DCT-II),
// framed like librosa's centred STFT, then standardised per coefficient over time.
//
// Versus librosa.feature.mfcc: same frames (centred, zero padding as librosa ≥ 0.10, periodic
// Hann), power spectrum, dB, orthonormal DCT-II; different mel bands (aubio's 40 Slaney
// Auditory-Toolbox bands over 133 Hz – 6.85 kHz, not 128 bands over 0 – sr/2), no top_db
// clipping, float arithmetic. The paper does not say which MFCC it used.
#include <aubio/aubio.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "bppsa/core/error.hpp"
#include "bppsa/data/irmas.hpp"

namespace bppsa {

namespace {

// RAII for the aubio objects: every mfcc() call owns its own, so calls on several threads
// share nothing (aubio serialises FFTW's non-thread-safe planner with its own mutex).
struct PvocDeleter {
  void operator()(aubio_pvoc_t* p) const { del_aubio_pvoc(p); }
};
struct MfccDeleter {
  void operator()(aubio_mfcc_t* p) const { del_aubio_mfcc(p); }
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

// Magnitudes below this are raised to it before the filterbank: the power floor is 1e-10,
// librosa's `amin`, so silent frames give finite values instead of aubio's log10(2e-42).
constexpr smpl_t magnitude_floor = 1e-5f;

}  // namespace

void detail::check_mfcc_preset(const std::string& op, const MfccPreset& preset) {
  const std::string which = "MFCC preset '" + preset.name + "': ";
  if (preset.n_fft < 2) raise<InvalidArgument>(op, which + "n_fft must be ≥ 2, got " + std::to_string(preset.n_fft));
  if (preset.hop < 1 || preset.hop > preset.n_fft)
    raise<InvalidArgument>(op, which + "hop must be in [1, n_fft = " + std::to_string(preset.n_fft) + "], got " +
                                   std::to_string(preset.hop));
  if (preset.n_filters < 1)
    raise<InvalidArgument>(op, which + "n_filters must be ≥ 1, got " + std::to_string(preset.n_filters));
  if (preset.n_mfcc < 2 || preset.n_mfcc > preset.n_filters)
    raise<InvalidArgument>(op, which + "n_mfcc must be in [2, n_filters = " + std::to_string(preset.n_filters) +
                                   "] (coefficient 0 is dropped), got " + std::to_string(preset.n_mfcc));
}

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
  // Created with 40 filters, aubio uses Slaney's Auditory Toolbox filterbank (133 Hz – 6.85 kHz);
  // with any other count, mel bands spaced evenly from 0 to the Nyquist frequency.
  auto mf =
      checked<aubio_mfcc_t, MfccDeleter>(new_aubio_mfcc(static_cast<uint_t>(n), static_cast<uint_t>(preset.n_filters),
                                                        static_cast<uint_t>(coeffs), static_cast<uint_t>(sample_rate)),
                                         "MFCC object", preset);
  // Power spectrum and decibels, as librosa (aubio's defaults are magnitude and log10).
  aubio_mfcc_set_power(mf.get(), 2);
  aubio_mfcc_set_scale(mf.get(), 10);
  auto in = checked<fvec_t, FvecDeleter>(new_fvec(static_cast<uint_t>(hop)), "input buffer", preset);
  auto grain = checked<cvec_t, CvecDeleter>(new_cvec(static_cast<uint_t>(n)), "spectrum buffer", preset);
  auto out = checked<fvec_t, FvecDeleter>(new_fvec(static_cast<uint_t>(coeffs)), "output buffer", preset);

  std::vector<float> result(static_cast<std::size_t>(frames * coeffs));
  for (Index k = 0; k < calls; ++k) {
    for (Index j = 0; j < hop; ++j) {
      const Index i = k * hop + j - lead;
      in->data[j] = (i >= 0 && i < length) ? mono[static_cast<std::size_t>(i)] : 0.0f;
    }
    aubio_pvoc_do(pvoc.get(), in.get(), grain.get());
    const Index t = k - (m - 1);
    if (t < 0) continue;
    for (uint_t b = 0; b < grain->length; ++b) grain->norm[b] = std::max(grain->norm[b], magnitude_floor);
    aubio_mfcc_do(mf.get(), grain.get(), out.get());
    std::copy(out->data, out->data + coeffs, result.begin() + t * coeffs);
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
