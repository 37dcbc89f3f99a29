// The scan report: the Scanner's own plan (detail::plan_run) walked op by op, costed with the
// builder's own flop counts (detail::mm_flops, detail::mv_flops).
#include "bppsa/analysis/report.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/core/error.hpp"
#include "scan/plan.hpp"

namespace bppsa {
namespace {

/// The chain elements a matrix operand is the product of: J_first^T ⋯ J_last^T.
struct Range {
  Index first = 0, last = 0;
};

std::string name(const Range& r) {
  const std::string first = "J_" + std::to_string(r.first) + "^T";
  if (r.last == r.first) return first;
  return first + (r.last == r.first + 1 ? "·" : "⋯") + "J_" + std::to_string(r.last) + "^T";
}

std::string gradient_name(Index k) { return "g_" + std::to_string(k); }

[[noreturn]] void schedule_bug(const std::string& what) {
  throw std::logic_error("bppsa schedule bug (scan_report): " + what);
}

/// Walks the planned schedule of `elements` (scan positions, as detail::scan_elements makes
/// them) and records every op.
template <class T>
ScanReport report(const std::vector<detail::ElementInfo<T>>& elements, Index batch, const ScanOptions& options,
                  int threads) {
  const Index n = static_cast<Index>(elements.size()) - 1;
  const detail::PlannedSchedule<T> planned = detail::plan_run(elements, batch, options, threads);
  const detail::Schedule<T>& s = planned.schedule;

  ScanReport r;
  r.algorithm = planned.algorithm;
  r.chunks = planned.chunks;
  r.threads = threads;
  r.n = n;
  r.batch = batch;
  r.levels = s.stats.levels;
  r.depth = s.stats.depth;
  r.workspace_bytes = static_cast<std::size_t>(detail::workspace_values(s, batch)) * sizeof(T);

  // Position i holds J_{N−i+1}^T; a node's range is known once the op producing it is seen
  // (an op only reads nodes of earlier ops).
  std::vector<Range> node_range(s.nodes.size());
  auto range = [&](detail::MatRef m) {
    if (m.node) return node_range[static_cast<std::size_t>(m.index)];
    const Index k = n - m.index + 1;
    return Range{k, k};
  };
  auto layout = [&](detail::MatRef m) -> const Layout<T>& {
    return m.node ? s.nodes[static_cast<std::size_t>(m.index)].plan.out
                  : *elements[static_cast<std::size_t>(m.index)].layout;
  };
  auto has_v = [&](detail::MatRef m) {
    return m.node ? s.nodes[static_cast<std::size_t>(m.index)].has_v
                  : elements[static_cast<std::size_t>(m.index)].has_v;
  };

  Index levels = 0;
  for (std::size_t p = 0; p < s.phases.size(); ++p) {
    const std::vector<detail::Task>& tasks = s.phases[p].tasks;
    const std::size_t phase_begin = r.products.size();
    double critical_task_flops = 0;
    std::size_t critical_task = 0, longest = 0;
    for (std::size_t t = 0; t < tasks.size(); ++t) {
      double task_flops = 0;
      for (const detail::Op& op : tasks[t].ops) {
        ProductRecord rec;
        rec.phase = static_cast<Index>(p);
        rec.task = static_cast<Index>(t);
        const Layout<T>& la = layout(op.a);
        const Range ra = range(op.a);
        rec.a_kind = la.kind;
        rec.a = name(ra);
        rec.first = ra.first;
        if (op.type == detail::Op::Type::mm) {
          const detail::Node<T>& node = s.nodes[static_cast<std::size_t>(op.out)];
          const Range rb = range(op.b);
          if (rb.first != ra.last + 1)
            schedule_bug("mm of " + name(ra) + " and " + name(rb) + ", which are not consecutive");
          node_range[static_cast<std::size_t>(op.out)] = {ra.first, rb.last};
          const Layout<T>& out = node.plan.out;
          rec.mm = true;
          rec.b_kind = layout(op.b).kind;
          rec.out_kind = out.kind;
          rec.out_rows = out.rows;
          rec.out_cols = out.cols;
          rec.out_nnz = static_cast<double>(out.values_per_sample());
          rec.out_shared = out.shared();
          rec.affine = has_v(op.b);
          rec.flops = detail::mm_flops(node.plan, la, has_v(op.a), has_v(op.b), batch);
          rec.split = ra.last;
          rec.last = rb.last;
          rec.b = name(rb);
          rec.out = name({ra.first, rb.last});
        } else {
          // s_out = a · s_in with s_i = g_{N−i}: g_{first−1} = (J_first^T ⋯ J_last^T) g_last.
          const Index g_in = n - op.in, g_out = n - op.out;
          if (g_in != ra.last || g_out != ra.first - 1)
            schedule_bug("mv " + gradient_name(g_out) + " = " + name(ra) + " · " + gradient_name(g_in));
          rec.mm = false;
          rec.b_kind = rec.out_kind = Kind::dense;
          rec.out_rows = la.rows;
          rec.out_cols = 1;
          rec.out_nnz = static_cast<double>(la.rows);
          rec.out_shared = false;
          rec.affine = has_v(op.a);
          rec.flops = detail::mv_flops(la, has_v(op.a), batch);
          rec.split = rec.last = ra.last;
          rec.b = gradient_name(g_in);
          rec.out = gradient_name(g_out);
        }
        task_flops += rec.flops;
        r.total_flops += rec.flops;
        r.products.push_back(std::move(rec));
      }
      if (t == 0 || task_flops > critical_task_flops) {
        critical_task = t;
        critical_task_flops = task_flops;
      }
      longest = std::max(longest, tasks[t].ops.size());
    }
    for (std::size_t i = phase_begin; i < r.products.size(); ++i)
      r.products[i].critical = r.products[i].task == static_cast<Index>(critical_task);
    r.phase_flops.push_back(critical_task_flops);
    r.critical_flops += critical_task_flops;
    levels += static_cast<Index>(longest);
  }
  if (levels != r.levels)
    schedule_bug("Σ over phases of the longest task is " + std::to_string(levels) + " products, the plan's levels " +
                 std::to_string(r.levels));

  r.bp_step_flops.reserve(static_cast<std::size_t>(n));
  for (Index i = 1; i <= n; ++i) {  // position i is J_{N−i+1}^T: k = N..1
    const detail::ElementInfo<T>& e = elements[static_cast<std::size_t>(i)];
    r.bp_step_flops.push_back(detail::mv_flops(*e.layout, e.has_v, batch));
    r.bp_flops += r.bp_step_flops.back();
  }
  return r;
}

/// The layouts overload's boundary check: what Chain::validate checks of a chain, from layouts.
template <class T>
void check_layouts(const std::vector<Layout<T>>& layouts, Index batch, const char* op) {
  if (batch < 1) detail::raise<InvalidArgument>(op, "batch size must be ≥ 1, got " + std::to_string(batch));
  if (layouts.empty()) detail::raise<InvalidArgument>(op, "no layouts: give at least one (J_1^T's, layouts[0])");
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const Layout<T>& l = layouts[i];
    const std::string k = std::to_string(i + 1);
    const std::string what = "J_" + k + "^T (layouts[" + std::to_string(i) + "], " + l.describe() + ")";
    if (l.count != 1 && l.count != batch)
      detail::raise<ShapeError>(op, what + " has " + std::to_string(l.count) + " samples but the batch has " +
                                        std::to_string(batch) + "; use count 1 (shared) or " + std::to_string(batch));
    if ((l.kind == Kind::identity || l.kind == Kind::diagonal) && l.rows != l.cols)
      detail::raise<ShapeError>(op, what + " is " + to_string(l.kind) + " but not square");
    if (l.kind == Kind::csr) {
      if (!l.pattern) detail::raise<InvalidArgument>(op, what + " is csr without a pattern");
      l.pattern->require_valid(op + (": " + what));
      if (l.pattern->rows() != l.rows || l.pattern->cols() != l.cols)
        detail::raise<ShapeError>(op,
                                  what + " has a " + shape_string(l.pattern->rows(), l.pattern->cols()) + " pattern");
    }
    if (l.kind == Kind::shared_dense_diag &&
        (!l.shared_dense || l.shared_dense->rows() != l.rows || l.shared_dense->cols() != l.cols))
      detail::raise<ShapeError>(op, what + " needs its shared matrix S, " + shape_string(l.rows, l.cols));
    if (i > 0 && layouts[i - 1].cols != l.rows)
      detail::raise<ShapeError>(op, what + " does not chain with J_" + std::to_string(i) + "^T (" +
                                        layouts[i - 1].describe() + "): " + std::to_string(layouts[i - 1].cols) +
                                        " columns (d_" + std::to_string(i) + ") against " + std::to_string(l.rows) +
                                        " rows");
  }
}

}  // namespace

template <class T>
ScanReport scan_report(const Chain<T>& chain, const ScanOptions& options) {
  const char* op = "scan_report";
  detail::check_options(options, op);
  const int threads = detail::run_threads(options);
  chain.validate(op, threads);
  return report(detail::scan_elements(chain), chain.batch(), options, threads);
}

template <class T>
ScanReport scan_report(const std::vector<Layout<T>>& layouts, Index batch, const ScanOptions& options) {
  const char* op = "scan_report";
  detail::check_options(options, op);
  check_layouts(layouts, batch, op);
  // The positions detail::scan_elements would make: 0 is g_N, i is J_{N−i+1}^T.
  const Index n = static_cast<Index>(layouts.size());
  std::vector<detail::ElementInfo<T>> elements(static_cast<std::size_t>(n) + 1);
  for (Index i = 1; i <= n; ++i)
    elements[static_cast<std::size_t>(i)] = {&layouts[static_cast<std::size_t>(n - i)], false};
  return report(elements, batch, options, detail::run_threads(options));
}

std::string to_json(const ScanReport& r) {
  using nlohmann::json;
  json products = json::array();
  for (const ProductRecord& p : r.products)
    products.push_back({{"phase", p.phase},
                        {"task", p.task},
                        {"mm", p.mm},
                        {"a_kind", to_string(p.a_kind)},
                        {"b_kind", to_string(p.b_kind)},
                        {"out_kind", to_string(p.out_kind)},
                        {"out_rows", p.out_rows},
                        {"out_cols", p.out_cols},
                        {"out_nnz", p.out_nnz},
                        {"out_shared", p.out_shared},
                        {"affine", p.affine},
                        {"flops", p.flops},
                        {"critical", p.critical},
                        {"first", p.first},
                        {"split", p.split},
                        {"last", p.last},
                        {"a", p.a},
                        {"b", p.b},
                        {"out", p.out}});
  const json j = {{"algorithm", to_string(r.algorithm)},
                  {"chunks", r.chunks},
                  {"threads", r.threads},
                  {"n", r.n},
                  {"batch", r.batch},
                  {"levels", r.levels},
                  {"depth", r.depth},
                  {"products", std::move(products)},
                  {"phase_flops", r.phase_flops},
                  {"critical_flops", r.critical_flops},
                  {"total_flops", r.total_flops},
                  {"bp_step_flops", r.bp_step_flops},
                  {"bp_flops", r.bp_flops},
                  {"workspace_bytes", r.workspace_bytes}};
  return j.dump();
}

template ScanReport scan_report(const Chain<float>&, const ScanOptions&);
template ScanReport scan_report(const Chain<double>&, const ScanOptions&);
template ScanReport scan_report(const std::vector<Layout<float>>&, Index, const ScanOptions&);
template ScanReport scan_report(const std::vector<Layout<double>>&, Index, const ScanOptions&);

}  // namespace bppsa
