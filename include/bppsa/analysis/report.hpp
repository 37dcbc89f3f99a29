// What a scan does, product by product, without running it: kinds, fill-in and flops of every
// product of the schedule Scanner::run executes, its critical path, and sequential BP's steps
// for comparison (the data behind the paper's Fig. 10).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bppsa/scan/scanner.hpp"

namespace bppsa {

/// One product of a planned scan. Operands are named by the chain elements they multiply:
/// J_k^T is element k of the chain (forward order), and a product of the consecutive elements
/// first..last is J_first^T ⋯ J_last^T = (J_last ⋯ J_first)^T (the later element, the smaller
/// k, on the left, docs/method.md §1).
///  - mm: out = a · b with a = J_first^T ⋯ J_split^T and b = J_{split+1}^T ⋯ J_last^T.
///  - mv: g_{first−1} = a · g_last with a = J_first^T ⋯ J_last^T (split = last); the vector
///    operand and the result are dense columns, one per sample: b_kind = out_kind = dense,
///    out_cols = 1, out_nnz = out_rows, out_shared = false.
struct ProductRecord {
  Index phase = 0;  ///< the schedule's phase (phases run one after another, a barrier between)
  Index task = 0;   ///< task within the phase (tasks of a phase run in parallel; a task's products in order)
  bool mm = true;   ///< matrix-matrix (false: matrix-vector)
  Kind a_kind = Kind::identity;    ///< the later operand (the matrix of an mv)
  Kind b_kind = Kind::identity;    ///< the earlier operand (dense for an mv: the gradient)
  Kind out_kind = Kind::identity;  ///< the result (dense for an mv)
  Index out_rows = 0, out_cols = 0;
  /// Stored values per sample of the result, Layout::values_per_sample(): csr the fill-in
  /// pattern's nnz, dense rows·cols, diagonal rows, shared_dense_diag cols, identity 0; mv rows.
  double out_nnz = 0;
  bool out_shared = false;  ///< the result is one Jacobian shared by the batch (computed once)
  /// Affine chains (per-step injections). mm: b has an affine part, carried through as
  /// v = a · v_b (+ v_a), which ScanStats counts as one more mv; mv: a's affine part is added.
  /// Its flops are part of `flops`.
  bool affine = false;
  /// For the whole batch, shared products counted once, exactly as ScanStats::flops counts
  /// them (so Σ flops = ScanStats::flops).
  double flops = 0;
  bool critical = false;                 ///< in the task its phase waits for (see ScanReport)
  Index first = 0, split = 0, last = 0;  ///< the elements multiplied (see above)
  /// For humans: "J_5^T", "J_4^T·J_5^T", "J_2^T⋯J_5^T" (elements 2 to 5), "g_7".
  std::string a, b, out;
};

/// A scan's schedule as data.
///
/// Critical path. The schedule is a sequence of phases with a barrier between consecutive
/// ones; the tasks of a phase are independent and each runs its products one after another.
/// A machine with one worker per task (the batch's samples inside each product's flops)
/// finishes a phase when its most expensive task does. So, in every phase, the task with the
/// most flops (the first one on ties) is the critical task and all of its products are marked
/// `critical`; phase_flops[p] is that task's flops (0 for a phase without tasks) and
/// critical_flops = Σ_p phase_flops[p]. This is ScanStats::levels (Σ over phases of the
/// longest task, in products) measured in flops; it is not ScanStats::depth (the longest
/// chain of dependent products, which ignores barriers). For linear, one task holds every
/// product: critical_flops = total_flops = bp_flops.
struct ScanReport {
  Algorithm algorithm = Algorithm::linear;  ///< the algorithm planned (automatic resolved)
  int chunks = 1;                           ///< hybrid chunks per chain (1 for linear, 0 for blelloch), as ScanStats
  int threads = 1;                          ///< the thread count the Scanner would run with (automatic plans for it)
  Index n = 0;                              ///< N, the number of Jacobians
  Index batch = 1;
  Index levels = 0;  ///< ScanStats::levels of the plan
  Index depth = 0;   ///< ScanStats::depth of the plan
  /// In schedule order: phase by phase, task by task, each task's products in order.
  std::vector<ProductRecord> products;
  std::vector<double> phase_flops;  ///< per phase of the schedule: its critical task's flops
  double critical_flops = 0;        ///< Σ phase_flops
  double total_flops = 0;           ///< Σ every product's flops (= ScanStats::flops)
  /// Sequential BP for comparison: element i is g_{k−1} = J_k^T g_k (+ e_{k−1}) for k = N − i,
  /// i.e. k = N..1, costed like the linear scan's mv (batch × apply_flops, shared or not).
  std::vector<double> bp_step_flops;
  double bp_flops = 0;              ///< Σ bp_step_flops: BP's critical path is all of its work
  std::size_t workspace_bytes = 0;  ///< intermediate products and affine parts (= ScanStats's)
};

/// Plans the scan of `chain` exactly as Scanner<T>(options).run would (same validation,
/// algorithm resolution, chunks and thread count) and reports every product without running
/// it: only layouts are read, never values. Throws as Scanner::run does for malformed chains
/// and options.
template <class T>
ScanReport scan_report(const Chain<T>& chain, const ScanOptions& options = {});

/// The same from layouts alone, for chains too large to hold: layouts[k − 1] is the layout of
/// J_k^T, k = 1..N (forward order), for a batch of `batch` samples; no injections. Throws
/// ShapeError / InvalidArgument for layouts that do not chain, counts other than 1 or batch,
/// and invalid CSR patterns.
template <class T>
ScanReport scan_report(const std::vector<Layout<T>>& layouts, Index batch, const ScanOptions& options = {});

/// The report as JSON for scripts: every field of ScanReport and ProductRecord under its own
/// name, kinds and the algorithm as strings ("csr", "blelloch").
std::string to_json(const ScanReport& report);

}  // namespace bppsa
