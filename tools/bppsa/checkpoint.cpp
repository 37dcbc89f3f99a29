// Crash-safe checkpoints (generations of the optimizer state named by the weights), the
// --save lock and the checked JSON-lines log of `bppsa train`.
#include "checkpoint.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "bppsa/core/error.hpp"
#include "bppsa/io/file.hpp"

namespace bppsa::cli {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view kExt = ".safetensors";

/// "X" and ".safetensors" for "X.safetensors"; "F" and "" for any other name.
std::pair<std::string, std::string> split_ext(const std::string& checkpoint) {
  if (checkpoint.size() > kExt.size() && checkpoint.compare(checkpoint.size() - kExt.size(), kExt.size(), kExt) == 0)
    return {checkpoint.substr(0, checkpoint.size() - kExt.size()), std::string(kExt)};
  return {checkpoint, ""};
}

/// A generation as save_checkpoint names them: "<step>-<16 hex digits>".
bool is_generation(std::string_view g) {
  const auto dash = g.find('-');
  if (dash == 0 || dash == std::string_view::npos || g.size() - dash - 1 != 16) return false;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const char c = g[i];
    if (i == dash) continue;
    if (!((c >= '0' && c <= '9') || (i > dash && c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string new_generation(const std::string& step) {
  std::random_device rd;
  std::uint64_t r = (std::uint64_t{rd()} << 32) ^ rd() ^
                    static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                    (static_cast<std::uint64_t>(::getpid()) << 17);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  return step + "-" + hex;
}

/// The generation of `name` when it is one of the optimizer generations of `checkpoint` (a file
/// name in its folder: "X.optim.GEN.safetensors"), else "".
std::string generation_of(const std::string& checkpoint, std::string_view name) {
  const auto [base, ext] = split_ext(checkpoint);
  const std::string prefix = fs::path(base).filename().string() + ".optim.";
  if (name.size() <= prefix.size() + ext.size() || name.substr(0, prefix.size()) != prefix ||
      name.substr(name.size() - ext.size()) != ext)
    return "";
  const std::string_view gen = name.substr(prefix.size(), name.size() - prefix.size() - ext.size());
  return is_generation(gen) ? std::string(gen) : "";
}

/// The optimizer generations beside `checkpoint` other than `keep` (paths).
std::vector<std::string> other_generations(const std::string& checkpoint, const std::string& keep) {
  const fs::path c(checkpoint);
  const fs::path dir = c.has_parent_path() ? c.parent_path() : fs::path(".");
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string gen = generation_of(checkpoint, e->d_name);
    if (!gen.empty() && gen != keep) out.push_back((dir / e->d_name).string());
  }
  ::closedir(d);
  return out;
}

/// Whether `name` is one of the files of `checkpoint` in its folder: its own name, its optimizer
/// state before generations, or one of its optimizer generations.
bool is_checkpoint_file(const std::string& checkpoint, std::string_view name) {
  return name == fs::path(checkpoint).filename().string() ||
         name == fs::path(optimizer_path(checkpoint)).filename().string() || !generation_of(checkpoint, name).empty();
}

/// The optimizer generation the weights at `checkpoint` name ("" when there are none, or none
/// that can be read): only the header is read.
std::string named_generation(const std::string& checkpoint) {
  if (!fs::exists(checkpoint)) return "";
  try {
    const auto metadata = read_safetensors_metadata(checkpoint);
    const auto it = metadata.find(kOptimizerKey);
    return it != metadata.end() && is_generation(it->second) ? it->second : "";
  } catch (const Error&) {
    return "";
  }
}

std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!all.empty() && all.back() == '\0') all.pop_back();
  for (char& c : all)
    if (c == '\0' || c == '\n') c = ' ';
  return utf8_text(all);
}

/// Whether two paths name the same file: the same inode when both exist, else the same
/// canonical path.
bool same_file(const fs::path& a, const fs::path& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code e1, e2;
  const fs::path ca = fs::weakly_canonical(a, e1), cb = fs::weakly_canonical(b, e2);
  return !e1 && !e2 && ca == cb;
}

}  // namespace

std::string optimizer_path(const std::string& checkpoint, const std::string& generation) {
  const auto [base, ext] = split_ext(checkpoint);
  return base + ".optim" + (generation.empty() ? "" : "." + generation) + ext;
}

CheckpointLock::CheckpointLock(const std::string& checkpoint) {
  const std::string path = path_for(checkpoint);
  // O_NOFOLLOW: a link planted at the lock's name must not make the run write where it leads.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  const int open_err = errno;
  // What was opened, or what is there when the kernel refused it (a link or another user's file
  // in a sticky folder, with fs.protected_*): only a regular file of this user with one name is
  // ours to lock and write.
  struct stat st {};
  const bool seen = fd_ >= 0 ? ::fstat(fd_, &st) == 0 : ::lstat(path.c_str(), &st) == 0;
  if (fd_ < 0 && !(seen && (S_ISLNK(st.st_mode) || st.st_uid != ::geteuid())))
    detail::raise<IoError>(
        "train", "--save " + checkpoint + ": cannot open the lock file " + path + ": " + std::strerror(open_err));
  std::string wrong;
  if (!seen)
    wrong = std::string("cannot be examined (") + std::strerror(errno) + ")";
  else if (S_ISLNK(st.st_mode))
    wrong = "is a symbolic link, which bppsa does not follow (another user may have planted it)";
  else if (!S_ISREG(st.st_mode))
    wrong = "is not a regular file";
  else if (st.st_uid != ::geteuid())
    wrong = "belongs to user " + std::to_string(st.st_uid) + ", not to you";
  else if (st.st_nlink != 1)
    wrong = "has other names (hard links)";
  if (!wrong.empty()) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    // Whether a run holds it (a regular file of another user, readable): then it must not be removed.
    bool held = false;
    if (seen && S_ISREG(st.st_mode)) {
      const int rd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      struct flock probe {};
      probe.l_type = F_RDLCK;
      probe.l_whence = SEEK_SET;
      held = rd >= 0 && ::fcntl(rd, F_OFD_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
      if (rd >= 0) ::close(rd);
    }
    detail::raise<IoError>(
        "train", "--save " + checkpoint + ": the lock file " + path + " " + wrong +
                     "; bppsa writes only a lock file it owns: " +
                     (held ? "a run holds it now, so wait for that run to end or use another --save"
                           : "no run holds it now: remove it (or have its owner remove it), or use another --save"));
  }
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd_, F_OFD_SETLK, &fl) != 0) {
    const int err = errno;
    std::string holder(4096, '\0');
    const ssize_t n = ::pread(fd_, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err != EAGAIN && err != EACCES)
      detail::raise<IoError>("train", "--save " + checkpoint + ": cannot lock " + path + ": " + std::strerror(err));
    for (char& c : holder)
      if (c == '\n') c = ';';
    detail::raise<IoError>(
        "train", "--save " + checkpoint + " is in use by another run (" +
                     (holder.empty() ? std::string("its process has not said which yet") : utf8_text(holder)) +
                     ", holding " + path +
                     "); two runs saving to one checkpoint would mix "
                     "their weights and optimizer state: wait for it to end or use another --save");
  }
  // The lock is on what was opened: if the name was removed or replaced meanwhile (another run
  // could then lock a new file under it), refuse rather than run unlocked.
  struct stat now {};
  if (::lstat(path.c_str(), &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
    ::close(fd_);
    fd_ = -1;
    detail::raise<IoError>("train", "--save " + checkpoint + ": the lock file " + path +
                                        " was removed or replaced while this run locked it; run again");
  }
  const std::string who = "pid " + std::to_string(::getpid()) + "\ncommand " + command_line() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    // The lock holds regardless; only the other run's message loses the pid.
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);
}

void save_checkpoint(const std::string& path, TensorFile weights, TensorFile optimizer_state) {
  const fs::path file(path);
  remove_stale_temporaries(file.has_parent_path() ? file.parent_path() : fs::path("."),
                           [&](std::string_view name) { return is_checkpoint_file(path, name); });
  const std::string previous = named_generation(path);
  const std::string step = weights.metadata_or("bppsa.step", "0");
  const std::string generation = new_generation(step);
  optimizer_state.metadata["generation"] = generation;
  write_safetensors(optimizer_path(path, generation), optimizer_state);
  weights.metadata[kOptimizerKey] = generation;
  write_safetensors(path, weights);
  // The new pair is complete. The generation the old weights named stays until the next save:
  // a --resume that read those weights just before the rename still finds it.
  for (const std::string& old : other_generations(path, generation))
    if (generation_of(path, fs::path(old).filename().string()) != previous) ::unlink(old.c_str());
  if (!previous.empty()) ::unlink(optimizer_path(path).c_str());
}

std::int64_t checkpoint_count(const TensorFile& weights, const std::string& key) {
  return weights.metadata_count(key, 0, "resume");
}

namespace {
/// The optimizer state read_resumed_checkpoint read with the weights, until load_optimizer_state
/// takes it.
struct KeptState {
  std::string checkpoint, generation;
  std::optional<TensorFile> state;
};
KeptState& kept_state() {
  static KeptState kept;
  return kept;
}
}  // namespace

TensorFile read_resumed_checkpoint(const std::string& checkpoint) {
  for (int attempt = 1;; ++attempt) {
    TensorFile weights = read_safetensors(checkpoint);
    const std::string generation = weights.metadata_or(kOptimizerKey);
    // The weights' own counts first: a malformed one is named as such, not as a missing state.
    for (const char* key : {"bppsa.epoch", "bppsa.step"}) checkpoint_count(weights, key);
    try {
      TensorFile state = load_optimizer_state(checkpoint, weights);
      kept_state() = {checkpoint, generation, std::move(state)};
      return weights;
    } catch (const IoError&) {
      // Missing: unless another process's saves replaced the pair between the two reads (twice,
      // the generation before is kept), in which case the new pair is read.
      if (attempt == 3 || named_generation(checkpoint) == generation) throw;
    }
  }
}

TensorFile load_optimizer_state(const std::string& checkpoint, const TensorFile& weights) {
  KeptState& kept = kept_state();
  if (kept.state && kept.checkpoint == checkpoint && kept.generation == weights.metadata_or(kOptimizerKey)) {
    TensorFile state = std::move(*kept.state);
    kept.state.reset();
    return state;
  }
  const std::string step = std::to_string(checkpoint_count(weights, "bppsa.step"));
  const auto it = weights.metadata.find(kOptimizerKey);
  if (it != weights.metadata.end()) {
    const std::string& gen = it->second;
    if (!is_generation(gen))
      detail::raise<FormatError>("resume", checkpoint + ": metadata '" + kOptimizerKey + "' = '" +
                                               utf8_text(gen.substr(0, 64)) +
                                               "' is not an optimizer generation (STEP-16 hex digits)");
    const std::string op_path = optimizer_path(checkpoint, gen);
    if (!fs::exists(op_path))
      detail::raise<IoError>("resume", "optimizer state " + op_path + " (named by " + checkpoint +
                                           ") is missing; it is needed to continue the run exactly");
    TensorFile os = read_safetensors(op_path);
    if (os.metadata_or("generation") != gen || os.metadata_or("step") != step)
      detail::raise<FormatError>("resume", op_path + " (generation '" + utf8_text(os.metadata_or("generation")) +
                                               "', step '" + utf8_text(os.metadata_or("step")) + "') is not the one " +
                                               checkpoint + " names (generation " + gen + ", step " + step + ")");
    return os;
  }
  const std::string op_path = optimizer_path(checkpoint);
  if (!fs::exists(op_path))
    detail::raise<IoError>("resume", "optimizer state " + op_path + " (saved beside " + checkpoint +
                                         ") is missing; it is needed to continue the run exactly");
  TensorFile os = read_safetensors(op_path);
  if (os.metadata_or("step") != step)
    detail::raise<FormatError>("resume", op_path + " is from step '" + utf8_text(os.metadata_or("step")) + "' but " +
                                             checkpoint + " from step " + step + ": the pair is inconsistent");
  return os;
}

void check_log_path(const std::string& log, const std::string& save, const std::vector<std::string>& files,
                    const std::vector<std::string>& folders) {
  if (log.empty()) return;
  auto refuse = [&](const std::string& what) {
    detail::raise<InvalidArgument>(
        "train", "--log " + log + " is " + what + "; the log would overwrite it: give the log another name");
  };
  const auto folder = [](const fs::path& p) { return p.has_parent_path() ? p.parent_path() : fs::path("."); };
  const fs::path l(log);
  for (const std::string& f : files) {
    if (f.empty()) continue;
    if (same_file(log, f)) refuse("the checkpoint " + f);
    if (is_checkpoint_file(f, l.filename().string()) && same_file(folder(f), folder(l)))
      refuse("the optimizer state of " + f);
  }
  // Every file the data set is read from: a log that exists is compared with each of them.
  struct stat ls {};
  if (::stat(log.c_str(), &ls) == 0)
    for (const std::string& d : folders) {
      if (d.empty()) continue;
      std::error_code ec;
      for (fs::recursive_directory_iterator it(d, fs::directory_options::skip_permission_denied, ec), end;
           !ec && it != end; it.increment(ec)) {
        struct stat st {};
        if (::stat(it->path().c_str(), &st) == 0 && st.st_dev == ls.st_dev && st.st_ino == ls.st_ino)
          refuse("the file " + it->path().string() + " of the data in " + d + ", which this run reads");
      }
    }
  if (save.empty()) return;
  if (same_file(log, save)) refuse("the --save checkpoint");
  if (same_file(log, CheckpointLock::path_for(save))) refuse("the lock file of --save " + save);
  if (same_file(log, optimizer_path(save))) refuse("the optimizer state of --save " + save);
  // A generation file (existing or future) is recognised by its name in the save's folder.
  const auto [base, ext] = split_ext(save);
  const fs::path b(base);
  const std::string prefix = b.filename().string() + ".optim.";
  const std::string name = l.filename().string();
  if (name.compare(0, prefix.size(), prefix) == 0 && same_file(b.has_parent_path() ? b.parent_path() : fs::path("."),
                                                               l.has_parent_path() ? l.parent_path() : fs::path(".")))
    refuse("named like the optimizer state of --save " + save);
  for (const std::string& f : files)
    if (!f.empty() && same_file(log, optimizer_path(f))) refuse("the optimizer state of " + f);
}

void JsonLog::open(const std::string& path, bool append) {
  path_ = path;
  if (path.empty()) return;
  fd_ = open_output(path, append, "train --log");  // never through a link another user planted
}

JsonLog::~JsonLog() {
  if (fd_ >= 0) ::close(fd_);
}

void JsonLog::write(const nlohmann::json& record) {
  if (fd_ < 0) return;
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      detail::raise<IoError>("train", "cannot write the log file " + path_ + ": " +
                                          std::strerror(n < 0 ? errno : ENOSPC) + "; free space or give another --log");
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace bppsa::cli
