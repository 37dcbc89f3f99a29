// The paper's synthetic bitstream classification task (docs/method.md §5).
#pragma once

#include <cstdint>

#include "bppsa/data/dataset.hpp"

namespace bppsa {

/// `count` samples: label p uniform in {0..9}; `steps` bits i.i.d. Bernoulli(0.05 + 0.1·p),
/// one input feature per step (0.0 or 1.0). Deterministic in `seed` on every platform.
/// min_steps in 1..steps − 1: each sample's length is uniform in [min_steps, steps] (drawn
/// after its label), its bits stop there and the rest is zero padding (SequenceDataset::lengths);
/// 0 or steps: every sample has all `steps` bits (the paper's task, the same samples as before).
SequenceDataset make_bitstream(Index count, Index steps, std::uint64_t seed, Index min_steps = 0);

/// The paper's split: 50,000 samples, 32,000 train / 18,000 test (pass smaller totals to
/// shrink both proportionally: train = round(total · 0.64)); min_steps as make_bitstream's.
std::pair<SequenceDataset, SequenceDataset> bitstream_split(Index steps, std::uint64_t seed, Index total = 50000,
                                                            Index min_steps = 0);

}  // namespace bppsa
