#include "core/team.hpp"

#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/core/threads.hpp"

namespace bppsa::detail {
namespace {

/// The pool's threads wait for a job: a short spin (back-to-back jobs, such as Jacobian generation
/// then the scan, find them awake), then a sleep that leaves the core to whoever needs it. One job
/// at a time: run_team's busy flag keeps every other caller out.
class Pool {
 public:
  void run(int threads, void (*call)(void*, int), void* context) {
    std::unique_lock lock(mutex_);
    try {
      for (; workers_ < threads - 1; ++workers_) std::thread([this, id = workers_ + 1] { work(id); }).detach();
    } catch (const std::system_error&) {  // no more threads (a process or container limit): use those there are
    }
    job_ = Job{call, context, std::min(threads, workers_ + 1), 0, true, nullptr};
    epoch_.fetch_add(1, std::memory_order_release);
    lock.unlock();
    wake_.notify_all();

    std::exception_ptr error;
    try {
      call(context, 0);
    } catch (...) {
      error = std::current_exception();
    }

    lock.lock();
    job_.open = false;
    left_.wait(lock, [&] { return job_.active == 0; });
    if (!error) error = job_.error;
    job_ = Job{};
    lock.unlock();
    if (error) std::rethrow_exception(error);
  }

 private:
  struct Job {
    void (*call)(void*, int) = nullptr;
    void* context = nullptr;
    int threads = 0;
    int active = 0;
    bool open = false;
    std::exception_ptr error;
  };

  void work(int id) {
    std::uint64_t seen = 0;
    bool ran = false;
    for (;;) {
      // Only a thread that has just run a body spins (the next job of a sequence is likely near);
      // one that was not wanted, or came too late, sleeps at once.
      constexpr int kSpins = 2048;
      for (int i = 0; ran && i < kSpins && epoch_.load(std::memory_order_acquire) == seen; ++i) cpu_relax();
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return epoch_.load(std::memory_order_acquire) != seen; });
      seen = epoch_.load(std::memory_order_acquire);
      ran = job_.open && id < job_.threads;
      if (!ran) continue;
      ++job_.active;
      const Job job = job_;
      lock.unlock();
      std::exception_ptr error;
      try {
        job.call(job.context, id);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !job_.error) job_.error = error;
      if (--job_.active == 0) left_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, left_;
  alignas(64) std::atomic<std::uint64_t> epoch_{0};  // spun on: a cache line of its own
  alignas(64) Job job_;
  int workers_ = 0;
};

// Never destroyed: its threads sleep through exit. A forked child (a data-loader worker, say)
// inherits the object but not its threads, so it starts a pool of its own.
std::atomic<Pool*> pool{nullptr};
std::atomic<TeamThreads> mode{TeamThreads::own};
// A child inherits the OpenMP runtime's record of its parent's threads, not the threads: libgomp
// would wait for them forever, so a forked child's teams run on the own pool.
std::atomic<bool> forked{false};
// Held by the caller of a job on either kind of threads: a nested or concurrent call runs alone (an
// OpenMP team per calling thread would oversubscribe the cores), whatever the mode was or is.
std::atomic<bool> busy{false};
// Registered when the library is loaded, before any thread of ours exists.
[[maybe_unused]] const int at_fork = pthread_atfork(nullptr, nullptr, [] {
  pool.store(nullptr);
  forked.store(true);
  busy.store(false);  // a job another thread of the parent was running is not the child's
});

// body(0) on the caller, body(w) on the OpenMP team's thread w while the caller's call has not
// returned. Unlike the own pool's, the region's end waits for every thread of the team.
void run_openmp(int threads, void (*call)(void*, int), void* context) {
  std::atomic<bool> open{true}, worker_failed{false};
  std::exception_ptr error, worker_error;
#pragma omp parallel num_threads(threads)
  {
    const int worker = omp_get_thread_num();
    if (worker == 0) {
      try {
        call(context, 0);
      } catch (...) {
        error = std::current_exception();
      }
      open.store(false, std::memory_order_release);
    } else if (open.load(std::memory_order_acquire)) {
      try {
        call(context, worker);
      } catch (...) {
        if (!worker_failed.exchange(true)) worker_error = std::current_exception();
      }
    }
  }
  if (!error) error = worker_error;
  if (error) std::rethrow_exception(error);
}

Pool& the_pool() {
  Pool* p = pool.load(std::memory_order_acquire);
  if (p) return *p;
  auto* fresh = new Pool;
  if (pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *p;
}

}  // namespace

void run_team(int threads, void (*call)(void* context, int worker), void* context) {
  if (threads <= 1) {
    call(context, 0);
    return;
  }
  if (busy.exchange(true, std::memory_order_acquire)) {
    call(context, 0);
    return;
  }
  struct Release {
    ~Release() { busy.store(false, std::memory_order_release); }
  } release;
  if (mode.load(std::memory_order_relaxed) == TeamThreads::openmp && !forked.load(std::memory_order_relaxed))
    run_openmp(threads, call, context);
  else
    the_pool().run(threads, call, context);
}

}  // namespace bppsa::detail

namespace bppsa {

void set_team_threads(TeamThreads threads) { detail::mode.store(threads); }

TeamThreads team_threads() { return detail::mode.load(); }

std::string to_string(TeamThreads threads) { return threads == TeamThreads::openmp ? "openmp" : "own"; }

TeamThreads parse_team_threads(std::string_view text, std::string_view what) {
  if (text == "own") return TeamThreads::own;
  if (text == "openmp") return TeamThreads::openmp;
  detail::raise<InvalidArgument>("team threads", std::string(what) + " is '" + std::string(text) +
                                                     "'; expected 'own' (bppsa's own pool) or 'openmp' (the OpenMP "
                                                     "runtime's threads, shared with PyTorch's ops)");
}

std::string openmp_runtime() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&omp_get_max_threads), &info) != 0 && info.dli_fname) return info.dli_fname;
  return "unknown";
}

}  // namespace bppsa
