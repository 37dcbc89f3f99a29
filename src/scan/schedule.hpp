// A scan algorithm compiled to data: phases of independent tasks, each a straight-line list
// of products. linear, blelloch and hybrid are builders of this one form; the executor
// (scan/cpu/) runs any schedule, and statistics and buffer reuse are derived from it.
#pragma once

#include <cstdint>
#include <vector>

#include "bppsa/jacobian/product.hpp"
#include "bppsa/scan/scanner.hpp"

namespace bppsa::detail {

/// A matrix operand: an input element a_i (position 1..n of the scan array) or a node (an
/// intermediate product held in the workspace).
struct MatRef {
  bool node = false;
  std::int32_t index = 0;
};

/// mm: node `out` = a · b (a the later element).  mv: s_out = a · s_in (+ a's affine part).
/// s_i is the inclusive prefix at position i, i.e. the gradient g_{N−i}.
struct Op {
  enum class Type : std::uint8_t { mm, mv };
  Type type = Type::mv;
  MatRef a;
  MatRef b;
  std::int32_t out = 0;
  std::int32_t in = 0;
};

/// Ops of a task run in order; tasks of a phase are independent; phases run in order.
struct Task {
  std::vector<Op> ops;
};
struct Phase {
  std::vector<Task> tasks;
  bool has_shared_product = false;  ///< some mm's result is shared by the batch
};

template <class T>
struct Node {
  ProductPlan<T> plan;     ///< layout of the product and its cost
  bool has_v = false;      ///< affine part (rows × batch), present when an operand has one
  std::int32_t slot = -1;  ///< workspace buffer of the matrix part
  std::int32_t v_slot = -1;
};

/// Flops of s_out = A · s_in for the whole batch, as ScanStats counts them: A applied to every
/// sample, plus the addition of A's affine part when it has one.
template <class T>
double mv_flops(const Layout<T>& a, bool a_has_v, Index batch) {
  return (apply_flops(a) + (a_has_v ? static_cast<double>(a.rows) : 0.0)) * static_cast<double>(batch);
}

/// Flops of the mm `plan` = A · B for the whole batch, as ScanStats counts them: the matrix
/// product once per Jacobian it yields (once when shared by the batch), plus, when B has an
/// affine part, v = A · v_B (+ v_A), which ScanStats counts as one more mv.
template <class T>
double mm_flops(const ProductPlan<T>& plan, const Layout<T>& a, bool a_has_v, bool b_has_v, Index batch) {
  return plan.flops_per_sample * static_cast<double>(plan.out.count) + (b_has_v ? mv_flops(a, a_has_v, batch) : 0.0);
}

/// Per-position facts the builders plan on.
template <class T>
struct ElementInfo {
  const Layout<T>* layout = nullptr;
  bool has_v = false;
};

template <class T>
struct Schedule {
  std::vector<Phase> phases;
  std::vector<Node<T>> nodes;
  /// Workspace slots. A per-sample slot holds `batch` samples at a fixed stride of
  /// slot_values[i] (its largest tenant), so nodes of different sizes that share it over time
  /// never overlap another sample's values. A shared slot holds one sample.
  std::vector<Index> slot_values;
  std::vector<char> slot_shared;
  std::vector<Index> v_slot_values;  ///< affine slots: rows per sample (stride), × batch
  ScanStats stats;                   ///< levels, counts, flops (timings left to the runner)
};

/// Values the workspace of `s` holds for a batch of `batch` samples: what Workspace::reserve
/// allocates (per-sample slots × batch, shared slots once, affine slots × batch).
template <class T>
Index workspace_values(const Schedule<T>& s, Index batch);

/// Records products into a Schedule while tracking what each builder must not get wrong:
/// operand availability (written in an earlier phase or earlier in the same task), every
/// prefix written exactly once, depth (critical path), counts and flops.
template <class T>
class Builder {
 public:
  Builder(std::vector<ElementInfo<T>> elements, Index batch);

  /// n: the last position; positions are 0 (g_N) … n (J_1^T).
  Index n() const { return static_cast<Index>(elements_.size()) - 1; }
  MatRef element(Index i) const { return {false, static_cast<std::int32_t>(i)}; }
  const Layout<T>& layout(MatRef m) const;
  bool has_v(MatRef m) const;

  void begin_phase();
  void begin_task();
  /// a · b as a new node. The SpGEMM fill-in patterns the products make are counted as they
  /// are made: ResourceError (check_memory) once together they pass what one request may use.
  MatRef mm(MatRef a, MatRef b);
  /// s_out = a · s_in.
  void mv(MatRef a, Index in, Index out);

  /// Checks that every prefix s_1..s_n was written, assigns workspace slots (reusing the
  /// buffers of dead per-sample nodes) and returns the schedule.
  Schedule<T> finish();

 private:
  struct Stamp {
    std::int32_t phase = -1;
    std::int32_t task = -1;
    Index depth = 0;
  };
  void require_ready(const Stamp& s, const char* what, Index index) const;
  Stamp& stamp(MatRef m);

  std::vector<ElementInfo<T>> elements_;
  Index batch_;
  Schedule<T> schedule_;
  std::vector<Stamp> node_stamp_;
  std::vector<Stamp> prefix_stamp_;
  Stamp element_stamp_{-1, -1, 0};
  std::int32_t phase_ = -1;
  std::int32_t task_ = -1;
  double pattern_bytes_ = 0;  ///< fill-in patterns made by mm so far
};

// Algorithm builders (one file each).
template <class T>
void build_linear(Builder<T>& b);
template <class T>
void build_blelloch(Builder<T>& b);
/// ends[c] is the last position of chunk c; ends is increasing and ends.back() == n.
template <class T>
void build_hybrid(Builder<T>& b, const std::vector<Index>& ends);

}  // namespace bppsa::detail
