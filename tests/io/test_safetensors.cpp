// safetensors and atomic file writes against hand-built byte images: exact serialisation,
// round trips of every dtype, and one clear FormatError per kind of malformed file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bppsa/core/error.hpp>
#include <bppsa/io/file.hpp>
#include <bppsa/io/safetensors.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "temp_dir.hpp"

namespace {

using testutil::TempDir;

using testutil::expect_error;
using testutil::message_of;

using namespace bppsa;
using Bytes = std::vector<unsigned char>;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

/// The oracle: 8-byte little-endian header length, the header text as written, then `data`.
Bytes image(const std::string& header, const Bytes& data) {
  Bytes out(8 + header.size() + data.size());
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(n >> (8 * i));
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

template <class T>
void append(Bytes& b, std::initializer_list<T> values) {
  for (T v : values) {
    const std::size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
  }
}

// {"a": F32 [2] = {1, -2.5}, "b": I64 [] = 7}, metadata {"format": "pt"}: 138 header bytes + 6 spaces,
// as PyTorch writes it (no checksums).
const std::string kHeader = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}      )";
// The same as bppsa writes it: with each tensor's CRC-32 (Python: zlib.crc32 of the tensor's
// bytes), 194 header bytes + 6 spaces.
const std::string kCheckedHeader =
    R"({"__metadata__":{"bppsa.crc32":"{\"a\":\"560302f4\",\"b\":\"6fe7d670\"}","format":"pt"},)"
    R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}      )";

Bytes small_data() {
  Bytes d;
  append<float>(d, {1.0f, -2.5f});
  append<std::int64_t>(d, {7});
  return d;
}

TensorFile small_file() {
  TensorFile f;
  const float a[] = {1.0f, -2.5f};
  const std::int64_t b[] = {7};
  f.tensors["b"] = Tensor::from_i64(b, {});
  f.tensors["a"] = Tensor::from_f32(a, {2});
  f.metadata["format"] = "pt";
  return f;
}

TEST(Safetensors, SerializeMatchesHandBuiltImage) {
  ASSERT_EQ(kCheckedHeader.size() % 8, 0u);
  EXPECT_EQ(serialize_safetensors(small_file()), image(kCheckedHeader, small_data()));
}

TEST(Safetensors, ChecksumsAreVerifiedAndRemovedFromTheMetadata) {
  const TensorFile f = parse_safetensors(image(kCheckedHeader, small_data()), "small");
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(f.at("a").to_f32(), (std::vector<float>{1.0f, -2.5f}));
}

// Issue 44: a flipped bit in a weight loaded silently. Every bit of the data section, flipped
// in turn in a written file, is refused naming the file and the tensor.
TEST(Safetensors, FlippedBitIsRefusedNamingTensorAndFile) {
  TempDir dir;
  const fs::path p = dir.path / "ck.safetensors";
  write_safetensors(p, small_file());
  const Bytes good = read_file(p);
  const std::size_t data_at = good.size() - small_data().size();
  for (std::size_t bit = 0; bit < 8 * small_data().size(); ++bit) {
    Bytes bad = good;
    bad[data_at + bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    testutil::write_bytes(p, bad);
    const std::string tensor = bit < 64 ? "'a'" : "'b'";
    expect_error<FormatError>([&] { (void)read_safetensors(p); },
                              {p.string(), "tensor " + tensor + " fails its checksum", "corrupt"});
  }
  // In the checksums themselves, and with a tensor's checksum missing: refused as well.
  std::string header(kCheckedHeader);
  header.replace(header.find("560302f4"), 8, "560302f5");
  expect_error<FormatError>([&] { (void)parse_safetensors(image(header, small_data()), "m"); },
                            {"tensor 'a' fails its checksum"});
  header = kCheckedHeader;
  const std::string entry_b = R"(,\"b\":\"6fe7d670\")";
  header.replace(header.find(entry_b), entry_b.size(), std::string(entry_b.size(), ' '));
  expect_error<FormatError>([&] { (void)parse_safetensors(image(header, small_data()), "m"); },
                            {"tensor 'b' has no checksum"});
}

TEST(Safetensors, HandBuiltImageParses) {
  const TensorFile f = parse_safetensors(image(kHeader, small_data()), "small");
  EXPECT_EQ(f.source, "small");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(f.at("a").describe(), "F32 [2]");
  EXPECT_EQ(f.at("a").to_f32(), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(f.at("b").shape, std::vector<Index>{});
  EXPECT_EQ(f.at("b").numel(), 1);
  EXPECT_EQ(f.at("b").to_i64(), std::vector<std::int64_t>{7});
}

// PyTorch's save_file orders the data by dtype alignment (8-byte first), not by name, and may
// pad the header with spaces; offsets in any order are accepted as long as they tile the data.
TEST(Safetensors, DataInNonNameOrderParses) {
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[1,2],"data_offsets":[16,24]},"b":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  Bytes data;
  append<double>(data, {0.5, 1e300});
  append<float>(data, {3.0f, 4.0f});
  const TensorFile f = parse_safetensors(image(header + "   ", data), "torch");
  EXPECT_EQ(f.at("a").to_f32(), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(f.at("a").shape, (std::vector<Index>{1, 2}));
  EXPECT_EQ(f.at("b").to_f64(), (std::vector<double>{0.5, 1e300}));
}

TEST(Safetensors, RoundTripEveryDType) {
  TempDir dir;
  TensorFile f;
  const std::vector<float> f32 = {0.0f, -1.5f, 3.25f, 1e-30f, 7.0f, -0.0f};
  const std::vector<double> f64 = {1.0 / 3.0, -2e200};
  const std::vector<std::int64_t> i64 = {-(std::int64_t(1) << 62), 0, 42};
  const std::vector<std::int32_t> i32 = {-7, 2147483647};
  const double scalar[] = {2.5};
  f.tensors["x.f32"] = Tensor::from_f32(f32, {2, 3});
  f.tensors["x.f64"] = Tensor::from_f64(f64, {2});
  f.tensors["x.i64"] = Tensor::from_i64(i64, {3, 1});
  f.tensors["x.i32"] = Tensor::from_i32(i32, {2});
  f.tensors["scalar"] = Tensor::from_f64(scalar, {});
  f.tensors["empty"] = Tensor::from_f32({}, {0, 4});
  f.metadata = {{"epoch", "3"}, {"model", "rnn \"20\""}};
  const fs::path path = dir.path / "rt.safetensors";
  write_safetensors(path, f);

  const TensorFile g = read_safetensors(path);
  EXPECT_EQ(g.source, path.string());
  EXPECT_EQ(g.metadata, f.metadata);
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    const Tensor& u = g.at(name);
    EXPECT_EQ(u.dtype, t.dtype) << name;
    EXPECT_EQ(u.shape, t.shape) << name;
    EXPECT_EQ(u.bytes, t.bytes) << name;
  }
  EXPECT_EQ(g.at("x.f32").to_f32(), f32);
  EXPECT_EQ(g.at("x.f64").to_f64(), f64);
  EXPECT_EQ(g.at("x.i64").to_i64(), i64);
  EXPECT_EQ(g.at("x.i32").to_i64(), (std::vector<std::int64_t>{-7, 2147483647}));
  EXPECT_EQ(g.at("scalar").to_f64(), std::vector<double>{2.5});
  EXPECT_TRUE(g.at("empty").to_f32().empty());
  EXPECT_EQ(serialize_safetensors(g), serialize_safetensors(f));
}

TEST(Safetensors, EmptyFileHasNoMetadataKey) {
  EXPECT_EQ(serialize_safetensors(TensorFile{}), image("{}      ", {}));
  EXPECT_TRUE(parse_safetensors(image("{}      ", {}), "e").tensors.empty());
}

TEST(Safetensors, Conversions) {
  const double d[] = {0.5, -1e-3};
  const std::int32_t i[] = {-3, 9};
  const std::int64_t l[] = {1};
  EXPECT_EQ(Tensor::from_f64(d, {2}).to_f32(), (std::vector<float>{0.5f, static_cast<float>(-1e-3)}));
  EXPECT_EQ(Tensor::from_i32(i, {2}).to_i64(), (std::vector<std::int64_t>{-3, 9}));
  const std::string m = message_of<FormatError>([&] { (void)Tensor::from_i64(l, {1}).to_f32("labels 'y'"); });
  EXPECT_THAT(m, HasSubstr("labels 'y'"));
  EXPECT_THAT(m, HasSubstr("I64"));
  EXPECT_THAT(message_of<FormatError>([&] { (void)Tensor::from_f64(d, {2}).to_i64("ids"); }), HasSubstr("F64"));
  EXPECT_THAT(message_of<ShapeError>([&] { (void)Tensor::from_f64(d, {3}); }), HasSubstr("[3]"));
}

TEST(Safetensors, AtAndRequireExplainMisses) {
  TensorFile f = small_file();
  f.source = "ckpt.safetensors";
  const std::string miss = message_of<FormatError>([&] { (void)f.at("c", "load"); });
  EXPECT_THAT(miss, HasSubstr("[load]"));
  EXPECT_THAT(miss, HasSubstr("ckpt.safetensors"));
  EXPECT_THAT(miss, HasSubstr("'c'"));
  EXPECT_THAT(miss, HasSubstr("it holds: a, b"));
  EXPECT_EQ(&f.require("a", {-1}), &f.at("a"));
  EXPECT_EQ(&f.require("b", {}), &f.at("b"));
  const std::string shape = message_of<ShapeError>([&] { (void)f.require("a", {2, 1}); });
  EXPECT_THAT(shape, HasSubstr("tensor 'a' in 'ckpt.safetensors' has shape [2], expected [2, 1]"));
  EXPECT_THROW((void)f.require("a", {3}), ShapeError);
}

struct Malformed {
  const char* what;
  Bytes bytes;
  const char* expect;
};

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

TEST(Safetensors, EveryMalformationHasItsOwnMessage) {
  const Bytes d8(8, 0), d12(12, 0), d20(20, 0);
  Bytes huge_len = image("{}", {});
  huge_len[0] = 0xe8;  // 1000 > 2 remaining bytes
  huge_len[1] = 0x03;
  const std::string f32 = "\"F32\"";
  const std::vector<Malformed> cases = {
      {"short", {1, 2, 3, 4, 5}, "shorter than the 8-byte header length"},
      {"header length", huge_len, "header length 1000 is larger than the 2 bytes"},
      {"not json", image("{\"a\":", {}), "not valid JSON"},
      {"not object", image("[1,2]", {}), "not an object"},
      {"entry", image("{\"a\":3}", {}), "tensor 'a': entry is a number"},
      {"missing key", image("{\"a\":{\"dtype\":\"F32\",\"shape\":[]}}", {}), "has no \"data_offsets\""},
      {"dtype", image("{" + entry("a", "\"BF16\"", "[4]", "[0,8]") + "}", d8), "unknown dtype 'BF16'"},
      {"dtype list", image("{" + entry("a", "\"F16\"", "[4]", "[0,8]") + "}", d8), "F32, F64, I64, I32"},
      {"shape type", image("{" + entry("a", f32, "2", "[0,8]") + "}", d8), "not a list of non-negative integers"},
      {"shape neg", image("{" + entry("a", f32, "[-2]", "[0,8]") + "}", d8), "shape [-2] is not a list"},
      {"shape float", image("{" + entry("a", f32, "[2.0]", "[0,8]") + "}", d8), "is not a list of non-negative"},
      {"offsets order", image("{" + entry("a", f32, "[2]", "[8,0]") + "}", d8), "not [begin, end]"},
      {"offsets len", image("{" + entry("a", f32, "[2]", "[8]") + "}", d8), "not [begin, end]"},
      {"truncated", image("{" + entry("x", f32, "[3]", "[0,12]") + "}", d8),
       "truncated: tensor 'x' needs bytes [0, 12) but the data section has only 8 bytes"},
      {"byte size", image("{" + entry("a", f32, "[3]", "[0,8]") + "}", d8), "span 8 bytes"},
      {"overlap", image("{" + entry("a", f32, "[2]", "[0,8]") + "," + entry("b", f32, "[2]", "[4,12]") + "}", d12),
       "overlap"},
      {"gap", image("{" + entry("a", f32, "[2]", "[0,8]") + "," + entry("b", f32, "[2]", "[12,20]") + "}", d20),
       "no tensor covers data bytes [8, 12)"},
      {"trailing", image("{" + entry("a", f32, "[2]", "[0,8]") + "}", d12), "tensors cover only [0, 8)"},
      {"metadata value", image(R"({"__metadata__":{"k":1}})", {}), "__metadata__ must map strings to strings"},
      {"metadata type", image(R"({"__metadata__":[]})", {}), "__metadata__ is a array"},
  };
  for (const Malformed& c : cases) {
    const std::string m = message_of<FormatError>([&] { (void)parse_safetensors(c.bytes, "mem.safetensors"); });
    EXPECT_THAT(m, HasSubstr(c.expect)) << c.what;
    EXPECT_THAT(m, HasSubstr("'mem.safetensors'")) << c.what;
  }
}

TEST(Safetensors, MissingFileIsIoError) {
  const std::string m = message_of<IoError>([] { (void)read_safetensors("/nonexistent/bppsa/x.safetensors"); });
  EXPECT_THAT(m, HasSubstr("/nonexistent/bppsa/x.safetensors"));
  EXPECT_THAT(m, HasSubstr("No such file"));
}

TEST(WriteFileAtomic, ReplacesContent) {
  TempDir dir;
  const fs::path p = dir.path / "f.bin";
  const Bytes a = {1, 2, 3}, b = {9, 8};
  write_file_atomic(p, a);
  EXPECT_EQ(read_file(p), a);
  write_file_atomic(p, b);
  EXPECT_EQ(read_file(p), b);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST(WriteFileAtomic, MissingFolderIsIoError) {
  TempDir dir;
  const fs::path p = dir.path / "no" / "such" / "f.bin";
  EXPECT_THAT(message_of<IoError>([&] { write_file_atomic(p, Bytes{1}); }), HasSubstr(p.string()));
}

TEST(WriteFileAtomic, FailedRenameLeavesNoTemporary) {
  TempDir dir;
  const fs::path good = dir.path / "good.bin";
  write_file_atomic(good, Bytes{4, 5, 6});
  fs::create_directories(dir.path / "sub" / "child");  // a non-empty folder cannot be renamed over
  EXPECT_THROW(write_file_atomic(dir.path / "sub", Bytes{1, 2}), IoError);
  EXPECT_EQ(read_file(good), (Bytes{4, 5, 6}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 2);  // good.bin, sub
  EXPECT_THROW((void)read_file(dir.path / "sub"), IoError);
}

// A write that fails half-way (here: the file-size limit, EFBIG) leaves the old file intact.
TEST(WriteFileAtomic, FailedWriteKeepsOldFile) {
  TempDir dir;
  const fs::path p = dir.path / "ckpt.bin";
  const Bytes old = {7, 7, 7};
  write_file_atomic(p, old);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 1024;
  auto* previous = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string m;
  try {
    write_file_atomic(p, Bytes(4096, 1));
  } catch (const IoError& e) {
    m = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, previous);
  EXPECT_THAT(m, HasSubstr("ckpt.bin"));
  EXPECT_EQ(read_file(p), old);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST(Utf8Text, UnchangedWhenUtf8WithoutBackslashElseEscapedLosslessly) {
  EXPECT_EQ(utf8_text("/data/caf\xc3\xa9/x.safetensors"), "/data/caf\xc3\xa9/x.safetensors");  // é in UTF-8
  EXPECT_EQ(utf8_text("/data/caf\xe9"), "/data/caf\\xe9");                                     // Latin-1 é
  EXPECT_EQ(utf8_text("a\\b"), "a\\\\b");
  EXPECT_EQ(utf8_text("\xe9\\"), "\\xe9\\\\");
  EXPECT_EQ(utf8_text("\xc0\xaf"), "\\xc0\\xaf");          // overlong '/'
  EXPECT_EQ(utf8_text("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate
  EXPECT_FALSE(is_utf8("\xe9"));
  EXPECT_TRUE(is_utf8("\xf0\x9f\x98\x80"));
}

TEST(Safetensors, MetadataThatIsNotUtf8IsStoredEscaped) {
  TensorFile f;
  f.tensors["w"] = Tensor::from_f32(std::vector<float>{1.0f}, {1});
  f.metadata["bppsa.init"] = "/tmp/caf\xe9.safetensors";
  const TensorFile back = parse_safetensors(serialize_safetensors(f), "mem");
  EXPECT_EQ(back.metadata_or("bppsa.init"), "/tmp/caf\\xe9.safetensors");
}

TEST(ReadFile, RefusesWhatIsNotARegularFile) {
  expect_error<IoError>([] { (void)read_file("/dev/zero"); }, {"/dev/zero", "not a regular file"});
  expect_error<IoError>([] { (void)read_safetensors("/dev/zero"); }, {"/dev/zero", "not a regular file"});
}

}  // namespace
