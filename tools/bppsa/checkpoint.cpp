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

/// The optimizer generations beside `checkpoint` other than `keep` (file names).
std::vector<std::string> other_generations(const std::string& checkpoint, const std::string& keep) {
  const auto [base, ext] = split_ext(checkpoint);
  const fs::path b(base);
  const std::string prefix = b.filename().string() + ".optim.";
  const fs::path dir = b.has_parent_path() ? b.parent_path() : fs::path(".");
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() + ext.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - ext.size(), ext.size(), ext) != 0)
      continue;
    const std::string gen = name.substr(prefix.size(), name.size() - prefix.size() - ext.size());
    if (is_generation(gen) && gen != keep) out.push_back((dir / name).string());
  }
  ::closedir(d);
  return out;
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
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd_ < 0)
    detail::raise<IoError>(
        "train", "--save " + checkpoint + ": cannot open the lock file " + path + ": " + std::strerror(errno));
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
  const std::string who = "pid " + std::to_string(::getpid()) + "\ncommand " + command_line() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    // The lock holds regardless; only the other run's message loses the pid.
  }
}

CheckpointLock::~CheckpointLock() {
  if (fd_ >= 0) ::close(fd_);
}

void save_checkpoint(const std::string& path, TensorFile weights, TensorFile optimizer_state) {
  const auto [base, ext] = split_ext(path);
  remove_stale_temporaries(base);  // ".X.safetensors.tmp.…" and ".X.optim.….tmp.…"
  const std::string step = weights.metadata_or("bppsa.step", "0");
  const std::string generation = new_generation(step);
  optimizer_state.metadata["generation"] = generation;
  write_safetensors(optimizer_path(path, generation), optimizer_state);
  weights.metadata[kOptimizerKey] = generation;
  write_safetensors(path, weights);
  // The new pair is complete: what the old weights named is now unreferenced.
  for (const std::string& old : other_generations(path, generation)) ::unlink(old.c_str());
  ::unlink(optimizer_path(path).c_str());
}

std::int64_t checkpoint_count(const TensorFile& weights, const std::string& key) {
  return weights.metadata_count(key, 0, "resume");
}

TensorFile load_optimizer_state(const std::string& checkpoint, const TensorFile& weights) {
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

void check_log_path(const std::string& log, const std::string& save, const std::vector<std::string>& files) {
  if (log.empty()) return;
  auto refuse = [&](const std::string& what) {
    detail::raise<InvalidArgument>(
        "train", "--log " + log + " is " + what + "; the log would overwrite it: give the log another name");
  };
  for (const std::string& f : files)
    if (!f.empty() && same_file(log, f)) refuse("the checkpoint " + f);
  if (save.empty()) return;
  if (same_file(log, save)) refuse("the --save checkpoint");
  if (same_file(log, CheckpointLock::path_for(save))) refuse("the lock file of --save " + save);
  if (same_file(log, optimizer_path(save))) refuse("the optimizer state of --save " + save);
  // A generation file (existing or future) is recognised by its name in the save's folder.
  const auto [base, ext] = split_ext(save);
  const fs::path b(base), l(log);
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
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0666);
  if (fd_ < 0)
    detail::raise<IoError>("train", "cannot open the log file " + path + " for writing: " + std::strerror(errno));
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
