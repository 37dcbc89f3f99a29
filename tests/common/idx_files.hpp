// Shared by the tests of MNIST-format data: IDX files assembled byte by byte (independently of
// the reader), gzip by zlib, and small fake data set folders in the published file layout.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "temp_dir.hpp"

namespace testutil {

using ByteVector = std::vector<unsigned char>;

/// 00 00 <type> <dims.size()>, each size as 4 big-endian bytes, then `data`.
inline ByteVector idx_bytes(const std::vector<std::uint32_t>& dims, const ByteVector& data, unsigned char type = 0x08) {
  ByteVector b = {0, 0, type, static_cast<unsigned char>(dims.size())};
  for (std::uint32_t d : dims) {
    b.push_back(static_cast<unsigned char>(d >> 24));
    b.push_back(static_cast<unsigned char>(d >> 16));
    b.push_back(static_cast<unsigned char>(d >> 8));
    b.push_back(static_cast<unsigned char>(d));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

/// `bytes` as a gzip file, written by zlib's gzip file interface (gzdopen, gzwrite) to a
/// temporary file and read back.
inline ByteVector gzipped(const ByteVector& bytes) {
  std::FILE* tmp = std::tmpfile();
  if (tmp == nullptr) throw std::runtime_error("tmpfile failed");
  gzFile gz = gzdopen(::dup(::fileno(tmp)), "wb6");
  const bool ok = gz != nullptr && (bytes.empty() || gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())) ==
                                                         static_cast<int>(bytes.size()));
  if (gz == nullptr || gzclose(gz) != Z_OK || !ok) {
    std::fclose(tmp);
    throw std::runtime_error("gzwrite failed");
  }
  ByteVector out;
  std::rewind(tmp);
  for (int c; (c = std::fgetc(tmp)) != EOF;) out.push_back(static_cast<unsigned char>(c));
  std::fclose(tmp);
  return out;
}

/// The four files' names in the published spelling, and the dotted one some mirrors use.
inline const std::vector<std::string> kMnistNames = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                                     "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
inline const std::vector<std::string> kMnistDotted = {"train-images.idx3-ubyte", "train-labels.idx1-ubyte",
                                                      "t10k-images.idx3-ubyte", "t10k-labels.idx1-ubyte"};

/// A small MNIST-format set: `train` + `test` images of h×w whose pixel p of image i is
/// (7·i + 3·p) % 256 (test images continue the count), labels i % 10 (test: (i + 3) % 10).
struct FakeMnist {
  std::uint32_t train, test, h, w;
  ByteVector train_images, train_labels, test_images, test_labels;

  FakeMnist(std::uint32_t train_ = 13, std::uint32_t test_ = 7, std::uint32_t h_ = 5, std::uint32_t w_ = 4)
      : train(train_), test(test_), h(h_), w(w_) {
    for (std::uint32_t i = 0; i < train + test; ++i) {
      ByteVector& images = i < train ? train_images : test_images;
      for (std::uint32_t p = 0; p < h * w; ++p) images.push_back(static_cast<unsigned char>((7 * i + 3 * p) % 256));
      if (i < train)
        train_labels.push_back(static_cast<unsigned char>(i % 10));
      else
        test_labels.push_back(static_cast<unsigned char>((i - train + 3) % 10));
    }
  }

  /// The four files as IDX bytes, in kMnistNames' order.
  std::vector<ByteVector> files() const {
    return {idx_bytes({train, h, w}, train_images), idx_bytes({train}, train_labels),
            idx_bytes({test, h, w}, test_images), idx_bytes({test}, test_labels)};
  }

  /// Writes the four files into `folder` (created), gzip-compressed with ".gz" names when `gz`.
  void write(const std::filesystem::path& folder, bool gz = false, bool dotted = false) const {
    const auto all = files();
    for (std::size_t i = 0; i < all.size(); ++i)
      write_bytes(folder / ((dotted ? kMnistDotted : kMnistNames)[i] + (gz ? ".gz" : "")),
                  gz ? gzipped(all[i]) : all[i]);
  }
};

}  // namespace testutil
