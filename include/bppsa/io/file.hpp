// Whole-file reads and atomic writes: a failed or interrupted write never leaves a
// half-written file where a good one was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bppsa {

/// A regular file open for reading at given offsets. Anything else (a folder, a device such
/// as /dev/zero, a pipe) is refused at open: its size cannot be known before reading it.
class InputFile {
 public:
  /// Throws IoError naming the path and the reason.
  explicit InputFile(const std::filesystem::path& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  std::uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  /// Reads exactly out.size() bytes at `offset`; IoError when the file is shorter (it shrank
  /// since it was opened) or the read fails.
  void read_at(std::uint64_t offset, std::span<unsigned char> out) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

/// Reads the whole of a regular file, after checking its size against the memory guard
/// (check_memory). Throws IoError naming the path and the reason (ResourceError: too big).
std::vector<unsigned char> read_file(const std::filesystem::path& path);

/// `bytes` as valid UTF-8 text for JSON and safetensors metadata, losslessly: a string that
/// is valid UTF-8 and holds no backslash is returned unchanged; otherwise every backslash is
/// doubled and every byte that is not part of valid UTF-8 becomes \xNN (two hex digits).
/// Paths are bytes on POSIX; this is how bppsa stores them.
std::string utf8_text(std::string_view bytes);
/// Whether `bytes` is valid UTF-8.
bool is_utf8(std::string_view bytes);

/// Removes the temporary files that write_file_atomic left in the folder of `prefix` for files
/// whose name starts with prefix's file name (".NAME….tmp.PID.N") when process PID no longer
/// runs (it was killed mid-write). Returns how many were removed; failures are ignored.
int remove_stale_temporaries(const std::filesystem::path& prefix);

/// Writes `bytes` to `path` atomically: to a temporary file in the same folder, flushed and
/// fsync'ed, then renamed over `path`. On any failure the temporary is removed, the old file
/// (if any) is untouched, and IoError is thrown.
void write_file_atomic(const std::filesystem::path& path, std::span<const unsigned char> bytes);
/// The same for text (JSON reports, logs).
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace bppsa
