// read_audio: decodes a sound file (WAV and anything else libsndfile reads) into interleaved
// floats in [-1, 1], with errors that name the file and say what is wrong with it.
#include <sndfile.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "bppsa/core/error.hpp"
#include "bppsa/data/irmas.hpp"

namespace bppsa {

namespace {

struct SndfileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndfileHandle = std::unique_ptr<SNDFILE, SndfileCloser>;

/// libsndfile opens a WAV whose data chunk runs past the end of the file and silently reads
/// what is there; its log then holds "data : <declared> (should be <present>)". Returns the
/// two byte counts when the data was cut short, {0, 0} otherwise. (A "should be" larger than
/// declared is a streaming placeholder size, not a truncation.)
std::pair<long long, long long> truncated_data_chunk(SNDFILE* file) {
  std::string log(16384, '\0');
  sf_command(file, SFC_GET_LOG_INFO, log.data(), static_cast<int>(log.size()));
  log.resize(std::strlen(log.c_str()));
  for (std::size_t pos = 0; pos < log.size();) {
    const std::size_t end = std::min(log.find('\n', pos), log.size());
    const std::string line = log.substr(pos, end - pos);
    long long declared = 0, present = 0;
    if (line.rfind("data", 0) == 0 &&
        std::sscanf(line.c_str(), "data : %lld (should be %lld)", &declared, &present) == 2 && present < declared)
      return {declared, present};
    pos = end + 1;
  }
  return {0, 0};
}

}  // namespace

Audio read_audio(const std::filesystem::path& path) {
  const std::string op = "read_audio";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) detail::raise<IoError>(op, "file " + path.string() + " does not exist");
  if (std::filesystem::is_directory(path, ec))
    detail::raise<IoError>(op, path.string() + " is a folder, not a sound file");

  SF_INFO info{};
  SndfileHandle file(sf_open(path.c_str(), SFM_READ, &info));
  if (!file) {
    // sf_open reports both "cannot open" and "not a sound file" through the same call; a file
    // that exists but does not open is almost always unreadable as audio.
    const std::string why = sf_strerror(nullptr);
    detail::raise<FormatError>(op, "cannot decode " + path.string() + " as audio: " + why);
  }
  if (info.channels <= 0 || info.samplerate <= 0)
    detail::raise<FormatError>(op, path.string() + " declares " + std::to_string(info.channels) + " channels at " +
                                       std::to_string(info.samplerate) + " Hz");
  if (info.frames <= 0) detail::raise<FormatError>(op, path.string() + " holds no audio frames (empty or truncated)");

  if (const auto [declared, present] = truncated_data_chunk(file.get()); declared > 0)
    detail::raise<FormatError>(op, path.string() + " is truncated: its data chunk declares " +
                                       std::to_string(declared) + " bytes but the file holds " +
                                       std::to_string(present));

  Audio audio;
  audio.sample_rate = info.samplerate;
  audio.channels = info.channels;
  audio.samples.resize(static_cast<std::size_t>(info.frames) * static_cast<std::size_t>(info.channels));
  const sf_count_t got = sf_readf_float(file.get(), audio.samples.data(), info.frames);
  if (sf_error(file.get()) != SF_ERR_NO_ERROR)
    detail::raise<FormatError>(op, "error while decoding " + path.string() + ": " + sf_strerror(file.get()));
  if (got != info.frames)
    detail::raise<FormatError>(op, path.string() + " is truncated: its header announces " +
                                       std::to_string(info.frames) + " frames but only " + std::to_string(got) +
                                       " could be read");
  return audio;
}

}  // namespace bppsa
