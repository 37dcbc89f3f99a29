// safetensors reading (with full validation of the header against the data section) and
// writing (name order, header padded to 8 bytes), plus Tensor's typed views.
#include "bppsa/io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <zlib.h>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/io/file.hpp"

namespace bppsa {

// Tensor bytes are copied to and from host values with memcpy.
static_assert(std::endian::native == std::endian::little, "bppsa's safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;
constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::i64, DType::i32};

std::optional<DType> parse_dtype(const std::string& s) {
  for (DType d : kAllDTypes)
    if (s == to_string(d)) return d;
  return std::nullopt;
}

std::string supported_dtypes() {
  std::string s;
  for (DType d : kAllDTypes) s += (s.empty() ? "" : ", ") + std::string(to_string(d));
  return s;
}

std::string file_name(const std::string& source) { return source.empty() ? "<in memory>" : "'" + source + "'"; }

/// Product of the extents, or nullopt when an extent is negative or the product overflows.
std::optional<Index> checked_numel(const std::vector<Index>& shape) {
  Index n = 1;
  for (Index e : shape) {
    if (e < 0 || (e != 0 && n > std::numeric_limits<Index>::max() / e)) return std::nullopt;
    n *= e;
  }
  return n;
}

template <class T>
Tensor make_tensor(DType dtype, std::span<const T> values, std::vector<Index> shape, const char* op) {
  const auto n = checked_numel(shape);
  if (!n || *n != static_cast<Index>(values.size()))
    detail::raise<ShapeError>(op, std::to_string(values.size()) + " values do not fill shape " + shape_list(shape));
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

template <class To, class From>
std::vector<To> convert(const Tensor& t) {
  std::vector<To> out(t.bytes.size() / sizeof(From));
  for (std::size_t i = 0; i < out.size(); ++i) {
    From v;
    std::memcpy(&v, t.bytes.data() + i * sizeof(From), sizeof(From));
    out[i] = static_cast<To>(v);
  }
  return out;
}

void check_bytes(const Tensor& t, const std::string& what) {
  const auto n = checked_numel(t.shape);
  if (!n || t.bytes.size() != static_cast<std::size_t>(*n) * dtype_size(t.dtype))
    detail::raise<FormatError>(
        "Tensor", what + " is " + t.describe() + " but holds " + std::to_string(t.bytes.size()) + " bytes");
}

[[noreturn]] void wrong_dtype(const Tensor& t, const std::string& what, const char* wanted) {
  detail::raise<FormatError>("Tensor", what + " is " + t.describe() + "; expected dtype " + wanted);
}

/// A header value for a message: its JSON text when it is a scalar or a flat list (cut at 64
/// characters), else only its type. Never recursive: nesting in a header is as deep as the
/// file is long, and dumping it would overflow the stack.
std::string brief(const json& v) {
  const bool flat = v.is_primitive() || (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& x) {
                                          return x.is_primitive();
                                        }));
  if (!flat) return std::string("(a nested JSON ") + v.type_name() + ")";
  const std::string text = v.dump();
  return text.size() > 64 ? text.substr(0, 60) + " …" : text;
}

/// Throws FormatError "[safetensors] file F: msg".
struct Bad {
  std::string file;
  [[noreturn]] void operator()(const std::string& msg) const {
    detail::raise<FormatError>("safetensors", "file " + file + ": " + msg);
  }
};

/// A validated header entry, before its bytes are copied out.
struct Entry {
  std::string name;
  Tensor tensor;
  std::uint64_t begin = 0, end = 0;
};

/// Parses and checks one tensor entry of the header (everything but its place in the data).
Entry parse_entry(const std::string& name, const json& v, std::uint64_t data_size, const Bad& bad) {
  const std::string tn = "tensor '" + name + "'";
  if (!v.is_object()) bad(tn + ": entry is a " + std::string(v.type_name()) + ", not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(tn + ": entry has no \"" + key + "\"");

  Entry e{name, {}, 0, 0};
  const json& dt = v["dtype"];
  if (!dt.is_string()) bad(tn + ": dtype is a " + std::string(dt.type_name()) + ", not a string");
  const auto dtype = parse_dtype(dt.get<std::string>());
  if (!dtype) bad(tn + ": unknown dtype '" + dt.get<std::string>() + "' (bppsa supports " + supported_dtypes() + ")");
  e.tensor.dtype = *dtype;

  const json& sh = v["shape"];
  auto nonneg = [](const json& x) {
    return x.is_number_unsigned() || (x.is_number_integer() && x.get<std::int64_t>() >= 0);
  };
  if (!sh.is_array()) bad(tn + ": shape " + brief(sh) + " is not a list of non-negative integers");
  for (const json& x : sh) {
    if (!nonneg(x) || x.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<Index>::max()))
      bad(tn + ": shape " + brief(sh) + " is not a list of non-negative integers");
    e.tensor.shape.push_back(x.get<Index>());
  }
  const auto numel = checked_numel(e.tensor.shape);
  if (!numel) bad(tn + ": shape " + brief(sh) + " has more elements than can be addressed");

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !nonneg(off[0]) || !nonneg(off[1]) ||
      off[0].get<std::uint64_t>() > off[1].get<std::uint64_t>())
    bad(tn + ": data_offsets " + brief(off) + " is not [begin, end] with 0 <= begin <= end");
  e.begin = off[0].get<std::uint64_t>();
  e.end = off[1].get<std::uint64_t>();
  if (e.end > data_size)
    bad("truncated: " + tn + " needs bytes [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
        ") but the data section has only " + std::to_string(data_size) + " bytes");
  const std::uint64_t dsize = dtype_size(*dtype);
  if (std::uint64_t(*numel) > std::numeric_limits<std::uint64_t>::max() / dsize ||
      e.end - e.begin != std::uint64_t(*numel) * dsize)
    bad(tn + " is " + e.tensor.describe() + " = " + std::to_string(*numel) + " × " + std::to_string(dsize) +
        " bytes, but its data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") span " +
        std::to_string(e.end - e.begin) + " bytes");
  return e;
}

}  // namespace

namespace {

/// Metadata key under which serialize_safetensors records every tensor's CRC-32 (zlib's), as
/// a JSON object {"name": "8 hex digits"}; read_safetensors checks and removes it. Files
/// without it (older checkpoints, PyTorch's) are read as before.
constexpr const char* kChecksumKey = "bppsa.crc32";

std::string crc32_hex(const std::vector<unsigned char>& bytes) {
  uLong c = ::crc32(0L, Z_NULL, 0);
  for (std::size_t at = 0; at < bytes.size();) {
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes.size() - at, 1u << 30));
    c = ::crc32(c, bytes.data() + at, n);
    at += n;
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(c & 0xffffffffUL));
  return hex;
}

/// Checks every tensor of `file` against the checksums it records (if any), then removes the
/// record from its metadata. FormatError naming the tensor on a mismatch.
void verify_checksums(TensorFile& file, const Bad& bad) {
  const auto it = file.metadata.find(kChecksumKey);
  if (it == file.metadata.end()) return;
  json sums;
  try {
    sums = json::parse(it->second);
  } catch (const json::exception&) {
  }
  if (!sums.is_object())
    bad(std::string("metadata '") + kChecksumKey + "' is not a JSON object of tensor checksums (corrupt)");
  for (const auto& [name, t] : file.tensors) {
    const auto s = sums.find(name);
    if (s == sums.end() || !s->is_string())
      bad("tensor '" + name + "' has no checksum in '" + kChecksumKey +
          "' although the others have (the file was altered after it was written)");
    const std::string computed = crc32_hex(t.bytes);
    if (s->get<std::string>() != computed)
      bad("tensor '" + name + "' fails its checksum (CRC-32 recorded " + brief(*s) + ", computed \"" + computed +
          "\"): the file is corrupt (a bit changed on disk or in a copy); use an intact copy");
  }
  for (const auto& [name, v] : sums.items())
    if (!file.contains(name))
      bad(std::string("metadata '") + kChecksumKey + "' lists tensor '" + name + "', which the file does not hold");
  file.metadata.erase(it);
}

}  // namespace

const char* to_string(DType d) {
  switch (d) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::i64:
      return "I64";
    case DType::i32:
      return "I32";
  }
  return "?";
}

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f64:
    case DType::i64:
      return 8;
  }
  return 0;
}

std::string shape_list(const std::vector<Index>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Index Tensor::numel() const {
  Index n = 1;
  for (Index e : shape) n *= e;
  return n;
}

std::string Tensor::describe() const { return std::string(to_string(dtype)) + " " + shape_list(shape); }

Tensor Tensor::from_f32(std::span<const float> values, std::vector<Index> shape) {
  return make_tensor(DType::f32, values, std::move(shape), "Tensor::from_f32");
}
Tensor Tensor::from_f64(std::span<const double> values, std::vector<Index> shape) {
  return make_tensor(DType::f64, values, std::move(shape), "Tensor::from_f64");
}
Tensor Tensor::from_i64(std::span<const std::int64_t> values, std::vector<Index> shape) {
  return make_tensor(DType::i64, values, std::move(shape), "Tensor::from_i64");
}
Tensor Tensor::from_i32(std::span<const std::int32_t> values, std::vector<Index> shape) {
  return make_tensor(DType::i32, values, std::move(shape), "Tensor::from_i32");
}

std::vector<float> Tensor::to_f32(const std::string& what) const {
  check_bytes(*this, what);
  if (dtype == DType::f32) return convert<float, float>(*this);
  if (dtype == DType::f64) return convert<float, double>(*this);
  wrong_dtype(*this, what, "F32 or F64");
}

std::vector<double> Tensor::to_f64(const std::string& what) const {
  check_bytes(*this, what);
  if (dtype == DType::f64) return convert<double, double>(*this);
  if (dtype == DType::f32) return convert<double, float>(*this);
  wrong_dtype(*this, what, "F64 or F32");
}

std::vector<std::int64_t> Tensor::to_i64(const std::string& what) const {
  check_bytes(*this, what);
  if (dtype == DType::i64) return convert<std::int64_t, std::int64_t>(*this);
  if (dtype == DType::i32) return convert<std::int64_t, std::int32_t>(*this);
  wrong_dtype(*this, what, "I64 or I32");
}

std::string TensorFile::metadata_or(const std::string& key, const std::string& fallback) const {
  const auto it = metadata.find(key);
  return it == metadata.end() ? fallback : it->second;
}

std::int64_t TensorFile::metadata_count(const std::string& key, std::int64_t fallback, const std::string& op) const {
  const auto it = metadata.find(key);
  if (it == metadata.end()) return fallback;
  const std::string& v = it->second;
  constexpr std::int64_t kMax = std::int64_t{1} << 53;  // exact in a double, far from overflow when incremented
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || v.front() == '-' || ec != std::errc() || end != v.data() + v.size() || n > kMax)
    detail::raise<FormatError>(op, "file " + file_name(source) + ": metadata '" + key + "' = '" + v.substr(0, 64) +
                                       (v.size() > 64 ? "…" : "") + "' is not a whole number in [0, 2^53]");
  return n;
}

const Tensor& TensorFile::at(const std::string& name, const std::string& op) const {
  const auto it = tensors.find(name);
  if (it != tensors.end()) return it->second;
  std::string names;
  for (const auto& [n, t] : tensors) names += (names.empty() ? "" : ", ") + n;
  detail::raise<FormatError>(op, "file " + file_name(source) + " has no tensor '" + name + "' (" +
                                     (names.empty() ? "it holds no tensors" : "it holds: " + names) + ")");
}

const Tensor& TensorFile::require(const std::string& name, const std::vector<Index>& expected,
                                  const std::string& op) const {
  const Tensor& t = at(name, op);
  bool ok = t.shape.size() == expected.size();
  for (std::size_t i = 0; ok && i < expected.size(); ++i) ok = expected[i] == -1 || expected[i] == t.shape[i];
  if (!ok)
    detail::raise<ShapeError>(op, "tensor '" + name + "' in " + file_name(source) + " has shape " +
                                      shape_list(t.shape) + ", expected " + shape_list(expected) +
                                      (std::count(expected.begin(), expected.end(), -1) ? " (-1: any extent)" : ""));
  return t;
}

namespace {

/// Parses the JSON header and checks every entry against a data section of `data_size`
/// bytes (inside it, tiling it exactly), before any tensor bytes are read or allocated.
/// Fills `file`'s metadata; returns the entries sorted by offset.
std::vector<Entry> parse_header(const char* begin, std::uint64_t header_len, std::uint64_t data_size, TensorFile& file,
                                const Bad& bad) {
  json header;
  try {
    header = json::parse(begin, begin + header_len);
  } catch (const json::exception& e) {
    bad(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) bad("header is a JSON " + std::string(header.type_name()) + ", not an object");

  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        bad("__metadata__ is a " + std::string(value.type_name()) + ", not a string → string map");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          bad("__metadata__ must map strings to strings, but '" + k + "' is a " + std::string(v.type_name()));
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(key, value, data_size, bad));
  }

  // The tensors must tile the data section exactly: no overlaps, no gaps, nothing after.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  std::uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered)
      bad("tensors '" + prev->name + "' [" + std::to_string(prev->begin) + ", " + std::to_string(prev->end) +
          ") and '" + e.name + "' [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") overlap");
    if (e.begin > covered)
      bad("data_offsets are not contiguous: no tensor covers data bytes [" + std::to_string(covered) + ", " +
          std::to_string(e.begin) + ") before tensor '" + e.name + "'");
    covered = e.end;
    prev = &e;
  }
  if (covered != data_size)
    bad("data_offsets are not contiguous: the data section has " + std::to_string(data_size) +
        " bytes but the tensors cover only [0, " + std::to_string(covered) + ")");
  return entries;
}

/// The 8-byte header length, checked against the `size` bytes of the whole file.
std::uint64_t header_length(const unsigned char* first8, std::uint64_t size, const Bad& bad) {
  if (size < 8)
    bad("is " + std::to_string(size) +
        " bytes long, shorter than the 8-byte header length (not a safetensors file, or truncated)");
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, first8, 8);
  if (header_len > size - 8)
    bad("header length " + std::to_string(header_len) + " is larger than the " + std::to_string(size - 8) +
        " bytes that follow it (truncated, or not a safetensors file)");
  return header_len;
}

}  // namespace

TensorFile parse_safetensors(std::span<const unsigned char> bytes, const std::string& source) {
  const Bad bad{file_name(source)};
  const std::uint64_t header_len = header_length(bytes.data(), bytes.size(), bad);
  const std::span<const unsigned char> data = bytes.subspan(8 + header_len);
  TensorFile file;
  file.source = source;
  for (Entry& e : parse_header(reinterpret_cast<const char*>(bytes.data() + 8), header_len, data.size(), file, bad)) {
    e.tensor.bytes.assign(data.begin() + static_cast<std::ptrdiff_t>(e.begin),
                          data.begin() + static_cast<std::ptrdiff_t>(e.end));
    file.tensors.emplace(std::move(e.name), std::move(e.tensor));
  }
  verify_checksums(file, bad);
  return file;
}

namespace {

/// Reads and checks the header of the open file `f` into `file` (source and metadata); returns
/// its entries and the offset of the data section.
std::pair<std::vector<Entry>, std::uint64_t> read_header(const InputFile& f, TensorFile& file) {
  const std::string source = f.path().string();
  const Bad bad{file_name(source)};
  unsigned char first8[8] = {};
  if (f.size() >= 8) f.read_at(0, first8);
  const std::uint64_t header_len = header_length(first8, f.size(), bad);
  constexpr std::uint64_t kMaxHeader = 100'000'000;  // the safetensors format's own limit
  if (header_len > kMaxHeader)
    bad("header length " + std::to_string(header_len) +
        " exceeds the format's limit of 100 MB (not a safetensors "
        "file, or corrupt)");
  std::vector<unsigned char> header(static_cast<std::size_t>(header_len));
  f.read_at(8, header);
  file.source = source;
  const std::uint64_t data_size = f.size() - 8 - header_len;
  return {parse_header(reinterpret_cast<const char*>(header.data()), header_len, data_size, file, bad), 8 + header_len};
}

}  // namespace

TensorFile read_safetensors(const std::filesystem::path& path) {
  // Header first, checked against the real file size; the tensors are read (and allocated)
  // only once every offset is known to lie inside the file and the total fits in memory.
  const InputFile f(path);
  TensorFile file;
  auto [entries, data_at] = read_header(f, file);
  check_memory("read_safetensors", "the tensors of " + file_name(file.source),
               {{"tensor data", static_cast<double>(f.size() - data_at)}}, "give a smaller file");
  for (Entry& e : entries) {
    e.tensor.bytes.resize(static_cast<std::size_t>(e.end - e.begin));
    f.read_at(data_at + e.begin, e.tensor.bytes);
    file.tensors.emplace(std::move(e.name), std::move(e.tensor));
  }
  verify_checksums(file, Bad{file_name(file.source)});
  return file;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path) {
  const InputFile f(path);
  TensorFile file;
  (void)read_header(f, file);
  file.metadata.erase(kChecksumKey);
  return file.metadata;
}

std::vector<unsigned char> serialize_safetensors(const TensorFile& file) {
  const std::string op = "serialize_safetensors";
  std::string header = "{";
  std::uint64_t offset = 0;
  try {
    // A value that is not UTF-8 (a path's bytes) is stored escaped by utf8_text rather than
    // failing the write: a save must not fail on the metadata.
    std::map<std::string, std::string> metadata;
    for (const auto& [k, v] : file.metadata) metadata[is_utf8(k) ? k : utf8_text(k)] = is_utf8(v) ? v : utf8_text(v);
    metadata.erase(kChecksumKey);
    if (!file.tensors.empty()) {
      json sums = json::object();
      for (const auto& [name, t] : file.tensors) sums[name] = crc32_hex(t.bytes);
      metadata[kChecksumKey] = sums.dump();
    }
    if (!metadata.empty()) header += "\"__metadata__\":" + json(metadata).dump();
    for (const auto& [name, t] : file.tensors) {
      if (name == "__metadata__") detail::raise<InvalidArgument>(op, "a tensor cannot be named \"__metadata__\"");
      const auto n = checked_numel(t.shape);
      if (!n || t.bytes.size() != static_cast<std::size_t>(*n) * dtype_size(t.dtype))
        detail::raise<InvalidArgument>(
            op, "tensor '" + name + "' is " + t.describe() + " but holds " + std::to_string(t.bytes.size()) + " bytes");
      if (header.size() > 1) header += ",";
      header += json(name).dump() + ":{\"dtype\":\"" + to_string(t.dtype) + "\",\"shape\":" + json(t.shape).dump() +
                ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.bytes.size()) + "]}";
      offset += t.bytes.size();
    }
  } catch (const json::exception& e) {  // names or metadata that are not valid UTF-8
    detail::raise<InvalidArgument>(op, std::string("cannot encode the header: ") + e.what());
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  std::vector<unsigned char> out(8 + header.size());
  const std::uint64_t header_len = header.size();
  std::memcpy(out.data(), &header_len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  out.reserve(out.size() + offset);
  for (const auto& [name, t] : file.tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_safetensors(const std::filesystem::path& path, const TensorFile& file) {
  write_file_atomic(path, serialize_safetensors(file));
}

}  // namespace bppsa
