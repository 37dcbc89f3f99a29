// read_audio / decode_audio: decodes a sound file (WAV and anything else libsndfile reads),
// from disk or from memory, into interleaved floats in [-1, 1], with errors that name the
// file and say what is wrong with it.
#include <sndfile.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/data/irmas.hpp"
#include "bppsa/io/file.hpp"

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

/// libsndfile's virtual I/O over a byte span: reads and seeks, never writes.
struct MemoryFile {
  std::span<const unsigned char> bytes;
  sf_count_t pos = 0;

  static MemoryFile& of(void* user) { return *static_cast<MemoryFile*>(user); }
  static sf_count_t length(void* user) { return static_cast<sf_count_t>(of(user).bytes.size()); }
  static sf_count_t seek(sf_count_t offset, int whence, void* user) {
    MemoryFile& f = of(user);
    const sf_count_t base = whence == SEEK_CUR ? f.pos : whence == SEEK_END ? length(user) : 0;
    // Like lseek: a negative position is refused, one past the end allowed (reads there
    // return nothing); checked before adding, so base + offset cannot overflow.
    if (offset < -base || offset > std::numeric_limits<sf_count_t>::max() - base) return -1;
    return f.pos = base + offset;
  }
  static sf_count_t read(void* ptr, sf_count_t count, void* user) {
    MemoryFile& f = of(user);
    const sf_count_t n = std::clamp<sf_count_t>(count, 0, std::max<sf_count_t>(0, length(user) - f.pos));
    if (n > 0) std::memcpy(ptr, f.bytes.data() + f.pos, static_cast<std::size_t>(n));
    f.pos += n;
    return n;
  }
  static sf_count_t write(const void*, sf_count_t, void*) { return 0; }
  static sf_count_t tell(void* user) { return of(user).pos; }
};

}  // namespace

Audio read_audio(const std::filesystem::path& path) {
  const std::string op = "read_audio";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) detail::raise<IoError>(op, "file " + path.string() + " does not exist");
  if (std::filesystem::is_directory(path, ec))
    detail::raise<IoError>(op, path.string() + " is a folder, not a sound file");
  return decode_audio(read_file(path), path.string());
}

Audio decode_audio(std::span<const unsigned char> bytes, const std::string& source) {
  const std::string op = "read_audio";
  MemoryFile memory{bytes, 0};
  SF_VIRTUAL_IO io{&MemoryFile::length, &MemoryFile::seek, &MemoryFile::read, &MemoryFile::write, &MemoryFile::tell};
  SF_INFO info{};
  SndfileHandle file(sf_open_virtual(&io, SFM_READ, &info, &memory));
  if (!file) {
    // sf_open reports both "cannot open" and "not a sound file" through the same call; a file
    // that exists but does not open is almost always unreadable as audio.
    const std::string why = sf_strerror(nullptr);
    detail::raise<FormatError>(op, "cannot decode " + source + " as audio: " + why);
  }
  if (info.channels <= 0 || info.samplerate <= 0)
    detail::raise<FormatError>(op, source + " declares " + std::to_string(info.channels) + " channels at " +
                                       std::to_string(info.samplerate) + " Hz");
  if (info.samplerate < kMinSampleRate || info.samplerate > kMaxSampleRate)
    detail::raise<FormatError>(op, source + " declares a sample rate of " + std::to_string(info.samplerate) +
                                       " Hz, outside the " + std::to_string(kMinSampleRate) + "–" +
                                       std::to_string(kMaxSampleRate) +
                                       " Hz of real recordings (a corrupt header?); resample it or remove it");
  if (info.frames <= 0) detail::raise<FormatError>(op, source + " holds no audio frames (empty or truncated)");

  if (const auto [declared, present] = truncated_data_chunk(file.get()); declared > 0)
    detail::raise<FormatError>(op, source + " is truncated: its data chunk declares " + std::to_string(declared) +
                                       " bytes but the file holds " + std::to_string(present));

  Audio audio;
  audio.sample_rate = info.samplerate;
  audio.channels = info.channels;
  // Read in blocks of about 64 Ki samples: the header's frame count is only a claim (a FLAC
  // header may announce 2^36 frames), so memory grows with what is decoded, not with it, and
  // each growth meets the memory guard (compressed audio can decode to 1000 times its bytes).
  const auto channels = static_cast<std::size_t>(info.channels);
  const sf_count_t block = std::max<sf_count_t>(1, (sf_count_t{1} << 16) / info.channels);
  sf_count_t got = 0;
  while (got < info.frames) {
    const sf_count_t want = std::min(block, info.frames - got);
    check_memory(op, "decoding " + source,
                 {{"its samples as floats", static_cast<double>(got + want) * static_cast<double>(channels) *
                                                sizeof(float)}},
                 "split or shorten the recording");
    audio.samples.resize(static_cast<std::size_t>(got + want) * channels);
    const sf_count_t n = sf_readf_float(file.get(), audio.samples.data() + static_cast<std::size_t>(got) * channels, want);
    if (sf_error(file.get()) != SF_ERR_NO_ERROR)
      detail::raise<FormatError>(op, "error while decoding " + source + ": " + sf_strerror(file.get()));
    got += std::max<sf_count_t>(n, 0);
    if (n < want) break;
  }
  audio.samples.resize(static_cast<std::size_t>(got) * channels);
  if (got != info.frames)
    detail::raise<FormatError>(op, source + " is truncated: its header announces " + std::to_string(info.frames) +
                                       " frames but only " + std::to_string(got) + " could be read");
  return audio;
}

}  // namespace bppsa
