// CPU half of the scan: runs a Schedule on a team of threads (detail::run_team).
#pragma once

#include <vector>

#include "scan/schedule.hpp"

namespace bppsa::detail {

/// Buffers a schedule needs, sized once per plan and reused by every run.
template <class T>
struct Workspace {
  std::vector<AlignedVector<T>> slots;
  std::vector<AlignedVector<T>> v_slots;
  std::vector<Scratch<T>> scratch;  ///< one per thread

  void reserve(const Schedule<T>& schedule, Index batch, int threads);
  std::size_t bytes() const;
};

/// The run's data by scan position: elements a_1..a_n, their affine parts (rows × batch,
/// or null) and the prefixes s_0..s_n (rows × batch, column-major), s_0 = g_N filled in.
template <class T>
struct Operands {
  std::vector<JacobianView<T>> element;
  std::vector<const T*> element_v;
  std::vector<T*> prefix;
  std::vector<Index> prefix_rows;
};

/// Whether execute() runs whole samples per thread (no barrier between phases) rather than
/// spreading each phase over (task, sample) pairs: when the batch divides well among the threads.
inline bool runs_sample_major(Index batch, int threads) {
  return threads <= 1 || (batch >= threads && (batch % threads == 0 || batch >= 4 * threads));
}

/// Runs every op of the schedule on at most `threads` threads (fewer for little work:
/// detail::team_for). Products whose result is shared by the batch are done once, first; then
/// either whole sample ranges run through all phases (when the batch divides well among the
/// threads) or each phase is spread over (task, sample) pairs. Units are claimed, not assigned
/// (detail::Stages), so a descheduled thread delays only the unit it holds. Every value is
/// computed by exactly one thread in a fixed order, so the result does not depend on which
/// thread ran it.
template <class T>
void execute(const Schedule<T>& schedule, const Operands<T>& operands, Workspace<T>& ws, Index batch, int threads);

/// One op on the calling thread, exactly as execute() runs it (for the simulator's calibration):
/// the batch-independent part when `shared` (the matrix of a product shared by the batch;
/// nothing for other ops), else the per-sample part for samples [b0, b1). Ops are idempotent
/// (no op writes a buffer it reads), so an op may be run again to time it.
template <class T>
void execute_op(const Schedule<T>& schedule, const Operands<T>& operands, Workspace<T>& ws, Index batch, const Op& op,
                bool shared, Index b0, Index b1, Scratch<T>& scratch);

}  // namespace bppsa::detail
