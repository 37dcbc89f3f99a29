// MPI for model-parallel training: one checked wrapper around the calls bppsa makes, so the
// rest of the code never sees an MPI return code, and never blocks without a deadline.
//
// Every blocking operation here is a non-blocking MPI call polled until it completes or the
// communicator's timeout passes. A rank that died or hangs, or ranks that disagree about what
// comes next, therefore end in a CommError naming the operation, the peer and the wait —
// never in a job that hangs forever. Waiting ranks yield the CPU between polls: several
// ranks per core (tests with --oversubscribe, the network-namespace benchmark) would
// otherwise starve each other and the kernel's network stack.
//
// MPI itself (mpi.h) stays inside src/mpi/: this header only needs the library's handles.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bppsa/core/error.hpp"

namespace bppsa::mpi {

/// An MPI call failed, a peer did not answer in time, or ranks disagree.
class CommError : public Error {
 public:
  using Error::Error;
};
/// A wait passed the communicator's timeout (its message says what was awaited from whom).
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

/// RAII MPI_Init_thread / MPI_Finalize (MPI_THREAD_FUNNELED: OpenMP threads compute, the main
/// thread communicates). One per process.
class Environment {
 public:
  Environment(int* argc, char*** argv);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  /// Ends every rank of the job with `code` (MPI_Abort): what a rank does after an error
  /// that its peers cannot know about, so that none of them waits for it.
  [[noreturn]] static void abort(int code);
  /// True when this process was started by mpirun/mpiexec (PMIx/PMI variables are set).
  static bool launched_by_mpirun();
};

/// A communicator with a timeout on every wait. Cheap to copy (shared handle).
class Comm {
 public:
  /// MPI_COMM_WORLD (errors returned, not fatal, so they become exceptions).
  static Comm world(double timeout_s);

  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout() const { return timeout_; }
  /// Ranks with the same color form a new communicator, ordered by key (MPI_Comm_split).
  Comm split(int color, int key) const;

  /// Point-to-point, blocking with the timeout. `what` names the message in errors
  /// ("the gradient of micro-batch 2"). Tags separate message kinds between one pair.
  void send(std::span<const std::byte> data, int dest, int tag, const std::string& what) const;
  /// Receives a message of any size from `src` with `tag`.
  std::vector<std::byte> recv(int src, int tag, const std::string& what) const;
  /// Sends `data` to `peer` and receives `peer`'s message with the same tag (both directions
  /// at once: no deadlock when both sides call it).
  std::vector<std::byte> exchange(std::span<const std::byte> data, int peer, int tag, const std::string& what) const;

  /// A send that returns at once; finish() waits (with the timeout) for all still in flight.
  /// The data is copied, so the caller may reuse its buffer.
  void post_send(std::vector<std::byte> data, int dest, int tag, const std::string& what);
  void finish_sends();

  /// In-place sums across all ranks (MPI_Iallreduce + timed wait).
  void allreduce_sum(std::span<float> data, const std::string& what) const;
  void allreduce_sum(std::span<double> data, const std::string& what) const;
  /// In-place maximum of integers across all ranks.
  void allreduce_max(std::span<std::int64_t> data, const std::string& what) const;
  void barrier(const std::string& what) const;
  /// Root's bytes to every rank (size first, then content).
  std::vector<std::byte> broadcast(std::span<const std::byte> data, int root, const std::string& what) const;

  /// MPI_Wtime: seconds on this rank's clock.
  static double now();

 private:
  struct Handle;
  Comm(std::shared_ptr<Handle> h, double timeout);
  std::shared_ptr<Handle> h_;
  int rank_ = 0, size_ = 1;
  double timeout_ = 60;
  struct Pending;
  std::vector<std::shared_ptr<Pending>> pending_;
};

/// Bytes of a string / from bytes, for configuration messages.
std::vector<std::byte> to_bytes(const std::string& s);
std::string to_string(std::span<const std::byte> b);

}  // namespace bppsa::mpi
