// Which output columns of a recurrent stack a classifier head reads when the samples have
// lengths: one rule for the single-process classifier (src/nn/cpu/classifier.cpp) and for a
// model-parallel stage's share of the steps (src/mpi/rnn_stage.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "bppsa/core/types.hpp"

namespace bppsa::detail {

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
