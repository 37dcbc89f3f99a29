// How the CPU engine shares work among threads on a machine it does not own: teams sized by the
// work (a fork/join costs microseconds, a descheduled thread a scheduler slice), a team runner
// whose caller never waits for a thread that has not started, and stages whose units are claimed
// rather than assigned, so that waiting is for work, not for threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace bppsa::detail {

/// Floating-point operations below which one more thread costs more than it saves: the
/// granularity at which a team grows. Tests set 0 (every team full) to exercise the threads on
/// small problems.
inline std::atomic<double> flops_per_thread{1 << 18};

/// Threads to run `flops` of work on, at most `threads`, at least 1: one per flops_per_thread.
inline int team_for(double flops, int threads) {
  threads = std::max(threads, 1);
  const double granularity = flops_per_thread.load(std::memory_order_relaxed);
  if (!(granularity > 0) || flops >= granularity * threads) return threads;
  return std::max(1, static_cast<int>(flops / granularity));
}

/// Sets flops_per_thread for its lifetime (tests).
class FlopsPerThread {
 public:
  explicit FlopsPerThread(double flops) : saved_(flops_per_thread.exchange(flops)) {}
  ~FlopsPerThread() { flops_per_thread.store(saved_); }
  FlopsPerThread(const FlopsPerThread&) = delete;
  FlopsPerThread& operator=(const FlopsPerThread&) = delete;

 private:
  double saved_;
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

/// Runs body(worker) on the calling thread (worker 0) and on up to `threads` − 1 other threads
/// (workers 1 … threads − 1, each at most once): those of bppsa's process-wide pool, or with
/// set_team_threads(TeamThreads::openmp) the OpenMP runtime's (not in a forked child). A helper
/// joins only while the job is open, which ends when the caller's call returns. On the own pool the
/// caller then waits for the threads that joined, never for one the OS has not yet run, and when no
/// more threads can be made the pool runs with those it has; an OpenMP region's end waits for every
/// thread of its team, and libgomp ends the process when it cannot make one. body must share its
/// work by claiming (Stages, atomic counters), since any worker but 0 may be missing. While a job
/// runs (another caller's, or a call from inside body) the caller runs body(0) alone. An exception
/// from body(0), else the first from a worker, is rethrown. Forking from inside a body is not
/// supported.
void run_team(int threads, void (*call)(void* context, int worker), void* context);

template <class F>
void run_team(int threads, F&& body) {
  using Body = std::remove_reference_t<F>;
  run_team(
      threads, [](void* context, int worker) { (*static_cast<Body*>(context))(worker); },
      const_cast<void*>(static_cast<const void*>(std::addressof(body))));
}

/// A sequence of stages, each of `units` independent units; stage s starts only when every
/// unit of stage s − 1 is done. Any thread of the team may run any unit (claimed with an atomic
/// counter), so a thread the OS has descheduled holds back only the unit it has claimed, not
/// every stage; a thread with nothing to claim spins briefly, then sleeps on the counter.
class Stages {
 public:
  explicit Stages(const std::vector<std::int64_t>& units) : counters_(units.size()) {
    for (std::size_t s = 0; s < units.size(); ++s) counters_[s].units = units[s];
  }

  /// Runs stage after stage on the calling thread (a member of the team): unit(s, u) for every
  /// unit it claims. unit must not throw (the caller records errors and carries on).
  template <class F>
  void run(F&& unit) {
    for (std::size_t s = 0; s < counters_.size(); ++s) {
      if (s > 0) wait_done(counters_[s - 1]);
      Counter& c = counters_[s];
      for (std::int64_t u; (u = c.next.fetch_add(1, std::memory_order_relaxed)) < c.units;) {
        unit(s, u);
        if (c.done.fetch_add(1, std::memory_order_acq_rel) + 1 == c.units) c.done.notify_all();
      }
    }
  }

 private:
  struct alignas(64) Counter {
    std::atomic<std::int64_t> next{0};
    std::atomic<std::int64_t> done{0};
    std::int64_t units = 0;
  };

  static void wait_done(const Counter& c) {
    constexpr int kSpins = 1024;  // about the cost of a futex round trip before sleeping
    for (int i = 0; i < kSpins; ++i) {
      if (c.done.load(std::memory_order_acquire) >= c.units) return;
      cpu_relax();
    }
    for (std::int64_t v; (v = c.done.load(std::memory_order_acquire)) < c.units;)
      c.done.wait(v, std::memory_order_acquire);
  }

  std::vector<Counter> counters_;
};

}  // namespace bppsa::detail
