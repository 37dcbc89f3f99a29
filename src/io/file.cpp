// Whole-file reads and atomic replace-by-rename writes on POSIX (open/read/write/fsync/rename),
// so every failure carries errno's reason and no reader ever sees a half-written file.
#include "bppsa/io/file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"

namespace bppsa {
namespace {

std::string quoted(const std::filesystem::path& p) { return std::string("'").append(p.string()).append("'"); }

[[noreturn]] void fail(const std::string& op, const std::string& what, const std::filesystem::path& p, int err) {
  detail::raise<IoError>(op, "cannot " + what + " " + quoted(p) + ": " + std::strerror(err));
}

/// Closes a descriptor on scope exit unless released.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

InputFile::InputFile(const std::filesystem::path& path) : path_(path) {
  const std::string op = "read_file";
  // O_NONBLOCK: opening a FIFO with no writer must not hang before it can be refused.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail(op, "open", path, errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail(op, "stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    if (S_ISDIR(st.st_mode)) fail(op, "read", path, EISDIR);
    detail::raise<IoError>(
        op, "cannot read " + quoted(path) + ": not a regular file (a device, pipe or socket); give a file");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(std::uint64_t offset, std::span<unsigned char> out) const {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("read_file", "read", path_, errno);
    }
    if (n == 0)
      detail::raise<IoError>("read_file", "cannot read " + quoted(path_) + ": it ended at byte " +
                                              std::to_string(offset + done) + " (it shrank while being read)");
    done += static_cast<std::size_t>(n);
  }
}

std::vector<unsigned char> read_file(const std::filesystem::path& path) {
  const InputFile f(path);
  check_memory("read_file", "reading " + quoted(path), {{"file contents", static_cast<double>(f.size())}},
               "give a smaller file");
  std::vector<unsigned char> bytes(static_cast<std::size_t>(f.size()));
  f.read_at(0, bytes);
  return bytes;
}

namespace {
/// The length of the valid UTF-8 sequence at bytes[i] (RFC 3629: no overlongs, no
/// surrogates, nothing past U+10FFFF), or 0.
std::size_t utf8_at(std::string_view bytes, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4)
    len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else
    return 0;
  if (i + len > bytes.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return len;
}
}  // namespace

bool is_utf8(std::string_view bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = utf8_at(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_text(std::string_view bytes) {
  const auto valid_at = [&](std::size_t i) { return utf8_at(bytes, i); };
  if (bytes.find('\\') == std::string_view::npos && is_utf8(bytes)) return std::string(bytes);
  std::string out;
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = valid_at(i);
    if (n == 0) {
      static const char hex[] = "0123456789abcdef";
      const auto c = static_cast<unsigned char>(bytes[i]);
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
      ++i;
    } else {
      if (bytes[i] == '\\') out += '\\';
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

int remove_stale_temporaries(const std::filesystem::path& prefix) {
  std::string start(1, '.');
  start += prefix.filename().string();
  const std::filesystem::path dir = prefix.has_parent_path() ? prefix.parent_path() : std::filesystem::path(".");
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    const auto tmp = name.rfind(".tmp.");
    if (name.substr(0, start.size()) != start || tmp == std::string_view::npos || tmp < start.size()) continue;
    const std::string_view rest = name.substr(tmp + 5);  // "PID.N"
    long pid = 0;
    unsigned long n = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (ec != std::errc() || pid <= 0 || end == rest.data() + rest.size() || *end != '.') continue;
    const auto [end2, ec2] = std::from_chars(end + 1, rest.data() + rest.size(), n);
    if (ec2 != std::errc() || end2 != rest.data() + rest.size()) continue;
    if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still running
    if (::unlink((dir / std::string(name)).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

void write_file_atomic(const std::filesystem::path& path, std::span<const unsigned char> bytes) {
  const std::string op = "write_file_atomic";
  const std::filesystem::path name = path.filename();
  if (name.empty() || name == "." || name == "..")
    detail::raise<IoError>(op, "cannot write " + quoted(path) + ": the path names a folder, not a file");
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");

  // Unique within the process (counter) and across processes (pid); O_EXCL guards the rest.
  static std::atomic<unsigned long> counter{0};
  const std::filesystem::path tmp = dir / (std::string(".").append(name.string()) + ".tmp." +
                                           std::to_string(::getpid()) + "." + std::to_string(counter++));

  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)};
  if (f.fd < 0) fail(op, "create temporary file for", path, errno);

  auto abandon = [&](const std::string& what, int err) {
    if (f.fd >= 0) ::close(f.fd);
    f.fd = -1;
    ::unlink(tmp.c_str());
    fail(op, what, path, err);
  };

  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(f.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(f.fd) != 0) abandon("flush", errno);
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(op, "close", path, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(op, "replace", path, err);
  }
  // Make the rename itself durable; a failure here cannot un-write the file, so it is ignored.
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd >= 0) ::fsync(d.fd);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(text.data()), text.size()));
}

}  // namespace bppsa
