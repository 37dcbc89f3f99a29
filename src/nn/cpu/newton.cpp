// The Newton forward of one layer (newton.hpp).
#include "nn/cpu/newton.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "bppsa/core/memory.hpp"
#include "bppsa/scan/scanner.hpp"

namespace bppsa::detail {
namespace {

/// Block t (0 … T) of the record's state s = [h; c] (S × B).
template <class T>
Matrix<T> state_block(const LayerRecord<T>& rec, Index t, Index P, Index S, bool lstm) {
  const Index B = rec.batch;
  Matrix<T> s(S, B);
  s.topRows(P) = rec.h.middleCols(t * B, B);
  if (lstm) s.bottomRows(S - P) = rec.c.middleCols(t * B, B);
  return s;
}

/// Where every true state of a sample lies, row by row (the set the cell maps into; docs/method.md
/// §9.2): lo ≤ s ≤ hi, with c's bound growing by 1 a step (c_t = f c_{t−1} + i g).
template <class T>
struct StateBox {
  Vector<T> lo, hi;  ///< S rows, at step 0 for c
  Index c_rows = 0;  ///< the last c_rows rows (LSTM's c) widen by 1 a step
};

template <class T>
StateBox<T> state_box(const RecurrentConfig& config, const LayerWeights<T>& p, const Matrix<T>& s0) {
  const Index S = s0.rows(), P = output_size(config), H = config.hidden;
  constexpr T inf = std::numeric_limits<T>::infinity();
  StateBox<T> box;
  box.lo.setConstant(S, -inf);
  box.hi.setConstant(S, inf);
  const T start = s0.size() != 0 ? s0.cwiseAbs().maxCoeff() : T(0);
  switch (config.cell) {
    case CellType::rnn:  // tanh into (−1, 1); relu into [0, ∞)
      if (config.nonlinearity == Nonlinearity::tanh) {
        box.lo.setConstant(S, T(-1));
        box.hi.setConstant(S, T(1));
      } else {
        box.lo.setZero(S);
      }
      break;
    case CellType::gru:  // h_t = (1 − z) n + z h_{t−1}, n in (−1, 1)
      box.lo.setConstant(S, -std::max(T(1), start));
      box.hi.setConstant(S, std::max(T(1), start));
      break;
    case CellType::lstm: {  // h = o tanh c (or W_hr of it), |c_t| ≤ |c_{t−1}| + 1
      for (Index i = 0; i < P; ++i) {
        const T bound = config.proj > 0 ? p.w_hr.row(i).cwiseAbs().sum() : T(1);
        box.lo(i) = -bound;
        box.hi(i) = bound;
      }
      const T c0 = s0.bottomRows(H).size() != 0 ? s0.bottomRows(H).cwiseAbs().maxCoeff() : T(0);
      box.lo.tail(H).setConstant(-c0);
      box.hi.tail(H).setConstant(c0);
      box.c_rows = H;
      break;
    }
  }
  return box;
}

}  // namespace

template <class T>
NewtonOutcome newton_forward(const CellOps<T>& ops, const RecurrentConfig& config, const LayerWeights<T>& p,
                             LayerRecord<T>& rec, const ForwardOptions& options) {
  const Index steps = rec.steps, B = rec.batch, TB = steps * B, H = config.hidden, P = output_size(config),
              S = state_size(config);
  const bool lstm = config.cell == CellType::lstm;
  const double tol = options.tolerance > 0 ? options.tolerance : 16.0 * std::numeric_limits<T>::epsilon();
  const int threads = resolve_threads(options.threads);
  {
    // What an iteration holds besides the record: the chain of T·B dense S × S elements, the scan's
    // workspace (up to twice that for Blelloch's products), the step Jacobians, the wide record.
    const double per = static_cast<double>(TB) * sizeof(T);
    const double wide_rec =
        per * static_cast<double>(rec.ax.rows() + 2 * P + (lstm ? 2 * H : 0) + rec.gates.rows() + rec.aux.rows());
    check_memory("Recurrent::forward",
                 "the Newton forward of " + std::to_string(steps) + " steps × batch " + std::to_string(B) +
                     " (state size " + std::to_string(S) + ")",
                 {{"linear recurrence elements", per * static_cast<double>(S * S)},
                  {"scan workspace", 2 * per * static_cast<double>(S * S)},
                  {"step Jacobians", per * static_cast<double>(S * S)},
                  {"every step's evaluation", wide_rec}},
                 "use the sequential forward (--forward sequential), a smaller --batch or shorter sequences");
  }
  auto running = [&](Index t, Index b) { return b < rec.width(t); };
  for (Index t = 1; t <= steps && !rec.active.empty(); ++t) {  // padding: never read by the sequential forward
    const Index w = rec.width(t);
    rec.ax.middleCols((t - 1) * B + w, B - w).setZero();
  }
  // The first iterate: s_0 carried through every step.
  for (Index t = 1; t <= steps; ++t) {
    rec.h.middleCols(t * B, B) = rec.h.leftCols(B);
    if (lstm) rec.c.middleCols(t * B, B) = rec.c.leftCols(B);
  }

  // Every step as a one-step sample of its own: sample (t − 1)·B + b starts from s_{t−1} of b.
  LayerRecord<T> wide;
  wide.steps = 1;
  wide.batch = TB;
  wide.hidden = H;
  wide.x_view = rec.input().data();  // (the cells read ax, not x)
  wide.x_rows = rec.input().rows();
  wide.ax = rec.ax;
  wide.h.resize(P, 2 * TB);
  if (lstm) wide.c.resize(H, 2 * TB);
  wide.gates.resize(rec.gates.rows(), rec.gates.cols());
  wide.aux.resize(rec.aux.rows(), rec.aux.cols());
  const auto w_hh_t = std::make_shared<Matrix<T>>(p.w_hh.transpose());
  Chain<T> jacobians(TB);
  Chain<T> linear(B);  // s_t = A_t s_{t−1} + c_t in reverse time: g_k = s_{T−k}, element k + 1 = A_{T−k}
  for (Index m = 1; m <= steps; ++m) linear.push_back(Jacobian<T>::dense(S, S, B));
  ScanOptions so;
  so.algorithm = options.algorithm;
  so.threads = options.threads;
  so.chunks = options.chunks;
  so.check_inputs = false;  // the residual's finiteness is checked before every solve
  so.check_outputs = false;
  Scanner<T> scanner(so);
  Gradients<T> solved;
  const Matrix<T> s0 = state_block(rec, 0, P, S, lstm);
  const StateBox<T> box = state_box(config, p, s0);

  // Keeps the evaluated gates and auxiliaries of every step (they belong to the iterate's
  // states), then runs the sequential forward from step `first` on: the fallback.
  auto finish = [&](Index first) {
    rec.gates = wide.gates;
    rec.aux = wide.aux;
    rec.m = wide.m;
    if (first > steps) return;
    const Index n = steps - first + 1, c0 = (first - 1) * B;
    LayerRecord<T> tail;
    tail.steps = n;
    tail.batch = B;
    tail.hidden = H;
    if (!rec.active.empty()) tail.active.assign(rec.active.begin() + (first - 1), rec.active.end());
    tail.x_view = rec.input().data() + c0 * rec.input().rows();
    tail.x_rows = rec.input().rows();
    tail.ax = rec.ax.middleCols(c0, n * B);
    tail.h.resize(P, (n + 1) * B);
    tail.h.leftCols(B) = rec.h.middleCols(c0, B);  // s_{first−1}: certified
    if (lstm) {
      tail.c.resize(H, (n + 1) * B);
      tail.c.leftCols(B) = rec.c.middleCols(c0, B);
    }
    tail.gates.resize(rec.gates.rows(), rec.gates.rows() != 0 ? n * B : 0);
    tail.aux.resize(rec.aux.rows(), rec.aux.rows() != 0 ? n * B : 0);
    ops.forward(p, tail, threads);
    rec.h.middleCols(first * B, n * B) = tail.h.rightCols(n * B);
    if (lstm) rec.c.middleCols(first * B, n * B) = tail.c.rightCols(n * B);
    if (rec.gates.size() != 0) rec.gates.middleCols(c0, n * B) = tail.gates;
    if (rec.aux.size() != 0) rec.aux.middleCols(c0, n * B) = tail.aux;
    if (rec.m.size() != 0) rec.m.middleCols(c0, n * B) = tail.m;
  };

  NewtonOutcome out;
  for (int k = 1; k <= options.max_iterations; ++k) {
    wide.h.leftCols(TB) = rec.h.leftCols(TB);
    if (lstm) wide.c.leftCols(TB) = rec.c.leftCols(TB);
    ops.forward(p, wide, threads);  // f(s_{t−1}, x_t) of every step at once, in wide's block 1
    // The certificate: max_t ‖s_t − f(s_{t−1}, x_t)‖∞ / max(1, ‖f‖∞) over the running samples.
    std::vector<double> worst(static_cast<std::size_t>(steps), 0.0);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (Index t = 1; t <= steps; ++t) {
      double r = 0;
      for (Index b = 0; b < B && running(t, b); ++b) {
        const Index col = t * B + b, f = TB + (t - 1) * B + b;
        double diff = (rec.h.col(col) - wide.h.col(f)).cwiseAbs().maxCoeff(),
               size = wide.h.col(f).cwiseAbs().maxCoeff();
        if (lstm) {
          diff = std::max<double>(diff, (rec.c.col(col) - wide.c.col(f)).cwiseAbs().maxCoeff());
          size = std::max<double>(size, wide.c.col(f).cwiseAbs().maxCoeff());
        }
        const double rel = diff / std::max(1.0, size);
        r = std::isnan(rel) || std::isnan(r) ? std::numeric_limits<double>::quiet_NaN() : std::max(r, rel);
      }
      worst[static_cast<std::size_t>(t - 1)] = r;
    }
    double residual = 0;
    Index first = steps + 1;  // the first step the certificate does not hold at (NaN included)
    for (Index t = steps; t >= 1; --t) {
      const double r = worst[static_cast<std::size_t>(t - 1)];
      residual =
          std::isnan(r) || std::isnan(residual) ? std::numeric_limits<double>::quiet_NaN() : std::max(residual, r);
      if (!(r <= tol)) first = t;
    }
    out.iterations = k;
    out.residual = residual;
    if (first > steps) {  // certified: the trajectory to within what a sequential forward's rounding leaves
      finish(first);
      return out;
    }
    if (k == options.max_iterations || !std::isfinite(residual)) {  // the sequential forward from `first`
      finish(first);
      out.fallback_step = first;
      return out;
    }

    // Newton's linear recurrence at the iterate: A_t = ∂f/∂s_{t−1} (the transpose of the cell's
    // J_t^T), c_t = f_t − A_t s_{t−1}. The certified steps before `first` keep their states
    // (A = 0, c = s_t) and step `first` takes f(s_{first−1}) (A = 0, c = y): at least one more step
    // is exact after every iteration. A step past a sample's length carries its state.
    if (jacobians.empty()) jacobians.push_back(ops.element(p, wide, w_hh_t, TB));
    {  // the Jacobians of the steps after `first` only (sample (t − 1)·B + b of the wide record)
      std::vector<JacobianSlot<T>> slots;
      slots.reserve(static_cast<std::size_t>(TB - first * B));
      for (Index j = first * B; j < TB; ++j) slots.push_back({j, &jacobians.jacobian(1), j});
      ops.fill(p, wide, slots);
    }
    const Jacobian<T>& jt = jacobians.jacobian(1);
    std::vector<Matrix<T>> c(static_cast<std::size_t>(steps));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (Index t = 1; t <= steps; ++t) {
      Jacobian<T>& a = linear.jacobian(steps - t + 1);
      Matrix<T>& ct = c[static_cast<std::size_t>(t - 1)];
      ct.setZero(S, B);
      const Matrix<T> prev = state_block(rec, t - 1, P, S, lstm);
      for (Index b = 0; b < B; ++b) {
        auto ab = a.dense_map(b);
        if (!running(t, b)) {
          ab.setIdentity();
          continue;
        }
        const Index f = TB + (t - 1) * B + b;
        if (t < first) {
          ab.setZero();
          ct.col(b).topRows(P) = rec.h.col(t * B + b);
          if (lstm) ct.col(b).bottomRows(H) = rec.c.col(t * B + b);
          continue;
        }
        ct.col(b).topRows(P) = wide.h.col(f);
        if (lstm) ct.col(b).bottomRows(H) = wide.c.col(f);
        if (t == first) {
          ab.setZero();
          continue;
        }
        ab = jt.to_dense((t - 1) * B + b).transpose();
        ct.col(b).noalias() -= ab * prev.col(b);
      }
    }
    for (Index t = 1; t <= steps; ++t) linear.set_injection(steps - t, std::move(c[static_cast<std::size_t>(t - 1)]));
    scanner.run(linear, s0, solved);
    // The safeguard (§9.2): where the linear model leaves the box every true state lies in (it
    // expands, far from the trajectory), the state is clipped back into it, and where it is not
    // finite it takes f(s_{t−1}) of the iterate. The fixed point lies inside: it is unchanged.
#pragma omp parallel for num_threads(threads) schedule(static)
    for (Index t = first; t <= steps; ++t) {
      Matrix<T>& s = solved.g(steps - t);
      const T widen = static_cast<T>(t);
      for (Index b = 0; b < B; ++b) {
        const Index f = TB + (t - 1) * B + b;
        for (Index i = 0; i < S; ++i) {
          T& v = s(i, b);
          const bool c_row = i >= S - box.c_rows;
          const T lo = c_row ? box.lo(i) - widen : box.lo(i), hi = c_row ? box.hi(i) + widen : box.hi(i);
          if (!std::isfinite(v))
            v = i < P ? wide.h(i, f) : wide.c(i - P, f);
          else
            v = std::clamp(v, lo, hi);
        }
      }
    }
    for (Index t = first; t <= steps; ++t) {
      const Matrix<T>& s = solved.g(steps - t);
      rec.h.middleCols(t * B, B) = s.topRows(P);
      if (lstm) rec.c.middleCols(t * B, B) = s.bottomRows(H);
    }
  }
  return out;  // (max_iterations ≥ 1: the loop returns)
}

template NewtonOutcome newton_forward(const CellOps<float>&, const RecurrentConfig&, const LayerWeights<float>&,
                                      LayerRecord<float>&, const ForwardOptions&);
template NewtonOutcome newton_forward(const CellOps<double>&, const RecurrentConfig&, const LayerWeights<double>&,
                                      LayerRecord<double>&, const ForwardOptions&);

}  // namespace bppsa::detail
