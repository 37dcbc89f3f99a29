// Which threads run the CPU engine's teams (docs/busy_core.md, docs/pytorch.md).
#pragma once

#include <string>
#include <string_view>

namespace bppsa {

enum class TeamThreads {
  /// bppsa's own pool (the library's default): a caller never waits for a thread the OS has not
  /// started, which keeps a team fast beside another process that holds a core.
  own,
  /// The OpenMP runtime's threads, those that also run the process's other OpenMP work (PyTorch's
  /// ops, where torch uses the same runtime; bppsa's Python package's default). Its idle threads
  /// spin for milliseconds after each parallel region, so beside them a pool of its own competes
  /// for the cores; on these threads nothing does. A region's end waits for every thread of its
  /// team, and libgomp ends the process when it cannot start a thread (as torch's ops would). In a
  /// child forked after this library was loaded the own pool is used (libgomp hangs there).
  openmp,
};

/// Sets, for the whole process, the threads that teams started from now on run on.
void set_team_threads(TeamThreads threads);

/// The setting in force (TeamThreads::own unless set).
TeamThreads team_threads();

/// "own" or "openmp".
std::string to_string(TeamThreads threads);

/// Parses "own" or "openmp"; anything else throws InvalidArgument naming `what` (a flag, an environment variable)
/// and the accepted values.
TeamThreads parse_team_threads(std::string_view text, std::string_view what);

/// The file of the OpenMP runtime this library calls (libgomp's path), or "unknown".
std::string openmp_runtime();

}  // namespace bppsa
