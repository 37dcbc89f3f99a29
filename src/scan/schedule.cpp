// Schedule builder: dependency checks, statistics and workspace slot assignment.
#include "scan/schedule.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>

#include "bppsa/core/memory.hpp"

namespace bppsa::detail {
namespace {

constexpr std::int32_t kUnwritten = -2;

/// Free slots by capacity.
using FreeList = std::multimap<Index, std::int32_t>;

/// Takes a free slot able to hold `need` values (the smallest that fits, else the largest,
/// grown); -1 when the list is empty.
std::int32_t take(FreeList& list, std::vector<Index>& sizes, Index need) {
  if (list.empty()) return -1;
  auto it = list.lower_bound(need);
  if (it == list.end()) it = std::prev(list.end());
  const std::int32_t slot = it->second;
  list.erase(it);
  sizes[static_cast<std::size_t>(slot)] = std::max(sizes[static_cast<std::size_t>(slot)], need);
  return slot;
}

/// Free lists honouring the executor's ordering: a buffer freed inside a task can be reused
/// later in that task; one freed by another task only from the next phase on.
struct Pool {
  std::vector<Index>* sizes;
  FreeList global, task, pending;

  void release(std::int32_t slot) { task.emplace(sizes->at(static_cast<std::size_t>(slot)), slot); }

  std::int32_t alloc(Index need) {
    std::int32_t s = take(task, *sizes, need);
    if (s < 0) s = take(global, *sizes, need);
    if (s < 0) {
      s = static_cast<std::int32_t>(sizes->size());
      sizes->push_back(need);
    }
    return s;
  }
  void end_task() {
    pending.merge(task);
    task.clear();
  }
  void end_phase() {
    global.merge(pending);
    pending.clear();
  }
};

}  // namespace

template <class T>
Builder<T>::Builder(std::vector<ElementInfo<T>> elements, Index batch) : elements_(std::move(elements)), batch_(batch) {
  prefix_stamp_.assign(elements_.size(), Stamp{kUnwritten, -1, 0});
  prefix_stamp_[0] = Stamp{-1, -1, 0};  // s_0 = g_N is given
}

template <class T>
const Layout<T>& Builder<T>::layout(MatRef m) const {
  return m.node ? schedule_.nodes[static_cast<std::size_t>(m.index)].plan.out
                : *elements_[static_cast<std::size_t>(m.index)].layout;
}

template <class T>
bool Builder<T>::has_v(MatRef m) const {
  return m.node ? schedule_.nodes[static_cast<std::size_t>(m.index)].has_v
                : elements_[static_cast<std::size_t>(m.index)].has_v;
}

template <class T>
typename Builder<T>::Stamp& Builder<T>::stamp(MatRef m) {
  return m.node ? node_stamp_[static_cast<std::size_t>(m.index)] : element_stamp_;
}

template <class T>
void Builder<T>::require_ready(const Stamp& s, const char* what, Index index) const {
  if (s.phase == kUnwritten)
    throw std::logic_error(std::string("bppsa schedule bug: reads ") + what + std::to_string(index) +
                           " before it is written");
  if (s.phase == phase_ && s.task != task_)
    throw std::logic_error(std::string("bppsa schedule bug: reads ") + what + std::to_string(index) +
                           " written by another task of the same phase");
}

template <class T>
void Builder<T>::begin_phase() {
  ++phase_;
  task_ = -1;
  schedule_.phases.emplace_back();
}

template <class T>
void Builder<T>::begin_task() {
  ++task_;
  schedule_.phases.back().tasks.emplace_back();
}

template <class T>
MatRef Builder<T>::mm(MatRef a, MatRef b) {
  require_ready(stamp(a), a.node ? "node " : "element ", a.index);
  require_ready(stamp(b), b.node ? "node " : "element ", b.index);
  const Layout<T>& la = layout(a);
  const Layout<T>& lb = layout(b);
  Node<T> node{plan_product(la, lb, batch_), has_v(a) || has_v(b)};
  // A chain of band matrices fills in level by level: each pattern fits, their sum may not
  // (a scan of 10^5 CSR products of d = 4000 grew to 21 GB).
  if (const CsrPattern* p = node.plan.out.pattern.get(); p && p != la.pattern.get() && p != lb.pattern.get()) {
    pattern_bytes_ += (static_cast<double>(p->nnz()) + static_cast<double>(p->rows()) + 1) * sizeof(std::int32_t);
    if (!fits_in_memory(pattern_bytes_))
      check_memory("plan", "the SpGEMM fill-in patterns of the first " + std::to_string(schedule_.nodes.size() + 1) +
                               " products of a scan of " + std::to_string(n()) + " Jacobians",
                   {{"patterns", pattern_bytes_}},
                   "use a shorter chain or sparser Jacobians, or the linear algorithm (sequential BP: no products) "
                   "or hybrid, which makes few (bppsa: --backward bp or hybrid; scan-check and simulate: --algo "
                   "linear or hybrid)");
  }
  ScanStats& st = schedule_.stats;
  st.mm += 1;
  st.mm_by_kind[static_cast<int>(la.kind)][static_cast<int>(lb.kind)] += 1;
  st.flops += mm_flops(node.plan, la, has_v(a), has_v(b), batch_);
  if (has_v(b)) {  // v = a · v_b (+ v_a)
    st.mv += 1;
    st.mv_by_kind[static_cast<int>(la.kind)] += 1;
  }
  const Index depth = std::max(stamp(a).depth, stamp(b).depth) + 1;
  const MatRef out{true, static_cast<std::int32_t>(schedule_.nodes.size())};
  schedule_.nodes.push_back(std::move(node));
  node_stamp_.push_back(Stamp{phase_, task_, depth});
  schedule_.phases.back().tasks.back().ops.push_back(Op{Op::Type::mm, a, b, out.index, 0});
  return out;
}

template <class T>
void Builder<T>::mv(MatRef a, Index in, Index out) {
  require_ready(stamp(a), a.node ? "node " : "element ", a.index);
  require_ready(prefix_stamp_[static_cast<std::size_t>(in)], "prefix s_", in);
  Stamp& dst = prefix_stamp_[static_cast<std::size_t>(out)];
  if (dst.phase != kUnwritten)
    throw std::logic_error("bppsa schedule bug: prefix s_" + std::to_string(out) + " written twice");
  const Layout<T>& la = layout(a);
  ScanStats& st = schedule_.stats;
  st.mv += 1;
  st.mv_by_kind[static_cast<int>(la.kind)] += 1;
  st.flops += mv_flops(la, has_v(a), batch_);
  dst = Stamp{phase_, task_, std::max(stamp(a).depth, prefix_stamp_[static_cast<std::size_t>(in)].depth) + 1};
  st.depth = std::max(st.depth, dst.depth);
  schedule_.phases.back().tasks.back().ops.push_back(
      Op{Op::Type::mv, a, MatRef{}, static_cast<std::int32_t>(out), static_cast<std::int32_t>(in)});
}

template <class T>
Schedule<T> Builder<T>::finish() {
  for (Index i = 1; i <= n(); ++i)
    if (prefix_stamp_[static_cast<std::size_t>(i)].phase == kUnwritten)
      throw std::logic_error("bppsa schedule bug: prefix s_" + std::to_string(i) + " is never computed");
  for (Phase& phase : schedule_.phases) {
    std::size_t longest = 0;
    for (const Task& task : phase.tasks) {
      longest = std::max(longest, task.ops.size());
      for (const Op& op : task.ops)
        if (op.type == Op::Type::mm && schedule_.nodes[static_cast<std::size_t>(op.out)].plan.out.shared())
          phase.has_shared_product = true;
    }
    schedule_.stats.levels += static_cast<Index>(longest);
  }

  // Last reader of every node, as (phase, task, op) in execution order.
  struct Where {
    std::int32_t phase = -1, task = -1, op = -1;
  };
  std::vector<Where> last(schedule_.nodes.size());
  for (std::int32_t p = 0; p < static_cast<std::int32_t>(schedule_.phases.size()); ++p) {
    const auto& tasks = schedule_.phases[static_cast<std::size_t>(p)].tasks;
    for (std::int32_t t = 0; t < static_cast<std::int32_t>(tasks.size()); ++t) {
      const auto& ops = tasks[static_cast<std::size_t>(t)].ops;
      for (std::int32_t o = 0; o < static_cast<std::int32_t>(ops.size()); ++o) {
        const Op& op = ops[static_cast<std::size_t>(o)];
        if (op.a.node) last[static_cast<std::size_t>(op.a.index)] = {p, t, o};
        if (op.type == Op::Type::mm && op.b.node) last[static_cast<std::size_t>(op.b.index)] = {p, t, o};
      }
    }
  }

  Pool mats{&schedule_.slot_values, {}, {}, {}};
  Pool vecs{&schedule_.v_slot_values, {}, {}, {}};
  auto release = [&](const MatRef& m, std::int32_t p, std::int32_t t, std::int32_t o) {
    if (!m.node) return;
    const Where& w = last[static_cast<std::size_t>(m.index)];
    if (w.phase != p || w.task != t || w.op != o) return;
    const Node<T>& node = schedule_.nodes[static_cast<std::size_t>(m.index)];
    if (!node.plan.out.shared()) mats.release(node.slot);  // shared nodes are computed up front: never reused
    if (node.has_v) vecs.release(node.v_slot);
  };
  for (std::int32_t p = 0; p < static_cast<std::int32_t>(schedule_.phases.size()); ++p) {
    auto& tasks = schedule_.phases[static_cast<std::size_t>(p)].tasks;
    for (std::int32_t t = 0; t < static_cast<std::int32_t>(tasks.size()); ++t) {
      const auto& ops = tasks[static_cast<std::size_t>(t)].ops;
      for (std::int32_t o = 0; o < static_cast<std::int32_t>(ops.size()); ++o) {
        const Op& op = ops[static_cast<std::size_t>(o)];
        if (op.type == Op::Type::mm) {
          Node<T>& node = schedule_.nodes[static_cast<std::size_t>(op.out)];
          const Layout<T>& l = node.plan.out;
          if (l.shared()) {
            node.slot = static_cast<std::int32_t>(schedule_.slot_values.size());
            schedule_.slot_values.push_back(l.values_per_sample());
          } else {
            node.slot = mats.alloc(l.values_per_sample());
          }
          schedule_.slot_shared.resize(schedule_.slot_values.size(), 0);
          if (l.shared()) schedule_.slot_shared[static_cast<std::size_t>(node.slot)] = 1;
          if (node.has_v) node.v_slot = vecs.alloc(l.rows);
          release(op.b, p, t, o);
        }
        release(op.a, p, t, o);
      }
      mats.end_task();
      vecs.end_task();
    }
    mats.end_phase();
    vecs.end_phase();
  }
  // Nodes nobody reads still need their slot until the end; nothing to do.
  return std::move(schedule_);
}

template <class T>
Index workspace_values(const Schedule<T>& s, Index batch) {
  Index values = 0;
  for (std::size_t i = 0; i < s.slot_values.size(); ++i) values += s.slot_values[i] * (s.slot_shared[i] ? 1 : batch);
  for (const Index v : s.v_slot_values) values += v * batch;
  return values;
}

template class Builder<float>;
template class Builder<double>;
template Index workspace_values(const Schedule<float>&, Index);
template Index workspace_values(const Schedule<double>&, Index);

}  // namespace bppsa::detail
