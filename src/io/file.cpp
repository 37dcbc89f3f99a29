// Whole-file reads and atomic replace-by-rename writes on POSIX (open/read/write/fsync/rename),
// so every failure carries errno's reason and no reader ever sees a half-written file.
#include "bppsa/io/file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
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

namespace {

/// NAME when `name` is a temporary of write_file_atomic, ".NAME.tmp.PID.N" (decimal PID > 0
/// and N), and its PID; nothing otherwise.
std::optional<std::pair<std::string_view, long>> temporary_of(std::string_view name) {
  const auto digits = [](std::string_view d) {
    return !d.empty() && d.find_first_not_of("0123456789") == std::string_view::npos;
  };
  const auto dot_n = name.rfind('.');
  if (name.size() < 2 || name.front() != '.' || dot_n == std::string_view::npos || dot_n == 0) return std::nullopt;
  const auto dot_pid = name.rfind('.', dot_n - 1);
  if (dot_pid == std::string_view::npos || !digits(name.substr(dot_n + 1)) ||
      !digits(name.substr(dot_pid + 1, dot_n - dot_pid - 1)))
    return std::nullopt;
  constexpr std::string_view kTmp = ".tmp";
  if (dot_pid < 1 + kTmp.size() + 1 || name.substr(dot_pid - kTmp.size(), kTmp.size()) != kTmp) return std::nullopt;
  long pid = 0;
  const std::string_view p = name.substr(dot_pid + 1, dot_n - dot_pid - 1);
  if (std::from_chars(p.data(), p.data() + p.size(), pid).ec != std::errc() || pid <= 0) return std::nullopt;
  return std::pair{name.substr(1, dot_pid - kTmp.size() - 1), pid};
}

std::filesystem::path folder_of(const std::filesystem::path& p) {
  return p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
}

}  // namespace

int remove_stale_temporaries(const std::filesystem::path& folder,
                             const std::function<bool(std::string_view)>& is_target) {
  DIR* d = ::opendir(folder.c_str());
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    const auto tmp = temporary_of(name);
    if (!tmp || !is_target(tmp->first)) continue;
    const long pid = tmp->second;
    if (pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still running
    if (::unlink((folder / std::string(name)).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

int remove_stale_temporaries(const std::filesystem::path& target) {
  const std::string name = target.filename().string();
  return remove_stale_temporaries(folder_of(target), [&](std::string_view n) { return n == name; });
}

namespace {

/// Where write_file_atomic writes `path`: the file at the end of its links, and whether it is
/// written directly (not a regular file, or behind a process's descriptor link) rather than
/// replaced by rename. Refuses what the header says it refuses.
struct Output {
  std::filesystem::path file;
  bool direct = false;
  bool descriptor = false;  // reached through /proc/PID/fd/N: opened by following that link
  int own_fd = -1;          // … N when PID is this process: written through N itself
};

Output resolve_output(const std::filesystem::path& path, const std::string& op) {
  const auto refuse = [&](const std::string& why) {
    detail::raise<IoError>(op, "cannot write " + quoted(path) + ": " + why);
  };
  std::filesystem::path p = path;
  for (int hops = 0;; ++hops) {
    struct stat ls {};
    if (::lstat(p.c_str(), &ls) != 0) {
      if (errno == ENOENT && hops == 0) return {p, false, false};  // a new file
      if (errno == ENOENT)
        refuse("it is a link to " + quoted(p) +
               ", which does not exist; remove the link or give the path of the file to write");
      fail(op, "look up", p == path ? path : p, errno);
    }
    if (S_ISDIR(ls.st_mode))
      refuse(p == path ? "it is a folder; give a file name" : "it is a link to the folder " + quoted(p));
    if (S_ISREG(ls.st_mode)) return {p, false, false};
    if (!S_ISLNK(ls.st_mode)) return {p, true, false};  // a device, FIFO or socket
    if (hops == 40) fail(op, "follow the links of", path, ELOOP);
    const std::filesystem::path dir = folder_of(p);
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0) fail(op, "look up the folder of", p, errno);
    // The kernel's rule for links in sticky folders (fs.protected_symlinks), in every folder:
    // a link someone else planted is never followed to write.
    if (ls.st_uid != ::geteuid() && ls.st_uid != ds.st_uid)
      refuse((p == path ? std::string("it is a symbolic link")
                        : std::string("it leads through the link ").append(quoted(p))) +
             " owned by user " + std::to_string(ls.st_uid) +
             ", neither you nor the owner of its folder; bppsa does not write through a link another user may "
             "have planted: remove it, or give the path of the file itself");
    struct statfs sfs {};
    if (::statfs(dir.c_str(), &sfs) == 0 && sfs.f_type == PROC_SUPER_MAGIC) {
      std::error_code ec;
      const std::string name = p.filename().string();
      const bool ours = std::filesystem::canonical(dir, ec) == "/proc/" + std::to_string(::getpid()) + "/fd";
      int fd = -1;
      const auto [end, bad] = std::from_chars(name.data(), name.data() + name.size(), fd);
      if (!ours || ec || bad != std::errc() || end != name.data() + name.size()) fd = -1;
      return {p, true, true, fd};
    }
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0) fail(op, "read the link", p, errno);
    target.resize(static_cast<std::size_t>(n));
    p = std::filesystem::path(target).is_absolute() ? std::filesystem::path(target) : dir / target;
  }
}

/// Writes all of `bytes` to the descriptor; errno on failure, 0 on success.
int write_all(int fd, std::span<const unsigned char> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

/// A device, FIFO or socket, or a descriptor link: opened as it is (never created, truncated
/// or replaced) and written.
void write_direct(const std::filesystem::path& path, const Output& out, std::span<const unsigned char> bytes,
                  const std::string& op) {
  if (out.own_fd >= 0) {
    // One of this process's descriptors (/dev/stdout): written through it, after what the
    // process printed before (its stdio buffers), at its offset, as the rest of its output is.
    std::fflush(nullptr);
    if (const int err = write_all(out.own_fd, bytes)) fail(op, "write", path, err);
    return;
  }
  // O_NOFOLLOW: what was checked above is what is opened (a link swapped in since is refused).
  Fd f{::open(out.file.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC | (out.descriptor ? 0 : O_NOFOLLOW))};
  if (f.fd < 0) fail(op, "open for writing", path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail(op, "stat", path, errno);
  if (S_ISREG(st.st_mode)) {
    if (!out.descriptor)
      detail::raise<IoError>(op,
                             "cannot write " + quoted(path) + ": it was replaced by a regular file while being opened");
    // A file behind /dev/stdout: after what the process wrote to it, as the shell's >> would.
    if (::fcntl(f.fd, F_SETFL, ::fcntl(f.fd, F_GETFL) | O_APPEND) != 0) fail(op, "append to", path, errno);
  }
  if (const int err = write_all(f.fd, bytes)) fail(op, "write", path, err);
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0 && errno != EINTR) fail(op, "close", path, errno);
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::span<const unsigned char> bytes) {
  const std::string op = "write_file_atomic";
  const std::filesystem::path name = path.filename();
  if (name.empty() || name == "." || name == "..")
    detail::raise<IoError>(op, "cannot write " + quoted(path) + ": the path names a folder, not a file");
  const Output out = resolve_output(path, op);
  if (out.direct) return write_direct(path, out, bytes, op);
  // Through a link: the file it leads to is replaced, in that file's folder; the link stays.
  const std::filesystem::path& target = out.file;
  const std::string via = target == path ? "" : " (through its link, " + quoted(target) + ")";
  const auto failed = [&](const std::string& what, int err) {
    detail::raise<IoError>(op, "cannot " + what + " " + quoted(path) + via + ": " + std::strerror(err));
  };
  const std::filesystem::path dir = folder_of(target);

  // Unique within the process (counter) and across processes (pid); O_EXCL guards the rest.
  static std::atomic<unsigned long> counter{0};
  const std::filesystem::path tmp = dir / (std::string(".").append(target.filename().string()) + ".tmp." +
                                           std::to_string(::getpid()) + "." + std::to_string(counter++));

  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666)};
  if (f.fd < 0) {
    const int err = errno;
    detail::raise<IoError>(op, "cannot write " + quoted(path) + via + ": creating its temporary file " + quoted(tmp) +
                                   " in the same folder (written first, then renamed over it, so that a failed "
                                   "write never leaves half a file) failed: " +
                                   std::strerror(err));
  }

  auto abandon = [&](const std::string& what, int err) {
    if (f.fd >= 0) ::close(f.fd);
    f.fd = -1;
    ::unlink(tmp.c_str());
    failed(what, err);
  };

  if (const int err = write_all(f.fd, bytes)) abandon("write", err);
  if (::fsync(f.fd) != 0) abandon("flush", errno);
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    failed("close", err);
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    failed("replace", err);
  }
  // Make the rename itself durable; a failure here cannot un-write the file, so it is ignored.
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd >= 0) ::fsync(d.fd);
}

int open_output(const std::filesystem::path& path, bool append, const std::string& op) {
  const Output out = resolve_output(path, op);
  if (out.own_fd >= 0) {  // this process's own descriptor (/dev/stdout): a duplicate of it
    const int fd = ::fcntl(out.own_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) fail(op, "open for writing", path, errno);
    return fd;
  }
  // O_NOFOLLOW on the file the checked links lead to: a link swapped in since the check is refused,
  // not followed (a descriptor link is the one link that must be followed).
  const int flags = O_WRONLY | O_CLOEXEC | O_NOCTTY | (out.descriptor ? 0 : O_NOFOLLOW) |
                    (out.direct ? 0 : O_CREAT | (append ? O_APPEND : O_TRUNC));
  const int fd = ::open(out.file.c_str(), flags, 0666);
  if (fd < 0) fail(op, "open for writing", path, errno);
  return fd;
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path,
                    std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(text.data()), text.size()));
}

}  // namespace bppsa
