// The scan across ranks (docs/method.md §1, §2 hybrid, §6): the backward pass of a model split into K
// pipeline stages, in Θ(log K) message rounds instead of back-propagation's K − 1 hops.
//
// Each stage's backward is one affine map from the gradient arriving on its output to the
// gradient it passes to its input, g_in = M · g_out + v (M = the product of the stage's
// transposed Jacobians; v = what the stage's own losses inject). The stage holding the loss
// has no incoming gradient: its map is a constant vector. The ranks then run an exclusive
// scan of these maps with the non-commutative operator "apply the earlier map, then the
// later one", from the loss backwards; each rank gets the gradient on its output, a vector.
//
// Two log-depth algorithms over point-to-point messages (Open MPI's MPI_Exscan is linear):
//  - doubling: recursive doubling with partner rank ⊕ 2^d (MPICH's exscan order),
//              ⌈log2 K⌉ rounds; every rank exchanges every round.
//  - blelloch: the modified Blelloch tree of docs/method.md §2 over ranks, 2⌈log2 K⌉ − 1 rounds, about
//              half the matrix products and messages of doubling.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "bppsa/jacobian/jacobian.hpp"
#include "bppsa/mpi/comm.hpp"

namespace bppsa::mpi {

/// One stage's backward as an affine map of the gradient on its output (d_out × B) to the
/// gradient on its input (d_in × B). Column b uses sample b of M (or M's one shared value);
/// with `width`, only the first `width` samples have a block and the others pass unchanged.
template <class T>
struct Transfer {
  /// True: g_in = v whatever arrives (the stage that holds the loss, or a prefix that contains it).
  bool constant = false;
  std::optional<Jacobian<T>> m;  ///< M; nullopt = identity (a stage without Jacobians)
  std::optional<Matrix<T>> v;    ///< nullopt = zero; always set when constant
  /// > 0: M is dense and square with one block for each of samples 0 … width − 1 (count() ==
  /// width); every later sample's block is the identity (sequences sorted longest first that
  /// ended before the stage), neither stored, sent nor multiplied. 0: M covers every sample.
  Index width = 0;

  static Transfer vector(Matrix<T> g);
  static Transfer linear(Jacobian<T> m);
  static Transfer affine(Jacobian<T> m, Matrix<T> v);
  /// M · g + v (g ignored when constant).
  Matrix<T> apply(const Matrix<T>& g) const;
};

/// The map "first, then second": second(first(g)). `first` is closer to the loss.
template <class T>
Transfer<T> then(const Transfer<T>& first, const Transfer<T>& second);

/// Wire format of a list of transfers (one per micro-batch): kinds, shapes, CSR patterns,
/// values. decode throws CommError on a malformed or truncated message.
template <class T>
std::vector<std::byte> encode(std::span<const Transfer<T>> transfers);
template <class T>
std::vector<Transfer<T>> decode(std::span<const std::byte> bytes);

enum class RankScan { doubling, blelloch };
const char* to_string(RankScan s);
/// "doubling", "blelloch"; InvalidArgument otherwise.
RankScan parse_rank_scan(std::string_view name);
/// Message rounds on the critical path for K ranks: doubling ⌈log2 K⌉, blelloch 2⌈log2 K⌉ − 1
/// (0 for K = 1). Back-propagation's pipeline needs K − 1.
int scan_rounds(RankScan s, int ranks);

struct RankScanStats {
  int rounds = 0;  ///< rounds this rank waited on a message
  std::int64_t bytes_sent = 0;
  std::int64_t products = 0;  ///< then() calls on this rank
};

/// Exclusive scan over the ranks of `pipe` (rank K − 1 holds the loss and its constant
/// transfer; rank r's transfers describe stage r). Returns, on every rank r < K − 1, the
/// gradient arriving on its output for each micro-batch (the composition of the transfers of
/// ranks K − 1 … r + 1 applied to nothing); rank K − 1 gets an empty list. `tag` separates
/// concurrent scans (one per pass).
template <class T>
std::vector<Matrix<T>> exclusive_scan(const Comm& pipe, std::vector<Transfer<T>> mine, RankScan algorithm, int tag,
                                      RankScanStats* stats = nullptr);

}  // namespace bppsa::mpi
