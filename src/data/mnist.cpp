// MNIST-format data sets from their four IDX files (read_idx): found in a folder or torchvision's
// raw/ layouts, told apart by content, and laid out as sequences or zero-padded images (docs/method.md §7).
#include "bppsa/data/mnist.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <system_error>
#include <tuple>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/data/idx.hpp"
#include "data/file_kind.hpp"

namespace bppsa {
namespace {

constexpr const char* kOp = "read_mnist";
constexpr Index kClasses = 10;
constexpr const char* kHint =
    "install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist: "
    "/usr/share/datasets/fashion-mnist) or pass --data-dir (or set BPPSA_MNIST) with a folder holding "
    "train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz] and "
    "t10k-labels-idx1-ubyte[.gz]";

/// One of the four files: what it holds, its usual name and the dotted spelling some mirrors use.
struct Part {
  const char* what;
  const char* name;
  const char* dotted;
};
constexpr std::array<Part, 4> kParts{{{"training images", "train-images-idx3-ubyte", "train-images.idx3-ubyte"},
                                      {"training labels", "train-labels-idx1-ubyte", "train-labels.idx1-ubyte"},
                                      {"test images", "t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"},
                                      {"test labels", "t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"}}};

/// The first ten training labels of the sets bppsa knows by name.
struct Known {
  const char* name;
  std::array<std::int64_t, 10> first_labels;
  std::array<const char*, 10> classes;
};
const std::array<Known, 2> kKnown{{
    {"Fashion-MNIST",
     {9, 0, 0, 3, 0, 2, 7, 2, 5, 5},
     {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}},
    {"MNIST", {5, 0, 4, 1, 9, 2, 1, 3, 1, 4}, {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}},
}};

std::string quoted(const std::filesystem::path& p) { return std::string("'").append(p.string()).append("'"); }

/// The file of `part` in `folder` (the plain one before the .gz, the usual name before the
/// dotted one), or an empty path; IoError naming it when one of these names is not a regular
/// file (a FIFO, a link to /dev/zero).
std::filesystem::path find_part(const std::filesystem::path& folder, const Part& part) {
  for (const char* suffix : {"", ".gz"})
    for (const char* name : {part.name, part.dotted}) {
      std::filesystem::path file = folder / (std::string(name) + suffix);
      if (detail::regular_file_at(kOp, file, "IDX data")) return file;
    }
  return {};
}

/// The four files, from the first folder of dir, dir/raw, dir/FashionMNIST/raw, dir/MNIST/raw
/// that holds training images.
std::array<std::filesystem::path, 4> find_files(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    detail::raise<IoError>(kOp, "MNIST-format folder " + quoted(dir) + " does not exist; " + kHint);
  for (const auto& folder : {dir, dir / "raw", dir / "FashionMNIST" / "raw", dir / "MNIST" / "raw"}) {
    if (find_part(folder, kParts[0]).empty()) continue;
    std::array<std::filesystem::path, 4> files;
    for (std::size_t i = 0; i < kParts.size(); ++i) {
      files[i] = find_part(folder, kParts[i]);
      if (files[i].empty())
        detail::raise<IoError>(kOp, quoted(folder) + " holds training images but no " + kParts[i].what + " (" +
                                        kParts[i].name + "[.gz] or " + kParts[i].dotted + "[.gz]); " + kHint);
    }
    return files;
  }
  detail::raise<IoError>(kOp, "no MNIST-format data in " + quoted(dir) +
                                  ": looked for train-images-idx3-ubyte[.gz] (or train-images.idx3-ubyte[.gz]) in "
                                  "it and in its raw/, FashionMNIST/raw/ and MNIST/raw/; " +
                                  kHint);
}

/// "60000 × 28 × 28".
std::string dims_text(const std::vector<Index>& dims) {
  std::string s;
  for (Index d : dims) s += (s.empty() ? "" : " × ") + std::to_string(d);
  return s;
}

[[noreturn]] void bad(const std::filesystem::path& file, const std::string& msg) {
  detail::raise<FormatError>(kOp, "IDX file " + quoted(file) + ": " + msg);
}

/// The images of one split: N × H × W with N, H, W ≥ 1.
IdxArray read_images(const std::filesystem::path& file, const char* what) {
  IdxArray a = read_idx(file, kOp);
  if (a.dims.size() != 3)
    bad(file, "holds " + std::to_string(a.dims.size()) + " dimensions (" + dims_text(a.dims) + "), expected 3 for " +
                  what + " (images × height × width)");
  if (a.dims[0] == 0 || a.dims[1] == 0 || a.dims[2] == 0) bad(file, "holds no images (" + dims_text(a.dims) + ")");
  return a;
}

/// The labels of the `count` images of `images`: N labels, each 0..9.
std::vector<std::int64_t> read_labels(const std::filesystem::path& file, const std::filesystem::path& images,
                                      Index count, const char* what) {
  const IdxArray a = read_idx(file, kOp);
  if (a.dims.size() != 1)
    bad(file, "holds " + std::to_string(a.dims.size()) + " dimensions (" + dims_text(a.dims) + "), expected 1 for " +
                  what + " (one label per image)");
  if (a.dims[0] != count)
    detail::raise<FormatError>(kOp, quoted(images) + " holds " + std::to_string(count) + " images but " + quoted(file) +
                                        " " + std::to_string(a.dims[0]) +
                                        " labels; the two files must come from the same set");
  for (std::size_t i = 0; i < a.data.size(); ++i)
    if (a.data[i] >= kClasses)
      bad(file, "label " + std::to_string(i) + " is " + std::to_string(a.data[i]) +
                    ", not 0..9 (MNIST-format sets have 10 classes)");
  return {a.data.begin(), a.data.end()};
}

/// Mean and standard deviation of bytes / 255, from a histogram (exact whatever the count).
std::pair<double, double> pixel_stats(const std::vector<unsigned char>& bytes) {
  std::array<double, 256> count{};
  for (unsigned char b : bytes) ++count[b];
  double sum = 0, squares = 0;
  for (int b = 0; b < 256; ++b) {
    const double v = b / 255.0;
    sum += count[static_cast<std::size_t>(b)] * v;
    squares += count[static_cast<std::size_t>(b)] * v * v;
  }
  const double n = static_cast<double>(bytes.size()), mean = sum / n;
  return {mean, std::sqrt(std::max(0.0, squares / n - mean * mean))};
}

/// byte / 255 for every byte value.
const std::array<float, 256>& unit_scale() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[static_cast<std::size_t>(b)] = static_cast<float>(b) / 255.0f;
    return t;
  }();
  return table;
}

/// InvalidArgument for a padding below 0 or above 2^20.
void check_pad(Index pad) {
  if (pad < 0 || pad > (Index{1} << 20))
    detail::raise<InvalidArgument>("mnist_images", "padding " + std::to_string(pad) + " is not in [0, 2^20]");
}

/// The memory guard for `floats` values (and their labels) built from `set`.
void check_floats(const std::string& op, const MnistSet& set, double floats_per_image, const std::string& what) {
  const double images = static_cast<double>(set.train_size() + set.test_size());
  check_memory(
      op, set.name + " " + what,
      {{"pixels as floats", images * floats_per_image * sizeof(float)}, {"labels", images * sizeof(std::int64_t)}},
      "use fewer images (--limit-train / --limit-test)");
}

}  // namespace

MnistSet read_mnist(const std::filesystem::path& dir) {
  const auto files = find_files(dir);
  MnistSet set;
  set.folder = files[0].parent_path();
  IdxArray train = read_images(files[0], kParts[0].what);
  set.train_labels = read_labels(files[1], files[0], train.dims[0], kParts[1].what);
  IdxArray test = read_images(files[2], kParts[2].what);
  set.test_labels = read_labels(files[3], files[2], test.dims[0], kParts[3].what);
  if (train.dims[1] != test.dims[1] || train.dims[2] != test.dims[2])
    detail::raise<FormatError>(kOp, "the training images (" + quoted(files[0]) + ") are " +
                                        shape_string(train.dims[1], train.dims[2]) + " but the test images (" +
                                        quoted(files[2]) + ") " + shape_string(test.dims[1], test.dims[2]) +
                                        "; the files must come from the same set");
  set.height = train.dims[1];
  set.width = train.dims[2];
  set.train_images = std::move(train.data);
  set.test_images = std::move(test.data);
  std::tie(set.pixel_mean, set.pixel_std) = pixel_stats(set.train_images);

  set.name = "IDX data in " + set.folder.string();
  for (Index c = 0; c < kClasses; ++c) set.class_names.push_back(std::to_string(c));
  for (const Known& k : kKnown)
    if (set.train_labels.size() >= k.first_labels.size() &&
        std::equal(k.first_labels.begin(), k.first_labels.end(), set.train_labels.begin())) {
      set.name = k.name;
      set.class_names.assign(k.classes.begin(), k.classes.end());
      break;
    }
  return set;
}

MnistSet mnist_head(MnistSet set, Index train, Index test) {
  const auto pixels = static_cast<std::size_t>(set.height * set.width);
  if (train > 0 && train < set.train_size()) {
    set.train_labels.resize(static_cast<std::size_t>(train));
    set.train_images.resize(static_cast<std::size_t>(train) * pixels);
  }
  if (test > 0 && test < set.test_size()) {
    set.test_labels.resize(static_cast<std::size_t>(test));
    set.test_images.resize(static_cast<std::size_t>(test) * pixels);
  }
  return set;
}

std::pair<SequenceDataset, SequenceDataset> mnist_sequences(const MnistSet& set, MnistLayout layout) {
  const Index pixels = set.height * set.width;
  check_floats("mnist_sequences", set, static_cast<double>(pixels), "as sequences");
  const auto& scale = unit_scale();
  auto make = [&](const std::vector<unsigned char>& images, const std::vector<std::int64_t>& labels) {
    SequenceDataset d;
    d.steps = layout == MnistLayout::rows ? set.height : pixels;
    d.features = pixels / d.steps;
    d.classes = kClasses;
    d.name = set.name + (layout == MnistLayout::rows ? " rows" : " pixels");
    d.class_names = set.class_names;
    d.y = labels;
    d.x.resize(images.size());
    std::transform(images.begin(), images.end(), d.x.begin(), [&](unsigned char b) { return scale[b]; });
    return d;
  };
  return {make(set.train_images, set.train_labels), make(set.test_images, set.test_labels)};
}

std::pair<ImageDataset, ImageDataset> mnist_images(const MnistSet& set, Index pad) {
  check_pad(pad);
  const Index h = set.height + 2 * pad, w = set.width + 2 * pad;
  check_floats("mnist_images", set, static_cast<double>(h) * static_cast<double>(w),
               "as " + shape_string(h, w) + " images");
  const auto& scale = unit_scale();
  auto make = [&](const std::vector<unsigned char>& images, const std::vector<std::int64_t>& labels) {
    ImageDataset d;
    d.channels = 1;
    d.height = h;
    d.width = w;
    d.classes = kClasses;
    d.name = set.name + " " + shape_string(h, w);
    d.class_names = set.class_names;
    d.y = labels;
    // Row r of an image becomes row r + pad, starting at column pad; the border stays 0.
    d.x.assign(labels.size() * static_cast<std::size_t>(h * w), 0.0f);
    for (Index n = 0; n < d.size(); ++n)
      for (Index r = 0; r < set.height; ++r) {
        const unsigned char* from = images.data() + (n * set.height + r) * set.width;
        std::transform(from, from + set.width, d.x.data() + (n * h + r + pad) * w + pad,
                       [&](unsigned char b) { return scale[b]; });
      }
    return d;
  };
  return {make(set.train_images, set.train_labels), make(set.test_images, set.test_labels)};
}

std::pair<ImageDataset, ImageDataset> mnist_cnn_data(const MnistSet& set) {
  auto d = mnist_images(set, 2);
  // A set whose training pixels are all equal (std 0) is only centred.
  const float mean[] = {static_cast<float>(set.pixel_mean)},
              stdev[] = {set.pixel_std > 0 ? static_cast<float>(set.pixel_std) : 1.0f};
  normalize_channels(d.first, mean, stdev);
  normalize_channels(d.second, mean, stdev);
  return d;
}

std::pair<SequenceDataset, SequenceDataset> load_mnist(const std::filesystem::path& dir, MnistLayout layout) {
  return mnist_sequences(read_mnist(dir), layout);
}

std::pair<ImageDataset, ImageDataset> load_mnist_images(const std::filesystem::path& dir, Index pad) {
  check_pad(pad);  // before reading the files
  return mnist_images(read_mnist(dir), pad);
}

std::pair<ImageDataset, ImageDataset> mnist_cnn_data(const std::filesystem::path& dir) {
  return mnist_cnn_data(read_mnist(dir));
}

std::filesystem::path default_mnist_dir() {
  const char* env = std::getenv("BPPSA_MNIST");
  if (env != nullptr && *env != '\0') return env;
  return "/usr/share/datasets/fashion-mnist";
}

}  // namespace bppsa
