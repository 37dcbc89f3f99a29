// The team runner and the executor's stages (src/core/team.hpp): every unit runs once and in
// stage order, an absent thread holds nothing back, and the pool survives exceptions, nesting,
// concurrent callers, fork and a thread limit; each on the own pool and on OpenMP's threads
// (bppsa/core/threads.hpp).
#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bppsa/core/error.hpp"
#include "bppsa/core/threads.hpp"
#include "core/team.hpp"

namespace {

using namespace bppsa;

// Every test of the team below runs on both kinds of threads.
class Team : public testing::TestWithParam<TeamThreads> {
 protected:
  void SetUp() override { set_team_threads(GetParam()); }
  void TearDown() override { set_team_threads(TeamThreads::own); }
};

// ---------------------------------------------------------------------------------------
// The executor's stages: units claimed by whichever thread is free.

TEST_P(Team, StagesEveryUnitRunsOnceAndAfterThePreviousStage) {
  const std::vector<std::int64_t> units{1, 7, 64, 3, 0, 200, 1, 33};
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> runs(units.size() * 256);
    std::vector<std::atomic<std::int64_t>> finished(units.size());
    std::atomic<int> out_of_order{0};
    detail::Stages stages(units);
    detail::run_team(threads, [&](int) {
      stages.run([&](std::size_t s, std::int64_t u) {
        if (s > 0 && finished[s - 1].load() != units[s - 1]) ++out_of_order;
        ++runs[s * 256 + static_cast<std::size_t>(u)];
        ++finished[s];
      });
    });
    EXPECT_EQ(out_of_order.load(), 0) << threads << " threads";
    for (std::size_t s = 0; s < units.size(); ++s)
      for (std::int64_t u = 0; u < 256; ++u)
        ASSERT_EQ(runs[s * 256 + static_cast<std::size_t>(u)].load(), u < units[s] ? 1 : 0)
            << "stage " << s << " unit " << u << ", " << threads << " threads";
  }
}

TEST_P(Team, StagesAThreadThatNeverArrivesHoldsNothingBack) {
  // Worker 1 stands for a thread the OS has descheduled: it claims nothing until every unit is
  // done, or 30 s have passed. With a barrier per stage the caller would wait for it.
  const std::vector<std::int64_t> units{4, 9, 2, 16, 5};
  std::int64_t total = 0;
  for (std::int64_t u : units) total += u;
  std::atomic<std::int64_t> ran{0};
  std::atomic<bool> worker_joined{false}, joined_after_all{false};
  detail::Stages stages(units);
  detail::run_team(2, [&](int worker) {
    if (worker == 1) {
      worker_joined = true;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (ran.load() < total && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      joined_after_all = ran.load() == total;
    }
    stages.run([&](std::size_t, std::int64_t) { ++ran; });
  });
  EXPECT_EQ(ran.load(), total);
  if (worker_joined) {
    EXPECT_TRUE(joined_after_all.load()) << "the caller waited for the absent worker";
  }
}

// ---------------------------------------------------------------------------------------
// The team runner: the caller is worker 0; pool threads join while the job is open.

TEST_P(Team, RunTeamTheCallerRunsOnceAndEveryOtherWorkerAtMostOnce) {
  for (int threads : {1, 2, 3, 8})
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> calls(16);
      std::atomic<std::int64_t> ran{0};
      detail::Stages stages({3, 40, 1, 17});
      detail::run_team(threads, [&](int worker) {
        ++calls[static_cast<std::size_t>(worker)];
        stages.run([&](std::size_t, std::int64_t) { ++ran; });
      });
      ASSERT_EQ(calls[0].load(), 1) << threads << " threads";
      for (int w = 1; w < 16; ++w) ASSERT_LE(calls[static_cast<std::size_t>(w)].load(), w < threads ? 1 : 0) << w;
      ASSERT_EQ(ran.load(), 61) << "every unit done before run_team returns";
    }
}

TEST_P(Team, RunTeamAnExceptionReachesTheCallerAndThePoolStaysUsable) {
  for (int rep = 0; rep < 20; ++rep) {
    try {
      detail::run_team(2, [](int worker) {
        if (worker == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        throw std::runtime_error("unit " + std::to_string(worker));
      });
      FAIL() << "nothing thrown";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "unit 0") << "the caller's exception wins over a worker's";
    }
    std::atomic<int> ran{0};
    detail::Stages stages({10});
    detail::run_team(2, [&](int) { stages.run([&](std::size_t, std::int64_t) { ++ran; }); });
    ASSERT_EQ(ran.load(), 10);
  }
}

TEST_P(Team, RunTeamNestedAndConcurrentCallersEachFinishTheirOwnWork) {
  // A call from inside a body, or while another caller holds the pool, runs on its caller alone.
  std::atomic<int> inner_workers{0};
  detail::run_team(2, [&](int worker) {
    if (worker == 0) detail::run_team(4, [&](int w) { inner_workers += 1 + w * 100; });
  });
  EXPECT_EQ(inner_workers.load(), 1);

  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 200; ++rep) {
        std::atomic<std::int64_t> ran{0};
        detail::Stages stages({5 + c, 30, 2});
        detail::run_team(1 + (rep + c) % 3, [&](int) { stages.run([&](std::size_t, std::int64_t) { ++ran; }); });
        if (ran.load() != 37 + c) ++wrong;
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_P(Team, RunTeamACallWhileAJobRunsRunsAloneOnItsCaller) {
  // Another thread's call while a team is running gets no helper and starts no OpenMP region, and
  // neither does one made after the mode changed under the running job.
  std::atomic<bool> inside{false}, release{false};
  std::thread holder([&] {
    detail::run_team(2, [&](int worker) {
      if (worker != 0) return;
      inside = true;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!release && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
  });
  while (!inside) std::this_thread::sleep_for(std::chrono::microseconds(100));
  for (TeamThreads now : {GetParam(), GetParam() == TeamThreads::own ? TeamThreads::openmp : TeamThreads::own}) {
    set_team_threads(now);
    std::atomic<int> helpers{0}, in_region{0};
    detail::run_team(2, [&](int worker) {
      if (worker != 0) ++helpers;
      if (omp_in_parallel()) ++in_region;
    });
    EXPECT_EQ(helpers.load(), 0) << to_string(now);
    EXPECT_EQ(in_region.load(), 0) << to_string(now);
  }
  set_team_threads(GetParam());
  release = true;
  holder.join();
}

TEST_P(Team, RunTeamAForkedChildStartsAPoolOfItsOwn) {
  // The child inherits the pool, busy or not, but not its threads (PyTorch forks data-loader
  // workers from a process that is training): its teams must still get real workers. The busy
  // loop does not allocate: GCC 12's AddressSanitizer allocator is not fork-safe, and a child
  // forked while a parent thread held one of its locks hangs in its first new thread.
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop)
      detail::run_team(2, [](int) {
        for (int i = 0; i < 64; ++i) detail::cpu_relax();
      });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);  // a deadlock kills the child: the parent sees a signal, not exit 0
    int joined = 0;
    for (int rep = 0; rep < 5; ++rep) {
      std::atomic<bool> worker_ran{false};
      detail::run_team(2, [&](int worker) {
        if (worker == 1) worker_ran = true;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (worker == 0 && !worker_ran && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
      joined += worker_ran ? 1 : 0;
    }
    _exit(joined == 5 ? 0 : 1);
  }
  stop = true;
  busy.join();
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child's teams got no worker (status " << status << ")";
}

TEST_P(Team, RunTeamNoMoreThreadsMeansFewerWorkersNotAnError) {
  // In a child (a new pool) whose threads cannot be created (a 1 TiB default stack cannot be
  // mapped: what a process or container thread limit looks like), the work still gets done, by
  // the caller, call after call.
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, std::size_t{1} << 40);
    if (pthread_setattr_default_np(&attr) != 0) _exit(3);
    int wrong = 0;
    for (int rep = 0; rep < 5; ++rep) {
      std::atomic<int> ran{0}, others{0};
      detail::Stages stages({7, 11});
      try {
        detail::run_team(4, [&](int worker) {
          if (worker != 0) ++others;
          stages.run([&](std::size_t, std::int64_t) { ++ran; });
        });
      } catch (...) {
        _exit(2);
      }
      if (ran != 18 || others != 0) ++wrong;
    }
    _exit(wrong == 0 ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  if (WEXITSTATUS(status) == 3) GTEST_SKIP() << "pthread_setattr_default_np refused the stack size";
  EXPECT_EQ(WEXITSTATUS(status), 0) << (WEXITSTATUS(status) == 2 ? "run_team threw" : "work missing");
}

INSTANTIATE_TEST_SUITE_P(Threads, Team, testing::Values(TeamThreads::own, TeamThreads::openmp),
                         [](const testing::TestParamInfo<TeamThreads>& info) { return to_string(info.param); });

// ---------------------------------------------------------------------------------------
// Whose threads: OpenMP's are the ones the process's other OpenMP regions ran on.

TEST(TeamThreads, OpenMpTeamsRunOnTheThreadsOfTheProcesssOpenMpRegions) {
  std::vector<pthread_t> region(2);
  int region_threads = 0;
#pragma omp parallel num_threads(2)
  {
    region[static_cast<std::size_t>(omp_get_thread_num())] = pthread_self();
#pragma omp single
    region_threads = omp_get_num_threads();
  }
  if (region_threads < 2) GTEST_SKIP() << "the OpenMP runtime gave one thread";

  for (TeamThreads mode : {TeamThreads::openmp, TeamThreads::own}) {
    set_team_threads(mode);
    std::atomic<bool> worker_ran{false}, in_region{false}, same_thread{false};
    detail::run_team(2, [&](int worker) {
      if (worker != 1) {  // the caller waits (10 s at most) for worker 1 to have run
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!worker_ran && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        return;
      }
      in_region = omp_in_parallel() != 0 && omp_get_thread_num() == 1;
      same_thread = pthread_equal(pthread_self(), region[1]) != 0;
      worker_ran = true;
    });
    ASSERT_TRUE(worker_ran.load()) << to_string(mode);
    EXPECT_EQ(in_region.load(), mode == TeamThreads::openmp) << to_string(mode);
    EXPECT_EQ(same_thread.load(), mode == TeamThreads::openmp) << to_string(mode);
  }
  set_team_threads(TeamThreads::own);
}

TEST(TeamThreads, AForkedChildRunsOpenMpTeamsOnItsOwnPool) {
  // The parent has used OpenMP threads; the child inherits libgomp's record of them but not the
  // threads, so its teams must not go to OpenMP (they would wait forever), and still get workers.
  set_team_threads(TeamThreads::openmp);
  detail::run_team(2, [](int) {});
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    std::atomic<bool> worker_ran{false}, in_region{false};
    detail::run_team(2, [&](int worker) {
      if (worker == 1) {
        in_region = omp_in_parallel() != 0;
        worker_ran = true;
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (worker == 0 && !worker_ran && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    _exit(worker_ran && !in_region ? 0 : 1);
  }
  set_team_threads(TeamThreads::own);
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(TeamThreads, ParsesItsTwoNamesAndRefusesOthersNamingTheSource) {
  EXPECT_EQ(parse_team_threads("own", "x"), TeamThreads::own);
  EXPECT_EQ(parse_team_threads("openmp", "x"), TeamThreads::openmp);
  EXPECT_EQ(to_string(TeamThreads::openmp), "openmp");
  try {
    parse_team_threads("omp", "$BPPSA_TEAM_THREADS");
    FAIL() << "accepted 'omp'";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("$BPPSA_TEAM_THREADS is 'omp'"), std::string::npos) << what;
    EXPECT_NE(what.find("'own'"), std::string::npos) << what;
  }
  EXPECT_NE(openmp_runtime().find("gomp"), std::string::npos) << openmp_runtime();
}

}  // namespace
