// Whole-file reads and atomic writes: a failed or interrupted write never leaves a
// half-written file where a good one was.
#pragma once

#include <filesystem>
#include <span>
#include <string_view>
#include <string>
#include <vector>

namespace bppsa {

/// Reads the whole file. Throws IoError naming the path and the reason.
std::vector<unsigned char> read_file(const std::filesystem::path& path);

/// Writes `bytes` to `path` atomically: to a temporary file in the same folder, flushed and
/// fsync'ed, then renamed over `path`. On any failure the temporary is removed, the old file
/// (if any) is untouched, and IoError is thrown.
void write_file_atomic(const std::filesystem::path& path, std::span<const unsigned char> bytes);
/// The same for text (JSON reports, logs).
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace bppsa
