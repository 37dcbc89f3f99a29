// bppsa: back-propagation by parallel scan. Include this for the whole public API.
#pragma once

#include "bppsa/core/error.hpp"
#include "bppsa/core/types.hpp"
#include "bppsa/jacobian/csr_pattern.hpp"
#include "bppsa/jacobian/jacobian.hpp"
#include "bppsa/jacobian/product.hpp"
#include "bppsa/scan/chain.hpp"
#include "bppsa/scan/random_chain.hpp"
#include "bppsa/scan/scanner.hpp"
