// The one schedule planner: picks the algorithm (Algorithm::automatic through the cost model),
// partitions hybrid chunks and builds the schedule. Scanner<T>::run plans with it and so does
// the simulator (bppsa/analysis/simulate.hpp), so what is simulated is what runs.
#pragma once

#include <vector>

#include "bppsa/core/memory.hpp"
#include "bppsa/scan/chain.hpp"
#include "bppsa/scan/resident_scanner.hpp"
#include "scan/cpu/executor.hpp"
#include "scan/schedule.hpp"

namespace bppsa::detail {

template <class T>
struct PlannedSchedule {
  Schedule<T> schedule;
  Algorithm algorithm = Algorithm::linear;  ///< the algorithm built (automatic resolved)
  int chunks = 1;                           ///< hybrid chunks per chain (1 for linear, 0 for blelloch)
};

/// Plans a scan over `elements` (positions 0..n; position 0, g_N, needs no layout) for a batch
/// of `batch` samples. `chunks` is the hybrid chunk count, 0 = `threads`. `cores` is the
/// parallelism Algorithm::automatic plans for: the Scanner passes min(threads, cores of the
/// machine) (oversubscribed threads add no arithmetic), the simulator its virtual workers.
/// Only layouts are read, never values, so chains far larger than memory can be planned.
template <class T>
PlannedSchedule<T> plan_schedule(std::vector<ElementInfo<T>> elements, Index batch, Algorithm requested, int threads,
                                 int chunks, int cores);

/// Throws InvalidArgument (naming `op`) for negative thread or chunk counts and for
/// Algorithm::fused.
void check_options(const ScanOptions& options, const char* op);
/// InvalidArgument: Algorithm::fused names the GPU's recurrent scan, which no plan runs.
[[noreturn]] void refuse_fused(const char* op);

/// The thread count a run with `options` uses: options.threads, or OpenMP's default when 0.
int run_threads(const ScanOptions& options);

/// plan_schedule exactly as Scanner<T>::run calls it for `options` with `threads` threads
/// (run_threads): Algorithm::automatic plans for min(threads, this machine's cores), since
/// oversubscribed threads add no arithmetic. The scan report (bppsa/analysis/report.hpp) plans
/// with it too, so what it reports is what runs.
template <class T>
PlannedSchedule<T> plan_run(std::vector<ElementInfo<T>> elements, Index batch, const ScanOptions& options, int threads);

/// The scan positions of a chain as the Scanner plans them: position 0 is g_N (no layout),
/// position i is J_{N−i+1}^T with the affine part e_{N−i} when that injection is set.
template <class T>
std::vector<ElementInfo<T>> scan_elements(const Chain<T>& chain);

/// The scan positions of a resident chain (scan_elements' convention), after checking it
/// (InvalidArgument / ShapeError under `op`, naming the element): at least one element, each
/// layout consistent (Layout::check) with count 1 or the batch, adjacent shapes chaining, and
/// `injection` empty or of N flags.
template <class T>
std::vector<ElementInfo<T>> resident_elements(const ResidentChain<T>& chain, const char* op);
/// The chunk count a resident scan plans with: InvalidArgument for automatic and fused (they
/// need host data or are not schedules); hybrid's 0 is ⌈√N⌉; 1 for the others.
int resident_chunks(const ScanOptions& options, Index n, const char* op);

/// What a run of `schedule` over `chain` holds beyond the chain itself, by part: the workspace
/// (Workspace::reserve), the gradients g_0 … g_N, the SpGEMM fill-in patterns the plan made
/// and the schedule's own bookkeeping. Scanner::run checks it (check_memory) after planning
/// and before allocating the workspace and the gradients.
template <class T>
std::vector<MemoryItem> run_memory(const Schedule<T>& schedule, const Chain<T>& chain);

/// Binds a run's data to scan positions, as execute() reads it: shapes out.g(k) (d_k × batch),
/// sets g_N, and points operands at the elements, their affine parts and the prefixes
/// (s_i = g_{N−i}); `dims` receives d_0..d_N. Spread over `threads` for long chains
/// (kParallelElements).
template <class T>
void bind_operands(const Chain<T>& chain, const Matrix<T>& g_last, Gradients<T>& out, Operands<T>& operands,
                   std::vector<Index>& dims, int threads);

}  // namespace bppsa::detail
