// Executor for scan schedules (CPU half): stages of claimed units on a team of threads.
#include "scan/cpu/executor.hpp"
#include "core/denormals.hpp"
#include "core/team.hpp"

#include <algorithm>
#include <exception>
#include <mutex>

namespace bppsa::detail {

template <class T>
void Workspace<T>::reserve(const Schedule<T>& schedule, Index batch, int threads) {
  slots.resize(schedule.slot_values.size());
  for (std::size_t i = 0; i < slots.size(); ++i)
    slots[i].resize(static_cast<std::size_t>(schedule.slot_values[i] * (schedule.slot_shared[i] ? 1 : batch)));
  v_slots.resize(schedule.v_slot_values.size());
  for (std::size_t i = 0; i < v_slots.size(); ++i)
    v_slots[i].resize(static_cast<std::size_t>(schedule.v_slot_values[i] * batch));
  scratch.resize(static_cast<std::size_t>(std::max(threads, 1)));
}

template <class T>
std::size_t Workspace<T>::bytes() const {
  std::size_t n = 0;
  for (const auto& s : slots) n += s.capacity();
  for (const auto& s : v_slots) n += s.capacity();
  return n * sizeof(T);
}

namespace {

template <class T>
class Runner {
 public:
  Runner(const Schedule<T>& s, const Operands<T>& o, Workspace<T>& ws, Index batch)
      : s_(s), o_(o), ws_(ws), batch_(batch) {}

  JacobianView<T> mat(const MatRef& m) const {
    if (!m.node) return o_.element[static_cast<std::size_t>(m.index)];
    const Node<T>& node = s_.nodes[static_cast<std::size_t>(m.index)];
    return {&node.plan.out, ws_.slots[static_cast<std::size_t>(node.slot)].data(),
            s_.slot_values[static_cast<std::size_t>(node.slot)]};
  }
  /// An affine part: rows × batch at leading dimension ld (null when absent).
  struct Vec {
    T* data = nullptr;
    Index ld = 0;
  };
  Vec vec(const MatRef& m) const {
    if (!m.node) {
      const auto i = static_cast<std::size_t>(m.index);
      return {const_cast<T*>(o_.element_v[i]), o_.element[i].layout->rows};
    }
    const Node<T>& node = s_.nodes[static_cast<std::size_t>(m.index)];
    if (!node.has_v) return {};
    const auto slot = static_cast<std::size_t>(node.v_slot);
    return {ws_.v_slots[slot].data(), s_.v_slot_values[slot]};
  }

  bool is_shared_product(const Op& op) const {
    return op.type == Op::Type::mm && s_.nodes[static_cast<std::size_t>(op.out)].plan.out.shared();
  }

  /// The batch-independent part of an op: the matrix of a shared product.
  void run_shared(const Op& op, Scratch<T>& scratch) const {
    if (!is_shared_product(op)) return;
    const Node<T>& node = s_.nodes[static_cast<std::size_t>(op.out)];
    multiply(node.plan, mat(op.a), mat(op.b), 0, ws_.slots[static_cast<std::size_t>(node.slot)].data(), scratch);
  }

  /// The per-sample part of an op for samples [b0, b1).
  void run_samples(const Op& op, Index b0, Index b1, Scratch<T>& scratch) const {
    const JacobianView<T> a = mat(op.a);
    const Vec va = vec(op.a);
    const Index rows = a.layout->rows;
    if (op.type == Op::Type::mv) {
      const Vec out{o_.prefix[static_cast<std::size_t>(op.out)], rows};
      apply(a, b0, b1, o_.prefix[static_cast<std::size_t>(op.in)], o_.prefix_rows[static_cast<std::size_t>(op.in)],
            out.data, out.ld, false, scratch);
      if (va.data) add(out, va, rows, b0, b1);
      return;
    }
    const Node<T>& node = s_.nodes[static_cast<std::size_t>(op.out)];
    if (!node.plan.out.shared()) {
      T* out = ws_.slots[static_cast<std::size_t>(node.slot)].data();
      const Index stride = s_.slot_values[static_cast<std::size_t>(node.slot)];
      const JacobianView<T> b = mat(op.b);
      for (Index s = b0; s < b1; ++s) multiply(node.plan, a, b, s, out + s * stride, scratch);
    }
    if (!node.has_v) return;
    const Vec v = vec(MatRef{true, op.out});
    const Vec vb = vec(op.b);
    if (vb.data) {
      apply(a, b0, b1, vb.data, vb.ld, v.data, v.ld, false, scratch);
      if (va.data) add(v, va, rows, b0, b1);
    } else {
      for (Index b = b0; b < b1; ++b) std::copy_n(va.data + b * va.ld, rows, v.data + b * v.ld);
    }
  }

 private:
  static void add(const Vec& dst, const Vec& src, Index rows, Index b0, Index b1) {
    for (Index b = b0; b < b1; ++b) {
      T* d = dst.data + b * dst.ld;
      const T* s = src.data + b * src.ld;
      for (Index i = 0; i < rows; ++i) d[i] += s[i];
    }
  }

  const Schedule<T>& s_;
  const Operands<T>& o_;
  Workspace<T>& ws_;
  Index batch_;
};

}  // namespace

template <class T>
void execute(const Schedule<T>& schedule, const Operands<T>& operands, Workspace<T>& ws, Index batch, int threads) {
  threads = team_for(schedule.stats.flops, std::max(threads, 1));
  ws.scratch.resize(std::max(ws.scratch.size(), static_cast<std::size_t>(threads)));
  const Runner<T> runner(schedule, operands, ws, batch);
  const auto& phases = schedule.phases;
  const bool sample_major = runs_sample_major(batch, threads);

  // The stages: the shared products phase by phase; then either `threads` contiguous sample
  // ranges through every phase (one stage), or each phase's (task, sample) pairs.
  std::vector<std::size_t> shared_phases;
  std::vector<std::int64_t> units;
  for (std::size_t p = 0; p < phases.size(); ++p)
    if (phases[p].has_shared_product) {
      shared_phases.push_back(p);
      units.push_back(static_cast<std::int64_t>(phases[p].tasks.size()));
    }
  const std::size_t first_sample_stage = units.size();
  if (sample_major)
    units.push_back(threads);
  else
    for (const Phase& phase : phases) units.push_back(static_cast<std::int64_t>(phase.tasks.size()) * batch);

  std::exception_ptr error;
  std::mutex error_mutex;
  auto unit = [&](std::size_t stage, std::int64_t u, Scratch<T>& scratch) {
    try {
      if (stage < first_sample_stage) {
        for (const Op& op : phases[shared_phases[stage]].tasks[static_cast<std::size_t>(u)].ops)
          runner.run_shared(op, scratch);
      } else if (sample_major) {
        const Index b0 = batch * u / threads, b1 = batch * (u + 1) / threads;
        for (const Phase& phase : phases)
          for (const Task& task : phase.tasks)
            for (const Op& op : task.ops) runner.run_samples(op, b0, b1, scratch);
      } else {
        const Index s = u % batch;
        for (const Op& op : phases[stage - first_sample_stage].tasks[static_cast<std::size_t>(u / batch)].ops)
          runner.run_samples(op, s, s + 1, scratch);
      }
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };

  Stages stages(units);
  run_team(threads, [&](int worker) {
    detail::FlushDenormals flush;
    Scratch<T>& scratch = ws.scratch[static_cast<std::size_t>(worker)];
    stages.run([&](std::size_t stage, std::int64_t u) { unit(stage, u, scratch); });
  });
  if (error) std::rethrow_exception(error);
}

template <class T>
void execute_op(const Schedule<T>& schedule, const Operands<T>& operands, Workspace<T>& ws, Index batch, const Op& op,
                bool shared, Index b0, Index b1, Scratch<T>& scratch) {
  const Runner<T> runner(schedule, operands, ws, batch);
  if (shared)
    runner.run_shared(op, scratch);
  else
    runner.run_samples(op, b0, b1, scratch);
}

template struct Workspace<float>;
template struct Workspace<double>;
template void execute(const Schedule<float>&, const Operands<float>&, Workspace<float>&, Index, int);
template void execute(const Schedule<double>&, const Operands<double>&, Workspace<double>&, Index, int);

template void execute_op(const Schedule<float>&, const Operands<float>&, Workspace<float>&, Index, const Op&, bool,
                         Index, Index, Scratch<float>&);
template void execute_op(const Schedule<double>&, const Operands<double>&, Workspace<double>&, Index, const Op&, bool,
                         Index, Index, Scratch<double>&);

}  // namespace bppsa::detail
