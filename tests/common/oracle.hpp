// Test helpers: naive dense BP oracle in double (from raw values), exact chain builders, errors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bppsa/bppsa.hpp"
#include "tolerance.hpp"

namespace oracle {

using bppsa::Chain;
using bppsa::CsrPatternPtr;
using bppsa::Index;
using bppsa::Jacobian;
using bppsa::Kind;
using bppsa::Layout;
using Md = Eigen::MatrixXd;
using Rng = std::mt19937_64;

// ---------------------------------------------------------------------------------------
// Densification and naive arithmetic (double, plain loops; no library kernels involved).

/// One sample of a compact transposed Jacobian as a dense double matrix, read from the raw
/// value array `v` (the values of that sample) exactly as the layout contract describes it.
template <class T>
Md densify(const Layout<T>& l, const T* v) {
  Md m = Md::Zero(l.rows, l.cols);
  switch (l.kind) {
    case Kind::identity:
      for (Index i = 0; i < l.rows; ++i) m(i, i) = 1;
      break;
    case Kind::diagonal:
      for (Index i = 0; i < l.rows; ++i) m(i, i) = v[i];
      break;
    case Kind::dense:
      for (Index j = 0; j < l.cols; ++j)
        for (Index i = 0; i < l.rows; ++i) m(i, j) = v[i + j * l.rows];
      break;
    case Kind::csr: {
      const auto rp = l.pattern->row_ptr();
      const auto ci = l.pattern->col_idx();
      for (Index r = 0; r < l.rows; ++r)
        for (Index p = rp[r]; p < rp[r + 1]; ++p) m(r, ci[p]) = v[p];
      break;
    }
    case Kind::shared_dense_diag:
      for (Index j = 0; j < l.cols; ++j)
        for (Index i = 0; i < l.rows; ++i) m(i, j) = double((*l.shared_dense)(i, j)) * double(v[j]);
      break;
  }
  return m;
}

/// Sample s of a Jacobian (a shared one answers every sample with its single set of values).
template <class T>
Md densify(const Jacobian<T>& j, Index s) {
  const Index per = j.layout().values_per_sample();
  return densify(j.layout(), j.values().data() + (j.shared() ? 0 : s) * per);
}

/// C = A · B by the textbook triple loop.
inline Md matmul(const Md& a, const Md& b) {
  Md c = Md::Zero(a.rows(), b.cols());
  for (Index i = 0; i < a.rows(); ++i)
    for (Index j = 0; j < b.cols(); ++j) {
      double acc = 0;
      for (Index k = 0; k < a.cols(); ++k) acc += a(i, k) * b(k, j);
      c(i, j) = acc;
    }
  return c;
}

/// Naive sequential BP: g_{k-1} = J_k^T g_k (+ e_{k-1}), per sample, in double.
/// `reverse_order` applies the Jacobians in the WRONG order (J_1^T first), for checking that
/// test data is order-sensitive; it needs square Jacobians of one size.
template <class T>
std::vector<Md> naive_backward(const Chain<T>& chain, const bppsa::Matrix<T>& g_last, bool reverse_order = false) {
  const Index n = chain.size(), batch = chain.batch();
  std::vector<Md> g(static_cast<std::size_t>(n) + 1);
  g[static_cast<std::size_t>(n)] = g_last.template cast<double>();
  for (Index step = n; step >= 1; --step) {
    const Index k = reverse_order ? n - step + 1 : step;
    const Jacobian<T>& j = chain.jacobian(k);
    const Md& in = g[static_cast<std::size_t>(step)];
    Md out = Md::Zero(j.rows(), batch);
    for (Index b = 0; b < batch; ++b) {
      const Md m = densify(j, b);
      for (Index r = 0; r < m.rows(); ++r) {
        double acc = 0;
        for (Index c = 0; c < m.cols(); ++c) acc += m(r, c) * in(c, b);
        out(r, b) = acc;
      }
    }
    if (const bppsa::Matrix<T>* e = chain.injection(reverse_order ? n - step : step - 1))
      out += e->template cast<double>();
    g[static_cast<std::size_t>(step) - 1] = std::move(out);
  }
  return g;
}

// ---------------------------------------------------------------------------------------
// Comparisons.

/// Every g_k within `tol` of the oracle (testutil::norm_rel_error).
template <class T>
::testing::AssertionResult close_to(const bppsa::Gradients<T>& got, const std::vector<Md>& ref, double tol) {
  if (got.size() != static_cast<Index>(ref.size()))
    return ::testing::AssertionFailure() << "got " << got.size() << " gradients, expected " << ref.size();
  for (Index k = 0; k < got.size(); ++k) {
    const Md& r = ref[static_cast<std::size_t>(k)];
    if (got.g(k).rows() != r.rows() || got.g(k).cols() != r.cols())
      return ::testing::AssertionFailure() << "g_" << k << " is " << got.g(k).rows() << "x" << got.g(k).cols()
                                           << ", expected " << r.rows() << "x" << r.cols();
    const double e = testutil::norm_rel_error(got.g(k), r);
    if (!(e <= tol)) return ::testing::AssertionFailure() << "g_" << k << ": relative error " << e << " > " << tol;
  }
  return ::testing::AssertionSuccess();
}

/// Every entry of every g_k equal to the oracle (exact arithmetic).
template <class T>
::testing::AssertionResult equal_to(const bppsa::Gradients<T>& got, const std::vector<Md>& ref) {
  if (got.size() != static_cast<Index>(ref.size()))
    return ::testing::AssertionFailure() << "got " << got.size() << " gradients, expected " << ref.size();
  for (Index k = 0; k < got.size(); ++k) {
    const Md& r = ref[static_cast<std::size_t>(k)];
    if (got.g(k).rows() != r.rows() || got.g(k).cols() != r.cols())
      return ::testing::AssertionFailure() << "g_" << k << " has the wrong shape";
    for (Index b = 0; b < r.cols(); ++b)
      for (Index i = 0; i < r.rows(); ++i)
        if (double(got.g(k)(i, b)) != r(i, b))
          return ::testing::AssertionFailure()
                 << "g_" << k << "(" << i << ", " << b << ") = " << got.g(k)(i, b) << ", expected " << r(i, b);
  }
  return ::testing::AssertionSuccess();
}

/// Bit-identical gradients (memcmp of every g_k).
template <class T>
::testing::AssertionResult bit_identical(const bppsa::Gradients<T>& a, const bppsa::Gradients<T>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "different gradient counts";
  for (Index k = a.size() - 1; k >= 0; --k) {  // report the first difference in BP order
    if (a.g(k).rows() != b.g(k).rows() || a.g(k).cols() != b.g(k).cols())
      return ::testing::AssertionFailure() << "g_" << k << " shapes differ";
    if (std::memcmp(a.g(k).data(), b.g(k).data(), sizeof(T) * static_cast<std::size_t>(a.g(k).size())) != 0)
      return ::testing::AssertionFailure()
             << "g_" << k << " differs (max |diff| " << (a.g(k) - b.g(k)).cwiseAbs().maxCoeff() << ")";
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------
// Exact-arithmetic chains.

inline Index uniform_int(Rng& rng, Index lo, Index hi) { return std::uniform_int_distribution<Index>(lo, hi)(rng); }

/// g_N with entries in {-3..3}.
template <class T>
bppsa::Matrix<T> small_int_matrix(Index rows, Index cols, Rng& rng, Index lo = -3, Index hi = 3) {
  bppsa::Matrix<T> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = T(uniform_int(rng, lo, hi));
  return m;
}

inline std::vector<Index> random_permutation(Index n, Rng& rng) {
  std::vector<Index> p(static_cast<std::size_t>(n));
  for (Index i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}
inline double random_sign(Rng& rng) { return uniform_int(rng, 0, 1) ? 1.0 : -1.0; }

/// CSR pattern holding a permutation plus (optionally) a few extra entries that are kept
/// as explicit zeros: products stay exact while SpGEMM sees real fill-in.
inline CsrPatternPtr permutation_pattern(const std::vector<Index>& perm, bool extras, Rng& rng) {
  const Index n = static_cast<Index>(perm.size());
  std::vector<std::int32_t> rp{0}, ci;
  for (Index r = 0; r < n; ++r) {
    std::vector<std::int32_t> cols{static_cast<std::int32_t>(perm[static_cast<std::size_t>(r)])};
    if (extras && uniform_int(rng, 0, 2) == 0) cols.push_back(static_cast<std::int32_t>(uniform_int(rng, 0, n - 1)));
    std::sort(cols.begin(), cols.end());
    cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
    ci.insert(ci.end(), cols.begin(), cols.end());
    rp.push_back(static_cast<std::int32_t>(ci.size()));
  }
  return bppsa::make_csr_pattern(n, n, std::move(rp), std::move(ci));
}

/// A chain of n signed permutation matrices (dim × dim) of every kind: dense, csr (with
/// explicit zeros), diagonal ±1, identity and shared_dense_diag (signed permutation S times
/// ±1), each randomly shared or per-sample. With integer g_N all arithmetic is exact.
template <class T>
Chain<T> signed_permutation_chain(Index n, Index dim, Index batch, Rng& rng) {
  Chain<T> chain(batch);
  for (Index k = 1; k <= n; ++k) {
    const int kind = static_cast<int>(uniform_int(rng, 0, 4));
    const Index count = uniform_int(rng, 0, 1) ? 1 : batch;
    Jacobian<T> j;
    switch (kind) {
      case 0: {
        j = Jacobian<T>::dense(dim, dim, count);
        for (Index s = 0; s < count; ++s) {
          const auto p = random_permutation(dim, rng);
          auto m = j.dense_map(s);
          for (Index r = 0; r < dim; ++r) m(r, p[static_cast<std::size_t>(r)]) = T(random_sign(rng));
        }
        break;
      }
      case 1: {
        const auto p = random_permutation(dim, rng);
        const CsrPatternPtr pat = permutation_pattern(p, true, rng);
        j = Jacobian<T>::csr(pat, count);
        const auto rp = pat->row_ptr();
        const auto ci = pat->col_idx();
        for (Index s = 0; s < count; ++s)
          for (Index r = 0; r < dim; ++r)
            for (Index q = rp[r]; q < rp[r + 1]; ++q)
              j.sample(s)[static_cast<std::size_t>(q)] =
                  ci[q] == p[static_cast<std::size_t>(r)] ? T(random_sign(rng)) : T(0);
        break;
      }
      case 2:
        j = Jacobian<T>::diagonal(dim, count);
        for (T& x : j.values()) x = T(random_sign(rng));
        break;
      case 3:
        j = Jacobian<T>::identity(dim);
        break;
      default: {
        const auto p = random_permutation(dim, rng);
        auto sm = std::make_shared<bppsa::Matrix<T>>(bppsa::Matrix<T>::Zero(dim, dim));
        for (Index r = 0; r < dim; ++r) (*sm)(r, p[static_cast<std::size_t>(r)]) = T(random_sign(rng));
        j = Jacobian<T>::shared_dense_diag(sm, count);
        for (T& x : j.values()) x = T(random_sign(rng));
        break;
      }
    }
    chain.push_back(std::move(j));
  }
  return chain;
}

/// A random rows × cols CSR pattern (some rows empty), validated.
inline CsrPatternPtr random_pattern(Index rows, Index cols, Rng& rng, int percent_full = 40) {
  std::vector<std::int32_t> rp{0}, ci;
  for (Index r = 0; r < rows; ++r) {
    const bool empty_row = uniform_int(rng, 0, 4) == 0;
    for (Index c = 0; c < cols; ++c)
      if (!empty_row && uniform_int(rng, 0, 99) < percent_full) ci.push_back(static_cast<std::int32_t>(c));
    rp.push_back(static_cast<std::int32_t>(ci.size()));
  }
  return bppsa::make_csr_pattern(rows, cols, std::move(rp), std::move(ci));
}

/// A rows × cols Jacobian of `kind` with small-integer values in [lo, hi] (S of a
/// shared_dense_diag in {-1, 0, 1}). identity/diagonal need rows == cols.
template <class T>
Jacobian<T> small_int_jacobian(Kind kind, Index rows, Index cols, Index count, Rng& rng, Index lo = -2, Index hi = 2) {
  Jacobian<T> j;
  switch (kind) {
    case Kind::identity:
      return Jacobian<T>::identity(rows);
    case Kind::diagonal:
      j = Jacobian<T>::diagonal(rows, count);
      break;
    case Kind::dense:
      j = Jacobian<T>::dense(rows, cols, count);
      break;
    case Kind::csr:
      j = Jacobian<T>::csr(random_pattern(rows, cols, rng), count);
      break;
    case Kind::shared_dense_diag:
      j = Jacobian<T>::shared_dense_diag(
          std::make_shared<const bppsa::Matrix<T>>(small_int_matrix<T>(rows, cols, rng, -1, 1)), count);
      break;
  }
  for (T& x : j.values()) x = T(uniform_int(rng, lo, hi));
  return j;
}

/// A chain of n small-integer Jacobians of random kinds and sharing, dimensions in [2, 4]
/// (rectangular where the kind allows it).
template <class T>
Chain<T> small_int_chain(Index n, Index batch, Rng& rng) {
  Chain<T> chain(batch);
  Index rows = uniform_int(rng, 2, 4);
  for (Index k = 1; k <= n; ++k) {
    const Kind kind = static_cast<Kind>(uniform_int(rng, 0, bppsa::kKindCount - 1));
    const bool square = kind == Kind::identity || kind == Kind::diagonal;
    const Index cols = square ? rows : uniform_int(rng, 2, 4);
    chain.push_back(small_int_jacobian<T>(kind, rows, cols, uniform_int(rng, 0, 1) ? 1 : batch, rng));
    rows = cols;
  }
  return chain;
}

// ---------------------------------------------------------------------------------------
// Algorithms under test.

struct AlgoCase {
  bppsa::Algorithm algorithm;
  int chunks;
  std::string name;
};

/// linear, blelloch, hybrid with several chunk counts (including more chunks than elements)
/// and automatic.
inline std::vector<AlgoCase> all_algorithms() {
  using bppsa::Algorithm;
  return {{Algorithm::linear, 0, "linear"},      {Algorithm::blelloch, 0, "blelloch"},
          {Algorithm::hybrid, 2, "hybrid/2"},    {Algorithm::hybrid, 3, "hybrid/3"},
          {Algorithm::hybrid, 7, "hybrid/7"},    {Algorithm::hybrid, 64, "hybrid/64"},
          {Algorithm::hybrid, 0, "hybrid/auto"}, {Algorithm::automatic, 0, "auto"}};
}

/// ScanOptions from an algorithm, a thread count and (hybrid) a chunk count.
inline bppsa::ScanOptions opts(bppsa::Algorithm a, int threads, int chunks = 0) {
  bppsa::ScanOptions o;
  o.algorithm = a;
  o.threads = threads;
  o.chunks = chunks;
  return o;
}

inline bppsa::ScanOptions options_for(const AlgoCase& a, int threads = 2) {
  bppsa::ScanOptions o;
  o.algorithm = a.algorithm;
  o.threads = threads;
  o.chunks = a.chunks;
  return o;
}

}  // namespace oracle
