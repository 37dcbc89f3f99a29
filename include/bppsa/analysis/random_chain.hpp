// Random chains "scaled like a trained network's" for checks and benchmarks: every element's
// gain on the gradient it receives is normalised to 1 (spectral norm near 1), so chains of
// 10^5 elements neither overflow nor vanish in float.
#pragma once

#include <cstdint>
#include <string_view>

#include "bppsa/scan/chain.hpp"

namespace bppsa {

/// dense: orthonormal-row/column matrices with random signs; diagonal: ±U(0.75, 1);
/// csr: banded (3 per row, like a 1-D convolution), diagonally dominant values;
/// shared_dense_diag: one orthogonal S per shape shared by all elements (an RNN's W_hh^T)
/// times per-sample U(0.75, 1) diagonals; mixed: kinds, sharing and dimensions (dim/2, dim,
/// 3·dim/2) vary along the chain, rectangular elements included.
enum class ChainKind { dense, diagonal, csr, shared_dense_diag, mixed };

const char* to_string(ChainKind k);
/// "dense", "diag", "csr", "sdd", "mixed"; throws InvalidArgument otherwise.
ChainKind parse_chain_kind(std::string_view name);

struct RandomChainSpec {
  Index n = 100;   ///< number of Jacobians N
  Index dim = 20;  ///< d_k (the base dimension for mixed)
  Index batch = 1;
  ChainKind kind = ChainKind::dense;
  bool shared = false;  ///< one Jacobian per element for the whole batch (not for mixed)
  bool affine = false;  ///< per-step injections e_k for every k < N
  std::uint64_t seed = 1;
};

template <class T>
struct RandomProblem {
  Chain<T> chain;
  Matrix<T> g_last;  ///< g_N, unit-norm columns
};

template <class T>
RandomProblem<T> random_problem(const RandomChainSpec& spec);

/// The layout every element of random_problem(spec)'s chain has, made without values or random
/// draws, so that chains too large to hold can be planned and simulated: same kind, shape and
/// count (1 when spec.shared, else the batch), the same CSR band pattern; for sdd, S is the
/// identity (a planner never reads values). Throws InvalidArgument for mixed (kinds and
/// dimensions vary along that chain with the random draws: use random_problem's layouts).
template <class T>
Layout<T> random_chain_layout(const RandomChainSpec& spec);

}  // namespace bppsa
