// How the CPU engine shares work among its OpenMP threads on a machine it does not own: teams
// sized by the work (a fork/join costs microseconds, a descheduled thread a scheduler slice), and
// stages whose units are claimed rather than assigned, so that waiting is for work, not threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
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
    for (std::int64_t v; (v = c.done.load(std::memory_order_acquire)) < c.units;) c.done.wait(v, std::memory_order_acquire);
  }

  std::vector<Counter> counters_;
};

}  // namespace bppsa::detail
