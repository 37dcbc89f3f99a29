// What a results file records about the machine it was measured on.
#pragma once

#include <string>

namespace bppsa {

/// "model name" of the first CPU in /proc/cpuinfo; "unknown" where there is none.
std::string cpu_model();

}  // namespace bppsa
