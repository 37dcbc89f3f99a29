// Samples of different lengths: what their lengths must be, and which output columns of a
// recurrent stack a classifier head reads. One rule for the single-process model
// (src/nn/recurrent.cpp, src/nn/cpu/classifier.cpp) and a model-parallel stage's share of the
// steps (src/mpi/rnn_stage.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/core/types.hpp"

namespace bppsa::detail {

/// One length per sample of `batch`, each in 1..steps (in any order); ShapeError or
/// InvalidArgument naming `op` otherwise. Empty lengths (every sample has every step) pass.
inline void check_lengths(const std::string& op, std::span<const Index> lengths, Index batch, Index steps) {
  if (lengths.empty()) return;
  if (static_cast<Index>(lengths.size()) != batch)
    raise<ShapeError>(op, std::to_string(lengths.size()) + " lengths for a batch of " + std::to_string(batch) +
                              " (one per sample, or none)");
  for (std::size_t b = 0; b < lengths.size(); ++b)
    if (lengths[b] < 1 || lengths[b] > steps)
      raise<InvalidArgument>(op, "length " + std::to_string(lengths[b]) + " of sample " + std::to_string(b) +
                                     " is outside 1.." + std::to_string(steps) + " (the steps of the batch)");
}

/// check_lengths, and sorted longest first (non-increasing: PyTorch's packed order), as the
/// recurrent stacks take them (InvalidArgument naming the first sample out of order).
inline void check_sorted_lengths(const std::string& op, std::span<const Index> lengths, Index batch, Index steps) {
  check_lengths(op, lengths, batch, steps);
  for (std::size_t b = 1; b < lengths.size(); ++b)
    if (lengths[b] > lengths[b - 1])
      raise<InvalidArgument>(op,
                             "lengths must be sorted longest first (non-increasing, PyTorch's packed order): "
                             "sample " +
                                 std::to_string(b) + " has " + std::to_string(lengths[b]) + " after " +
                                 std::to_string(lengths[b - 1]) + "; sort the batch");
}

/// The order a batch with these lengths runs in (Recurrent's: longest first, stable): order[k]
/// is the sample at position k. Identity when every sample runs all `steps` (or none are given).
inline std::vector<Index> longest_first(std::span<const Index> lengths, Index steps, Index batch) {
  std::vector<Index> order(static_cast<std::size_t>(batch));
  std::iota(order.begin(), order.end(), Index{0});
  if (!lengths.empty() && *std::min_element(lengths.begin(), lengths.end()) < steps)
    std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) {
      return lengths[static_cast<std::size_t>(a)] > lengths[static_cast<std::size_t>(b)];
    });
  return order;
}

/// Sample k runs steps 1..lengths[k] (lengths ≥ 1, sorted longest first; the outputs are
/// time-major, step t of sample k in column (t − 1)·batch + k). cols receives the columns a head
/// reads: with `every`, each real step of each sample; in any case each sample's last real step,
/// those last and in sample order (the last `batch` columns are where predictions are read).
/// col_labels receives labels[k] for each of sample k's columns.
inline void head_columns(bool every, std::span<const Index> lengths, std::span<const std::int64_t> labels,
                         std::vector<Index>& cols, std::vector<std::int64_t>& col_labels) {
  const auto batch = static_cast<Index>(lengths.size());
  cols.clear();
  col_labels.clear();
  if (every && batch > 0)
    for (Index t = 0; t + 1 < lengths[0]; ++t)
      for (Index k = 0; k < batch && t + 1 < lengths[static_cast<std::size_t>(k)]; ++k) {
        cols.push_back(t * batch + k);
        col_labels.push_back(labels[static_cast<std::size_t>(k)]);
      }
  for (Index k = 0; k < batch; ++k) {
    cols.push_back((lengths[static_cast<std::size_t>(k)] - 1) * batch + k);
    col_labels.push_back(labels[static_cast<std::size_t>(k)]);
  }
}

}  // namespace bppsa::detail
