// Anchor translation unit for the error types (keeps their vtables in the library).
#include "bppsa/core/error.hpp"
