// IDX files, the format of LeCun's MNIST files and of torchvision's raw folders: a 4-byte magic,
// big-endian dimensions, then the values; plain or gzip-compressed.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "bppsa/core/types.hpp"

namespace bppsa {

/// An IDX array of unsigned bytes: dims[0] × dims[1] × … values, row-major (the last dimension
/// varies fastest), as the file stores them.
struct IdxArray {
  std::vector<Index> dims;
  std::vector<unsigned char> data;
};

/// Reads an IDX file of unsigned bytes (type 0x08): the magic 0x00 0x00 <type> <ndims>, ndims
/// big-endian uint32 sizes, then their product in bytes. The file may be gzip-compressed (told by
/// its first two bytes, 1f 8b, not by its name). `op` names the caller in errors.
/// Throws IoError if the file cannot be read; FormatError naming the file for a magic that is not
/// IDX's (with a hint when the bytes look like JSON, zip, bzip2, xz or gzip twice), another IDX
/// type (0x09, 0x0B … 0x0E: not supported), no dimensions, a header or data cut short, bytes after
/// the declared data, or corrupt gzip data; ResourceError when the declared data cannot fit in
/// memory (check_memory). A header's claim is checked against what the file can hold before
/// anything is allocated, and nothing is inflated past the declared size.
IdxArray read_idx(const std::filesystem::path& file, const std::string& op = "read_idx");

namespace detail {
/// The parser behind read_idx, on a file's bytes (`source` names it in messages): the same
/// checks and errors.
IdxArray parse_idx(std::span<const unsigned char> bytes, const std::string& source, const std::string& op = "read_idx");
}  // namespace detail

}  // namespace bppsa
