// The fused chunked scan without a GPU: its chunking, thread mapping and cost model, and whole
// runs of its kernels' __host__ __device__ phases replayed by g++ over every (block, thread), phase
// by phase as the barriers order them, against the CPU engine's BP (tests/common/cuda/fused_record.hpp).
// Hazards: the replay in reversed and shuffled thread orders (and, for kernels without
// barriers in their loop, thread by thread through all steps) must give the same bits; every
// device array and shared memory starts as NaN, so a read of a value nobody wrote shows.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <numeric>

#include "cuda/fused_record.hpp"
#include "nn/cuda/fused_cells.hpp"
#include "tolerance.hpp"

namespace {

using namespace fused_test;
using gpu::FusedArgs;
using gpu::FusedChoice;
using gpu::FusedLaunch;
using gpu::FusedRequest;
using gpu::FusedShape;

template <class T>
constexpr T kNaN = std::numeric_limits<T>::quiet_NaN();

/// Memory aligned as the device's (cudaMalloc: 256 bytes; shared memory: 32 here): the kernels
/// load W_hh four values at a time, 4·sizeof(T)-aligned.
template <class T>
struct Aligned {
  using value_type = T;
  Aligned() = default;
  template <class U>
  Aligned(const Aligned<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const Aligned&) const { return true; }
  bool operator!=(const Aligned&) const { return false; }
};
template <class T>
using DeviceVector = std::vector<T, Aligned<T>>;

// ---------------------------------------------------------------------------------------------
// The replay

/// In which order the replay runs the threads of a block.
enum class Order {
  forward,      ///< phase by phase, threads 0, 1, …
  reverse,      ///< phase by phase, threads last to first
  shuffled,     ///< phase by phase, a different random order each phase
  thread_major  ///< every thread through all its steps before the next (launches without step barriers)
};

/// A device's worth of host arrays for one replay of a plan on a layer.
template <class T>
struct Replayed {
  FusedArgs<T> a;
  DeviceVector<T> wp, totals, g;
  DeviceVector<T> y, yi;           ///< the push's outputs (replay with outputs; yi for a Step with an input side)
  bool in_flight_at_exit = false;  ///< an interleaved replay's kernel exited with copies in flight
  std::vector<Idx> len;            ///< the per-sample lengths a.len points to (empty: null)
};

/// Runs the column launch a.launch: the load phase of every thread, a barrier, then every step.
/// With the record's ring (l.stages > 0) the asynchronous copies land as late as the kernel
/// allows, at the wait of the step that reads them (with a barrier after it: every thread's of
/// that step), and their slot values hold NaN from the issue on; `late` lands them one step after
/// that (a kernel that does not wait: the replay's own test).
template <class T>
void replay_columns(const FusedArgs<T>& a, const DeviceVector<T>& wp, Order order, std::mt19937_64& rng,
                    bool late = false) {
  const FusedLaunch& l = a.launch;
  for (Idx block = 0; block < l.blocks; ++block) {
    DeviceVector<T> sm(static_cast<std::size_t>(l.smem), kNaN<T>);
    std::vector<gpu::FusedGroup> gr;
    for (Idx t = 0; t < l.threads; ++t) gr.push_back(gpu::fused_group(a.shape, l, block, t));
    std::vector<Idx> ids(static_cast<std::size_t>(l.threads));
    std::iota(ids.begin(), ids.end(), 0);
    auto arrange = [&] {
      if (order == Order::reverse) std::reverse(ids.begin(), ids.end());
      if (order == Order::shuffled) std::shuffle(ids.begin(), ids.end(), rng);
    };
    // The ring's copies in flight: (thread, step) → (destination, source) values.
    std::map<std::pair<Idx, Idx>, std::vector<std::pair<T*, const T*>>> in_flight;
    auto issue = [&](Idx t, Idx j) {
      const gpu::FusedGroup& g = gr[static_cast<std::size_t>(t)];
      const T* ring = sm.data() + gpu::ring_offset(a.shape, l);
      gpu::visit_cell(a.shape.variant, [&](auto cell) {
        gpu::fused_stage_copies<T, decltype(cell)>(a, sm.data(), g, j, [&](T* dst, const T* src, auto n) {
          constexpr int N = decltype(n)::value;
          const Idx at = static_cast<Idx>(dst - ring);  // inside the group's slot of step j
          ASSERT_EQ(at / l.stage_len, g.slot * l.stages + j % l.stages) << "step " << j << " thread " << t;
          ASSERT_EQ((at + N - 1) / l.stage_len, at / l.stage_len) << "step " << j << " thread " << t;
          if (N > 1) {
            ASSERT_EQ(reinterpret_cast<std::uintptr_t>(dst) % 16, 0u);
            ASSERT_EQ(reinterpret_cast<std::uintptr_t>(src) % 16, 0u);
          }
          for (int i = 0; i < N; ++i) {
            dst[i] = kNaN<T>;
            in_flight[{t, j}].emplace_back(dst + i, src + i);
          }
        });
      });
    };
    auto land = [&](Idx t, Idx j) {
      const auto it = in_flight.find({t, j});
      if (it == in_flight.end()) return;
      for (const auto& [dst, src] : it->second) *dst = *src;
      in_flight.erase(it);
    };
    arrange();
    for (Idx j = 0; l.stages > 0 && j < l.stages - 1; ++j)
      for (Idx t : ids) issue(t, j);
    for (Idx t : ids) gpu::fused_load(a, sm.data(), gr[static_cast<std::size_t>(t)], t);
    const T* w = l.w_shared ? sm.data() : wp.data();
    const Idx ldw = l.w_shared ? gpu::launch_hpad(l) : a.shape.ldw;
    auto step = [&](Idx t, Idx j) {
      bool ok = false;  // the layer's cell code is the plan's variant
      gpu::visit_cell(a.shape.variant, [&](auto cell) {
        using Step = decltype(cell);
        ok = gpu::fused_with_combo<T, Step>(l.tile, l.nc, [&](auto tw, auto nc) {
          constexpr int TW = decltype(tw)::value, NC = decltype(nc)::value;
          if (a.len != nullptr)
            gpu::fused_step<T, Step, TW, NC, true>(a, sm.data(), w, ldw, gr[static_cast<std::size_t>(t)], j);
          else
            gpu::fused_step<T, Step, TW, NC, false>(a, sm.data(), w, ldw, gr[static_cast<std::size_t>(t)], j);
        });
      });
      ASSERT_TRUE(ok) << "tile " << l.tile << " × " << l.nc << " not compiled";
    };
    // The push's outputs of a chunk's first step, after the loop (and a barrier).
    auto tail = [&](Idx t) {
      gpu::visit_cell(a.shape.variant, [&](auto cell) {
        gpu::fused_push_tail<T, decltype(cell)>(a, sm.data(), gr[static_cast<std::size_t>(t)]);
      });
    };
    const Idx ahead = l.stages - 1, landing = late ? 1 : 0;
    if (order == Order::thread_major) {
      ASSERT_EQ(l.ntile, 1) << "thread-major replay is only valid without step barriers";
      std::shuffle(ids.begin(), ids.end(), rng);
      for (Idx t : ids) {
        for (Idx j = 0; j < l.steps; ++j) {
          if (l.stages > 0) land(t, j - landing);  // the thread's own wait (no barrier)
          step(t, j);
          if (l.stages > 0) issue(t, j + ahead);
        }
        tail(t);
      }
    } else {
      for (Idx j = 0; j < l.steps; ++j) {
        if (l.stages > 0)
          for (Idx t : ids) land(t, j - landing);
        arrange();
        for (Idx t : ids) {
          step(t, j);
          if (l.stages > 0) issue(t, j + ahead);
        }
      }
      arrange();
      for (Idx t : ids) tail(t);
    }
  }
}

/// The order of a column kernel's operations per thread as kernels.cuh issues them (the ring's
/// prologue, then per step: wait, barrier, step, copies; the push's tail behind a barrier), with
/// knobs that break it, for replay_interleaved. The defaults are the kernel's.
struct KernelOrder {
  Idx prologue = gpu::kFusedRecordStages - 1;  ///< steps whose copies are issued before the loop
  Idx wait = gpu::kFusedRecordStages - 2;      ///< __pipeline_wait_prior's argument
  bool top_barrier = true;                     ///< the ring's barrier after the wait (ntile > 1)
  bool tail_barrier = true;                    ///< the barrier before the push's tail (ring, ntile > 1)
};

/// Runs the column launch a.launch as the GPU may: every thread runs KernelOrder's operations in
/// program order, the threads interleaved at random between barriers, and every asynchronous copy
/// lands at a random moment between its issue and the wait that completes its group (its
/// destination NaN until then). Returns false if a thread exits with copies still in flight.
template <class T>
bool replay_interleaved(const FusedArgs<T>& a, const DeviceVector<T>& wp, std::mt19937_64& rng,
                        const KernelOrder& k = {}) {
  const FusedLaunch& l = a.launch;
  const bool ring = l.stages > 0, sync = l.ntile > 1;
  enum Kind { kIssue, kLoad, kBarrier, kWait, kStep, kTail };
  struct Op {
    Kind kind;
    Idx j;
  };
  std::vector<Op> program;
  if (ring)
    for (Idx j = 0; j < k.prologue; ++j) program.push_back({kIssue, j});
  program.push_back({kLoad, 0});
  program.push_back({kBarrier, 0});
  for (Idx j = 0; j < l.steps; ++j) {
    if (ring) {
      program.push_back({kWait, k.wait});
      if (sync && k.top_barrier) program.push_back({kBarrier, 0});
    }
    program.push_back({kStep, j});
    if (ring) {
      program.push_back({kIssue, j + k.prologue});
    } else if (sync) {
      program.push_back({kBarrier, 0});
    }
  }
  if (l.mode == gpu::kFusedPush && a.y_out != nullptr && l.nc == 1) {
    if (ring && sync && k.tail_barrier) program.push_back({kBarrier, 0});
    program.push_back({kTail, 0});
  }
  const T* w = nullptr;
  bool clean = true;
  for (Idx block = 0; block < l.blocks; ++block) {
    DeviceVector<T> sm(static_cast<std::size_t>(l.smem), kNaN<T>);
    w = l.w_shared ? sm.data() : wp.data();
    const Idx ldw = l.w_shared ? gpu::launch_hpad(l) : a.shape.ldw;
    const auto n = static_cast<std::size_t>(l.threads);
    std::vector<gpu::FusedGroup> gr;
    for (Idx t = 0; t < l.threads; ++t) gr.push_back(gpu::fused_group(a.shape, l, block, t));
    using Copies = std::vector<std::pair<T*, const T*>>;
    std::vector<std::vector<Copies>> groups(n);  // per thread, its committed groups in order
    std::vector<std::size_t> pc(n, 0);
    std::vector<bool> waiting(n, false);  // at a barrier
    auto run = [&](std::size_t t, const Op& op) {
      const gpu::FusedGroup& g = gr[t];
      gpu::visit_cell(a.shape.variant, [&](auto cell) {
        using Step = decltype(cell);
        switch (op.kind) {
          case kIssue: {
            Copies cs;
            gpu::fused_stage_copies<T, Step>(a, sm.data(), g, op.j, [&](T* dst, const T* src, auto m) {
              for (int i = 0; i < decltype(m)::value; ++i) {
                dst[i] = kNaN<T>;
                cs.emplace_back(dst + i, src + i);
              }
            });
            groups[t].push_back(std::move(cs));  // one commit a step, empty or not
            break;
          }
          case kLoad:
            gpu::fused_load(a, sm.data(), g, static_cast<Idx>(t));
            break;
          case kWait:  // all but the newest `wait` groups complete
            while (groups[t].size() > static_cast<std::size_t>(op.j)) {
              for (const auto& [dst, src] : groups[t].front()) *dst = *src;
              groups[t].erase(groups[t].begin());
            }
            break;
          case kStep:
            gpu::fused_with_combo<T, Step>(l.tile, l.nc, [&](auto tw, auto nc) {
              constexpr int TW = decltype(tw)::value, NC = decltype(nc)::value;
              if (a.len != nullptr)
                gpu::fused_step<T, Step, TW, NC, true>(a, sm.data(), w, ldw, g, op.j);
              else
                gpu::fused_step<T, Step, TW, NC, false>(a, sm.data(), w, ldw, g, op.j);
            });
            break;
          case kTail:
            gpu::fused_push_tail<T, Step>(a, sm.data(), g);
            break;
          case kBarrier:
            break;
        }
      });
    };
    std::uniform_int_distribution<int> coin(0, 3);
    while (true) {
      std::vector<std::size_t> ready;
      bool done = true;
      for (std::size_t t = 0; t < n; ++t) {
        done = done && pc[t] >= program.size();
        if (pc[t] < program.size() && !waiting[t]) ready.push_back(t);
      }
      if (done) break;
      if (coin(rng) == 0) {  // one copy in flight lands early
        std::vector<std::pair<std::size_t, std::size_t>> flying;
        for (std::size_t t = 0; t < n; ++t)
          for (std::size_t q = 0; q < groups[t].size(); ++q)
            if (!groups[t][q].empty()) flying.emplace_back(t, q);
        if (!flying.empty()) {
          const auto [t, q] = flying[std::uniform_int_distribution<std::size_t>(0, flying.size() - 1)(rng)];
          Copies& cs = groups[t][q];
          const auto i = std::uniform_int_distribution<std::size_t>(0, cs.size() - 1)(rng);
          *cs[i].first = *cs[i].second;
          cs.erase(cs.begin() + static_cast<std::ptrdiff_t>(i));  // the group stays, empty: the wait counts groups
        }
      }
      if (ready.empty()) {  // every thread at the barrier: all pass it
        for (std::size_t t = 0; t < n; ++t)
          if (waiting[t]) waiting[t] = false, ++pc[t];
        continue;
      }
      const std::size_t t = ready[std::uniform_int_distribution<std::size_t>(0, ready.size() - 1)(rng)];
      const Op& op = program[pc[t]];
      if (op.kind == kBarrier) {
        waiting[t] = true;
        continue;
      }
      run(t, op);
      ++pc[t];
    }
    for (std::size_t t = 0; t < n; ++t)
      for (const Copies& cs : groups[t]) clean = clean && cs.empty();
  }
  return clean;
}

/// Runs the carry. With a ring (a.carry.stages > 0) its asynchronous copies land as late as the
/// kernel allows, at the wait of the step that reads them, and their slots hold NaN from the issue
/// on; `late` lands each stage one step after that (a kernel that does not wait: the replay's own test).
template <class T>
void replay_carry(const FusedArgs<T>& a, Order order, std::mt19937_64& rng, bool late = false) {
  const Idx stages = a.carry.stages;
  for (Idx block = 0; block < a.carry.blocks; ++block) {
    DeviceVector<T> sm(static_cast<std::size_t>(a.carry.smem), kNaN<T>);
    std::vector<Idx> ids(static_cast<std::size_t>(a.carry.threads));
    std::iota(ids.begin(), ids.end(), 0);
    if (order == Order::reverse) std::reverse(ids.begin(), ids.end());
    std::map<Idx, std::vector<std::pair<T*, const T*>>> in_flight;  // stage → its copies
    auto issue = [&](Idx t, Idx n) {
      gpu::carry_stage_copies(a, sm.data(), block, t, n, [&](T* dst, const T* src) {
        *dst = kNaN<T>;
        in_flight[n].emplace_back(dst, src);
      });
    };
    auto land = [&](Idx n) {
      for (const auto& [dst, src] : in_flight[n]) *dst = *src;
      in_flight.erase(n);
    };
    for (Idx t : ids) gpu::carry_load(a, sm.data(), block, t);
    for (Idx n = 0; stages > 0 && n < stages - 1; ++n)
      for (Idx t : ids) issue(t, n);
    for (Idx n = 0; n < a.shape.C - 1; ++n) {
      if (stages > 0) land(late ? n - 1 : n);  // the wait and the barrier at the top of step n
      if (order == Order::shuffled || order == Order::thread_major) std::shuffle(ids.begin(), ids.end(), rng);
      for (Idx t : ids) {
        gpu::carry_step(a, sm.data(), block, t, n);
        if (stages > 0) issue(t, n + stages - 1);
      }
    }
  }
}

/// The whole run() of a plan on a layer, replayed: prepare, reduce, carry, push; with per-sample
/// lengths `len` (B values) unless empty.
template <class T>
Replayed<T> replay(const FusedLayer<T>& L, const FusedChoice& plan, Order order = Order::forward,
                   std::uint64_t seed = 1, const std::vector<Idx>& len = {}, bool late_ring = false,
                   bool late_record = false, bool outputs = false, const KernelOrder* interleaved = nullptr) {
  std::mt19937_64 rng(seed);
  const FusedShape& s = plan.shape;
  Replayed<T> r;
  r.wp.assign(static_cast<std::size_t>(s.GH * s.ldw), kNaN<T>);
  r.totals.assign(static_cast<std::size_t>((s.C - 1) * s.B * s.S * s.ncols), kNaN<T>);
  r.g.assign(static_cast<std::size_t>(s.S * (s.steps + 1) * s.B), kNaN<T>);
  FusedArgs<T>& a = r.a;
  a.shape = s;
  a.carry = plan.carry;
  a.w = L.p.w_hh.data();
  a.wp = r.wp.data();
  a.record[gpu::kRecordH] = L.rec.h.data();
  a.record[gpu::kRecordC] = L.rec.c.size() ? L.rec.c.data() : nullptr;
  a.record[gpu::kRecordGates] = L.rec.gates.size() ? L.rec.gates.data() : nullptr;
  a.record[gpu::kRecordAux] = L.rec.aux.size() ? L.rec.aux.data() : nullptr;
  a.g_last = L.g_last.data();
  a.above = L.inject ? L.above.data() : nullptr;
  a.g = r.g.data();
  a.totals = r.totals.data();
  r.len = len;
  a.len = r.len.empty() ? nullptr : r.len.data();
  if (outputs) {  // NaN until written: a value the push never writes shows
    r.y.assign(static_cast<std::size_t>(s.GH * s.steps * s.B), kNaN<T>);
    a.y_out = r.y.data();
    if (gpu::fused_cell_info(L.code).input_side) {
      r.yi.assign(r.y.size(), kNaN<T>);
      a.yi_out = r.yi.data();
    }
  }
  for (Idx i = 0; i < gpu::prepare_items(s); ++i) gpu::prepare_item(a, i);
  const Order columns_order = order;
  auto columns = [&](Order o) {
    if (interleaved != nullptr)
      r.in_flight_at_exit = !replay_interleaved(a, r.wp, rng, *interleaved) || r.in_flight_at_exit;
    else
      replay_columns(a, r.wp, o, rng, late_record);
  };
  if (s.C > 1) {
    a.launch = plan.reduce;
    columns(plan.reduce.ntile == 1 || order != Order::thread_major ? columns_order : Order::shuffled);
    if (plan.reduce_v.groups > 0) {  // the v column's launch, concurrent with the reduce's: other columns
      a.launch = plan.reduce_v;
      columns(plan.reduce_v.ntile == 1 || order != Order::thread_major ? columns_order : Order::shuffled);
    }
    replay_carry(a, order, rng, late_ring);
  }
  a.launch = plan.push;
  columns(plan.push.ntile == 1 || order != Order::thread_major ? columns_order : Order::shuffled);
  return r;
}

/// The request's Step and variant for a cell code (an unknown code: no Step).
void set_cell(FusedRequest& q, std::int32_t cell) {
  q.step = gpu::fused_cell_info(cell);
  q.variant = cell;
}

template <class T>
FusedRequest request(const FusedLayer<T>& L) {
  return gpu::fused_cell_request(L.code, L.H, L.steps, L.B, L.inject, sizeof(T));
}

/// A plan for the layer (the cost model's, or with overrides); fails the test when refused.
template <class T>
FusedChoice plan_for(const FusedLayer<T>& L, Idx chunk = 0, Idx reduce_tile = 0, Idx reduce_nc = 0, Idx push_tile = 0,
                     int w_shared = -1, int v_apart = -1, int record_ring = -1) {
  FusedRequest q = request(L);
  q.record_ring = record_ring;
  q.chunk_length = chunk;
  q.reduce_tile = reduce_tile;
  q.reduce_nc = reduce_nc;
  q.push_tile = push_tile;
  q.w_shared = w_shared;
  q.v_apart = v_apart;
  const FusedChoice p = gpu::fused_plan(q, gpu::FusedLimits{});
  EXPECT_EQ(p.error, gpu::kPlanOk) << L.describe() << " chunk " << chunk << " tiles " << reduce_tile << "/"
                                   << push_tile;
  return p;
}

std::string plan_string(const FusedChoice& p) {
  const FusedShape& s = p.shape;
  return " [L " + std::to_string(s.L) + ", C " + std::to_string(s.C) + ", reduce " + std::to_string(p.reduce.tile) +
         "×" + std::to_string(p.reduce.nc) + "/" + std::to_string(p.reduce.ntile) + (p.reduce.w_shared ? "" : " gW") +
         (p.reduce_v.groups > 0
              ? ", v apart " + std::to_string(p.reduce_v.tile) + "/" + std::to_string(p.reduce_v.ntile)
              : std::string()) +
         ", push " + std::to_string(p.push.tile) + "/" + std::to_string(p.push.ntile) + (p.push.w_shared ? "" : " gW") +
         (p.reduce.stages > 0 || p.push.stages > 0
              ? ", ring " + std::to_string(p.reduce.stages) + "/" + std::to_string(p.push.stages)
              : std::string()) +
         "]";
}

template <class T>
constexpr double kTol = testutil::tol<T>(testutil::Op::fused_scan);
/// Float gradients that vanish below this share of the largest are compared at that scale.
constexpr double kFloor = 1e-6;

// ---------------------------------------------------------------------------------------------
// Chunking and mapping

TEST(FusedChunks, EveryStepIsInOneChunkAndEveryGradientIsWrittenOnce) {
  for (Idx T_ = 1; T_ <= 130; T_ += (T_ < 20 ? 1 : 7))
    for (Idx L = 1; L <= T_ + 2; L += (L < 10 ? 1 : 5)) {
      const FusedShape s = gpu::fused_cell_shape(gpu::kGru, 3, T_, 2, true, L);
      ASSERT_GE(s.len0, 1);
      ASSERT_LE(s.len0, s.L);
      ASSERT_EQ(gpu::chunk_begin(s, 0), 0);
      ASSERT_EQ(gpu::chunk_end(s, s.C - 1), T_);
      std::vector<int> step_seen(static_cast<std::size_t>(T_ + 1), 0), written(static_cast<std::size_t>(T_ + 1), 0);
      for (Idx c = 0; c < s.C; ++c) {
        if (c > 0) {
          ASSERT_EQ(gpu::chunk_begin(s, c), gpu::chunk_end(s, c - 1));
        }
        ASSERT_EQ(gpu::chunk_end(s, c) - gpu::chunk_begin(s, c), c == 0 ? s.len0 : s.L);
        for (Idx t = gpu::chunk_begin(s, c) + 1; t <= gpu::chunk_end(s, c); ++t)
          ++step_seen[static_cast<std::size_t>(t)];
        if (c > 0) ++written[static_cast<std::size_t>(gpu::chunk_begin(s, c))];  // the carry
        ASSERT_LE(gpu::push_steps(s, c), gpu::push_steps_max(s));
        for (Idx j = 0; j < gpu::push_steps(s, c); ++j)
          ++written[static_cast<std::size_t>(gpu::chunk_end(s, c) - j - 1)];
      }
      ++written[static_cast<std::size_t>(T_)];  // prepare: g_T
      for (Idx t = 1; t <= T_; ++t) ASSERT_EQ(step_seen[static_cast<std::size_t>(t)], 1) << "T " << T_ << " L " << L;
      for (Idx t = 0; t <= T_; ++t)
        ASSERT_EQ(written[static_cast<std::size_t>(t)], 1) << "g_" << t << ", T " << T_ << " L " << L;
    }
}

TEST(FusedChunks, EveryColumnOfEveryProblemHasOneThreadPerTile) {
  for (const std::int32_t cell : kCells)
    for (const Idx H : {1, 3, 20, 33})
      for (const Idx B : {1, 3})
        for (const bool inject : {false, true}) {
          FusedShape s = gpu::fused_cell_shape(cell, H, 23, B, inject, 5);
          for (int ti = 0; ti < gpu::kFusedTileCount; ++ti)
            for (const Idx nc : {1, 4}) {
              const Idx tile = gpu::kFusedTiles[ti];
              if (!gpu::fused_combo_compiled(tile, nc, 4, gpu::fused_cell_info(cell).max_tile4)) continue;
              for (const std::int32_t mode : {gpu::kFusedReduce, gpu::kFusedPush})
                for (const bool apart : {false, true}) {
                  if (mode == gpu::kFusedPush && nc != 1) continue;
                  if (apart && (mode == gpu::kFusedPush || !inject)) continue;
                  // Apart: the identity columns [0, S) with nc a thread, and v_c with one.
                  std::vector<FusedLaunch> launches(apart ? 2 : 1);
                  ASSERT_TRUE(gpu::fused_configure(launches[0], s, mode, tile, nc, -1, gpu::FusedLimits{}, 4, 0,
                                                   apart ? s.S : 0));
                  if (apart) {
                    ASSERT_TRUE(
                        gpu::fused_configure(launches[1], s, mode, tile, 1, -1, gpu::FusedLimits{}, 4, s.S, s.S + 1));
                  }
                  const FusedLaunch& l = launches[0];
                  ASSERT_GE(l.ntile * l.tile, H);
                  ASSERT_LT((l.ntile - 1) * l.tile, H);
                  ASSERT_LE(l.threads, gpu::kFusedMaxThreads);
                  std::map<std::array<Idx, 4>, int> seen;  // (chunk, sample, column, tile)
                  for (const FusedLaunch& one : launches)
                    for (Idx b = 0; b < one.blocks; ++b)
                      for (Idx t = 0; t < one.threads; ++t) {
                        const gpu::FusedGroup g = gpu::fused_group(s, one, b, t);
                        if (!g.valid) continue;
                        for (Idx n = 0; n < one.nc; ++n)
                          if (mode == gpu::kFusedPush || g.col0 + n < one.col_end)
                            ++seen[{g.chunk, g.sample, g.col0 + n, g.tile}];
                      }
                  const Idx chunks = mode == gpu::kFusedReduce ? s.C - 1 : s.C;
                  const Idx cols = mode == gpu::kFusedReduce ? s.ncols : 1;
                  ASSERT_EQ(static_cast<Idx>(seen.size()), chunks * B * cols * l.ntile)
                      << cell_name(cell) << " H " << H << " tile " << tile << "×" << nc;
                  for (const auto& [key, count] : seen) {
                    ASSERT_EQ(count, 1);
                    ASSERT_GE(key[0], mode == gpu::kFusedReduce ? 1 : 0);
                    ASSERT_LT(key[0], s.C);
                    ASSERT_LT(key[2], cols);
                  }
                }
            }
        }
}

// ---------------------------------------------------------------------------------------------
// The cost model

TEST(FusedChoice, TheIssueSizesGetValidPlansThatFitTheDevice) {
  const gpu::FusedLimits lim;
  for (const std::int32_t cell : kCells)
    for (const Idx H : {1, 20, 32, 33, 64, 256})
      for (const Idx T_ : {1, 2, 3, 63, 65, 1000, 30000})
        for (const Idx B : {1, 16, 64, 256})
          for (const Idx scalar : {4, 8}) {
            FusedRequest q;
            set_cell(q, cell);
            q.H = H;
            q.steps = T_;
            q.B = B;
            q.inject = (T_ + B) % 2 == 0;
            q.scalar = scalar;
            const FusedChoice p = gpu::fused_plan(q, lim);
            const std::string what = cell_name(cell) + " H " + std::to_string(H) + " T " + std::to_string(T_) + " B " +
                                     std::to_string(B) + (scalar == 8 ? " double" : " float");
            ASSERT_EQ(p.error, gpu::kPlanOk) << what;
            const FusedShape& s = p.shape;
            ASSERT_EQ(s.steps, T_);
            ASSERT_EQ((s.C - 1) * s.L + s.len0, T_) << what;
            ASSERT_GT(p.cycles, 0) << what;
            const bool apart = p.reduce_v.groups > 0;
            for (const FusedLaunch* l : {&p.push, s.C > 1 ? &p.reduce : &p.push, apart ? &p.reduce_v : &p.push}) {
              ASSERT_TRUE(gpu::fused_combo_compiled(l->tile, l->nc, scalar, gpu::fused_cell_info(cell).max_tile4))
                  << what;
              ASSERT_GE(l->ntile * l->tile, H) << what;
              ASSERT_LE(l->ntile * l->tile, s.ldw) << what;
              ASSERT_EQ(s.ldw % 4, 0) << what;
              ASSERT_LE(l->threads, gpu::kFusedMaxThreads) << what;
              ASSERT_LE(l->smem * scalar, lim.smem_block) << what;
              ASSERT_EQ(l->smem, gpu::launch_smem(s, *l)) << what;
              if (l->stages > 0) {  // the record's ring: a slot holds a step's spans (and the injection it takes)
                const Idx values = static_cast<Idx>(gpu::fused_cell_info(cell).record_per_unit) * H;
                ASSERT_EQ(l->stages, gpu::kFusedRecordStages) << what;
                ASSERT_EQ(l->stage_len, gpu::stage_values(s, *l, values)) << what;
                ASSERT_GE(l->stage_len, values + (gpu::launch_takes_e(s, *l) ? H : 0)) << what;
              }
              ASSERT_GE(l->blocks * l->gpb, l->groups) << what;
              ASSERT_LT((l->blocks - 1) * l->gpb, l->groups) << what;
            }
            ASSERT_EQ(p.push.steps, gpu::push_steps_max(s));
            // Memory of BP's order: the chunk totals within 2× the gradient buffer S·(T+1)·B, or 16 MiB.
            const double gradient = static_cast<double>(s.S * (T_ + 1) * B * scalar);
            ASSERT_LE(gpu::fused_totals_bytes(s, scalar), std::max(2 * gradient, 16.0 * 1024 * 1024))
                << what << " L " << s.L;
            if (apart) {  // only with injections and chunks: [0, S) in reduce, v_c one column a thread
              ASSERT_TRUE(s.inject && s.C > 1) << what;
              ASSERT_EQ(p.reduce.col_first, 0) << what;
              ASSERT_EQ(p.reduce.col_end, s.S) << what;
              ASSERT_EQ(p.reduce_v.col_first, s.S) << what;
              ASSERT_EQ(p.reduce_v.col_end, s.S + 1) << what;
              ASSERT_EQ(p.reduce_v.nc, 1) << what;
              ASSERT_EQ(p.reduce_v.groups, (s.C - 1) * B) << what;
              ASSERT_EQ(p.reduce.groups, (s.C - 1) * B * ((s.S + p.reduce.nc - 1) / p.reduce.nc)) << what;
            } else if (s.C > 1) {
              ASSERT_EQ(p.reduce.col_end, s.ncols) << what;
            }
            if (s.C > 1) {
              ASSERT_EQ(p.reduce.steps, s.L);
              ASSERT_EQ(p.carry.blocks, B);
              ASSERT_GE(p.carry.threads, 1);
              ASSERT_LE(p.carry.threads, gpu::kFusedCarryThreads);
              // The ring of totals wherever it fits half a multiprocessor's shared memory.
              const Idx ring = gpu::kFusedCarryStages * s.S * s.ncols;
              const bool fits = (2 * s.S + ring) * scalar <= std::min(lim.smem_block, lim.smem_sm / 2);
              ASSERT_EQ(p.carry.stages, fits ? gpu::kFusedCarryStages : 0) << what;
              ASSERT_EQ(p.carry.smem, 2 * s.S + (fits ? ring : 0)) << what;
              if (s.S <= 32) {  // ≤ 34 KB of double
                ASSERT_GT(p.carry.stages, 0) << what;
              }
            }
          }
}

TEST(FusedChoice, ThePapersRnnIsScannedInChunksAndTinySequencesArePushedOnly) {
  for (const Idx T_ : {1000, 30000}) {
    FusedRequest q;
    set_cell(q, gpu::kRnnTanh);
    q.H = 20;
    q.steps = T_;
    q.B = 16;
    const FusedChoice p = gpu::fused_plan(q, gpu::FusedLimits{});
    ASSERT_EQ(p.error, gpu::kPlanOk);
    // Long chains are cut into chunks whose reduce is parallel; the chunk count stays where the
    // sequential carry costs little against the reduce.
    EXPECT_GT(p.shape.C, 8) << plan_string(p);
    EXPECT_LE(p.shape.C, 1024) << plan_string(p);
    EXPECT_GE(p.shape.L, 4) << plan_string(p);
    EXPECT_TRUE(p.reduce.w_shared && p.push.w_shared) << plan_string(p);
    // The estimate: ≈ 2h³ flops per step and sample at a fraction of the FP32 peak, plus latency.
    const double us = p.cycles / gpu::kFusedCyclesPerMicro;
    EXPECT_LT(us, T_ == 1000 ? 200.0 : 2000.0) << plan_string(p);
  }
  FusedRequest one;
  set_cell(one, gpu::kLstm);
  one.H = 20;
  one.steps = 1;
  one.B = 16;
  EXPECT_EQ(gpu::fused_plan(one, gpu::FusedLimits{}).shape.C, 1);
}

TEST(FusedChoice, OverridesAreFollowedAndInvalidOnesRefused) {
  FusedRequest q;
  set_cell(q, gpu::kGru);
  q.H = 20;
  q.steps = 100;
  q.B = 3;
  q.chunk_length = 7;
  q.reduce_tile = 8;
  q.reduce_nc = 4;
  q.push_tile = 4;
  FusedChoice p = gpu::fused_plan(q, gpu::FusedLimits{});
  ASSERT_EQ(p.error, gpu::kPlanOk);
  EXPECT_EQ(p.shape.L, 7);
  EXPECT_EQ(p.shape.C, 15);
  EXPECT_EQ(p.shape.len0, 2);
  EXPECT_EQ(p.reduce.tile, 8);
  EXPECT_EQ(p.reduce.nc, 4);
  EXPECT_EQ(p.reduce.ntile, 3);
  EXPECT_EQ(p.push.tile, 4);
  EXPECT_EQ(p.push.ntile, 5);
  q = FusedRequest{};
  set_cell(q, gpu::kRnnTanh);
  q.H = 20;
  q.steps = 50;
  q.B = 2;
  q.w_shared = 0;
  p = gpu::fused_plan(q, gpu::FusedLimits{});
  ASSERT_EQ(p.error, gpu::kPlanOk);
  EXPECT_FALSE(p.push.w_shared);
  EXPECT_FALSE(p.reduce.w_shared);
  EXPECT_EQ(p.carry.stages, gpu::kFusedCarryStages);  // the model's: it fits
  q.carry_ring = 0;
  p = gpu::fused_plan(q, gpu::FusedLimits{});
  ASSERT_EQ(p.error, gpu::kPlanOk);
  EXPECT_EQ(p.carry.stages, 0);
  EXPECT_EQ(p.carry.smem, 2 * p.shape.S);
  // The v column apart: forced, refused, or without injections nothing to set apart.
  q = FusedRequest{};
  set_cell(q, gpu::kGru);
  q.H = 20;
  q.steps = 100;
  q.B = 3;
  q.inject = true;
  q.reduce_nc = 4;
  q.v_apart = 1;
  p = gpu::fused_plan(q, gpu::FusedLimits{});
  ASSERT_EQ(p.error, gpu::kPlanOk);
  ASSERT_GT(p.shape.C, 1);
  EXPECT_EQ(p.reduce.nc, 4);
  EXPECT_EQ(p.reduce.col_end, 20);
  EXPECT_EQ(p.reduce.groups, (p.shape.C - 1) * 3 * 5);  // 20 columns in 5 groups of 4, none padded
  EXPECT_EQ(p.reduce_v.groups, (p.shape.C - 1) * 3);
  EXPECT_EQ(p.reduce_v.nc, 1);
  EXPECT_GE(p.shape.ldw, gpu::launch_hpad(p.reduce_v));
  q.v_apart = 0;
  p = gpu::fused_plan(q, gpu::FusedLimits{});
  ASSERT_EQ(p.error, gpu::kPlanOk);
  EXPECT_EQ(p.reduce_v.groups, 0);
  EXPECT_EQ(p.reduce.col_end, 21);
  EXPECT_EQ(p.reduce.groups, (p.shape.C - 1) * 3 * 6);  // 21 columns: 24 with padding
  q.v_apart = 1;
  q.inject = false;
  p = gpu::fused_plan(q, gpu::FusedLimits{});
  ASSERT_EQ(p.error, gpu::kPlanOk);
  EXPECT_EQ(p.reduce_v.groups, 0);

  auto error = [](auto edit) {
    FusedRequest r;
    set_cell(r, gpu::kLstm);
    r.H = 5;
    r.steps = 9;
    r.B = 2;
    edit(r);
    return gpu::fused_plan(r, gpu::FusedLimits{}).error;
  };
  EXPECT_EQ(error([](FusedRequest& r) { r.H = 0; }), gpu::kPlanBadSize);
  EXPECT_EQ(error([](FusedRequest& r) { r.steps = 0; }), gpu::kPlanBadSize);
  EXPECT_EQ(error([](FusedRequest& r) { r.B = -1; }), gpu::kPlanBadSize);
  EXPECT_EQ(error([](FusedRequest& r) { r.chunk_length = -2; }), gpu::kPlanBadSize);
  EXPECT_EQ(error([](FusedRequest& r) { set_cell(r, 7); }), gpu::kPlanBadStep);
  EXPECT_EQ(error([](FusedRequest& r) { r.reduce_tile = 12; }), gpu::kPlanBadTile);
  EXPECT_EQ(error([](FusedRequest& r) { r.push_tile = 128; }), gpu::kPlanBadTile);
  EXPECT_EQ(error([](FusedRequest& r) { r.scalar = 8, r.push_tile = 64; }), gpu::kPlanBadTile);
  EXPECT_EQ(error([](FusedRequest& r) { r.reduce_nc = 2; }), gpu::kPlanBadColumns);
  EXPECT_EQ(error([](FusedRequest& r) { r.scalar = 8, r.reduce_nc = 4; }), gpu::kPlanBadColumns);
  EXPECT_EQ(error([](FusedRequest& r) { r.reduce_tile = 64, r.reduce_nc = 4; }), gpu::kPlanBadColumns);
  // 32 × 4 exists for the RNN only (the GRU's and LSTM's spill registers: not compiled).
  EXPECT_EQ(error([](FusedRequest& r) { set_cell(r, gpu::kRnnTanh), r.reduce_tile = 32, r.reduce_nc = 4; }),
            gpu::kPlanOk);
  EXPECT_EQ(error([](FusedRequest& r) { set_cell(r, gpu::kGru), r.reduce_tile = 32, r.reduce_nc = 4; }),
            gpu::kPlanBadColumns);
  EXPECT_EQ(error([](FusedRequest& r) { set_cell(r, gpu::kLstm), r.reduce_tile = 32, r.reduce_nc = 4; }),
            gpu::kPlanBadColumns);
  EXPECT_EQ(error([](FusedRequest& r) { set_cell(r, gpu::kLstm), r.reduce_tile = 20, r.reduce_nc = 4; }), gpu::kPlanOk);
  // A device without the shared memory for W_hh on chip: forced on chip, nothing fits.
  FusedRequest big;
  set_cell(big, gpu::kLstm);
  big.H = 256;
  big.steps = 10;
  big.B = 1;
  big.w_shared = 1;
  EXPECT_EQ(gpu::fused_plan(big, gpu::FusedLimits{}).error, gpu::kPlanTooLarge);
  // The carry's ring forced where four totals of 512 × 513 cannot fit: the model keeps to plans
  // without a carry (one chunk), and with chunks forced too nothing is left.
  big.w_shared = -1;
  big.carry_ring = 1;
  FusedChoice forced = gpu::fused_plan(big, gpu::FusedLimits{});
  ASSERT_EQ(forced.error, gpu::kPlanOk);
  EXPECT_EQ(forced.shape.C, 1);
  big.chunk_length = 2;
  EXPECT_EQ(gpu::fused_plan(big, gpu::FusedLimits{}).error, gpu::kPlanTooLarge);
  big.carry_ring = -1;
  forced = gpu::fused_plan(big, gpu::FusedLimits{});
  ASSERT_EQ(forced.error, gpu::kPlanOk);
  EXPECT_EQ(forced.shape.C, 5);
  EXPECT_EQ(forced.carry.stages, 0);
}

TEST(FusedChoice, LargeHiddenSizesReadWhhFromGlobalMemoryAndStayWithinLimits) {
  for (const Idx H : {512, 4096, 16384}) {
    FusedRequest q;
    set_cell(q, gpu::kRnnTanh);
    q.H = H;
    q.steps = 4;
    q.B = 2;
    const FusedChoice p = gpu::fused_plan(q, gpu::FusedLimits{});
    ASSERT_EQ(p.error, gpu::kPlanOk) << H;
    EXPECT_FALSE(p.push.w_shared) << H;
    EXPECT_LE(p.push.threads, gpu::kFusedMaxThreads);
  }
  FusedRequest q;
  set_cell(q, gpu::kRnnTanh);
  q.H = 64 * 256 + 1;  // more row tiles than threads in a block
  q.steps = 2;
  q.B = 1;
  EXPECT_EQ(gpu::fused_plan(q, gpu::FusedLimits{}).error, gpu::kPlanTooLarge);
  // Totals beyond the memory budget: the plan falls back to fewer chunks.
  gpu::FusedLimits small;
  small.totals_bytes = 0;
  q.H = 20;
  q.steps = 1000;
  q.B = 16;
  const FusedChoice p = gpu::fused_plan(q, small);
  ASSERT_EQ(p.error, gpu::kPlanOk);
  EXPECT_EQ(p.shape.C, 1);
}

TEST(FusedChoice, AForcedChunkLengthIsKeptWhateverItsTotalsTake) {
  // LSTM H 64, T 1023, B 16 at L = 9: 118 MB of chunk totals against BP's 8.4 MB, beyond what
  // the model would choose, but the caller asked for it (the device's limit alone applies).
  FusedRequest q;
  set_cell(q, gpu::kLstm);
  q.H = 64;
  q.steps = 1023;
  q.B = 16;
  q.inject = true;
  q.chunk_length = 9;
  const FusedChoice forced = gpu::fused_plan(q, gpu::FusedLimits{});
  ASSERT_EQ(forced.error, gpu::kPlanOk);
  EXPECT_EQ(forced.shape.L, 9);
  EXPECT_GT(gpu::fused_totals_bytes(forced.shape, 4), 100e6);
  q.chunk_length = 0;
  EXPECT_LE(gpu::fused_totals_bytes(gpu::fused_plan(q, gpu::FusedLimits{}).shape, 4), 16.0 * 1024 * 1024);
}

// ---------------------------------------------------------------------------------------------
// Whole runs against the CPU engine's BP

TEST(FusedHost, TheOracleIsTheEnginesBackward) {
  // fused_record.hpp's BP against Recurrent<double>::backward with BackwardMethod::bp (its g_0).
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true})
      for (const bool final_grad : {false, true}) {
        const auto L = make_layer<double>(cell, 4, 9, 3, inject, final_grad, 11);
        Recurrent<double> net(RecurrentConfig{cell_type(cell), L.I, L.H, 1, nonlinearity(cell)});
        net.params(0) = L.p;
        net.set_initial_state(0, L.s0);
        net.forward(L.x, L.steps, L.B);
        if (final_grad) net.set_final_state_grad(0, L.g_final);
        BackwardOptions o;
        o.method = BackwardMethod::bp;
        net.backward(L.above, inject, o);
        const Matrix<double> g = oracle_bp(L);
        ASSERT_LT((net.state0_grad(0) - g.leftCols(L.B)).norm(), 1e-13 * (1 + g.leftCols(L.B).norm())) << L.describe();
        for (Index t = 0; t <= L.steps; ++t)
          ASSERT_LT((net.state(0, t).topRows(L.H) - L.rec.h.middleCols(t * L.B, L.B)).norm(), 1e-15);
      }
}

TEST(FusedHost, EveryCellAndSizeMatchesTheEnginesBp) {
  int runs = 0;
  for (const std::int32_t cell : kCells)
    for (const Index H : {1, 3, 20, 33})
      for (const Index T_ : {1, 2, 3, 7, 64, 65, 300})
        for (const Index B : {1, 3})
          for (const bool inject : {false, true})
            for (const bool final_grad : {false, true}) {
              if (T_ == 300 && (B == 3 || H == 33) && (inject != final_grad)) continue;  // time; covered otherwise
              const std::uint64_t seed = static_cast<std::uint64_t>(1000 * H + 10 * T_ + B + (inject ? 7 : 0));
              const auto L = make_layer<double>(cell, H, T_, B, inject, final_grad, seed);
              const Matrix<double> want = oracle_bp(L);
              std::vector<FusedChoice> plans{plan_for(L)};
              if (T_ == 2 || T_ == 7 || T_ == 65) {        // the overrides: at sizes that leave a partial chunk 0
                plans.push_back(plan_for(L, 1, 4, 1, 4));  // every step its own chunk; many tiles
                plans.push_back(plan_for(L, 2, 8, 1, 16));
                plans.push_back(plan_for(L, 5, 0, 0, 4, 0));  // W_hh from global memory
                plans.push_back(plan_for(L, T_));             // one chunk: BP only
              }
              for (const FusedChoice& p : plans) {
                const Replayed<double> r = replay(L, p);
                ASSERT_TRUE(close_to_oracle(r.g.data(), want, B, kTol<double>)) << L.describe() << plan_string(p);
                ++runs;
              }
            }
  EXPECT_GT(runs, 800);
}

TEST(FusedHost, FloatRunsMatchTheEnginesBp) {
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true}) {
      const auto L = make_layer<float>(cell, 20, 130, 3, inject, !inject, 5);
      const Matrix<double> want = oracle_bp(L);
      for (const FusedChoice& p : {plan_for(L), plan_for(L, 16, 20, 4, 4), plan_for(L, 9, 8, 4, 20),
                                   plan_for(L, 33, 32, 1, 8), plan_for(L, 7, 0, 0, 0, 0)}) {
        const Replayed<float> r = replay(L, p);
        ASSERT_TRUE(close_to_oracle(r.g.data(), want, L.B, kTol<float>, kFloor)) << L.describe() << plan_string(p);
      }
    }
}

TEST(FusedHost, EveryCompiledTileAndColumnCountMatchesTheEnginesBp) {
  for (const std::int32_t cell : kCells)
    for (int ti = 0; ti < gpu::kFusedTileCount; ++ti)
      for (const Idx nc : {1, 4}) {
        const Idx tile = gpu::kFusedTiles[ti];
        const auto Lf = make_layer<float>(cell, 37, 12, 2, true, true, 9);
        const auto Ld = make_layer<double>(cell, 37, 12, 2, true, true, 9);
        if (gpu::fused_combo_compiled(tile, nc, 4, gpu::fused_cell_info(cell).max_tile4)) {
          const FusedChoice p = plan_for(Lf, 5, tile, nc, tile);
          ASSERT_TRUE(close_to_oracle(replay(Lf, p).g.data(), oracle_bp(Lf), 2, kTol<float>, kFloor))
              << Lf.describe() << plan_string(p);
        }
        if (gpu::fused_combo_compiled(tile, nc, 8, gpu::fused_cell_info(cell).max_tile4)) {
          const FusedChoice p = plan_for(Ld, 5, tile, nc, tile);
          ASSERT_TRUE(close_to_oracle(replay(Ld, p).g.data(), oracle_bp(Ld), 2, kTol<double>))
              << Ld.describe() << plan_string(p);
        }
      }
}

TEST(FusedHost, NoThreadOrderChangesABit) {
  // Reads and writes of one phase never touch what another thread of the phase writes: any
  // order gives the same bits; launches without step barriers (one thread per column) even
  // thread by thread through all their steps.
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true}) {
      const auto L = make_layer<double>(cell, 13, 40, 3, inject, true, 21);
      for (const FusedChoice& p : {plan_for(L, 6, 4, 1, 4), plan_for(L, 7, 16, 1, 16), plan_for(L, 5, 4, 1, 16),
                                   plan_for(L, 4, 4, 1, 32, 0)}) {
        const Replayed<double> base = replay(L, p, Order::forward);
        for (const Order o : {Order::reverse, Order::shuffled, Order::thread_major}) {
          const Replayed<double> other = replay(L, p, o, 77);
          ASSERT_EQ(0, std::memcmp(base.g.data(), other.g.data(), base.g.size() * sizeof(double)))
              << L.describe() << plan_string(p) << " order " << static_cast<int>(o);
        }
      }
      // Four columns a thread (float).
      const auto Lf = make_layer<float>(cell, 13, 40, 3, inject, true, 22);
      for (const FusedChoice& p : {plan_for(Lf, 6, 4, 4, 4), plan_for(Lf, 5, 16, 4, 16)}) {
        ASSERT_EQ(p.reduce.nc, 4);
        const Replayed<float> base = replay(Lf, p, Order::forward);
        for (const Order o : {Order::reverse, Order::shuffled, Order::thread_major}) {
          const Replayed<float> other = replay(Lf, p, o, 78);
          ASSERT_EQ(0, std::memcmp(base.g.data(), other.g.data(), base.g.size() * sizeof(float)))
              << Lf.describe() << plan_string(p) << " order " << static_cast<int>(o);
        }
      }
    }
}

TEST(FusedHost, TheCarrysRingGivesTheBitsOfGlobalReadsAndIsWaitedFor) {
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true}) {
      const auto L = make_layer<double>(cell, 6, 61, 3, inject, true, 23);
      const FusedChoice ring = plan_for(L, 4, 8, 1, 8);  // 16 chunks: 15 carry steps over a ring of 4
      ASSERT_EQ(ring.carry.stages, gpu::kFusedCarryStages);
      FusedChoice global = ring;
      global.carry.stages = 0;
      global.carry.smem = 2 * ring.shape.S;
      const Replayed<double> a = replay(L, ring), b = replay(L, global, Order::shuffled, 5);
      ASSERT_TRUE(close_to_oracle(a.g.data(), oracle_bp(L), L.B, kTol<double>)) << L.describe() << plan_string(ring);
      ASSERT_EQ(0, std::memcmp(a.g.data(), b.g.data(), a.g.size() * sizeof(double))) << L.describe();
      // A copy read before its stage has landed (a kernel without the wait) shows: its slot is NaN.
      const Replayed<double> late = replay(L, ring, Order::forward, 1, {}, true);
      const auto nan = std::count_if(late.g.begin(), late.g.end(), [](double v) { return std::isnan(v); });
      ASSERT_GT(nan, 0) << L.describe();
    }
}

TEST(FusedHost, TheRecordsRingGivesTheBitsOfGlobalReadsAndIsWaitedFor) {
  // The ring changes where a step reads its record and injection from, not what it computes: the
  // bits of the global reads, with one thread (no barrier) and several (the group's barrier) a
  // column, 16-byte copies (float, H 8) and one-value copies (double, H 7), per-sample lengths.
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true}) {
      const auto L = make_layer<float>(cell, 8, 37, 3, inject, true, 41);
      const Matrix<double> want = oracle_bp(L);
      // reduce 4 rows a thread (2 threads a column), push 8 (one); then 8 × 4 columns (one thread).
      for (const Idx reduce_tile : {4, 8}) {
        const Idx nc = reduce_tile == 8 && cell != gpu::kLstm ? 4 : 1;
        const FusedChoice ring = plan_for(L, 5, reduce_tile, nc, 8, -1, 0, 1);
        const FusedChoice global = plan_for(L, 5, reduce_tile, nc, 8, -1, 0, 0);
        ASSERT_EQ(ring.reduce.stages, gpu::kFusedRecordStages) << plan_string(ring);
        ASSERT_EQ(ring.push.stages, gpu::kFusedRecordStages) << plan_string(ring);
        ASSERT_EQ(global.reduce.stages + global.push.stages, 0) << plan_string(global);
        const Order order = reduce_tile == 8 ? Order::thread_major : Order::shuffled;
        const Replayed<float> a = replay(L, ring, order, 3), b = replay(L, global);
        ASSERT_TRUE(close_to_oracle(a.g.data(), want, L.B, kTol<float>, kFloor)) << L.describe() << plan_string(ring);
        ASSERT_EQ(0, std::memcmp(a.g.data(), b.g.data(), a.g.size() * sizeof(float)))
            << L.describe() << plan_string(ring);
        // A step that reads its slot before the copies have landed (a kernel without the wait) shows:
        // NaN, or (relu's 1[h > 0] of a NaN is 0) other values.
        const Replayed<float> late = replay(L, ring, order, 3, {}, false, true);
        ASSERT_NE(0, std::memcmp(late.g.data(), b.g.data(), b.g.size() * sizeof(float)))
            << L.describe() << plan_string(ring);
      }
      const std::vector<Idx> len{29, 12, 1};
      const auto D = make_layer<double>(cell, 7, 29, 3, inject, true, 43);
      const FusedLayer<double> packed = packed_layer(D, len);
      const FusedChoice ring = plan_for(D, 4, 4, 1, 4, -1, -1, 1), global = plan_for(D, 4, 4, 1, 4, -1, -1, 0);
      ASSERT_GT(ring.reduce.stages, 0);
      const Replayed<double> a = replay(packed, ring, Order::reverse, 2, len),
                             b = replay(packed, global, Order::forward, 1, len);
      ASSERT_TRUE(matches_per_sample(a.g.data(), D, len, kTol<double>, 0)) << D.describe() << plan_string(ring);
      ASSERT_EQ(0, std::memcmp(a.g.data(), b.g.data(), a.g.size() * sizeof(double)))
          << D.describe() << plan_string(ring);
    }
}

TEST(FusedHost, TheRecordsCopiesAreWideWhereAlignedAndCoverEverySpan) {
  // Every value of a step's spans is copied exactly once by the group's threads, into the slot's
  // layout the step reads; 16 bytes at a time exactly where every span allows it.
  for (const std::int32_t cell : kCells)
    for (const Idx H : {8, 7}) {
      const auto L = make_layer<float>(cell, H, 12, 2, true, true, 5);
      const FusedChoice p = plan_for(L, 4, 4, 1, 4, -1, -1, 1);
      Replayed<float> r = replay(L, p);
      r.a.launch = p.push;
      const FusedLaunch& l = p.push;
      ASSERT_EQ(l.ntile, 2);
      DeviceVector<float> sm(static_cast<std::size_t>(l.smem), kNaN<float>);
      for (Idx t = 0; t < l.threads; ++t) {
        const gpu::FusedGroup g = gpu::fused_group(p.shape, l, 0, t);
        if (!g.valid || g.tile != 0) continue;
        for (Idx j = 0; j < g.steps; ++j) {
          std::map<const float*, int> copied;
          int wide = 0, narrow = 0;
          for (Idx tile = 0; tile < l.ntile; ++tile) {
            gpu::FusedGroup mate = g;
            mate.tile = tile;
            gpu::visit_cell(cell, [&](auto c) {
              gpu::fused_stage_copies<float, decltype(c)>(r.a, sm.data(), mate, j,
                                                          [&](float* dst, const float* src, auto n) {
                                                            constexpr int N = decltype(n)::value;
                                                            (N > 1 ? wide : narrow) += 1;
                                                            for (int i = 0; i < N; ++i) {
                                                              dst[i] = src[i];
                                                              ++copied[src + i];
                                                            }
                                                          });
            });
          }
          const float* span[4];
          Idx len[4];
          gpu::visit_cell(cell, [&](auto c) { gpu::fused_spans<float, decltype(c)>(r.a, g, j, span, len); });
          Idx values = 0;
          const float* slot = gpu::fused_stage_slot(r.a, sm.data(), g, j);
          for (int q = 0; q < 4; ++q) {
            for (Idx i = 0; i < len[q]; ++i) {
              ASSERT_EQ(copied[span[q] + i], 1) << cell_name(cell) << " H " << H << " step " << j << " span " << q;
              ASSERT_EQ(std::memcmp(slot + values + i, span[q] + i, sizeof(float)), 0);
            }
            values += len[q];
          }
          ASSERT_EQ(static_cast<Idx>(copied.size()), values);
          ASSERT_LE(values, l.stage_len);
          ASSERT_GE(values, (cell == gpu::kGru ? 5 : cell == gpu::kLstm ? 6 : 1) * H);
          // H 8: every span is whole 16-byte pieces of aligned memory; H 7: h (7 values) is not.
          ASSERT_EQ(narrow == 0, H == 8) << cell_name(cell) << " step " << j;
          ASSERT_EQ(wide > 0, H == 8 || cell == gpu::kLstm) << cell_name(cell) << " step " << j;  // LSTM's 4H gates
        }
      }
    }
}

TEST(FusedChoice, TheRecordsRingIsPlannedWhereItFitsAndAsForced) {
  const gpu::FusedLimits lim;
  for (const std::int32_t cell : kCells) {
    // The paper's shape: a ring on every launch by default, none when refused.
    FusedRequest q = gpu::fused_cell_request(cell, 20, 30000, 16, true, 4);
    const FusedChoice p = gpu::fused_plan(q, lim);
    ASSERT_EQ(p.error, gpu::kPlanOk);
    ASSERT_GT(p.reduce.stages, 0) << cell_name(cell) << plan_string(p);
    ASSERT_GT(p.push.stages, 0) << cell_name(cell) << plan_string(p);
    if (p.reduce_v.groups > 0) {
      ASSERT_GT(p.reduce_v.stages, 0) << cell_name(cell) << plan_string(p);
      ASSERT_FALSE(gpu::launch_takes_e(p.shape, p.reduce));  // the identity columns stage no injection
      ASSERT_TRUE(gpu::launch_takes_e(p.shape, p.reduce_v));
    }
    q.record_ring = 0;
    const FusedChoice none = gpu::fused_plan(q, lim);
    ASSERT_EQ(none.error, gpu::kPlanOk);
    ASSERT_EQ(none.reduce.stages + none.push.stages + none.reduce_v.stages, 0);
    // Three slots of a 4096-unit LSTM step (7 · 4096 values) cannot fit: forced, no plan; else none.
    FusedRequest big = gpu::fused_cell_request(gpu::kLstm, 4096, 100, 2, true, 4);
    big.record_ring = 1;
    ASSERT_EQ(gpu::fused_plan(big, lim).error, gpu::kPlanTooLarge);
    big.record_ring = -1;
    const FusedChoice fallback = gpu::fused_plan(big, lim);
    ASSERT_EQ(fallback.error, gpu::kPlanOk);
    ASSERT_EQ(fallback.push.stages, 0);
  }
}

TEST(FusedHost, TheVColumnApartGivesTheBitsOfOneLaunch) {
  // Its launch computes v_c by the same arithmetic in the same order (one column a thread, any
  // tile): the same bits as v_c among four columns a thread, and every column written once.
  for (const std::int32_t cell : kCells) {
    const auto L = make_layer<float>(cell, 13, 41, 3, true, true, 31);
    const Matrix<double> want = oracle_bp(L);
    for (const Idx v_tile : {4, 16}) {
      const FusedChoice one = plan_for(L, 5, 8, 4, 8, -1, 0), apart = plan_for(L, 5, 8, 4, 8, -1, 1);
      ASSERT_EQ(one.reduce_v.groups, 0);
      ASSERT_GT(apart.reduce_v.groups, 0);
      FusedChoice p = apart;  // the v launch with another tile than the identity columns'
      ASSERT_TRUE(gpu::fused_configure(p.reduce_v, p.shape, gpu::kFusedReduce, v_tile, 1, -1, gpu::FusedLimits{}, 4,
                                       p.shape.S, p.shape.S + 1));
      p.shape.ldw = std::max(p.shape.ldw, gpu::launch_hpad(p.reduce_v));
      const Replayed<float> a = replay(L, one), b = replay(L, p, Order::shuffled, 9);
      ASSERT_TRUE(close_to_oracle(b.g.data(), want, L.B, kTol<float>, kFloor)) << L.describe() << plan_string(p);
      ASSERT_EQ(0, std::memcmp(a.g.data(), b.g.data(), a.g.size() * sizeof(float))) << L.describe() << plan_string(p);
      ASSERT_EQ(0, std::memcmp(a.totals.data(), b.totals.data(), a.totals.size() * sizeof(float)))
          << L.describe() << plan_string(p);
    }
    // Without its launch, v_c is never written (the totals start NaN): the replay sees it.
    FusedChoice missing = plan_for(L, 5, 8, 4, 8, -1, 1);
    missing.reduce_v.groups = 0;
    const Replayed<float> m = replay(L, missing);
    ASSERT_TRUE(std::any_of(m.g.begin(), m.g.end(), [](float v) { return std::isnan(v); })) << L.describe();
  }
  // Double (one column a thread) and per-sample lengths.
  for (const std::int32_t cell : kCells) {
    const std::vector<Idx> len{23, 11, 2};
    const auto L = make_layer<double>(cell, 7, 23, 3, true, true, 33);
    const FusedLayer<double> packed = packed_layer(L, len);
    const FusedChoice one = plan_for(L, 4, 4, 1, 4, -1, 0), apart = plan_for(L, 4, 4, 1, 4, -1, 1);
    ASSERT_GT(apart.reduce_v.groups, 0);
    const Replayed<double> a = replay(packed, one, Order::forward, 1, len),
                           b = replay(packed, apart, Order::reverse, 3, len);
    ASSERT_TRUE(matches_per_sample(b.g.data(), L, len, kTol<double>, 0)) << L.describe() << plan_string(apart);
    ASSERT_EQ(0, std::memcmp(a.g.data(), b.g.data(), a.g.size() * sizeof(double))) << L.describe();
  }
}

TEST(FusedHost, ThePushWritesThePreactKernelsGradientsBitForBit) {
  // The push's outputs against the scan path's preact kernel (preact_item) run over the replayed
  // g: the same bits, every value written (zeros at padding), for every cell, with and without
  // injections and lengths, in chunks (a chunk's first step from the push's tail) and not, with
  // and without the record's ring, one and two threads a column.
  struct Case {
    Idx chunk, tile;
    int ring;
    Order order;
  };
  const Case cases[] = {{5, 4, 1, Order::shuffled},
                        {4, 8, 0, Order::thread_major},
                        {1, 8, -1, Order::reverse},
                        {29, 4, 1, Order::forward}};
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true})
      for (const bool lengths : {false, true})
        for (const Case& c : cases) {
          const auto L = make_layer<double>(cell, 8, 29, 3, inject, true, 51);
          const std::vector<Idx> len = lengths ? std::vector<Idx>{29, 12, 1} : std::vector<Idx>{};
          FusedLayer<double> P = lengths ? packed_layer(L, len) : L;
          const FusedChoice p = plan_for(L, c.chunk, c.tile, 1, c.tile, -1, -1, c.ring);
          const Replayed<double> r = replay(P, p, c.order, 7, len, false, false, true);
          gpu::LayerArgs<double> la;
          la.cell = cell;
          la.H = L.H;
          la.GH = p.shape.GH;
          la.S = L.S;
          la.B = L.B;
          la.steps = L.steps;
          la.h = P.rec.h.data();
          la.c = P.rec.c.size() ? P.rec.c.data() : nullptr;
          la.gates = P.rec.gates.size() ? P.rec.gates.data() : nullptr;
          la.aux = P.rec.aux.size() ? P.rec.aux.data() : nullptr;
          std::vector<double> g(r.g.begin(), r.g.end()), dx(r.y.size(), kNaN<double>), dh(r.y.size(), kNaN<double>);
          la.g = g.data();
          la.dx = dx.data();
          la.dh = dh.data();
          la.len = r.len.empty() ? nullptr : r.len.data();
          for (Idx item = 0; item < L.steps * L.B * L.H; ++item) gpu::preact_item(la, item);
          const bool gru = cell == gpu::kGru;
          const std::string what = L.describe() + (lengths ? " lengths" : "") + plan_string(p);
          ASSERT_TRUE(std::none_of(r.y.begin(), r.y.end(), [](double v) { return std::isnan(v); })) << what;
          ASSERT_EQ(0, std::memcmp(r.y.data(), (gru ? dh : dx).data(), r.y.size() * sizeof(double))) << what;
          ASSERT_EQ(r.yi.size(), gru ? r.y.size() : 0u) << what;
          if (gru) {
            ASSERT_EQ(0, std::memcmp(r.yi.data(), dx.data(), dx.size() * sizeof(double))) << what;
          }
        }
}

TEST(FusedHost, TheKernelsOrderHoldsUnderAnyInterleavingAndCopyLanding) {
  // The column kernels' operations in their order (KernelOrder), the threads interleaved at random
  // between barriers and every asynchronous copy landing at a random moment before its wait: the
  // bits of the phase-by-phase replay, outputs included, for every cell, float and double, with
  // and without injections and lengths, ring or not, one and two threads a column, L 1 and C 1.
  struct Case {
    Idx chunk, reduce_tile, reduce_nc, push_tile;
    int ring;
  };
  const Case cases[] = {{5, 4, 1, 4, 1}, {5, 8, 4, 8, 1}, {1, 4, 1, 4, 1}, {4, 4, 1, 8, 0}, {29, 4, 1, 4, 1}};
  auto check = [&](auto zero, std::int32_t cell, bool inject, bool lengths, const Case& c) {
    using T = decltype(zero);
    const auto L = make_layer<T>(cell, 8, 29, 3, inject, true, 51);
    const std::vector<Idx> len = lengths ? std::vector<Idx>{29, 12, 1} : std::vector<Idx>{};
    const FusedLayer<T> P = lengths ? packed_layer(L, len) : L;
    const Idx nc = sizeof(T) == 8 || cell == gpu::kLstm ? 1 : c.reduce_nc;
    const FusedChoice p = plan_for(L, c.chunk, c.reduce_tile, nc, c.push_tile, -1, -1, c.ring);
    const Replayed<T> want = replay(P, p, Order::forward, 7, len, false, false, true);
    const KernelOrder kernel;
    for (const std::uint64_t seed : {101, 102}) {
      const Replayed<T> got = replay(P, p, Order::forward, seed, len, false, false, true, &kernel);
      const std::string what = L.describe() + (lengths ? " lengths" : "") + plan_string(p);
      ASSERT_FALSE(got.in_flight_at_exit) << what;
      ASSERT_EQ(0, std::memcmp(got.g.data(), want.g.data(), want.g.size() * sizeof(T))) << what;
      ASSERT_EQ(0, std::memcmp(got.y.data(), want.y.data(), want.y.size() * sizeof(T))) << what;
      ASSERT_EQ(got.yi.size(), want.yi.size()) << what;
      if (!want.yi.empty()) {  // (memcmp of an empty vector's null data is undefined)
        ASSERT_EQ(0, std::memcmp(got.yi.data(), want.yi.data(), want.yi.size() * sizeof(T))) << what;
      }
    }
  };
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true})
      for (const bool lengths : {false, true})
        for (const Case& c : cases) {
          check(float{}, cell, inject, lengths, c);
          check(double{}, cell, inject, lengths, c);
        }
}

TEST(FusedHost, AKernelOrderWithoutItsWaitOrBarriersIsCaught) {
  // The interleaved replay is not vacuous: a wait that leaves a step's copies in flight, a missing
  // barrier after the wait or before the push's tail, each changes some run (or leaves copies in
  // flight at the exit); a stricter wait does not.
  auto differs = [](const KernelOrder& k) {
    const auto L = make_layer<float>(gpu::kGru, 8, 29, 3, true, true, 51);
    const FusedChoice p = plan_for(L, 5, 4, 1, 4, -1, -1, 1);  // two threads a column: the barriers
    const Replayed<float> want = replay(L, p, Order::forward, 7, {}, false, false, true);
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      const Replayed<float> got = replay(L, p, Order::forward, 100 + seed, {}, false, false, true, &k);
      if (got.in_flight_at_exit || std::memcmp(got.g.data(), want.g.data(), want.g.size() * sizeof(float)) != 0 ||
          std::memcmp(got.y.data(), want.y.data(), want.y.size() * sizeof(float)) != 0)
        return true;
    }
    return false;
  };
  KernelOrder k;
  k.wait = gpu::kFusedRecordStages - 1;
  EXPECT_TRUE(differs(k)) << "a wait one group short";
  k = KernelOrder{};
  k.top_barrier = false;
  EXPECT_TRUE(differs(k)) << "no barrier after the wait";
  k = KernelOrder{};
  k.tail_barrier = false;
  EXPECT_TRUE(differs(k)) << "no barrier before the tail";
  k = KernelOrder{};
  k.wait = 0;
  EXPECT_FALSE(differs(k)) << "waiting for every group is only stricter";
}

// ---------------------------------------------------------------------------------------------
// Exact arithmetic: operand order

TEST(FusedHost, SmallIntegerAndDyadicChainsAreExactForEveryChunking) {
  for (const std::int32_t cell : kCells)
    for (const Index T_ : {1, 2, 3, 4, 5})
      for (const bool inject : {false, true}) {
        if (T_ == 5 && (cell == gpu::kGru || cell == gpu::kLstm)) continue;  // dyadic bits grow faster
        const FusedLayer<double> L = exact_layer(cell, 3, T_, 2, inject, static_cast<std::uint64_t>(31 * T_ + inject));
        const Matrix<double> want = oracle_bp(L);
        for (Idx chunk = 1; chunk <= T_; ++chunk)
          for (const Idx tile : {4, 32}) {
            const Replayed<double> r = replay(L, plan_for(L, chunk, tile, 1, tile));
            for (Index k = 0; k < want.size(); ++k)
              ASSERT_EQ(r.g[static_cast<std::size_t>(k)], want.data()[k])
                  << L.describe() << " chunk " << chunk << " tile " << tile << " value " << k;
          }
      }
}

// ---------------------------------------------------------------------------------------------
// Per-sample lengths (PackedSequence): a padded step is the identity without injection, and
// neither its record nor its injection (NaN here: packed_layer) reaches a real step's result

struct LengthCase {
  Index H, T;
  std::vector<Idx> len;  ///< non-increasing, each 1 … T; B = its size
};
const LengthCase kLengthCases[] = {{3, 1, {1, 1, 1}},          // T = 1
                                   {3, 7, {7, 5, 5, 1}},       // len = T, repeated lengths, len = 1
                                   {20, 13, {13, 13, 4}},      //
                                   {5, 9, {8, 6, 3, 2, 1}},    // no sample runs all T steps
                                   {33, 12, {12, 2}},          // several row tiles per column (the step barriers)
                                   {4, 30, {29, 17, 16, 3}}};  // many chunks, most of the short samples' padding

std::string lengths_string(const std::vector<Idx>& len) {
  std::string s = " lengths";
  for (const Idx l : len) {
    s += ' ';
    s += std::to_string(l);
  }
  return s;
}

/// Plans whose chunks are entirely padding (chunk 1), partly padding and fully real (2, 3, 5),
/// one chunk (push only), the cost model's; reduce tiles of 1 and (float) 4 columns; W_hh on chip
/// and from global memory.
template <class T>
std::vector<FusedChoice> length_plans(const FusedLayer<T>& L) {
  std::vector<FusedChoice> plans{plan_for(L),
                                 plan_for(L, 1, 4, 1, 4),
                                 plan_for(L, 2, 8, 1, 16, 1),
                                 plan_for(L, 3, 4, 1, 8, 0),
                                 plan_for(L, 5, 0, 0, 4, 1),
                                 plan_for(L, L.steps)};
  if constexpr (std::is_same_v<T, float>) {
    plans.push_back(plan_for(L, 2, 8, 4, 4, 1));
    plans.push_back(plan_for(L, 3, 4, 4, 4, 0));
  }
  return plans;
}

/// Every length plan of a random layer with lengths c.len against each sample's own BP.
template <class T>
::testing::AssertionResult scanned_at_own_lengths(std::int32_t cell, const LengthCase& c, bool inject, bool final_grad,
                                                  int& runs) {
  const Index B = static_cast<Index>(c.len.size());
  const auto seed = static_cast<std::uint64_t>(100 * c.H + 10 * c.T + B + (inject ? 7 : 0) + (final_grad ? 3 : 0));
  const FusedLayer<T> L = make_layer<T>(cell, c.H, c.T, B, inject, final_grad, seed);
  const FusedLayer<T> packed = packed_layer(L, c.len);
  const double floor = std::is_same_v<T, float> ? kFloor : 0;
  for (const FusedChoice& p : length_plans(L)) {
    const Replayed<T> r = replay(packed, p, Order::forward, 1, c.len);
    const auto ok = matches_per_sample(r.g.data(), L, c.len, kTol<T>, floor);
    if (!ok)
      return ::testing::AssertionFailure() << L.describe() << (sizeof(T) == 4 ? " float" : " double")
                                           << lengths_string(c.len) << plan_string(p) << ": " << ok.message();
    ++runs;
  }
  return ::testing::AssertionSuccess();
}

TEST(FusedLengths, EachSampleIsScannedAtItsOwnLengthAndItsPaddingIsNeverRead) {
  int runs = 0;
  for (const std::int32_t cell : kCells)
    for (const LengthCase& c : kLengthCases)
      for (const bool inject : {false, true})
        for (const bool final_grad : {false, true}) {
          ASSERT_TRUE(scanned_at_own_lengths<float>(cell, c, inject, final_grad, runs));
          ASSERT_TRUE(scanned_at_own_lengths<double>(cell, c, inject, final_grad, runs));
        }
  EXPECT_GT(runs, 1000);
}

TEST(FusedLengths, SmallIntegerAndDyadicChainsAreExactPerSampleForEveryChunking) {
  for (const std::int32_t cell : kCells)
    for (const Index T_ : {1, 2, 3, 4})
      for (const bool inject : {false, true}) {
        const FusedLayer<double> L = exact_layer(cell, 3, T_, 3, inject, static_cast<std::uint64_t>(17 * T_ + inject));
        const std::vector<Idx> len{T_, std::max<Idx>(1, T_ - 1), 1};
        const FusedLayer<double> packed = packed_layer(L, len);
        for (Idx chunk = 1; chunk <= T_; ++chunk)
          for (const Idx tile : {4, 32}) {
            const FusedChoice p = plan_for(L, chunk, tile, 1, tile);
            const Replayed<double> r = replay(packed, p, Order::forward, 1, len);
            ASSERT_TRUE(matches_per_sample(r.g.data(), L, len, 0, 0, true))
                << L.describe() << lengths_string(len) << plan_string(p);
          }
      }
}

TEST(FusedLengths, FullLengthsGiveTheBitsOfARunWithoutLengths) {
  auto same_bits = [](const auto& L) {
    using T = typename std::decay_t<decltype(L.g_last)>::Scalar;
    const std::vector<Idx> full(static_cast<std::size_t>(L.B), L.steps);
    for (const FusedChoice& p : length_plans(L)) {
      const Replayed<T> with = replay(L, p, Order::forward, 1, full), without = replay(L, p);
      ASSERT_EQ(0, std::memcmp(with.g.data(), without.g.data(), with.g.size() * sizeof(T)))
          << L.describe() << plan_string(p);
    }
  };
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true}) {
      same_bits(make_layer<double>(cell, 13, 17, 3, inject, true, 23));
      same_bits(make_layer<float>(cell, 13, 17, 3, inject, true, 23));
    }
}

TEST(FusedLengths, NoThreadOrderChangesABit) {
  for (const std::int32_t cell : kCells)
    for (const bool inject : {false, true}) {
      const std::vector<Idx> len{23, 11, 11, 2};
      const auto L = make_layer<double>(cell, 13, 23, 4, inject, true, 29);
      const FusedLayer<double> packed = packed_layer(L, len);
      for (const FusedChoice& p : {plan_for(L, 6, 4, 1, 4), plan_for(L, 1, 16, 1, 16), plan_for(L, 5, 4, 1, 16),
                                   plan_for(L, 4, 4, 1, 32, 0)}) {
        const Replayed<double> base = replay(packed, p, Order::forward, 1, len);
        ASSERT_TRUE(matches_per_sample(base.g.data(), L, len, kTol<double>, 0)) << L.describe() << plan_string(p);
        for (const Order o : {Order::reverse, Order::shuffled, Order::thread_major}) {
          const Replayed<double> other = replay(packed, p, o, 77, len);
          ASSERT_EQ(0, std::memcmp(base.g.data(), other.g.data(), base.g.size() * sizeof(double)))
              << L.describe() << plan_string(p) << " order " << static_cast<int>(o);
        }
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Prefetch addresses

TEST(FusedHost, PrefetchAddressesStayInsideTheirArraysAndStartEverySpan) {
  for (const std::int32_t cell : kCells) {
    const auto L = make_layer<float>(cell, 21, 30, 3, true, false, 3);
    const FusedChoice p = plan_for(L, 7, 8, 1, 4);
    Replayed<float> r = replay(L, p);
    auto inside = [](const float* q, const float* base, Index n) { return q >= base && q < base + n; };
    for (const FusedLaunch* l : {&p.reduce, &p.push}) {
      r.a.launch = *l;
      for (Idx b = 0; b < l->blocks; ++b)
        for (Idx t = 0; t < l->threads; ++t) {
          const gpu::FusedGroup g = gpu::fused_group(p.shape, *l, b, t);
          for (Idx j = 0; j < l->steps + 3; ++j) {
            Idx lines = 0;
            for (Idx which = 0;; ++which) {
              const float* q = nullptr;
              gpu::visit_cell(cell,
                              [&](auto c) { q = gpu::fused_prefetch_line<float, decltype(c)>(r.a, g, j, which); });
              if (!q) break;
              ++lines;
              const bool ok = inside(q, L.rec.h.data(), L.rec.h.size()) ||
                              (L.rec.c.size() && inside(q, L.rec.c.data(), L.rec.c.size())) ||
                              (L.rec.gates.size() && inside(q, L.rec.gates.data(), L.rec.gates.size())) ||
                              (L.rec.aux.size() && inside(q, L.rec.aux.data(), L.rec.aux.size())) ||
                              inside(q, L.above.data(), L.above.size());
              ASSERT_TRUE(ok) << cell_name(cell) << " step " << j << " line " << which;
            }
            if (g.valid && j < g.steps) {
              ASSERT_GE(lines, cell == gpu::kRnnTanh || cell == gpu::kRnnRelu ? 1 : 3);
            }
            if (!g.valid || j >= g.steps) {
              ASSERT_EQ(lines, 0);
            }
          }
        }
    }
    for (Idx n = -1; n < p.shape.C + 2; ++n)
      for (Idx which = 0; which < 400; ++which) {
        const float* q = gpu::carry_prefetch_line(r.a, 1, n, which);
        if (q) {
          ASSERT_TRUE(inside(q, r.totals.data(), static_cast<Index>(r.totals.size())));
        }
      }
  }
}

}  // namespace
