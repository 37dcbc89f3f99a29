// The scan schedule compiled for a GPU: the data layout of one flat value arena (element
// values, shared matrices, injections, prefixes, workspace) and one index arena (CSR
// patterns), and the ordered list of flat launches that runs the schedule over them.
//
// Host code without CUDA, compiled in every build: the CUDA executor (executor.cpp) uploads and
// launches a Program; the g++ tests run the same Program on the CPU with the kernels' own
// item functions (jacobian/cuda/items.hpp), so everything but the launch itself is tested
// without a GPU.
//
// Execution order. Stream order replaces the CPU executor's barriers: a phase whose longest
// task has L ops becomes L steps, step j running op j of every task, so an op always follows
// its task's earlier ops and every op of earlier phases. As on the CPU, products shared by the
// batch run first, once (the "shared pass", phase by phase and step by step), then every op's
// per-sample part. Within a step, ops are grouped by (mm|mv, kind of A, kind of B) into one
// launch each over (op, sample, item).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jacobian/cuda/items.hpp"
#include "scan/schedule.hpp"

namespace bppsa::detail::gpu {

/// One flat launch: ops [first, first + count) of mat_ops or vec_ops, `batch` samples each.
struct Launch {
  enum class Type : std::uint8_t { mat, vec };
  Type type = Type::vec;
  std::int32_t ka = 0;  ///< kind of A (both types)
  std::int32_t kb = 0;  ///< kind of B (mat)
  bool shared = false;  ///< a shared product (batch 1), part of the shared pass
  Idx first = 0;
  Idx count = 0;
  Idx batch = 1;
  Idx items = 0;  ///< items per (op, sample): the largest of the ops
  std::int32_t phase = 0;  ///< schedule phase and step it belongs to (for logs and tests)
  std::int32_t step = 0;
};

/// A matrix S of shared_dense_diag elements, uploaded every run (S may change between runs
/// while the plan stays: its identity, not its values, is part of the plan).
struct SharedMatrix {
  Idx offset = 0;
  Idx rows = 0, cols = 0;
  Index position = 0;  ///< a scan position whose element's layout holds it
};

template <class T>
struct Program {
  Index n = 0;      ///< last scan position
  Index batch = 1;
  std::vector<Launch> launches;
  std::vector<MatOp> mat_ops;
  std::vector<VecOp> vec_ops;
  std::vector<std::int32_t> indices;  ///< the index arena (every CSR pattern, once)

  Idx values = 0;  ///< size of the value arena
  /// Upload region [0, upload_values): element values, shared matrices, injections, s_0 = g_N.
  Idx upload_values = 0;
  /// Download region [download_begin, download_end): the prefixes s_1 … s_n.
  Idx download_begin = 0, download_end = 0;
  std::vector<Idx> element_offset;    ///< by position 1..n: values of a_i (count × per-sample), -1 none
  std::vector<Idx> element_values;    ///< by position: count × values per sample
  std::vector<Idx> injection_offset;  ///< by position: its affine part e_{N−i} (rows × batch), -1 none
  std::vector<Idx> prefix_offset;     ///< by position 0..n: s_i = g_{N−i} (rows × batch)
  std::vector<Idx> prefix_rows;
  std::vector<SharedMatrix> shared_matrices;
  Idx workspace_values = 0;  ///< the part of the arena that holds intermediate products

  /// Launches of the shared pass come first: [0, shared_launches).
  std::size_t shared_launches = 0;
};

/// Compiles `schedule` (planned for `elements`, positions 0..n, for `batch` samples).
/// Throws ShapeError / logic_error only on inconsistent input (a planner bug).
template <class T>
Program<T> compile_program(const Schedule<T>& schedule, const std::vector<ElementInfo<T>>& elements, Index batch);

/// Writes the upload region of a run into `dst` (upload_values values): every element's values,
/// the shared matrices, the injections and g_N, from `chain` (the chain the plan was made for,
/// or one with the same layouts). Spread over `threads` for long chains.
template <class T>
void pack_inputs(const Program<T>& program, const Chain<T>& chain, const Matrix<T>& g_last, T* dst, int threads);

/// Shapes `out` (g_k is d_k × batch), copies g_N and the downloaded prefixes s_1 … s_n (`src`
/// holds the download region, download_end − download_begin values) into g_{N−1} … g_0.
template <class T>
void unpack_outputs(const Program<T>& program, const Chain<T>& chain, const Matrix<T>& g_last, const T* src,
                    Gradients<T>& out, int threads);

/// "phase 3 step 0: mat dense·csr ×12 ops ×16 samples" lines, for logs and failing tests.
template <class T>
std::string describe(const Program<T>& program);

}  // namespace bppsa::detail::gpu
