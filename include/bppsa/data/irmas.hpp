// IRMAS-format audio (docs/method.md §5): folders of WAV files → per-channel MFCC sequences, cached.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/io/safetensors.hpp"

namespace bppsa {

/// The paper's feature shapes: n_mfcc coefficients (coefficient 0 dropped), FFT size and hop.
/// s: 20, 4096, 512 → F 38, T 259;  m: 13, 2048, 256 → F 24, T 517;  l: 7, 1024, 128 → F 12,
/// T 1034 (F = 2 channels × (n_mfcc − 1); T for a 3-s clip at 44.1 kHz).
struct MfccPreset {
  std::string name;
  int n_mfcc = 20;
  int n_fft = 4096;
  int hop = 512;
  int n_filters = 128;  ///< mel bands (librosa's default n_mels)
};
/// "s", "m" or "l"; InvalidArgument otherwise.
MfccPreset mfcc_preset(const std::string& name);

/// IRMAS's 11 instrument codes in label order: cel cla flu gac gel org pia sax tru vio voi.
const std::vector<std::string>& irmas_classes();

/// Decoded audio: interleaved samples in [-1, 1].
struct Audio {
  int sample_rate = 0;
  int channels = 0;
  std::vector<float> samples;  ///< frames × channels, interleaved
  Index frames() const { return channels ? static_cast<Index>(samples.size()) / channels : 0; }
};
/// The sample rates read_audio accepts. 1 kHz is below every audio standard (telephony is 8 kHz);
/// 768 kHz is the highest rate audio converters and recording software offer (ultrasonic
/// recordings use 250–500 kHz). A header outside this range is corrupt or hostile: 2^28 Hz made
/// a 3-s clip 6 million steps long.
inline constexpr int kMinSampleRate = 1000;
inline constexpr int kMaxSampleRate = 768000;

/// Reads a WAV (any format libsndfile reads). IoError / FormatError name the file; a sample
/// rate outside [kMinSampleRate, kMaxSampleRate] is a FormatError.
Audio read_audio(const std::filesystem::path& path);
/// Decodes a sound file held in memory, as read_audio does a file (`source` names it in
/// messages). FormatError for anything that is not complete, decodable audio.
Audio decode_audio(std::span<const unsigned char> bytes, const std::string& source);

/// MFCC of one channel as librosa.feature.mfcc(y, sr, n_mfcc, n_fft, hop_length, n_mels =
/// n_filters) computes it with its defaults (centred frames, periodic Hann, power spectrum,
/// Slaney-scale mel bands 0 Hz – Nyquist with unit area, power_to_db with amin 1e-10 and
/// top_db 80, orthonormal DCT-II; aubio does the FFT and the filtering): frames
/// T = 1 + ⌊samples / hop⌋, each n_mfcc − 1 coefficients (0 dropped), every coefficient standardised over time (mean 0,
/// std 1; a coefficient constant over time is only centred). Returned row-major
/// [T][n_mfcc − 1]. Thread-safe: no shared state, callable from several threads at once.
/// InvalidArgument for a bad preset or rate, NonFiniteError for NaN/Inf samples.
std::vector<float> mfcc(std::span<const float> mono, int sample_rate, const MfccPreset& preset);

/// Loads a folder tree of WAV files (*.wav, any case; macOS "._*" resource forks skipped),
/// in the byte order of their paths relative to `folder`. The class of a file is its parent
/// folder's name when that is an IRMAS code (the training set's layout), else the first
/// "[code]" in its file name (IRMAS names files "[cel][cla]0001__1.wav"); neither →
/// FormatError. Stereo → L and R features concatenated per frame (F = 2(n_mfcc − 1)); mono
/// is duplicated; more channels → FormatError. All files must share one sample rate. Every
/// sequence is cut or zero-padded to `steps` (0 = 1 + ⌊3·rate / hop⌋, a 3-s clip at the
/// files' rate); a clip shorter than `steps` keeps its length (SequenceDataset::lengths, set when
/// any clip is shorter), so that its padding costs nothing in training. Features are computed in parallel over files
/// (OpenMP); the result does not depend on the thread count, and of several broken files the first in order is
/// reported. Cache: `cache` (default <folder>/.bppsa-mfcc-<preset>.safetensors) holds x F32 [N, steps, F], y I64 [N],
/// lengths I64 [N] and metadata format "bppsa-mfcc-3" and key, a hash of the preset, `steps` and every file's relative
/// path, size and mtime. A cache with another key is recomputed and replaced (atomically); one that cannot be parsed or
/// does not fit is a FormatError telling the user to delete it. A cache that cannot be written (a full disk, a read-only
/// folder) is an IoError, or, when `warn` is given, a message to it naming the file, its folder and the reason, and the
/// features are returned uncached. Memory: the features, their copy for the cache and the cache file's bytes (three
/// copies) are checked against the memory guard (check_memory, ResourceError) before anything is allocated, as is
/// reading a cache (two copies). A .wav entry that is not a regular file (a FIFO, a link to a device) is an IoError.
SequenceDataset load_irmas(const std::filesystem::path& folder, const MfccPreset& preset, Index steps = 0,
                           const std::filesystem::path& cache = {},
                           const std::function<void(const std::string&)>& warn = {});

namespace detail {
/// The feature cache's reader behind load_irmas, on a parsed file (`file.source` names it):
/// the data set it holds when its metadata format and key match `key`, nothing when they do
/// not (a cache of other inputs, to recompute). FormatError telling the user to delete it
/// when x is not F32 [labels.size(), steps (any > 0 if steps is 0), features], y not I64
/// equal to `labels`, lengths not I64 [labels.size()] in 1..steps, or x holds NaN/Inf.
std::optional<SequenceDataset> mfcc_cache_dataset(const TensorFile& file, const std::string& key,
                                                  const std::vector<std::int64_t>& labels, Index steps, Index features);
/// Throws InvalidArgument (prefixed by `op`) unless 2 ≤ n_mfcc ≤ n_filters, n_fft ≥ 2 and
/// 1 ≤ hop ≤ n_fft.
void check_mfcc_preset(const std::string& op, const MfccPreset& preset);
/// The MFCC before any post-processing: [T][n_mfcc] row-major, coefficient 0 included,
/// librosa's values (dB of the mel power spectrum, orthonormal DCT-II). mfcc() is this with
/// coefficient 0 dropped and each coefficient standardised; tests compare it with a plain
/// oracle written from librosa's definitions.
std::vector<float> mfcc_unnormalised(std::span<const float> mono, int sample_rate, const MfccPreset& preset);
}  // namespace detail

}  // namespace bppsa
