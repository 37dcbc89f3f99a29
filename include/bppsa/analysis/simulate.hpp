// Predicted scan times on P virtual workers, from per-product costs calibrated on this machine
// (`bppsa simulate`; the model and its limits are in docs/simulate.md).
//
//  - calibrate() builds a real random chain of at most a few thousand elements, plans the
//    schedules to be simulated with the Scanner's own planner, and replays their products on
//    one thread exactly as the executor runs them, timing every class of product (operation,
//    operand kinds, result kind, flops) in two cache regimes; plus an OpenMP barrier, one
//    dynamic-schedule dispatch and a parallel region at this machine's core count, and the
//    part of Scanner::run outside the products.
//  - simulate() plans the scan from layouts alone (no values: 10^6 dense 20×20 elements cost
//    the schedule, not 1.6 GB) with the same planner, and runs it on P virtual workers the way
//    scan/cpu/executor.cpp runs it with P threads:
//      1. phases holding products shared by the batch: their tasks are dealt to the earliest
//         free worker (what `omp for schedule(dynamic, 1)` does), a barrier after each;
//      2. sample-major (batch ≥ P and dividing well, or P = 1): every worker runs its
//         contiguous block of samples through every phase, no barrier;
//         otherwise, phase by phase: units = tasks × batch, each to the earliest free worker at
//         Σ its products' costs + one dispatch; phase time = makespan + one barrier;
//      plus one parallel region, and Scanner::run's own work (validation, operands, output
//      check) with the output check spread over the workers.
//    Barriers and parallel regions for P workers beyond the measured thread count are
//    extrapolated as a tree: cost(P) = measured · log2(P) / log2(measured threads); P = 1 → 0.
//  - measure() times the real Scanner for the validation (`bppsa simulate --validate`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bppsa/analysis/random_chain.hpp"
#include "bppsa/scan/scanner.hpp"

namespace bppsa {

/// A class of product the executor runs: every instance of a class costs the same. One op of
/// a schedule has a batch-independent part (shared_mm, for products shared by the batch) and a
/// per-sample part (mv, mm or shared_rest), run for every sample.
struct ProductClass {
  enum class Type : std::uint8_t {
    mv,          ///< s_out = A · s_in (+ A's affine part): one sample
    mm,          ///< a per-sample product A · B (+ its affine part): one sample
    shared_mm,   ///< the matrix of a product shared by the batch: once per batch (the pre-pass)
    shared_rest  ///< the per-sample remainder of a shared product (its affine part, or only the call)
  };
  Type type = Type::mv;
  Kind a = Kind::identity;    ///< the matrix (mv), the later operand (the others)
  Kind b = Kind::identity;    ///< the earlier operand (identity for mv)
  Kind out = Kind::identity;  ///< the product's kind (identity for mv)
  bool affine = false;        ///< an affine part (per-step injections) is updated too
  double flops = 0;           ///< of one instance, affine part excluded

  /// "mm dense·dense→dense 16000 flop", "mv diagonal 20 flop +affine".
  std::string describe() const;
  friend bool operator<(const ProductClass& x, const ProductClass& y);
  friend bool operator==(const ProductClass& x, const ProductClass& y) = default;
};

const char* to_string(ProductClass::Type t);

/// Calibrated seconds of one instance of a class.
struct CostEntry {
  ProductClass product;
  /// Data in cache: the median over instances and repeated passes of a chain that fits.
  double warm_seconds = 0;
  /// Caches flushed before every phase: what chains much larger than the cache see.
  double cold_seconds = 0;
  Index instances = 0;  ///< instances timed (per pass × passes, both regimes)
};

/// Everything simulate() needs to know about this machine, from calibrate() (or made by hand:
/// tests use exact synthetic costs).
struct CostTable {
  std::vector<CostEntry> entries;  ///< sorted by class, one per class
  /// One OpenMP barrier with `barrier_threads` threads.
  double barrier_seconds = 0;
  int barrier_threads = 2;
  /// One unit of `omp for schedule(dynamic, 1)`, paid by the worker that takes it: with
  /// `barrier_threads` workers contending for the loop counter, and with one worker alone.
  double dispatch_seconds = 0;
  double dispatch_single_seconds = 0;
  /// Opening and closing one parallel region with `barrier_threads` threads.
  double region_seconds = 0;
  /// Scanner::run's own work per chain element on one thread (validation, plan check, operands;
  /// spread over the workers for chains of kParallelElements or more).
  double element_seconds = 0;
  /// Scanner::run's NaN/Inf check of the outputs per gradient value on one thread, in cache
  /// and from memory (the check is spread over the threads).
  double check_warm_seconds = 0;
  double check_cold_seconds = 0;
  /// Fallback for classes with no calibrated neighbour: seconds per flop (all timed products).
  double flop_seconds = 0;
  double timer_seconds = 0;     ///< one clock read, subtracted from every timing
  std::size_t cache_bytes = 0;  ///< the last-level cache as the system reports it (for the record)
  /// Share of a working set that misses the caches when it is streamed through again, by its
  /// size in bytes: (bytes, share) points, increasing, measured by re-reading buffers of growing
  /// size (on a shared or virtual machine the cache a process gets is smaller than reported).
  std::vector<std::pair<double, double>> miss_curve;
  int cores = 1;  ///< omp_get_num_procs() where calibrated
  Index calibration_n = 0;
  Index calibration_batch = 1;
  std::string precision;  ///< "float" or "double"; simulate<T> requires the same
  std::string chain;      ///< what was calibrated on, e.g. "dense d=20 batch 1"

  /// A barrier (or region) of `workers` threads: the measured one scaled as a tree barrier,
  /// · log2(workers) / log2(barrier_threads); 0 for one worker.
  double barrier(int workers) const;
  double region(int workers) const;
  /// dispatch_single_seconds for one worker, else dispatch_seconds (not scaled with P: the
  /// counter's contention beyond the measured thread count is not modelled).
  double dispatch(int workers) const;
  /// Share of the cold cost for a working set of `bytes`: miss_curve interpolated in log size
  /// (0 below its first point, its last share beyond its last); without a curve, 0 when it fits
  /// in cache_bytes, else 1 − cache_bytes/bytes.
  double cold_weight(double bytes) const;
  /// Seconds of one instance, mixing warm and cold costs by `cold`. A class not calibrated
  /// (e.g. CSR fill-in levels not reached at the calibration length) is scaled by flops from
  /// the nearest-flops entry of the same type and kinds (then of the same type, A kind and
  /// result kind), else costed at flop_seconds; *extrapolated tells which happened.
  double cost(const ProductClass& c, double cold, bool* extrapolated = nullptr) const;
  /// Multi-line summary: machine figures and one line per class (instances, µs warm/cold).
  std::string summary() const;
};

struct CalibrationOptions {
  /// Calibration chain length: min(spec.n, max_n), less a quarter when that is a power of two
  /// (a perfect tree lacks the clamped right edge's products).
  Index max_n = 4096;
  int repeats = 5;  ///< timed passes per cache regime (after one warm-up pass)
  /// The calibration chain's values are kept under this many bytes (n is reduced).
  double max_bytes = 256.0 * (1 << 20);
  /// Samples calibrated: min(spec.batch, max_batch). Costs are per sample and every sample of a
  /// class repeats the same product, so a larger batch only lengthens the calibration (linearly:
  /// batch 10^6 took minutes); at least 2 keeps per-sample Jacobians per-sample.
  Index max_batch = 16;
  /// Chunks of the hybrid schedule calibrated when `chunks` is 0 (one per worker).
  int hybrid_chunks = 4;
  /// Called with (steps done, steps in all) as calibration goes (it can take a minute on a
  /// loaded machine); none when empty.
  std::function<void(int, int)> progress;
};

/// Times every product class of `algorithm`'s schedule and of the linear one (BP, the
/// reference) on a real random_problem of min(spec.n, options.max_n) elements; automatic
/// calibrates linear, hybrid and blelloch. Costs are medians over instances and passes; runs of
/// consecutive same-class products are timed together so that a product under a microsecond
/// is not swamped by the clock. Takes a few seconds on an idle machine. Everything it holds at
/// once (the chain, each schedule's workspace, gradients and fill-in patterns, the buffers that
/// flush and measure the cache) is checked against the memory guard (check_memory,
/// ResourceError) before it is allocated.
template <class T>
CostTable calibrate(const RandomChainSpec& spec, Algorithm algorithm, int chunks,
                    const CalibrationOptions& options = {});

/// The chain calibrate<T> builds for `spec`: n = min(spec.n, max_n) (less a quarter when a power
/// of two), batch = min(spec.batch, max_batch) but at least 2 when spec.batch > 1, n then reduced (not below 64) until its values
/// fit max_bytes. Exposed so that callers can size it before calibrating.
template <class T>
RandomChainSpec calibration_spec(const RandomChainSpec& spec, const CalibrationOptions& options = {});

struct SimulationResult {
  Algorithm algorithm = Algorithm::linear;  ///< as planned (automatic resolved for `workers`)
  int workers = 1;
  int chunks = 1;  ///< hybrid chunks per chain (1 linear, 0 blelloch)
  Index n = 0, batch = 1;
  double seconds = 0;                ///< predicted Scanner::run time (scan_seconds + overhead_seconds)
  double scan_seconds = 0;           ///< the executor's part
  double overhead_seconds = 0;       ///< Scanner::run's own work (validation, operands, output check)
  double bp_seconds = 0;             ///< the same prediction for linear (BP) on the same workers
  double bp_scan_seconds = 0;        ///< its executor's part (the schedule without Scanner::run's own work)
  double speedup = 0;                ///< bp_seconds / seconds
  Index phases = 0;                  ///< phases of the schedule
  Index levels = 0, mm = 0, mv = 0;  ///< ScanStats' counts (per chain)
  double work_seconds = 0;           ///< Σ of every product's cost (one worker's time without overheads)
  double barrier_seconds = 0;        ///< barriers on the predicted critical path
  double cold_weight = 0;            ///< share of cold costs used (working set against the cache)
  double working_set_bytes = 0;      ///< chain values, gradients and workspace
  Index extrapolated_ops = 0;        ///< ops whose class was not calibrated (scan and BP schedules)
};

/// Predicts Scanner::run's time for random_problem(spec) with `workers` threads (any number:
/// they are virtual), `chunks` as ScanOptions::chunks. Needs no values for dense, diag, csr and
/// sdd chains; a mixed chain's layouts come from the real generator, so it is refused (with
/// InvalidArgument) when random_problem(spec) would take more than 2 GB.
template <class T>
SimulationResult simulate(const RandomChainSpec& spec, Algorithm algorithm, int workers, int chunks,
                          const CostTable& table);

/// Median seconds of Scanner::run on the problem (threads, chunks as ScanOptions; plan reused,
/// check_inputs off) over `repeats` runs after a warm-up run.
template <class T>
double measure(const RandomProblem<T>& problem, Algorithm algorithm, int threads, int chunks, int repeats);
/// The same on random_problem(spec), built first.
template <class T>
double measure(const RandomChainSpec& spec, Algorithm algorithm, int threads, int chunks, int repeats);

/// Peak memory random_problem(spec) takes to build and scan, approximately (bytes).
template <class T>
double random_problem_bytes(const RandomChainSpec& spec);

}  // namespace bppsa
