// Whole-file reads and atomic replace-by-rename writes on POSIX (open/read/write/fsync/rename),
// so every failure carries errno's reason and no reader ever sees a half-written file.
#include "bppsa/io/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "bppsa/core/error.hpp"

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

std::vector<unsigned char> read_file(const std::filesystem::path& path) {
  const std::string op = "read_file";
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) fail(op, "open", path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail(op, "stat", path, errno);
  if (S_ISDIR(st.st_mode)) fail(op, "read", path, EISDIR);

  std::vector<unsigned char> bytes;
  if (S_ISREG(st.st_mode)) bytes.reserve(static_cast<std::size_t>(st.st_size));
  unsigned char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(op, "read", path, errno);
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buf, buf + n);
  }
  return bytes;
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
