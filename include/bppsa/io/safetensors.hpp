// safetensors (https://huggingface.co/docs/safetensors): the checkpoint, batch and gradient
// file format shared with PyTorch. 8-byte little-endian header length, a JSON header
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the raw little-endian tensor bytes, C (row-major) order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "bppsa/core/types.hpp"

namespace bppsa {

/// The dtypes bppsa reads and writes ("F32", "F64", "I64", "I32" in the header).
enum class DType : std::uint8_t { f32, f64, i64, i32 };
const char* to_string(DType d);  ///< "F32", …
std::size_t dtype_size(DType d);

/// One tensor: dtype, shape (row-major) and its raw bytes.
struct Tensor {
  DType dtype = DType::f32;
  std::vector<Index> shape;
  std::vector<unsigned char> bytes;

  Index numel() const;  ///< product of shape (1 for a scalar, shape [])
  /// "F32 [16, 1000, 1]" for messages.
  std::string describe() const;

  static Tensor from_f32(std::span<const float> values, std::vector<Index> shape);
  static Tensor from_f64(std::span<const double> values, std::vector<Index> shape);
  static Tensor from_i64(std::span<const std::int64_t> values, std::vector<Index> shape);
  static Tensor from_i32(std::span<const std::int32_t> values, std::vector<Index> shape);

  /// Values converted from the stored dtype. to_f32 accepts F32 and F64; to_i64 accepts I64
  /// and I32. Anything else throws FormatError naming `what` and the dtype found.
  std::vector<float> to_f32(const std::string& what = "tensor") const;
  std::vector<double> to_f64(const std::string& what = "tensor") const;
  std::vector<std::int64_t> to_i64(const std::string& what = "tensor") const;
};

/// The contents of one safetensors file: named tensors (sorted by name) and string metadata.
class TensorFile {
 public:
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
  /// Where it was read from ("" when built in memory): used in messages.
  std::string source;

  bool contains(const std::string& name) const { return tensors.count(name) != 0; }
  /// The tensor, or FormatError: "[op] file F has no tensor 'x' (it holds: a, b, c)".
  const Tensor& at(const std::string& name, const std::string& op = "safetensors") const;
  /// The metadata value under `key`, or `fallback` when the file has none.
  std::string metadata_or(const std::string& key, const std::string& fallback = "") const;
  /// The metadata value under `key` as a count (an epoch, a step): decimal digits only, at
  /// most 2^53; `fallback` when the file has none. Otherwise FormatError "[op] file F:
  /// metadata 'key' = 'v' is not a whole number in [0, 2^53]".
  std::int64_t metadata_count(const std::string& key, std::int64_t fallback, const std::string& op = "safetensors") const;
  /// at(), then checks the shape: -1 in `expected` matches any extent. Mismatch →
  /// ShapeError "[op] tensor 'rnn.weight_hh_l0' in F has shape [20, 21], expected [20, 20]".
  const Tensor& require(const std::string& name, const std::vector<Index>& expected,
                        const std::string& op = "safetensors") const;
};

/// Reads and fully validates a file: header length within the file, valid JSON, known
/// dtypes, offsets contiguous, in order, inside the data section and matching shape × dtype
/// size, and every tensor against its CRC-32 when the file records them (bppsa's files do;
/// files without, such as PyTorch's, are read as they are). Throws IoError (cannot read) or
/// FormatError (malformed/truncated/corrupt, naming the file and the tensor).
TensorFile read_safetensors(const std::filesystem::path& path);
/// Parses an in-memory image (`source` names it in messages), with the same checks.
TensorFile parse_safetensors(std::span<const unsigned char> bytes, const std::string& source);
/// The metadata of a file, reading and checking only its header (not the tensors).
std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path);

/// Serialises (tensors in name order, header padded to 8 bytes with spaces), recording every
/// tensor's CRC-32 in the metadata under "bppsa.crc32" (removed again when it is read).
std::vector<unsigned char> serialize_safetensors(const TensorFile& file);
/// serialize + write_file_atomic: an existing file is replaced only by a complete new one.
void write_safetensors(const std::filesystem::path& path, const TensorFile& file);

/// "[16, 1000, 1]".
std::string shape_list(const std::vector<Index>& shape);

}  // namespace bppsa
