// CIFAR-10 binary batches: fixed 3073-byte records (label byte + 3 planes of 32×32 bytes)
// read into 3×32×32 images in [0, 1] (docs/method.md §7).
#include "bppsa/data/cifar10.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/io/file.hpp"
#include "data/file_kind.hpp"

namespace bppsa {
namespace {

constexpr const char* kOp = "load_cifar10";
constexpr Index kSide = 32;
constexpr Index kPixels = 3 * kSide * kSide;  // bytes of one image, [C][H][W]
constexpr Index kRecord = 1 + kPixels;        // label byte + image
constexpr const char* kFolder = "cifar-10-batches-bin";
constexpr const char* kHint =
    "expected data_batch_1.bin … data_batch_5.bin and test_batch.bin; download the \"CIFAR-10 binary version\" "
    "(cifar-10-binary.tar.gz) from https://www.cs.toronto.edu/~kriz/cifar.html and unpack it";

std::string quoted(const std::filesystem::path& p) { return std::string("'").append(p.string()).append("'"); }

/// The folder holding data_batch_1.bin: `dir` itself or its cifar-10-batches-bin.
std::filesystem::path batches_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    detail::raise<IoError>(kOp, "CIFAR-10 folder " + quoted(dir) + " does not exist; " + kHint);
  for (const auto& d : {dir, dir / kFolder})
    if (detail::regular_file_at(kOp, d / "data_batch_1.bin", "a CIFAR-10 batch")) return d;
  detail::raise<IoError>(kOp,
                         "no data_batch_1.bin in " + quoted(dir) + " nor in " + quoted(dir / kFolder) + "; " + kHint);
}

/// A new, empty 3×32×32 data set of the ten classes.
ImageDataset empty_set(const std::string& name, const std::vector<std::string>& class_names) {
  return ImageDataset{.channels = 3,
                      .height = kSide,
                      .width = kSide,
                      .classes = 10,
                      .x = {},
                      .y = {},
                      .class_names = class_names,
                      .name = name};
}

/// Appends the records of one batch file to `out` (whose x holds whole images).
void read_batch(const std::filesystem::path& file, ImageDataset& out) {
  if (!detail::regular_file_at(kOp, file, "a CIFAR-10 batch"))
    detail::raise<IoError>(kOp, "CIFAR-10 file " + quoted(file) + " is missing; " + kHint);
  detail::parse_cifar10_batch(read_file(file), file.string(), out);
}

/// The images of a batch of `bytes` bytes (a size that is not whole records is refused later).
Index records_in(double bytes) { return static_cast<Index>(bytes) / kRecord; }

/// The memory guard for converting `records` images to floats, with their labels and the
/// `held` bytes of files held meanwhile.
void check_floats(const std::string& what, double records, double held, const std::string& held_what) {
  check_memory(kOp, what,
               {{"the images as floats", records * static_cast<double>(kPixels) * sizeof(float)},
                {"their labels", records * sizeof(std::int64_t)},
                {held_what, held}},
               "give the folder of the real CIFAR-10 batches (10,000 images each), or fewer or smaller batch files");
}

/// Checks, before any file is read, the memory that loading `train_files` and `test_file`
/// needs (every image as floats and the largest file's bytes, held while it is converted),
/// then makes room in `train` for its images, so that appending batch after batch does not
/// copy the images read so far. Sizes that cannot be read count 0 (read_batch then refuses
/// the file).
void reserve_for(const std::vector<std::filesystem::path>& train_files, const std::filesystem::path& test_file,
                 ImageDataset& train) {
  const auto size_of = [](const std::filesystem::path& f) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(f, ec);
    return ec ? 0.0 : static_cast<double>(bytes);
  };
  Index train_records = 0;
  std::filesystem::path largest = test_file;
  for (const auto& f : train_files) {
    train_records += records_in(size_of(f));
    if (size_of(f) > size_of(largest)) largest = f;
  }
  const Index records = train_records + records_in(size_of(test_file));
  check_floats("CIFAR-10 in " + quoted(test_file.parent_path()) + " (" + std::to_string(train_records) +
                   " training and " + std::to_string(records - train_records) + " test images)",
               static_cast<double>(records), size_of(largest),
               "the largest file's bytes (" + largest.filename().string() + ")");
  train.y.reserve(static_cast<std::size_t>(train_records));
  train.x.reserve(static_cast<std::size_t>(train_records * kPixels));
}

/// batches.meta.txt's names, one a line, or the standard ten when the file is absent.
std::vector<std::string> read_class_names(const std::filesystem::path& folder) {
  const std::filesystem::path file = folder / "batches.meta.txt";
  std::error_code ec;
  if (!std::filesystem::exists(file, ec))
    return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  return detail::parse_cifar10_class_names(read_file(file), file.string());
}

}  // namespace

void detail::parse_cifar10_batch(std::span<const unsigned char> bytes, const std::string& source, ImageDataset& out) {
  auto bad = [&](const std::string& msg) {
    detail::raise<FormatError>(kOp, "CIFAR-10 file '" + source + "': " + msg);
  };
  const auto size = static_cast<Index>(bytes.size());
  if (size == 0) bad("is empty (0 bytes; a batch is a sequence of 3073-byte records)");
  if (size % kRecord != 0)
    bad("holds " + std::to_string(size) + " bytes = " + std::to_string(size / kRecord) + " records of 3073 bytes and " +
        std::to_string(size % kRecord) + " bytes over (truncated, or not a CIFAR-10 binary batch?)");

  // byte / 255 in float, once per byte value.
  std::array<float, 256> scale{};
  for (int b = 0; b < 256; ++b) scale[static_cast<std::size_t>(b)] = static_cast<float>(b) / 255.0f;

  const Index records = size / kRecord, first = out.size();
  // The images already in `out` are moved when its buffer grows: both are held meanwhile.
  const bool grows = out.x.capacity() < static_cast<std::size_t>((first + records) * kPixels);
  check_floats("converting CIFAR-10 file '" + source + "' (" + std::to_string(records) + " images) to floats",
               static_cast<double>(first + records) + (grows ? static_cast<double>(first) : 0.0),
               static_cast<double>(size), "the file's bytes");
  out.y.resize(static_cast<std::size_t>(first + records));
  out.x.resize(static_cast<std::size_t>((first + records) * kPixels));
  for (Index r = 0; r < records; ++r) {
    const unsigned char* record = bytes.data() + r * kRecord;
    if (record[0] > 9)
      bad("record " + std::to_string(r) + " (byte offset " + std::to_string(r * kRecord) + ") has label " +
          std::to_string(record[0]) + ", not 0..9 (a CIFAR-100 batch? its records are 3074 bytes)");
    out.y[static_cast<std::size_t>(first + r)] = record[0];
    std::transform(record + 1, record + kRecord, out.x.data() + (first + r) * kPixels,
                   [&](unsigned char b) { return scale[b]; });
  }
}

std::vector<std::string> detail::parse_cifar10_class_names(std::span<const unsigned char> bytes,
                                                           const std::string& source) {
  const std::string text(bytes.begin(), bytes.end());
  const char* blanks = " \t\r\n\f\v";
  std::vector<std::string> names;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    const std::size_t first = line.find_first_not_of(blanks);
    if (first != std::string::npos) names.push_back(line.substr(first, line.find_last_not_of(blanks) - first + 1));
    start = end + 1;
  }
  if (names.size() != 10)
    detail::raise<FormatError>(kOp, "CIFAR-10 file '" + source + "' lists " + std::to_string(names.size()) +
                                        " class names, not 10 (one a line)");
  return names;
}

std::pair<ImageDataset, ImageDataset> load_cifar10(const std::filesystem::path& dir) {
  const std::filesystem::path folder = batches_dir(dir);
  const std::vector<std::string> names = read_class_names(folder);
  // data_batch_1.bin is there (batches_dir checked); the others up to the first gap, and a
  // batch after a gap is an error rather than silently left out.
  std::vector<std::filesystem::path> train_files;
  std::error_code ec;
  int k = 1;
  for (;; ++k) {
    std::filesystem::path file = folder / ("data_batch_" + std::to_string(k) + ".bin");
    if (k > 1 && !std::filesystem::exists(file, ec)) break;
    train_files.push_back(std::move(file));
  }
  for (int later = k + 1; later <= k + 16; ++later)
    if (std::filesystem::exists(folder / ("data_batch_" + std::to_string(later) + ".bin"), ec))
      detail::raise<FormatError>(kOp, "CIFAR-10 folder '" + folder.string() + "' has data_batch_" +
                                          std::to_string(later) + ".bin but no data_batch_" + std::to_string(k) +
                                          ".bin: a training batch is missing (restore it, or remove the later ones)");
  ImageDataset train = empty_set("cifar10 train", names), test = empty_set("cifar10 test", names);
  reserve_for(train_files, folder / "test_batch.bin", train);
  for (const auto& file : train_files) read_batch(file, train);
  read_batch(folder / "test_batch.bin", test);
  return {std::move(train), std::move(test)};
}

}  // namespace bppsa
