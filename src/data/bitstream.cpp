// The synthetic bitstream task: the class is hidden in the rate of 1-bits over a long sequence,
// so a model must integrate over all T steps (docs/method.md §5).
#include "bppsa/data/bitstream.hpp"

#include <cmath>

#include "bppsa/core/error.hpp"
#include "core/random.hpp"

namespace bppsa {
namespace {

SequenceDataset empty_bitstream(Index steps, Index min_steps) {
  SequenceDataset d;
  d.steps = steps;
  d.features = 1;
  d.classes = 10;
  for (int c = 0; c < 10; ++c) d.class_names.push_back(std::to_string(c));
  d.name = "bitstream T=" + (min_steps > 0 ? std::to_string(min_steps) + ".." : std::string()) + std::to_string(steps);
  return d;
}

/// Appends `count` samples drawn from `rng`: first the label p, then (with min_steps) the
/// length, then the bits.
void append_samples(SequenceDataset& d, Index count, Index min_steps, std::mt19937_64& rng) {
  d.x.reserve(d.x.size() + static_cast<std::size_t>(count * d.steps));
  d.y.reserve(d.y.size() + static_cast<std::size_t>(count));
  for (Index i = 0; i < count; ++i) {
    const auto p = static_cast<std::int64_t>(detail::uniform_below(rng, 10));
    const double rate = 0.05 + 0.1 * static_cast<double>(p);
    Index len = d.steps;
    if (min_steps > 0) {
      len = min_steps +
            static_cast<Index>(detail::uniform_below(rng, static_cast<std::uint64_t>(d.steps - min_steps + 1)));
      d.lengths.push_back(len);
    }
    for (Index t = 0; t < d.steps; ++t) d.x.push_back(t < len && detail::uniform01(rng) < rate ? 1.0f : 0.0f);
    d.y.push_back(p);
  }
}

/// Checks the arguments; returns min_steps with "every sample full length" as 0.
Index check(const char* op, Index count, Index steps, Index min_steps) {
  if (count < 0 || steps <= 0)
    detail::raise<InvalidArgument>(op, "need count >= 0 and steps > 0, got count " + std::to_string(count) +
                                           " and steps " + std::to_string(steps));
  if (min_steps < 0 || min_steps > steps)
    detail::raise<InvalidArgument>(op, "min_steps " + std::to_string(min_steps) + " is outside 0.." +
                                           std::to_string(steps) + " (0: every sample has all " +
                                           std::to_string(steps) + " steps)");
  return min_steps == steps ? 0 : min_steps;
}

}  // namespace

SequenceDataset make_bitstream(Index count, Index steps, std::uint64_t seed, Index min_steps) {
  min_steps = check("make_bitstream", count, steps, min_steps);
  SequenceDataset d = empty_bitstream(steps, min_steps);
  std::mt19937_64 rng(detail::mix_seed(seed, 2));
  append_samples(d, count, min_steps, rng);
  return d;
}

std::pair<SequenceDataset, SequenceDataset> bitstream_split(Index steps, std::uint64_t seed, Index total,
                                                            Index min_steps) {
  min_steps = check("bitstream_split", total, steps, min_steps);
  // The samples are i.i.d., so the first samples of make_bitstream(total, …) are the training
  // set and the rest the test set: no shuffle needed and no copy of the whole set.
  const auto train_count = static_cast<Index>(std::llround(static_cast<double>(total) * 0.64));
  std::pair<SequenceDataset, SequenceDataset> out{empty_bitstream(steps, min_steps), empty_bitstream(steps, min_steps)};
  std::mt19937_64 rng(detail::mix_seed(seed, 2));
  append_samples(out.first, train_count, min_steps, rng);
  append_samples(out.second, total - train_count, min_steps, rng);
  return out;
}

}  // namespace bppsa
