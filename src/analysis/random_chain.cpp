// Random chain generator (checks and benchmarks). Built backwards from g_N in double,
// rescaling every element so that the reference gradient keeps its norm.
#include "bppsa/analysis/random_chain.hpp"

#include <Eigen/QR>
#include <map>
#include <random>

#include "bppsa/core/error.hpp"
#include "bppsa/jacobian/product.hpp"

namespace bppsa {

const char* to_string(ChainKind k) {
  switch (k) {
    case ChainKind::dense:
      return "dense";
    case ChainKind::diagonal:
      return "diag";
    case ChainKind::csr:
      return "csr";
    case ChainKind::shared_dense_diag:
      return "sdd";
    case ChainKind::mixed:
      return "mixed";
  }
  return "unknown";
}

ChainKind parse_chain_kind(std::string_view name) {
  for (ChainKind k :
       {ChainKind::dense, ChainKind::diagonal, ChainKind::csr, ChainKind::shared_dense_diag, ChainKind::mixed})
    if (name == to_string(k)) return k;
  detail::raise<InvalidArgument>(
      "parse_chain_kind", "unknown chain kind '" + std::string(name) + "'; expected dense, diag, csr, sdd or mixed");
}

namespace {

using Dd = Matrix<double>;

/// The banded pattern of a rows × cols "1-D convolution": row i has the columns next to its
/// centre i·(cols − 1)/(rows − 1), 3 per row inside.
CsrPatternPtr band_pattern(Index rows, Index cols) {
  std::vector<std::int32_t> rp{0}, ci;
  for (Index i = 0; i < rows; ++i) {
    const Index centre = rows == 1 ? 0 : i * (cols - 1) / (rows - 1);
    for (Index j = std::max<Index>(0, centre - 1); j <= std::min(cols - 1, centre + 1); ++j)
      ci.push_back(static_cast<std::int32_t>(j));
    rp.push_back(static_cast<std::int32_t>(ci.size()));
  }
  return make_csr_pattern(rows, cols, std::move(rp), std::move(ci));
}

/// The checks random_problem and random_chain_layout share.
void check_spec(const RandomChainSpec& spec, const char* op) {
  if (spec.n < 1) detail::raise<InvalidArgument>(op, "n must be ≥ 1, got " + std::to_string(spec.n));
  if (spec.dim < 1) detail::raise<InvalidArgument>(op, "dim must be ≥ 1, got " + std::to_string(spec.dim));
  if (spec.batch < 1) detail::raise<InvalidArgument>(op, "batch must be ≥ 1, got " + std::to_string(spec.batch));
}

class Generator {
 public:
  explicit Generator(const RandomChainSpec& spec) : spec_(spec), rng_(spec.seed) {}

  double normal() { return std::normal_distribution<double>(0.0, 1.0)(rng_); }
  double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng_); }
  Index pick(Index n) { return std::uniform_int_distribution<Index>(0, n - 1)(rng_); }

  /// rows × cols with orthonormal columns (rows ≥ cols) or rows (rows < cols).
  const Dd& orthonormal(Index rows, Index cols) {
    auto& pool = pools_[{rows, cols}];
    if (pool.size() < 16) {
      const Index m = std::max(rows, cols);
      Dd g(m, m);
      for (Index i = 0; i < g.size(); ++i) g.data()[i] = normal();
      const Dd q = Eigen::HouseholderQR<Dd>(g).householderQ();
      pool.push_back(q.topLeftCorner(rows, cols));
      return pool.back();
    }
    return pool[static_cast<std::size_t>(pick(static_cast<Index>(pool.size())))];
  }

  /// The banded pattern of a rows × cols "1-D convolution", one per shape.
  CsrPatternPtr band(Index rows, Index cols) {
    auto& p = bands_[{rows, cols}];
    if (!p) p = band_pattern(rows, cols);
    return p;
  }

  /// One S per shape, shared by every element of that shape (as W_hh^T in an RNN).
  std::shared_ptr<const Dd> shared_s(Index rows, Index cols) {
    auto& s = shared_[{rows, cols}];
    if (!s) s = std::make_shared<const Dd>(orthonormal(rows, cols));
    return s;
  }

  const RandomChainSpec& spec() const { return spec_; }

 private:
  RandomChainSpec spec_;
  std::mt19937_64 rng_;
  std::map<std::pair<Index, Index>, std::vector<Dd>> pools_;
  std::map<std::pair<Index, Index>, CsrPatternPtr> bands_;
  std::map<std::pair<Index, Index>, std::shared_ptr<const Dd>> shared_;
};

/// Fills sample s of j with fresh random values of its kind.
void fill(Generator& gen, Jacobian<double>& j, Index s) {
  auto v = j.sample(s);
  switch (j.kind()) {
    case Kind::identity:
      break;
    case Kind::diagonal:
      for (double& x : v) x = (gen.uniform(0, 1) < 0.5 ? -1 : 1) * gen.uniform(0.75, 1.0);
      break;
    case Kind::dense: {
      Eigen::Map<Dd> m(v.data(), j.rows(), j.cols());
      m = gen.orthonormal(j.rows(), j.cols());
      for (Index r = 0; r < j.rows(); ++r)
        if (gen.uniform(0, 1) < 0.5) m.row(r) *= -1;
      break;
    }
    case Kind::csr: {
      // Diagonally dominant band (centre ±U(0.7, 1), neighbours N(0, 0.15²)): well
      // conditioned like a trained layer, so long sparse products stay accurate in float.
      const auto rp = j.layout().pattern->row_ptr();
      const auto ci = j.layout().pattern->col_idx();
      for (Index r = 0; r < j.rows(); ++r) {
        const Index centre = j.rows() == 1 ? 0 : r * (j.cols() - 1) / (j.rows() - 1);
        for (std::int32_t p = rp[r]; p < rp[r + 1]; ++p)
          v[static_cast<std::size_t>(p)] =
              ci[p] == centre ? (gen.uniform(0, 1) < 0.5 ? -1 : 1) * gen.uniform(0.7, 1.0) : 0.15 * gen.normal();
      }
      break;
    }
    case Kind::shared_dense_diag:
      for (double& x : v) x = gen.uniform(0.75, 1.0);
      break;
  }
}

template <class T>
Jacobian<T> cast(const Jacobian<double>& j, std::map<const Dd*, std::shared_ptr<const Matrix<T>>>& s_cache) {
  const Layout<double>& l = j.layout();
  std::shared_ptr<const Matrix<T>> s;
  if (l.shared_dense) {
    auto& c = s_cache[l.shared_dense.get()];
    if (!c) c = std::make_shared<const Matrix<T>>(l.shared_dense->template cast<T>());
    s = c;
  }
  Jacobian<T> out(Layout<T>{l.kind, l.rows, l.cols, l.count, l.pattern, s});
  std::copy(j.values().begin(), j.values().end(), out.values().begin());
  return out;
}

}  // namespace

template <class T>
RandomProblem<T> random_problem(const RandomChainSpec& spec) {
  check_spec(spec, "random_problem");
  Generator gen(spec);
  const Index n = spec.n, batch = spec.batch;
  const bool mixed = spec.kind == ChainKind::mixed;

  std::vector<Index> dims(static_cast<std::size_t>(n) + 1, spec.dim);
  if (mixed) {
    const Index choices[3] = {std::max<Index>(1, spec.dim / 2), spec.dim, spec.dim + spec.dim / 2};
    for (Index k = n - 1; k >= 0; --k)
      dims[static_cast<std::size_t>(k)] =
          gen.uniform(0, 1) < 0.1 ? choices[gen.pick(3)] : dims[static_cast<std::size_t>(k) + 1];
  }

  Dd g(dims.back(), batch);
  for (Index i = 0; i < g.size(); ++i) g.data()[i] = gen.normal();
  g.colwise().normalize();
  const Dd g_last = g;

  std::vector<Jacobian<double>> elements(static_cast<std::size_t>(n));  // J_k^T at k − 1
  std::vector<Dd> injections(static_cast<std::size_t>(n));
  Scratch<double> scratch;
  for (Index k = n; k >= 1; --k) {
    const Index rows = dims[static_cast<std::size_t>(k) - 1], cols = dims[static_cast<std::size_t>(k)];
    Kind kind = Kind::dense;
    bool shared = spec.shared;
    switch (spec.kind) {
      case ChainKind::dense:
        kind = Kind::dense;
        break;
      case ChainKind::diagonal:
        kind = Kind::diagonal;
        break;
      case ChainKind::csr:
        kind = Kind::csr;
        break;
      case ChainKind::shared_dense_diag:
        kind = Kind::shared_dense_diag;
        break;
      case ChainKind::mixed: {
        static constexpr Kind square[] = {Kind::identity, Kind::diagonal, Kind::diagonal, Kind::dense,
                                          Kind::dense,    Kind::csr,      Kind::csr,      Kind::shared_dense_diag};
        static constexpr Kind rect[] = {Kind::dense, Kind::csr, Kind::shared_dense_diag};
        kind = rows == cols ? square[gen.pick(8)] : rect[gen.pick(3)];
        shared = gen.uniform(0, 1) < 0.3;
        break;
      }
    }
    const Index count = shared ? 1 : batch;
    Jacobian<double> j;
    switch (kind) {
      case Kind::identity:
        j = Jacobian<double>::identity(rows);
        break;
      case Kind::diagonal:
        j = Jacobian<double>::diagonal(rows, count);
        break;
      case Kind::dense:
        j = Jacobian<double>::dense(rows, cols, count);
        break;
      case Kind::csr:
        j = Jacobian<double>::csr(gen.band(rows, cols), count);
        break;
      case Kind::shared_dense_diag:
        j = Jacobian<double>::shared_dense_diag(gen.shared_s(rows, cols), count);
        break;
    }
    for (Index s = 0; s < j.count(); ++s) fill(gen, j, s);

    // Normalise the gain on the reference gradient: per sample, or RMS over the batch when shared.
    Dd y(rows, batch);
    apply(view(j), 0, batch, g.data(), cols, y.data(), rows, false, scratch);
    if (kind != Kind::identity) {
      Eigen::VectorXd gain = y.colwise().norm().transpose().cwiseQuotient(g.colwise().norm().transpose());
      for (Index b = 0; b < batch; ++b)
        if (!(gain[b] > 1e-30)) gain[b] = 1;  // a zero gradient column stays zero
      if (j.shared()) {
        const double rms = std::sqrt(gain.squaredNorm() / static_cast<double>(batch));
        for (double& x : j.values()) x /= rms;
        y /= rms;
      } else {
        for (Index b = 0; b < batch; ++b) {
          for (double& x : j.sample(b)) x /= gain[b];
          y.col(b) /= gain[b];
        }
      }
    }
    if (spec.affine) {
      Dd e(rows, batch);
      for (Index i = 0; i < e.size(); ++i) e.data()[i] = 0.1 * gen.normal() / std::sqrt(static_cast<double>(rows));
      y += e;
      injections[static_cast<std::size_t>(k) - 1] = std::move(e);
    }
    g = std::move(y);
    elements[static_cast<std::size_t>(k) - 1] = std::move(j);
  }

  RandomProblem<T> problem{Chain<T>(batch), g_last.template cast<T>()};
  std::map<const Dd*, std::shared_ptr<const Matrix<T>>> s_cache;
  for (const Jacobian<double>& j : elements) problem.chain.push_back(cast<T>(j, s_cache));
  if (spec.affine)
    for (Index k = 0; k < n; ++k)
      problem.chain.set_injection(k, injections[static_cast<std::size_t>(k)].template cast<T>());
  return problem;
}

template <class T>
Layout<T> random_chain_layout(const RandomChainSpec& spec) {
  const char* op = "random_chain_layout";
  check_spec(spec, op);
  const Index d = spec.dim, count = spec.shared ? 1 : spec.batch;
  switch (spec.kind) {
    case ChainKind::dense:
      return Layout<T>{Kind::dense, d, d, count, nullptr, nullptr};
    case ChainKind::diagonal:
      return Layout<T>{Kind::diagonal, d, d, count, nullptr, nullptr};
    case ChainKind::csr:
      return Layout<T>{Kind::csr, d, d, count, band_pattern(d, d), nullptr};
    case ChainKind::shared_dense_diag:
      // S's values are never read by a planner: the identity stands in for the random one.
      return Layout<T>{
          Kind::shared_dense_diag, d, d, count, nullptr, std::make_shared<const Matrix<T>>(Matrix<T>::Identity(d, d))};
    case ChainKind::mixed:
      break;
  }
  detail::raise<InvalidArgument>(op,
                                 "a mixed chain's kinds and dimensions vary along the chain with the random "
                                 "draws; build it with random_problem and take the layouts from its elements");
}

template RandomProblem<float> random_problem(const RandomChainSpec&);
template RandomProblem<double> random_problem(const RandomChainSpec&);
template Layout<float> random_chain_layout(const RandomChainSpec&);
template Layout<double> random_chain_layout(const RandomChainSpec&);

}  // namespace bppsa
