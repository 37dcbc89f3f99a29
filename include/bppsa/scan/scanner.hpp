// The scan engine: every gradient g_N … g_0 of a chain by sequential BP or by parallel scan.
//
// Operator contract (docs/method.md §1–§2). The scan runs over [g_N, J_N^T, …, J_1^T] with
// x ◇ y = y · x: the LATER element multiplies on the LEFT. ◇ is associative and not
// commutative, so every algorithm keeps operand order; the inclusive prefix s_i = g_{N−i}
// is returned for every i, including g_0. The parallel algorithms reassociate the products,
// so their results may differ from sequential BP in the last bits (floating point is only
// pseudo-associative); on exactly representable data (small integers) they are identical.
// For a fixed algorithm and chunk count, results do not depend on the thread count.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bppsa/core/device.hpp"
#include "bppsa/scan/chain.hpp"

namespace bppsa {

/// - linear:    sequential BP, g_{k−1} = J_k^T g_k; N matrix-vector products. The oracle.
/// - blelloch:  the modified Blelloch scan (docs/method.md §2): ≤ N matrix-matrix products,
///              critical path at most 2⌈log2(N+1)⌉ − 1 levels, no padding, any N.
/// - hybrid:    p contiguous chunks per chain: reduce each chunk (mm), scan the chunk totals,
///              push prefixes through each chunk (mv). Chunk sizes are balanced by the cost
///              model (chunk 0 only does matrix-vector work, so it is longer).
/// - automatic: picks one of the above by the cost model (see docs/cost_model.md).
/// - fused:     not a schedule of Scanner: the GPU's chunked scan of chains whose Jacobians are
///              applied on the fly, never stored (src/scan/cuda/fused/; the recurrent layers'
///              backward), named so that a backward reports what ran. Scanner refuses it;
///              parse_algorithm rejects it.
enum class Algorithm { linear, blelloch, hybrid, automatic, fused };

const char* to_string(Algorithm a);
/// "linear", "blelloch", "hybrid", "auto"; throws InvalidArgument otherwise.
Algorithm parse_algorithm(std::string_view name);

struct ScanOptions {
  Algorithm algorithm = Algorithm::automatic;
  /// Worker threads (OpenMP); 0 = OpenMP's default. Parallel over the batch and, when the
  /// batch is smaller than the thread count, within each chain.
  int threads = 0;
  /// hybrid: chunks per chain; 0 = the thread count (automatic: chosen by the cost model).
  int chunks = 0;
  /// Scan every input value for NaN/Inf before running. Outputs are always checked (cheap),
  /// so with false a non-finite input is still reported as soon as it reaches a gradient.
  bool check_inputs = true;
  /// Where the products run. Device::cuda runs the same schedule (the same algorithm, chunks
  /// and statistics as the CPU for the same options; `threads` then only packs and unpacks on
  /// the host and sizes hybrid chunks) on the current CUDA device: the plan allocates the
  /// device buffers once, each run uploads the chain's values and g_N and downloads every
  /// gradient. Results equal the CPU engine's up to float reassociation (fused multiply-adds,
  /// library GEMMs), and exactly on small-integer data. Without CUDA: UnsupportedError.
  Device device = Device::cpu;
  /// Check every output gradient (and g_N) for NaN/Inf. With both checks false, non-finite
  /// values propagate into the outputs, as torch's autograd does.
  bool check_outputs = true;
};

/// What a run did. Counts are per chain (one sample); flops cover the whole batch with
/// products shared by the batch counted once.
struct ScanStats {
  Algorithm algorithm = Algorithm::linear;  ///< the algorithm that ran (automatic resolved)
  int threads = 1;
  int chunks = 1;  ///< hybrid chunks per chain (1 for linear, 0 for blelloch)
  /// Critical path of the schedule as executed: phases run one after another (each waits for
  /// the one before), the products of a task in sequence, tasks of a phase in parallel, so
  /// levels = Σ over phases of the longest task. Blelloch: at most 2⌈log2(N+1)⌉ − 1 (one
  /// product per task; docs/method.md §2.3 says when it is one fewer); linear: N.
  Index levels = 0;
  /// The longest chain of products that depend on each other (≤ levels): what an ideal
  /// dataflow machine with unbounded workers would wait for.
  Index depth = 0;
  Index mm = 0;  ///< matrix-matrix products
  Index mv = 0;  ///< matrix-vector products (affine parts of combines included)
  /// mm_by_kind[A][B]: products A · B by the kinds of the later (A) and earlier (B) operand.
  std::array<std::array<Index, kKindCount>, kKindCount> mm_by_kind{};
  std::array<Index, kKindCount> mv_by_kind{};  ///< by the kind of the matrix
  double flops = 0;
  double seconds = 0;       ///< wall time of run(), checks included
  double plan_seconds = 0;  ///< part of it spent planning (0 when the plan was reused)
  bool plan_reused = false;
  std::size_t workspace_bytes = 0;  ///< intermediate products and affine parts
  Device device = Device::cpu;      ///< where it ran
  /// Device::cuda: kernel launches and library calls per run. The sequential schedule needs
  /// one per element, so launch latency (a few µs each) is its floor. 0 on the CPU.
  Index launches = 0;
};

/// g_0 … g_N, g_k being d_k × B (one column per sample).
template <class T>
class Gradients {
 public:
  Index size() const { return static_cast<Index>(g_.size()); }
  Matrix<T>& g(Index k) { return g_.at(static_cast<std::size_t>(k)); }
  const Matrix<T>& g(Index k) const { return g_.at(static_cast<std::size_t>(k)); }
  /// Shapes every g_k (d_k × batch); keeps storage whose shape is already right. threads:
  /// for long chains (kParallelElements), 0 = OpenMP's default.
  void resize(const std::vector<Index>& dims, Index batch, int threads = 0);

 private:
  std::vector<Matrix<T>> g_;
};

/// Runs backward passes and owns everything they need between runs: the schedule (planned
/// once per chain structure: kinds, shapes, patterns, counts), the SpGEMM fill-in patterns,
/// the workspace buffers and per-thread scratch. Reuse one Scanner across training steps.
/// A Scanner is not thread-safe; use one per concurrent caller.
template <class T>
class Scanner {
 public:
  explicit Scanner(ScanOptions options = {});
  ~Scanner();
  Scanner(Scanner&&) noexcept;
  Scanner& operator=(Scanner&&) noexcept;

  const ScanOptions& options() const { return options_; }
  void set_options(const ScanOptions& options);

  /// Given g_N (d_N × batch), fills out.g(k) = g_k for k = 0..N.
  /// Throws ShapeError / InvalidArgument for malformed chains (naming the element and
  /// shapes), NonFiniteError for NaN/Inf inputs or overflowing results.
  const ScanStats& run(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out);

  const ScanStats& stats() const { return stats_; }

 private:
  struct Plan;
  ScanOptions options_;
  ScanStats stats_;
  std::unique_ptr<Plan> plan_;
};

/// One-shot convenience: a fresh Scanner's run.
template <class T>
Gradients<T> backward(const Chain<T>& chain, const Matrix<T>& g_last, ScanOptions options = {},
                      ScanStats* stats = nullptr);

extern template class Gradients<float>;
extern template class Gradients<double>;
extern template class Scanner<float>;
extern template class Scanner<double>;

}  // namespace bppsa
