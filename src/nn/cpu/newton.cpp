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

}  // namespace

template <class T>
NewtonOutcome newton_forward(const CellOps<T>& ops, const RecurrentConfig& config, const RecurrentLayerParams<T>& p,
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
    const double wide_rec = per * static_cast<double>(rec.x.rows() + rec.ax.rows() + 2 * P + (lstm ? 2 * H : 0) +
                                                      rec.gates.rows() + rec.aux.rows());
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
  wide.x = rec.x;
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

  NewtonOutcome out;
  for (int k = 1; k <= options.max_iterations; ++k) {
    wide.h.leftCols(TB) = rec.h.leftCols(TB);
    if (lstm) wide.c.leftCols(TB) = rec.c.leftCols(TB);
    ops.forward(p, wide);  // f(s_{t−1}, x_t) of every step at once, in wide's block 1
    // The certificate: max_t ‖s_t − f(s_{t−1}, x_t)‖∞ / max(1, ‖f‖∞) over the running samples.
    std::vector<double> worst(static_cast<std::size_t>(steps), 0.0);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (Index t = 1; t <= steps; ++t) {
      double r = 0;
      for (Index b = 0; b < B && running(t, b); ++b) {
        const Index col = t * B + b, f = TB + (t - 1) * B + b;
        double diff = (rec.h.col(col) - wide.h.col(f)).cwiseAbs().maxCoeff(), size = wide.h.col(f).cwiseAbs().maxCoeff();
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
    for (const double r : worst) residual = std::isnan(r) || std::isnan(residual) ? r : std::max(residual, r);
    out.iterations = k;
    out.residual = residual;
    if (!std::isfinite(residual)) return out;  // diverged: the sequential forward decides
    if (residual <= tol) {
      // Certified: the iterate is the trajectory to within what a sequential forward's own
      // rounding leaves; the gates and auxiliaries of its steps are those just evaluated.
      rec.gates = wide.gates;
      rec.aux = wide.aux;
      rec.m = wide.m;
      out.converged = true;
      return out;
    }
    if (k == options.max_iterations) return out;

    // Newton's linear recurrence at the iterate: A_t = ∂f/∂s_{t−1} (the transpose of the cell's
    // J_t^T), c_t = f_t − A_t s_{t−1}; a step past a sample's length carries its state.
    if (jacobians.empty()) jacobians.push_back(ops.element(p, wide, w_hh_t, TB));
    fill_jacobians(ops, p, wide, jacobians, 1, 2);
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
        ab = jt.to_dense((t - 1) * B + b).transpose();
        ct.col(b).topRows(P) = wide.h.col(f);
        if (lstm) ct.col(b).bottomRows(H) = wide.c.col(f);
        ct.col(b).noalias() -= ab * prev.col(b);
      }
    }
    for (Index t = 1; t <= steps; ++t) linear.set_injection(steps - t, std::move(c[static_cast<std::size_t>(t - 1)]));
    scanner.run(linear, s0, solved);
    for (Index t = 1; t <= steps; ++t) {
      const Matrix<T>& s = solved.g(steps - t);
      rec.h.middleCols(t * B, B) = s.topRows(P);
      if (lstm) rec.c.middleCols(t * B, B) = s.bottomRows(H);
    }
  }
  return out;
}

template NewtonOutcome newton_forward(const CellOps<float>&, const RecurrentConfig&,
                                      const RecurrentLayerParams<float>&, LayerRecord<float>&, const ForwardOptions&);
template NewtonOutcome newton_forward(const CellOps<double>&, const RecurrentConfig&,
                                      const RecurrentLayerParams<double>&, LayerRecord<double>&, const ForwardOptions&);

}  // namespace bppsa::detail
