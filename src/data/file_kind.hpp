// What a data path is, in words, so that a FIFO or a link to /dev/zero where a data file belongs
// is reported as what it is rather than as missing (the loaders read regular files only: only
// they can be sized before they are read).
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

#include "bppsa/core/error.hpp"

namespace bppsa::detail {

/// "a FIFO (named pipe)", "a character device", "a folder", …; "a link to '/dev/zero', a character
/// device" for a symbolic link; "" when nothing is at `path` (a link to nothing says so).
inline std::string file_kind(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  const auto kind = [](fs::file_type t) -> std::string {
    switch (t) {
      case fs::file_type::regular: return "a regular file";
      case fs::file_type::directory: return "a folder";
      case fs::file_type::fifo: return "a FIFO (named pipe)";
      case fs::file_type::character: return "a character device";
      case fs::file_type::block: return "a block device";
      case fs::file_type::socket: return "a socket";
      case fs::file_type::not_found: return "";
      default: return "an unknown kind of file";
    }
  };
  std::error_code ec;
  const fs::file_status own = fs::symlink_status(path, ec);
  if (own.type() != fs::file_type::symlink) return kind(own.type());
  const std::string target = "a link to '" + fs::read_symlink(path, ec).string() + "'";
  const std::string to = kind(fs::status(path, ec).type());
  return target + (to.empty() ? ", which does not exist" : ", " + to);
}

/// Whether a regular file (or a link to one) is at `path`: false when nothing is; IoError from
/// `op` naming the path and what it is otherwise, e.g. "'…/train-images-idx3-ubyte' is a FIFO
/// (named pipe), not a regular file; <what> must be a regular file: replace it with one".
inline bool regular_file_at(const std::string& op, const std::filesystem::path& path, const std::string& what) {
  const std::string kind = file_kind(path);
  if (kind.empty()) return false;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return true;
  raise<IoError>(op, "'" + path.string() + "' is " + kind + ", not a regular file; " + what +
                         " must be a regular file (a pipe or a device cannot be sized before it is read): replace "
                         "it with one");
}

}  // namespace bppsa::detail
