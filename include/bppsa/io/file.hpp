// Whole-file reads and atomic writes: a failed or interrupted write never leaves a
// half-written file where a good one was.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
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

/// Removes the temporaries that write_file_atomic left for `target` (exactly
/// ".NAME.tmp.PID.N" in its folder, NAME its file name) when process PID no longer runs (it
/// was killed mid-write). Returns how many were removed; failures are ignored.
int remove_stale_temporaries(const std::filesystem::path& target);
/// The same for every file NAME in `folder` for which is_target(NAME) holds (e.g. the files of
/// one checkpoint); no other file is touched.
int remove_stale_temporaries(const std::filesystem::path& folder, const std::function<bool(std::string_view)>& is_target);

/// Writes `bytes` to `path`. A new or regular file is written atomically: to a temporary file
/// in the same folder, flushed and fsync'ed, then renamed over `path`; on any failure the
/// temporary is removed, the old file (if any) is untouched, and IoError is thrown.
/// Anything else is never replaced:
/// - a device, FIFO or socket (/dev/null, a pipe) is opened and written directly;
/// - a symbolic link is followed, and the file it leads to is written as above (atomically in
///   that file's folder when it is regular, the link kept); a process's descriptor link
///   (/dev/stdout, /dev/fd/N, /proc/PID/fd/N) is written directly: one of this process's
///   through the descriptor itself, after flushing stdio (so it lands where the process's
///   other output does), another process's by opening it, appending to a regular file;
/// - a link owned by neither this user nor the owner of the folder it is in (one planted by
///   another user), a link to nothing, and a folder are refused (IoError naming `path`).
void write_file_atomic(const std::filesystem::path& path, std::span<const unsigned char> bytes);
/// An output written in place (a log appended line by line), opened for writing where
/// write_file_atomic would write it: created, and truncated unless `append`, when it is a regular
/// file or new; a device, FIFO or descriptor link as it is. IoError naming `path` where
/// write_file_atomic refuses (a link planted by another user, a link to nothing, a folder), or when a
/// link was put in place of the file after the check. Returns the descriptor (close-on-exec).
int open_output(const std::filesystem::path& path, bool append, const std::string& op);
/// The same for text (JSON reports, logs).
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace bppsa
