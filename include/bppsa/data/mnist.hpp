// MNIST-format data sets (Fashion-MNIST, MNIST, …) from their four IDX files, with the official
// train/test split, as sequences (rows, pixels) or zero-padded images (docs/method.md §7).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/data/dataset.hpp"
#include "bppsa/data/image.hpp"

namespace bppsa {

/// An MNIST-format data set as its files hold it: 8-bit H×W images with labels 0..9, split as
/// published (train: train-*, test: t10k-*).
struct MnistSet {
  std::string name;              ///< "Fashion-MNIST", "MNIST" (told by content) or "IDX data in <folder>"
  std::filesystem::path folder;  ///< where the four files were found
  Index height = 0;
  Index width = 0;
  std::vector<unsigned char> train_images, test_images;  ///< N × height × width bytes, row-major
  std::vector<std::int64_t> train_labels, test_labels;   ///< one per image, 0..9
  std::vector<std::string> class_names;                  ///< 10 names
  /// Mean and standard deviation of the whole training set's pixels in [0, 1] (read_mnist sets
  /// them; mnist_head keeps them): mnist_cnn_data standardises with these.
  double pixel_mean = 0, pixel_std = 0;

  Index train_size() const { return static_cast<Index>(train_labels.size()); }
  Index test_size() const { return static_cast<Index>(test_labels.size()); }
};

/// Reads train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
/// t10k-labels-idx1-ubyte (each plain or .gz, the plain one first; also spelled
/// train-images.idx3-ubyte) from the first of dir, dir/raw, dir/FashionMNIST/raw, dir/MNIST/raw
/// (torchvision's layouts) that holds training images. Which set it is comes from the first ten
/// training labels (Fashion-MNIST's 9 0 0 3 0 2 7 2 5 5, MNIST's 5 0 4 1 9 2 1 3 1 4), with
/// Fashion-MNIST's class names or the digits "0" … "9".
/// Throws IoError for a missing folder or file (naming what was looked for and the fix: Debian's
/// dataset-fashion-mnist or --data-dir), read_idx's errors, and FormatError naming the files
/// for images that are not N×H×W, labels that are not N, image and label counts that differ, a
/// label ≥ 10 (with its index), or train and test images of different sizes.
MnistSet read_mnist(const std::filesystem::path& dir);

/// The first `train` training and `test` test images of `set` (0, or more than there are: all),
/// its pixel statistics unchanged.
MnistSet mnist_head(MnistSet set, Index train, Index test);

/// rows:   T = H steps of W pixels (row-by-row sequential MNIST);
/// pixels: T = H·W steps of 1 pixel (pixel-by-pixel sequential MNIST).
enum class MnistLayout { rows, pixels };

/// Train and test as sequences of pixels byte / 255, named "<set> rows" or "<set> pixels".
/// ResourceError (check_memory) if they cannot fit in memory.
std::pair<SequenceDataset, SequenceDataset> mnist_sequences(const MnistSet& set, MnistLayout layout);

/// Train and test as 1×(H+2·pad)×(W+2·pad) images of pixels byte / 255, zero-padded on every
/// side (pad = 2 gives MNIST's 28×28 the 32×32 that VGG-style networks with five 2×2 poolings
/// need), named "<set> 32×32". InvalidArgument if pad is not in [0, 2^20]; ResourceError as
/// mnist_sequences.
std::pair<ImageDataset, ImageDataset> mnist_images(const MnistSet& set, Index pad = 2);

/// The CNN data of `bppsa train --data mnist`: mnist_images(set, 2), both standardised with the
/// training set's own pixel_mean and pixel_std (Fashion-MNIST: 0.2860, 0.3530; a std of 0, all
/// pixels equal, only centres).
std::pair<ImageDataset, ImageDataset> mnist_cnn_data(const MnistSet& set);

/// read_mnist(dir), then mnist_sequences / mnist_images / mnist_cnn_data, with their errors.
std::pair<SequenceDataset, SequenceDataset> load_mnist(const std::filesystem::path& dir, MnistLayout layout);
std::pair<ImageDataset, ImageDataset> load_mnist_images(const std::filesystem::path& dir, Index pad = 2);
std::pair<ImageDataset, ImageDataset> mnist_cnn_data(const std::filesystem::path& dir);

/// Debian's dataset-fashion-mnist, /usr/share/datasets/fashion-mnist, unless the environment
/// variable BPPSA_MNIST names another folder.
std::filesystem::path default_mnist_dir();

}  // namespace bppsa
