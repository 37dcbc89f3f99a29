// Audio decoding and MFCC in a build without libsndfile and aubio (-DBPPSA_WITH_AUDIO=OFF): the
// same functions, throwing UnsupportedError, so that the library links; load_irmas still reads
// a feature cache computed by a build with audio.
#include "bppsa/core/error.hpp"
#include "bppsa/data/irmas.hpp"

namespace bppsa {
namespace {
[[noreturn]] void unsupported(const char* op) {
  detail::raise<UnsupportedError>(op,
                                  "built without audio: decoding WAV files and computing MFCC need libsndfile and "
                                  "aubio; rebuild with -DBPPSA_WITH_AUDIO=ON where they are installed (Debian: "
                                  "libsndfile1-dev libaubio-dev), or use a feature cache computed there");
}
}  // namespace

Audio read_audio(const std::filesystem::path&) { unsupported("read_audio"); }

Audio decode_audio(std::span<const unsigned char>, const std::string&) { unsupported("decode_audio"); }

std::vector<float> mfcc(std::span<const float>, int, const MfccPreset&) { unsupported("mfcc"); }

std::vector<float> detail::mfcc_unnormalised(std::span<const float>, int, const MfccPreset&) {
  unsupported("mfcc");
}

}  // namespace bppsa
