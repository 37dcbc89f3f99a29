// MFCC preset validation: no audio library involved, so every build has it (load_irmas checks
// its preset even where audio decoding is compiled out and only cached features can be read).
#include "bppsa/core/error.hpp"
#include "bppsa/data/irmas.hpp"

namespace bppsa {

void detail::check_mfcc_preset(const std::string& op, const MfccPreset& preset) {
  const std::string which = "MFCC preset '" + preset.name + "': ";
  if (preset.n_fft < 2) raise<InvalidArgument>(op, which + "n_fft must be ≥ 2, got " + std::to_string(preset.n_fft));
  if (preset.hop < 1 || preset.hop > preset.n_fft)
    raise<InvalidArgument>(op, which + "hop must be in [1, n_fft = " + std::to_string(preset.n_fft) + "], got " +
                                   std::to_string(preset.hop));
  if (preset.n_filters < 1)
    raise<InvalidArgument>(op, which + "n_filters must be ≥ 1, got " + std::to_string(preset.n_filters));
  if (preset.n_mfcc < 2 || preset.n_mfcc > preset.n_filters)
    raise<InvalidArgument>(op, which + "n_mfcc must be in [2, n_filters = " + std::to_string(preset.n_filters) +
                                   "] (coefficient 0 is dropped), got " + std::to_string(preset.n_mfcc));
}

}  // namespace bppsa
