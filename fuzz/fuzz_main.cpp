// libFuzzer entry point of one target, compiled once per target with BPPSA_FUZZ_TARGET set
// to its name (fuzz/CMakeLists.txt); the body is the shared one of targets.cpp.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "targets.hpp"

namespace {
const bppsa::fuzz::Target& the_target() {
  static const bppsa::fuzz::Target& target = bppsa::fuzz::target(BPPSA_FUZZ_TARGET);
  return target;
}
}  // namespace

// Adds the target's -max_len unless the command line sets one (libFuzzer reads its flags
// after this hook, from the argv it leaves).
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i)
    if (std::strncmp((*argv)[i], "-max_len=", 9) == 0) return 0;
  static std::string flag = "-max_len=" + std::to_string(the_target().max_len);
  static std::vector<char*> args;
  args.assign(*argv, *argv + *argc);
  args.insert(args.begin() + 1, flag.data());
  args.push_back(nullptr);
  *argc += 1;
  *argv = args.data();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  the_target().run({data, size});
  return 0;
}
