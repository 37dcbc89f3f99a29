// load_irmas: walks an IRMAS-style folder tree, labels each WAV, computes L/R MFCC sequences
// in parallel over files and caches them in a safetensors file keyed by the inputs.
#include "bppsa/data/irmas.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <system_error>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/io/safetensors.hpp"
#include "data/file_kind.hpp"

namespace bppsa {

namespace {

namespace fs = std::filesystem;

const std::string k_op = "load_irmas";
const std::string k_format = "bppsa-mfcc-3";
const std::string k_delete_hint = "; delete it to recompute the features";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string codes_list() {
  std::string s;
  for (const auto& c : irmas_classes()) s += (s.empty() ? "" : " ") + c;
  return s;
}

Index class_index(const std::string& code) {
  const auto& classes = irmas_classes();
  const auto it = std::find(classes.begin(), classes.end(), lower(code));
  return it == classes.end() ? -1 : static_cast<Index>(it - classes.begin());
}

/// The label of one file: its parent folder when that is a code, else the first "[code]" in
/// its name; FormatError explaining both rules otherwise.
std::int64_t label_of(const fs::path& file) {
  const std::string parent = file.parent_path().filename().string();
  if (const Index c = class_index(parent); c >= 0) return c;
  const std::string name = file.filename().string();
  for (std::size_t open = name.find('['); open != std::string::npos; open = name.find('[', open + 1)) {
    const std::size_t close = name.find(']', open + 1);
    if (close == std::string::npos) break;
    if (const Index c = class_index(name.substr(open + 1, close - open - 1)); c >= 0) return c;
  }
  detail::raise<FormatError>(k_op, "cannot tell the class of " + file.string() + ": its folder '" + parent +
                                       "' is not an IRMAS code and its name holds no \"[code]\" that is one "
                                       "(codes: " +
                                       codes_list() + "; e.g. cel/x.wav or \"[cel][cla]0001__1.wav\")");
}

struct Entry {
  fs::path path;
  std::string relative;  ///< generic form, for ordering, the cache key and messages
};

std::vector<Entry> find_wavs(const fs::path& folder) {
  std::vector<Entry> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(folder, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) detail::raise<IoError>(k_op, "cannot list " + folder.string() + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) detail::raise<IoError>(k_op, "cannot list " + folder.string() + ": " + ec.message());
    // Archives unpacked on macOS carry "._name.wav" resource forks that are not audio.
    const std::string name = it->path().filename().string();
    if (name.rfind("._", 0) == 0) continue;
    if (lower(it->path().extension().string()) != ".wav" || it->is_directory(ec)) continue;
    if (!it->is_regular_file(ec))
      detail::raise<IoError>(k_op, "'" + it->path().string() + "' is " + detail::file_kind(it->path()) +
                                       ", not a regular file; a WAV must be a regular file (a pipe or a device "
                                       "cannot be sized before it is read): replace it with one or remove it");
    files.push_back({it->path(), it->path().lexically_relative(folder).generic_string()});
  }
  std::sort(files.begin(), files.end(), [](const Entry& a, const Entry& b) { return a.relative < b.relative; });
  return files;
}

/// FNV-1a 64 over everything the features depend on; a field separator keeps "ab"+"c" and
/// "a"+"bc" apart.
class Fnv1a {
 public:
  void add(const std::string& s) {
    for (unsigned char c : s) mix(c);
    mix(0);
  }
  void add(std::int64_t v) { add(std::to_string(v)); }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  void mix(unsigned char c) {
    h_ ^= c;
    h_ *= 0x100000001b3ULL;
  }
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

std::string cache_key(const std::vector<Entry>& files, const MfccPreset& preset, Index steps) {
  Fnv1a h;
  h.add(k_format);
  h.add(preset.name);
  h.add(preset.n_mfcc);
  h.add(preset.n_fft);
  h.add(preset.hop);
  h.add(preset.n_filters);
  h.add(steps);
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f.path, ec);
    if (ec) detail::raise<IoError>(k_op, "cannot stat " + f.path.string() + ": " + ec.message());
    const auto mtime = fs::last_write_time(f.path, ec);
    if (ec) detail::raise<IoError>(k_op, "cannot stat " + f.path.string() + ": " + ec.message());
    h.add(f.relative);
    h.add(static_cast<std::int64_t>(size));
    h.add(static_cast<std::int64_t>(mtime.time_since_epoch().count()));
  }
  return h.hex();
}

/// The dataset stored in `cache` when its key is `key`; nothing when the file is a cache of
/// other inputs (to be recomputed). A file that cannot be parsed, or whose tensors do not
/// fit the inputs, is a FormatError telling the user to delete it.
std::optional<SequenceDataset> read_cache(const fs::path& cache, const std::string& key,
                                          const std::vector<std::int64_t>& labels, Index steps, Index features) {
  TensorFile file;
  try {
    file = read_safetensors(cache);
  } catch (const FormatError& e) {
    detail::raise<FormatError>(k_op, "cache " + cache.string() + " is unreadable (" + e.what() + ")" + k_delete_hint);
  }
  return detail::mfcc_cache_dataset(file, key, labels, steps, features);
}

/// Features of one file written into its slice [steps][features] of x (already zeroed); returns
/// the steps it filled (its length, at least 1: a clip shorter than a frame is one zero step).
Index compute_file(const Entry& file, const MfccPreset& preset, int rate, const std::string& rate_source, Index steps,
                   Index features, float* out) {
  const Audio audio = read_audio(file.path);
  if (audio.channels > 2)
    detail::raise<FormatError>(k_op, file.path.string() + " has " + std::to_string(audio.channels) +
                                         " channels; IRMAS clips are stereo or mono");
  if (audio.sample_rate != rate)
    detail::raise<FormatError>(k_op, file.path.string() + " is sampled at " + std::to_string(audio.sample_rate) +
                                         " Hz but " + rate_source + " at " + std::to_string(rate) +
                                         " Hz; all files must share one sample rate (resample them first)");
  const Index frames = audio.frames();
  const Index half = features / 2;
  std::vector<float> channel(static_cast<std::size_t>(frames));
  std::vector<float> feats[2];
  for (int c = 0; c < audio.channels; ++c) {
    for (Index i = 0; i < frames; ++i) channel[i] = audio.samples[i * audio.channels + c];
    try {
      feats[c] = mfcc(channel, audio.sample_rate, preset);
    } catch (const NonFiniteError& e) {
      detail::raise<NonFiniteError>(k_op, file.path.string() + ", channel " + std::to_string(c) + ": " + e.what() +
                                              " (the WAV file holds NaN/Inf samples; fix or remove it)");
    }
  }
  if (audio.channels == 1) feats[1] = feats[0];
  const Index t_max = std::min(steps, static_cast<Index>(feats[0].size()) / half);
  for (Index t = 0; t < t_max; ++t)
    for (int c = 0; c < 2; ++c) std::copy_n(feats[c].begin() + t * half, half, out + t * features + c * half);
  return std::max<Index>(t_max, 1);
}

/// Lengths that all equal `steps` say nothing: the data set then has none.
std::vector<Index> lengths_if_shorter(std::vector<Index> lengths, Index steps) {
  if (std::all_of(lengths.begin(), lengths.end(), [&](Index n) { return n == steps; })) lengths.clear();
  return lengths;
}

}  // namespace

std::optional<SequenceDataset> detail::mfcc_cache_dataset(const TensorFile& file, const std::string& key,
                                                          const std::vector<std::int64_t>& labels, Index steps,
                                                          Index features) {
  if (file.metadata_or("format") != k_format || file.metadata_or("key") != key) return std::nullopt;

  const auto bad = [&](const std::string& why) {
    detail::raise<FormatError>(k_op, "cache " + file.source + " is malformed (" + why + ")" + k_delete_hint);
  };
  if (!file.contains("x") || !file.contains("y") || !file.contains("lengths"))
    bad("it lacks tensor 'x', 'y' or 'lengths'");
  const Tensor& x = file.tensors.at("x");
  const Tensor& y = file.tensors.at("y");
  const Tensor& len = file.tensors.at("lengths");
  const auto n = static_cast<Index>(labels.size());
  if (x.dtype != DType::f32 || x.shape.size() != 3 || x.shape[0] != n || x.shape[2] != features ||
      (steps > 0 && x.shape[1] != steps) || x.shape[1] <= 0)
    bad("x is " + x.describe() + ", expected F32 [" + std::to_string(n) + ", " +
        (steps > 0 ? std::to_string(steps) : std::string("steps")) + ", " + std::to_string(features) + "]");
  if (y.dtype != DType::i64 || y.shape.size() != 1 || y.shape[0] != n)
    bad("y is " + y.describe() + ", expected I64 [" + std::to_string(n) + "]");
  if (len.dtype != DType::i64 || len.shape.size() != 1 || len.shape[0] != n)
    bad("lengths is " + len.describe() + ", expected I64 [" + std::to_string(n) + "]");

  check_memory(k_op, "reading the feature cache " + file.source,
               {{"its features as floats", static_cast<double>(x.bytes.size())},
                {"the file's tensor, held meanwhile", static_cast<double>(x.bytes.size())}},
               "delete it, or use a folder with fewer WAV files");
  SequenceDataset data;
  data.steps = x.shape[1];
  data.features = features;
  data.x = x.to_f32("x");
  data.y = y.to_i64("y");
  if (data.y != labels) bad("its labels differ from those of the file names");
  std::vector<Index> lengths;
  for (const std::int64_t v : len.to_i64("lengths")) {
    if (v < 1 || v > data.steps)
      bad("a length of " + std::to_string(v) + " is outside 1.." + std::to_string(data.steps));
    lengths.push_back(static_cast<Index>(v));
  }
  data.lengths = lengths_if_shorter(std::move(lengths), data.steps);
  for (float v : data.x)
    if (!std::isfinite(v)) bad("x holds NaN or Inf");
  return data;
}

MfccPreset mfcc_preset(const std::string& name) {
  if (name == "s") return {"s", 20, 4096, 512, 128};
  if (name == "m") return {"m", 13, 2048, 256, 128};
  if (name == "l") return {"l", 7, 1024, 128, 128};
  detail::raise<InvalidArgument>("mfcc_preset", "unknown MFCC preset '" + name + "'; valid presets: s, m, l");
}

const std::vector<std::string>& irmas_classes() {
  static const std::vector<std::string> classes = {"cel", "cla", "flu", "gac", "gel", "org",
                                                   "pia", "sax", "tru", "vio", "voi"};
  return classes;
}

SequenceDataset load_irmas(const std::filesystem::path& folder, const MfccPreset& preset, Index steps,
                           const std::filesystem::path& cache, const std::function<void(const std::string&)>& warn) {
  detail::check_mfcc_preset(k_op, preset);
  if (steps < 0)
    detail::raise<InvalidArgument>(k_op, "steps must be ≥ 0 (0 = a 3-s clip), got " + std::to_string(steps));
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    detail::raise<IoError>(k_op, folder.string() + (fs::exists(folder, ec) ? " is not a folder" : " does not exist"));

  const std::vector<Entry> files = find_wavs(folder);
  if (files.empty())
    detail::raise<FormatError>(k_op, "no .wav files under " + folder.string() +
                                         " (expected IRMAS layout: <class>/*.wav or \"[cel]…wav\" names)");
  std::vector<std::int64_t> labels;
  labels.reserve(files.size());
  for (const auto& f : files) labels.push_back(label_of(f.path));

  const Index features = 2 * (preset.n_mfcc - 1);
  const std::string preset_name = preset.name.empty() ? "custom" : preset.name;
  const fs::path cache_path =
      cache.empty() ? folder / (".bppsa-mfcc-" + preset_name + ".safetensors") : fs::path(cache);
  const std::string key = cache_key(files, preset, steps);

  SequenceDataset data;
  bool cached = false;
  if (fs::exists(cache_path, ec)) {
    if (auto hit = read_cache(cache_path, key, labels, steps, features)) {
      data = std::move(*hit);
      cached = true;
    }
  }

  if (!cached) {
    // The first file fixes the sample rate (and, for steps = 0, the length of a 3-s clip).
    const int rate = read_audio(files.front().path).sample_rate;
    if (steps == 0) steps = 1 + (3 * static_cast<Index>(rate)) / preset.hop;
    const auto n = static_cast<Index>(files.size());
    const double values = static_cast<double>(n) * static_cast<double>(steps) * static_cast<double>(features);
    check_memory(k_op,
                 "the MFCC features of " + std::to_string(n) + " WAV files in " + folder.string() + " (" +
                     std::to_string(steps) + " steps of " + std::to_string(features) + " features each, " +
                     files.front().path.string() + " being at " + std::to_string(rate) + " Hz)",
                 {{"the features", values * sizeof(float)},
                  {"their copy for the cache", values * sizeof(float)},
                  {"the cache file's bytes", values * sizeof(float)},
                  {"labels and lengths", 3.0 * static_cast<double>(n) * sizeof(std::int64_t)}},
                 "use a folder with fewer WAV files, or a preset with fewer steps (--preset s)");
    data.steps = steps;
    data.features = features;
    data.x.assign(static_cast<std::size_t>(n * steps * features), 0.0f);
    data.y = labels;

    // Every file is attempted and its error kept, so the error reported is always that of
    // the first broken file in path order, whatever the thread schedule.
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
    std::vector<Index> lengths(static_cast<std::size_t>(n), steps);
    const std::string rate_source = files.front().path.string();
#pragma omp parallel for schedule(dynamic)
    for (Index i = 0; i < n; ++i) {
      try {
        lengths[static_cast<std::size_t>(i)] =
            compute_file(files[i], preset, rate, rate_source, steps, features, data.x.data() + i * steps * features);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);

    TensorFile out;
    out.tensors["x"] = Tensor::from_f32(data.x, {n, steps, features});
    out.tensors["y"] = Tensor::from_i64(data.y, {n});
    out.tensors["lengths"] = Tensor::from_i64(std::vector<std::int64_t>(lengths.begin(), lengths.end()), {n});
    data.lengths = lengths_if_shorter(std::move(lengths), steps);
    out.metadata["format"] = k_format;
    out.metadata["key"] = key;
    out.metadata["preset"] = preset_name;
    out.metadata["folder"] = folder.string();
    try {
      write_safetensors(cache_path, out);
    } catch (const IoError& e) {
      const std::string why = std::string("cannot write the feature cache ") + cache_path.string() + " in " +
                              cache_path.parent_path().string() + ": " + e.what();
      if (!warn) detail::raise<IoError>(k_op, why + "; pass a writable `cache` path");
      warn(why + "; going on without it (the features will be computed again next time)");
    }
  }

  data.classes = static_cast<Index>(irmas_classes().size());
  data.class_names = irmas_classes();
  data.name = "irmas " + preset_name + " (" + folder.string() + ")";
  return data;
}

}  // namespace bppsa
