// The checked, timed MPI wrapper (bppsa/mpi/comm.hpp).
#include "bppsa/mpi/comm.hpp"

#include <mpi.h>
#include <sched.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace bppsa::mpi {

struct Comm::Handle {
  MPI_Comm comm = MPI_COMM_NULL;
  bool owned = false;
  ~Handle() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned && !finalized && comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

struct Comm::Pending {
  std::vector<std::byte> data;
  MPI_Request request = MPI_REQUEST_NULL;
  int dest = 0;
  std::string what;
};

namespace {

void check(int rc, const std::string& op) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw CommError("[mpi] " + op + " failed: " + std::string(text, static_cast<std::size_t>(len)) +
                  " (a rank of the job died or its network failed)");
}

int count_of(std::size_t bytes, const std::string& what) {
  if (bytes > static_cast<std::size_t>(INT_MAX))
    throw CommError("[mpi] " + what + " is " + std::to_string(bytes) +
                    " bytes, more than one MPI message can carry (2 GiB): use smaller --micro-batches or --batch");
  return static_cast<int>(bytes);
}

/// Lets other ranks on this core run between polls: a yield while the wait is young (a
/// reply is usually microseconds away on one host), then short sleeps so that a rank that
/// waits long does not take a core from the ranks it waits for.
void pause_poll(double waited) {
  if (waited < 1e-3) {
    sched_yield();
  } else {
    timespec ts{0, 20000};
    nanosleep(&ts, nullptr);
  }
}

[[noreturn]] void timed_out(const std::string& what, double timeout, int peer) {
  char after[32];  // "0.5 s", not "0 s"
  std::snprintf(after, sizeof after, "%g s", timeout);
  throw TimeoutError("[mpi] timed out after " + std::string(after) + " waiting for " + what +
                     (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : std::string()) +
                     ": a rank died, hangs, or runs a different configuration; raise --mp-timeout if the "
                     "ranks are merely slow");
}

void wait(MPI_Request& request, double timeout, const std::string& what, int peer) {
  const double t0 = MPI_Wtime();
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    const double waited = MPI_Wtime() - t0;
    if (waited > timeout) {
      MPI_Cancel(&request);
      timed_out(what, timeout, peer);
    }
    pause_poll(waited);
  }
}

/// Receives one message of any size: a matched probe (so no other receive can take it), then
/// a non-blocking receive of exactly that message, both under the timeout.
std::vector<std::byte> receive(MPI_Comm comm, int src, int tag, double timeout, const std::string& what) {
  const double t0 = MPI_Wtime();
  MPI_Message message;
  MPI_Status status;
  for (;;) {
    int found = 0;
    check(MPI_Improbe(src, tag, comm, &found, &message, &status), what);
    if (found) break;
    const double waited = MPI_Wtime() - t0;
    if (waited > timeout) timed_out(what, timeout, src);
    pause_poll(waited);
  }
  int count = 0;
  check(MPI_Get_count(&status, MPI_BYTE, &count), what);
  std::vector<std::byte> data(static_cast<std::size_t>(count));
  MPI_Request request;
  check(MPI_Imrecv(data.data(), count, MPI_BYTE, &message, &request), what);
  wait(request, std::max(1.0, timeout - (MPI_Wtime() - t0)), what, src);
  return data;
}

}  // namespace

Environment::Environment(int* argc, char*** argv) {
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

Environment::~Environment() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void Environment::abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); std::_Exit(code); }

bool Environment::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_SIZE");
}

Comm::Comm(std::shared_ptr<Handle> h, double timeout) : h_(std::move(h)), timeout_(timeout) {
  check(MPI_Comm_rank(h_->comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(h_->comm, &size_), "MPI_Comm_size");
}

Comm Comm::world(double timeout_s) {
  if (!(timeout_s > 0)) throw InvalidArgument("[mpi] the timeout must be > 0 seconds");
  auto h = std::make_shared<Handle>();
  h->comm = MPI_COMM_WORLD;
  return Comm(std::move(h), timeout_s);
}

Comm Comm::split(int color, int key) const {
  auto h = std::make_shared<Handle>();
  check(MPI_Comm_split(h_->comm, color, key, &h->comm), "MPI_Comm_split");
  h->owned = true;
  MPI_Comm_set_errhandler(h->comm, MPI_ERRORS_RETURN);
  return Comm(std::move(h), timeout_);
}

void Comm::send(std::span<const std::byte> data, int dest, int tag, const std::string& what) const {
  MPI_Request request;
  check(MPI_Isend(data.data(), count_of(data.size(), what), MPI_BYTE, dest, tag, h_->comm, &request),
        "sending " + what);
  wait(request, timeout_, "rank " + std::to_string(dest) + " to take " + what, dest);
}

std::vector<std::byte> Comm::recv(int src, int tag, const std::string& what) const {
  return receive(h_->comm, src, tag, timeout_, what + " from rank " + std::to_string(src));
}

std::vector<std::byte> Comm::exchange(std::span<const std::byte> data, int peer, int tag,
                                      const std::string& what) const {
  MPI_Request request;
  check(MPI_Isend(data.data(), count_of(data.size(), what), MPI_BYTE, peer, tag, h_->comm, &request),
        "sending " + what);
  std::vector<std::byte> in = receive(h_->comm, peer, tag, timeout_, what + " from rank " + std::to_string(peer));
  wait(request, timeout_, "rank " + std::to_string(peer) + " to take " + what, peer);
  return in;
}

void Comm::post_send(std::vector<std::byte> data, int dest, int tag, const std::string& what) {
  auto p = std::make_shared<Pending>();
  p->data = std::move(data);
  p->dest = dest;
  p->what = what;
  check(MPI_Isend(p->data.data(), count_of(p->data.size(), what), MPI_BYTE, dest, tag, h_->comm, &p->request),
        "sending " + what);
  pending_.push_back(std::move(p));
}

void Comm::finish_sends() {
  for (auto& p : pending_) wait(p->request, timeout_, "rank " + std::to_string(p->dest) + " to take " + p->what, p->dest);
  pending_.clear();
}

namespace {
template <class V>
void allreduce(MPI_Comm comm, V* data, std::size_t n, MPI_Datatype type, MPI_Op op, double timeout,
               const std::string& what) {
  if (n > static_cast<std::size_t>(INT_MAX)) throw CommError("[mpi] " + what + ": too many values for one all-reduce");
  MPI_Request request;
  check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), type, op, comm, &request), what);
  wait(request, timeout, what, -1);
}
}  // namespace

void Comm::allreduce_sum(std::span<float> data, const std::string& what) const {
  allreduce(h_->comm, data.data(), data.size(), MPI_FLOAT, MPI_SUM, timeout_, "every rank's " + what);
}
void Comm::allreduce_sum(std::span<double> data, const std::string& what) const {
  allreduce(h_->comm, data.data(), data.size(), MPI_DOUBLE, MPI_SUM, timeout_, "every rank's " + what);
}
void Comm::allreduce_max(std::span<std::int64_t> data, const std::string& what) const {
  allreduce(h_->comm, data.data(), data.size(), MPI_INT64_T, MPI_MAX, timeout_, "every rank's " + what);
}

void Comm::barrier(const std::string& what) const {
  MPI_Request request;
  check(MPI_Ibarrier(h_->comm, &request), what);
  wait(request, timeout_, "every rank to reach " + what, -1);
}

std::vector<std::byte> Comm::broadcast(std::span<const std::byte> data, int root, const std::string& what) const {
  long long size = rank_ == root ? static_cast<long long>(data.size()) : 0;
  MPI_Request request;
  check(MPI_Ibcast(&size, 1, MPI_LONG_LONG, root, h_->comm, &request), what);
  wait(request, timeout_, what + " from rank " + std::to_string(root), root);
  std::vector<std::byte> out(static_cast<std::size_t>(size));
  if (rank_ == root) std::copy(data.begin(), data.end(), out.begin());
  check(MPI_Ibcast(out.data(), count_of(out.size(), what), MPI_BYTE, root, h_->comm, &request), what);
  wait(request, timeout_, what + " from rank " + std::to_string(root), root);
  return out;
}

double Comm::now() { return MPI_Wtime(); }

std::vector<std::byte> to_bytes(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string to_string(std::span<const std::byte> b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace bppsa::mpi
