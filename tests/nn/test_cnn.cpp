// CNN layers and ConvNet vs independent oracles: every generated J^T against central finite
// differences (double) of the layer's own forward, forwards against their definitions, BP
// kernels and parameter gradients against finite differences, the paper's Table 1, BPPSA vs BP
// on whole CNNs (and BP vs finite differences of the loss), state_dict, masks, SPEC errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "bppsa/io/safetensors.hpp"
#include "bppsa/jacobian/window_pattern.hpp"
#include "bppsa/nn/arch.hpp"
#include "bppsa/nn/conv_net.hpp"
#include "bppsa/nn/layers.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"

namespace {

using testutil::expect_error;

using namespace bppsa;
using oracle::Md;
using oracle::Rng;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Md random_matrix(Index rows, Index cols, Rng& rng, double bound = 1.0) {
  std::uniform_real_distribution<double> u(-bound, bound);
  Md m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

/// The layer one SPEC token describes, for an input shape.
template <class T = double>
std::unique_ptr<Layer<T>> make(const std::string& token, const Shape3& in, bool flat = false) {
  const auto specs = parse_arch(token);
  EXPECT_EQ(specs.size(), 1u);
  return make_layer<T>(specs.front(), in, flat, "test layer '" + token + "'");
}

/// Every parameter of a layer drawn from ±[0.2, 1] (never zero, so that structural zeros of the
/// Jacobian are exactly its pattern's complement), then masked.
void randomize_params(Layer<double>& layer, Rng& rng) {
  std::uniform_real_distribution<double> mag(0.2, 1.0);
  for (const ParamRef<double>& p : layer.params())
    for (Index i = 0; i < p.size; ++i) p.value[i] = mag(rng) * oracle::random_sign(rng);
  layer.apply_mask();
}

// ---------------------------------------------------------------------------------------
// Oracles: the operators by their definitions (PyTorch's semantics), plain loops.

/// One axis of a window: does output i's tap u land inside [0, n)?
bool tap_inside(Index n, Index i, Index u, Index s, Index p, Index d) {
  const Index y = i * s - p + u * d;
  return y >= 0 && y < n;
}

/// nn.Conv2d: y[o, i, j] = b[o] + Σ_{c,u,v} w[o, c, u, v] · x[c, i·sh − ph + u·dh, j·sw − pw + v·dw]
/// (zero padding). x and the result hold one sample per column.
Md naive_conv(const Md& x, const Shape3& in, const Shape3& out, const Window2d& w, const double* weight,
              const double* bias) {
  Md y(out.size(), x.cols());
  for (Index b = 0; b < x.cols(); ++b)
    for (Index o = 0; o < out.c; ++o)
      for (Index i = 0; i < out.h; ++i)
        for (Index j = 0; j < out.w; ++j) {
          double acc = bias[o];
          for (Index c = 0; c < in.c; ++c)
            for (Index u = 0; u < w.kh; ++u)
              for (Index v = 0; v < w.kw; ++v) {
                if (!tap_inside(in.h, i, u, w.sh, w.ph, w.dh) || !tap_inside(in.w, j, v, w.sw, w.pw, w.dw)) continue;
                const Index yy = i * w.sh - w.ph + u * w.dh, xx = j * w.sw - w.pw + v * w.dw;
                acc += weight[((o * in.c + c) * w.kh + u) * w.kw + v] * x((c * in.h + yy) * in.w + xx, b);
              }
          y((o * out.h + i) * out.w + j, b) = acc;
        }
  return y;
}

/// nn.MaxPool2d (padding is −inf: only in-bounds taps compete) and nn.AvgPool2d
/// (count_include_pad = True: the sum over in-bounds taps divided by kh·kw).
Md naive_pool(const Md& x, const Shape3& in, const Shape3& out, const Window2d& w, bool max) {
  Md y(out.size(), x.cols());
  for (Index b = 0; b < x.cols(); ++b)
    for (Index c = 0; c < out.c; ++c)
      for (Index i = 0; i < out.h; ++i)
        for (Index j = 0; j < out.w; ++j) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          for (Index u = 0; u < w.kh; ++u)
            for (Index v = 0; v < w.kw; ++v) {
              if (!tap_inside(in.h, i, u, w.sh, w.ph, 1) || !tap_inside(in.w, j, v, w.sw, w.pw, 1)) continue;
              const double e = x((c * in.h + i * w.sh - w.ph + u) * in.w + j * w.sw - w.pw + v, b);
              best = std::max(best, e);
              sum += e;
            }
          y((c * out.h + i) * out.w + j, b) = max ? best : sum / static_cast<double>(w.taps());
        }
  return y;
}

/// Σ over the outputs i of one axis of the number of taps u inside [0, n): the in-bounds
/// (output, tap) pairs of that axis. A window's pairs factor over the two axes, so a 2-D
/// window has (Σ_i #valid u)·(Σ_j #valid v) of them per (output channel, input channel).
Index valid_pairs(Index n, Index out, Index k, Index s, Index p, Index d) {
  Index count = 0;
  for (Index i = 0; i < out; ++i)
    for (Index u = 0; u < k; ++u) count += tap_inside(n, i, u, s, p, d) ? 1 : 0;
  return count;
}

/// Number of outputs i whose tap u lands inside [0, n).
Index valid_outputs(Index n, Index out, Index u, Index s, Index p, Index d) {
  Index count = 0;
  for (Index i = 0; i < out; ++i) count += tap_inside(n, i, u, s, p, d) ? 1 : 0;
  return count;
}

// ---------------------------------------------------------------------------------------
// Finite differences and the generated Jacobians.

/// Central differences of the layer's own forward, per sample: fd[b](r, q) ≈ ∂y_q/∂x_r of
/// sample b, i.e. J^T. Rows r with skip(r, b) (kinks) stay NaN. Also checks that perturbing
/// one sample leaves every other sample's output bit-identical (samples are independent).
std::vector<Md> fd_jacobian_t(Layer<double>& layer, const Md& x, double h,
                              const std::function<bool(Index, Index)>& skip = {}) {
  const Index n = x.rows(), B = x.cols(), m = layer.out_shape().size();
  std::vector<Md> fd(static_cast<std::size_t>(B), Md::Constant(n, m, kNaN));
  Md xp = x, yp, ym;
  for (Index b = 0; b < B; ++b)
    for (Index r = 0; r < n; ++r) {
      if (skip && skip(r, b)) continue;
      const double up = x(r, b) + h, dn = x(r, b) - h;
      xp(r, b) = up;
      layer.forward(xp, yp, 1);
      xp(r, b) = dn;
      layer.forward(xp, ym, 1);
      xp(r, b) = x(r, b);
      fd[static_cast<std::size_t>(b)].row(r) = (yp.col(b) - ym.col(b)).transpose() / (up - dn);
      for (Index o = 0; o < B; ++o)
        if (o != b) {
          EXPECT_EQ(yp.col(o), ym.col(o)) << "perturbing sample " << b << " changed sample " << o;
        }
    }
  return fd;
}

/// forward(x), then J^T from make_jacobian(B) + fill_jacobian, densified per sample.
std::vector<Md> generated_jacobian_t(Layer<double>& layer, const Md& x, int threads, Jacobian<double>* keep = nullptr) {
  Md y;
  layer.forward(x, y, threads);
  Jacobian<double> jt = layer.make_jacobian(x.cols());
  EXPECT_EQ(jt.rows(), layer.in_shape().size());
  EXPECT_EQ(jt.cols(), layer.out_shape().size());
  layer.fill_jacobian(x, y, jt, threads);
  std::vector<Md> out;
  for (Index b = 0; b < x.cols(); ++b) out.push_back(jt.to_dense(b));
  if (keep) *keep = std::move(jt);
  return out;
}

/// max |got − fd| over the entries where fd is not NaN.
double max_fd_error(const Md& got, const Md& fd) {
  double e = 0;
  for (Index i = 0; i < fd.size(); ++i)
    if (!std::isnan(fd.data()[i])) e = std::max(e, std::abs(got.data()[i] - fd.data()[i]));
  return e;
}

/// The whole contract of a layer at x, against finite differences in double:
///  1. J^T (make_jacobian + fill_jacobian) = central differences of forward, per sample;
///  2. backward_input(g) = J^T g per sample (J^T just verified);
///  3. param_grads(x, g) = finite differences of L = Σ g ⊙ forward(x) for every weight and bias
///     (exactly 0 for pruned weights: they stay zero).
/// `tol` bounds the finite-difference error (for a layer linear in x and in its parameters only
/// rounding remains). Returns the generated J^T for further checks.
std::vector<Md> check_layer(Layer<double>& layer, const Md& x, double h, double tol, Rng& rng,
                            const std::function<bool(Index, Index)>& skip = {}, int threads = 1) {
  const Index B = x.cols();
  const std::vector<Md> fd = fd_jacobian_t(layer, x, h, skip);
  const std::vector<Md> jt = generated_jacobian_t(layer, x, threads);
  for (Index b = 0; b < B; ++b)
    EXPECT_LE(max_fd_error(jt[static_cast<std::size_t>(b)], fd[static_cast<std::size_t>(b)]), tol)
        << layer.describe() << ", sample " << b << ": J^T vs finite differences";

  Md y;
  layer.forward(x, y, threads);
  const Md g = random_matrix(layer.out_shape().size(), B, rng);
  Md g_in;
  layer.backward_input(x, y, g, g_in, threads);
  EXPECT_EQ(g_in.rows(), layer.in_shape().size());
  EXPECT_EQ(g_in.cols(), B);
  for (Index b = 0; b < B; ++b)
    EXPECT_LE((g_in.col(b) - oracle::matmul(jt[static_cast<std::size_t>(b)], g.col(b))).cwiseAbs().maxCoeff(),
              1e-12)
        << layer.describe() << ", sample " << b << ": backward_input vs J^T g";

  const auto params = layer.params();
  std::vector<std::vector<double>> fd_grads;
  for (const ParamRef<double>& p : params) {
    std::vector<double> d(static_cast<std::size_t>(p.size));
    for (Index i = 0; i < p.size; ++i) {
      const double v0 = p.value[i], up = v0 + h, dn = v0 - h;
      Md yy;
      p.value[i] = up;
      layer.forward(x, yy, 1);
      const double lp = g.cwiseProduct(yy).sum();
      p.value[i] = dn;
      layer.forward(x, yy, 1);
      const double lm = g.cwiseProduct(yy).sum();
      p.value[i] = v0;
      d[static_cast<std::size_t>(i)] = (lp - lm) / (up - dn);
    }
    fd_grads.push_back(std::move(d));
  }
  if (!params.empty()) {
    layer.forward(x, y, threads);
    layer.param_grads(x, g, threads);
    for (std::size_t k = 0; k < params.size(); ++k) {
      const ParamRef<double>& p = params[k];
      const bool masked_weight = k == 0 && !layer.mask().empty();
      for (Index i = 0; i < p.size; ++i) {
        if (masked_weight && !layer.mask()[static_cast<std::size_t>(i)]) {
          EXPECT_EQ(p.grad[i], 0.0) << layer.describe() << ": pruned " << p.suffix << "[" << i << "]";
          EXPECT_EQ(p.value[i], 0.0);
          continue;
        }
        EXPECT_NEAR(p.grad[i], fd_grads[k][static_cast<std::size_t>(i)], tol * std::max(1.0, std::abs(p.grad[i])))
            << layer.describe() << ": " << p.suffix << "[" << i << "]";
      }
    }
  }
  return jt;
}

/// Set of (row, col) positions of a CSR pattern as a 0/1 dense matrix.
Md pattern_mask(const CsrPattern& p) {
  Md m = Md::Zero(p.rows(), p.cols());
  const auto rp = p.row_ptr();
  const auto ci = p.col_idx();
  for (Index r = 0; r < p.rows(); ++r)
    for (Index e = rp[r]; e < rp[r + 1]; ++e) {
      EXPECT_EQ(m(r, ci[e]), 0.0) << "duplicate entry (" << r << ", " << ci[e] << ")";
      m(r, ci[e]) = 1;
    }
  return m;
}

/// 0/1 matrix of the entries of `m` with |m| > threshold.
Md structural(const Md& m, double threshold) {
  return (m.array().abs() > threshold).cast<double>().matrix();
}

// ---------------------------------------------------------------------------------------
// 1. Conv2d.

struct ConvCase {
  Shape3 in;
  Index out;
  Window2d w;
};

/// Kernels 1, 2, 3 and 2×3; strides 1, 2 and 2×1; padding 0, 1, 2; dilation 1, 2 on a
/// rectangular 2×5×7 input with 3 output channels (cases whose window does not fit are left
/// out), plus hand-picked shapes: more channels, a 1×1 output, stride larger than the kernel,
/// rectangular padding and dilation.
std::vector<ConvCase> conv_cases() {
  std::vector<ConvCase> cases;
  const Shape3 in{2, 5, 7};
  for (auto [kh, kw] : {std::pair<Index, Index>{1, 1}, {2, 2}, {3, 3}, {2, 3}})
    for (auto [sh, sw] : {std::pair<Index, Index>{1, 1}, {2, 2}, {2, 1}})
      for (Index p : {0, 1, 2})
        for (Index d : {1, 2}) {
          const Window2d w{kh, kw, sh, sw, p, p, d, d};
          if (w.out_h(in.h) >= 1 && w.out_w(in.w) >= 1) cases.push_back({in, 3, w});
        }
  cases.push_back({{3, 5, 7}, 4, {3, 3, 1, 1, 1, 1, 1, 1}});
  cases.push_back({{1, 3, 3}, 2, {3, 3, 1, 1, 0, 0, 1, 1}});   // 1×1 output
  cases.push_back({{2, 7, 8}, 2, {2, 2, 3, 3, 0, 0, 1, 1}});   // stride 3 > kernel 2: rows never read
  cases.push_back({{2, 6, 7}, 3, {2, 3, 2, 1, 1, 0, 2, 1}});   // rectangular everything
  cases.push_back({{1, 4, 9}, 2, {1, 3, 1, 2, 0, 2, 1, 3}});   // 1×3 kernel, dilation 3 along W
  return cases;
}

std::string conv_name(const ConvCase& c) { return "conv " + c.in.str() + " → " + std::to_string(c.out) + ", " + c.w.str(); }

LayerSpec conv_spec(const ConvCase& c) {
  LayerSpec s;
  s.type = LayerType::conv;
  s.out = c.out;
  s.window = c.w;
  return s;
}

TEST(Conv2d, ForwardMatchesDefinition) {
  Rng rng(101);
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(conv_name(c));
    auto layer = make_layer<double>(conv_spec(c), c.in, false, "test");
    ASSERT_EQ(layer->out_shape(), (Shape3{c.out, c.w.out_h(c.in.h), c.w.out_w(c.in.w)}));
    randomize_params(*layer, rng);
    const Md x = random_matrix(c.in.size(), 3, rng);
    Md y;
    layer->forward(x, y, 2);
    const auto p = layer->params();
    const Md ref = naive_conv(x, c.in, layer->out_shape(), c.w, p[0].value, p[1].value);
    EXPECT_LE((y - ref).cwiseAbs().maxCoeff(), 1e-13);
  }
}

TEST(Conv2d, JacobianBackwardAndParamGradsMatchFiniteDifferences) {
  Rng rng(102);
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(conv_name(c));
    auto layer = make_layer<double>(conv_spec(c), c.in, false, "test");
    randomize_params(*layer, rng);
    const Md x = random_matrix(c.in.size(), 2, rng);
    // Linear in x and in the parameters: the differences carry rounding only.
    const std::vector<Md> jt = check_layer(*layer, x, 1e-3, 1e-10, rng, {}, 2);

    // Shared by the batch: one CSR J^T for every sample.
    Jacobian<double> j;
    generated_jacobian_t(*layer, x, 1, &j);
    EXPECT_EQ(j.kind(), Kind::csr);
    EXPECT_TRUE(j.shared());
    EXPECT_EQ(jt[0], jt[1]);
  }
}

TEST(Conv2d, PatternIsTheStructureOfTheFiniteDifferenceJacobian) {
  // With every weight nonzero, an entry of the FD Jacobian is nonzero exactly where an output
  // reads the input through some tap; inputs an output never reads leave it bit-identical, so
  // their differences are exactly 0. The pattern must be that set, and its nnz the closed form.
  Rng rng(103);
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(conv_name(c));
    auto layer = make_layer<double>(conv_spec(c), c.in, false, "test");
    randomize_params(*layer, rng);
    const Md x = random_matrix(c.in.size(), 1, rng);
    const Md fd = fd_jacobian_t(*layer, x, 1e-3)[0];
    const ConvPattern p = conv2d_pattern(c.in, c.out, c.w);
    ASSERT_TRUE(p.pattern->valid()) << p.pattern->error();
    EXPECT_EQ(pattern_mask(*p.pattern), structural(fd, 1e-6));
    const Shape3 out = layer->out_shape();
    EXPECT_EQ(p.pattern->nnz(), c.out * c.in.c * valid_pairs(c.in.h, out.h, c.w.kh, c.w.sh, c.w.ph, c.w.dh) *
                                    valid_pairs(c.in.w, out.w, c.w.kw, c.w.sw, c.w.pw, c.w.dw));
    EXPECT_EQ(static_cast<Index>(p.weight_index.size()), p.pattern->nnz());
  }
}

TEST(Conv2d, PrunedWeightsLeaveThePattern) {
  Rng rng(104);
  const ConvCase c{{2, 6, 5}, 3, {3, 2, 1, 2, 1, 1, 1, 1}};
  auto layer = make_layer<double>(conv_spec(c), c.in, false, "test");
  auto dense = make_layer<double>(conv_spec(c), c.in, false, "test");
  randomize_params(*layer, rng);
  const Index nw = layer->params()[0].size;
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(nw));
  for (auto& m : mask) m = oracle::uniform_int(rng, 0, 2) != 0;
  mask[0] = 0;
  layer->set_mask(mask);
  // The same (masked) weights in an unpruned layer: the same J^T, with explicit zeros.
  for (std::size_t k = 0; k < 2; ++k)
    std::copy_n(layer->params()[k].value, layer->params()[k].size, dense->params()[k].value);
  const Md x = random_matrix(c.in.size(), 2, rng);
  const std::vector<Md> jt = check_layer(*layer, x, 1e-3, 1e-10, rng);
  EXPECT_EQ(jt[0], generated_jacobian_t(*dense, x, 1)[0]);

  // nnz = Σ over kept weights (o, c, u, v) of #outputs i reading row tap u × #outputs j reading column tap v.
  const Shape3 out = layer->out_shape();
  Index expected = 0;
  for (Index o = 0; o < c.out; ++o)
    for (Index ch = 0; ch < c.in.c; ++ch)
      for (Index u = 0; u < c.w.kh; ++u)
        for (Index v = 0; v < c.w.kw; ++v)
          if (mask[static_cast<std::size_t>(((o * c.in.c + ch) * c.w.kh + u) * c.w.kw + v)])
            expected += valid_outputs(c.in.h, out.h, u, c.w.sh, c.w.ph, c.w.dh) *
                        valid_outputs(c.in.w, out.w, v, c.w.sw, c.w.pw, c.w.dw);
  Jacobian<double> j;
  generated_jacobian_t(*layer, x, 1, &j);
  EXPECT_EQ(j.layout().pattern->nnz(), expected);
  EXPECT_EQ(conv2d_pattern(c.in, c.out, c.w, mask).pattern->nnz(), expected);
  EXPECT_LT(expected, conv2d_pattern(c.in, c.out, c.w).pattern->nnz());
}

// ---------------------------------------------------------------------------------------
// 2. MaxPool2d and AvgPool2d.

struct PoolCase {
  Shape3 in;
  Window2d w;
};

/// Kernels 2, 3 and 2×3; strides 1 (overlapping), 2, 3 and 1×2; padding 0, 1 (≤ kernel/2).
std::vector<PoolCase> pool_cases() {
  std::vector<PoolCase> cases;
  const Shape3 in{2, 5, 7};
  for (auto [kh, kw] : {std::pair<Index, Index>{2, 2}, {3, 3}, {2, 3}})
    for (auto [sh, sw] : {std::pair<Index, Index>{1, 1}, {2, 2}, {3, 3}, {1, 2}})
      for (Index p : {0, 1}) cases.push_back({in, {kh, kw, sh, sw, p, p, 1, 1}});
  cases.push_back({{3, 4, 4}, {2, 2, 2, 2, 0, 0, 1, 1}});
  cases.push_back({{1, 6, 5}, {3, 2, 2, 1, 1, 0, 1, 1}});
  return cases;
}

LayerSpec pool_spec(LayerType t, const Window2d& w) {
  LayerSpec s;
  s.type = t;
  s.window = w;
  return s;
}

/// Distinct inputs on a grid of 1/64 (both signs), shuffled: every window's maximum beats the
/// runner-up by ≥ 1/64, far more than the FD step 2^-10 moves it, so max pooling is linear
/// around x and central differences are exact. Negative values check that padding is −inf.
Md distinct_inputs(Index n, Index batch, Rng& rng) {
  Md x(n, batch);
  for (Index b = 0; b < batch; ++b) {
    const auto perm = oracle::random_permutation(n, rng);
    for (Index i = 0; i < n; ++i) x(i, b) = (static_cast<double>(perm[static_cast<std::size_t>(i)]) - n / 2.0) / 64;
  }
  return x;
}

std::string pool_name(const char* t, const PoolCase& c) { return std::string(t) + " " + c.in.str() + ", " + c.w.str(); }

TEST(MaxPool2d, ForwardJacobianAndBackwardMatchDefinitionAndFiniteDifferences) {
  Rng rng(201);
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(pool_name("maxpool", c));
    auto layer = make_layer<double>(pool_spec(LayerType::maxpool, c.w), c.in, false, "test");
    const Md x = distinct_inputs(c.in.size(), 3, rng);
    Md y;
    layer->forward(x, y, 2);
    EXPECT_EQ(y, naive_pool(x, c.in, layer->out_shape(), c.w, true));
    check_layer(*layer, x, std::ldexp(1.0, -10), 1e-12, rng, {}, 2);
    Jacobian<double> j;
    generated_jacobian_t(*layer, x, 1, &j);
    EXPECT_EQ(j.kind(), Kind::csr);
    EXPECT_EQ(j.count(), 3);  // per sample: the argmax depends on the values
  }
}

TEST(MaxPool2d, TiesGoToTheFirstMaximumInRowMajorOrder) {
  // PyTorch routes the gradient of a tied window to its first maximum in row-major window
  // order. Expectations written by hand (input index = y·W + x); no finite differences here:
  // at a tie the max is not differentiable.
  const Shape3 in{1, 4, 4};
  Md x(16, 2);
  x.col(0) << 5, 5, 1, 3,  //
      5, 5, 3, 2,          //
      0, 0, -1, -2,        //
      7, 7, -2, -1;
  x.col(1).setZero();  // every window tied
  auto layer = make<double>("maxpool:2:2", in);
  const std::vector<std::vector<Index>> argmax = {{0, 3, 12, 10}, {0, 2, 8, 10}};
  const std::vector<Md> jt = generated_jacobian_t(*layer, x, 1);
  Md g(4, 2);
  g << 1, 10, 2, 20, 3, 30, 4, 40;
  Md y, g_in;
  layer->forward(x, y, 1);
  layer->backward_input(x, y, g, g_in, 1);
  for (Index b = 0; b < 2; ++b) {
    Md expected = Md::Zero(16, 4), expected_g = Md::Zero(16, 1);
    for (Index q = 0; q < 4; ++q) {
      expected(argmax[static_cast<std::size_t>(b)][static_cast<std::size_t>(q)], q) = 1;
      expected_g(argmax[static_cast<std::size_t>(b)][static_cast<std::size_t>(q)], 0) += g(q, b);
    }
    EXPECT_EQ(jt[static_cast<std::size_t>(b)], expected) << "sample " << b;
    EXPECT_EQ(g_in.col(b), expected_g.col(0)) << "sample " << b;
  }

  // Overlapping windows with padding on a constant input (zero or negative: padding is −inf,
  // never the max): output (i, j) of a window starting at (i − 1, j − 1) picks its first
  // in-bounds tap, input (max(i − 1, 0), max(j − 1, 0)).
  for (const char* token : {"maxpool:3:1:1", "maxpool:2:1:1"})
    for (double value : {0.0, -2.0}) {
      SCOPED_TRACE(std::string(token) + ", constant " + std::to_string(value));
      const Shape3 in2{1, 3, 4};
      auto pool = make<double>(token, in2);
      const Shape3 out = pool->out_shape();
      const Md xc = Md::Constant(in2.size(), 1, value);
      const Md got = generated_jacobian_t(*pool, xc, 1)[0];
      Md expected = Md::Zero(in2.size(), out.size());
      for (Index i = 0; i < out.h; ++i)
        for (Index j = 0; j < out.w; ++j)
          expected(std::max<Index>(i - 1, 0) * in2.w + std::max<Index>(j - 1, 0), i * out.w + j) = 1;
      EXPECT_EQ(got, expected);
      Md yc;
      pool->forward(xc, yc, 1);
      EXPECT_EQ(yc, Md::Constant(out.size(), 1, value));
    }
}

TEST(MaxPool2d, PatternKeepsExplicitZerosAndDoesNotDependOnValues) {
  // The pattern holds every in-bounds (input, output) pair: value 1 at each window's argmax,
  // an explicit 0 at the others. Its structure must be that of AvgPool's FD Jacobian (every
  // in-bounds tap has weight 1/taps there) and must not change with the values.
  Rng rng(203);
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(pool_name("maxpool", c));
    auto layer = make_layer<double>(pool_spec(LayerType::maxpool, c.w), c.in, false, "test");
    auto avg = make_layer<double>(pool_spec(LayerType::avgpool, c.w), c.in, false, "test");
    const Shape3 out = layer->out_shape();
    const Index expected_nnz = c.in.c * valid_pairs(c.in.h, out.h, c.w.kh, c.w.sh, c.w.ph, 1) *
                               valid_pairs(c.in.w, out.w, c.w.kw, c.w.sw, c.w.pw, 1);
    const Md avg_fd = fd_jacobian_t(*avg, random_matrix(c.in.size(), 1, rng), 1e-3)[0];

    Jacobian<double> j1, j2;
    generated_jacobian_t(*layer, distinct_inputs(c.in.size(), 2, rng), 1, &j1);
    generated_jacobian_t(*layer, Md::Zero(c.in.size(), 2), 1, &j2);  // all ties: other argmaxes
    for (const Jacobian<double>* j : {&j1, &j2}) {
      const CsrPattern& p = *j->layout().pattern;
      ASSERT_TRUE(p.valid()) << p.error();
      EXPECT_EQ(p.nnz(), expected_nnz);
      EXPECT_EQ(pattern_mask(p), structural(avg_fd, 1e-6));
      for (Index b = 0; b < j->count(); ++b) {
        const auto v = j->sample(b);
        EXPECT_EQ(std::count(v.begin(), v.end(), 1.0), out.size()) << "one 1 per output";
        EXPECT_EQ(std::count(v.begin(), v.end(), 0.0), expected_nnz - out.size()) << "explicit zeros";
      }
    }
    EXPECT_EQ(j1.layout().pattern, j2.layout().pattern);  // built once per layer, shared
    EXPECT_EQ(pool2d_pattern(c.in, c.w).pattern->nnz(), expected_nnz);
  }
}

TEST(AvgPool2d, ForwardJacobianAndBackwardMatchDefinitionAndFiniteDifferences) {
  Rng rng(204);
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(pool_name("avgpool", c));
    auto layer = make_layer<double>(pool_spec(LayerType::avgpool, c.w), c.in, false, "test");
    const Md x = random_matrix(c.in.size(), 2, rng);
    Md y;
    layer->forward(x, y, 2);
    EXPECT_LE((y - naive_pool(x, c.in, layer->out_shape(), c.w, false)).cwiseAbs().maxCoeff(), 1e-15);
    check_layer(*layer, x, 1e-3, 1e-12, rng, {}, 2);
    Jacobian<double> j;
    generated_jacobian_t(*layer, x, 1, &j);
    EXPECT_EQ(j.kind(), Kind::csr);
    EXPECT_TRUE(j.shared());
    // count_include_pad = True: every entry is 1/(kh·kw), border windows included.
    for (double v : j.values()) EXPECT_EQ(v, 1.0 / static_cast<double>(c.w.taps()));
  }
}

// ---------------------------------------------------------------------------------------
// 3. ReLU, Tanh (diagonal J^T) and Linear (dense W^T, CSR when pruned).

TEST(Activations, ReluJacobianWithKinksAtZero) {
  // Inputs exactly 0 sit on the kink: PyTorch's derivative there is 0, which no finite
  // difference reproduces (the central one gives 1/2), so those rows are checked by hand and
  // skipped by FD. Every other input is at least 0.05 from the kink, ≫ h.
  Rng rng(301);
  const Shape3 in{2, 3, 4};
  auto layer = make<double>("relu", in);
  Md x = random_matrix(in.size(), 3, rng);
  for (Index i = 0; i < x.size(); ++i) {
    double& v = x.data()[i];
    if (oracle::uniform_int(rng, 0, 3) == 0) v = 0;
    else if (std::abs(v) < 0.05) v = v < 0 ? -0.05 : 0.05;
  }
  x(0, 0) = -0.0;  // negative zero: also the kink
  const auto kink = [&](Index r, Index b) { return std::abs(x(r, b)) < 1e-3; };
  const std::vector<Md> jt = check_layer(*layer, x, 1e-6, 1e-9, rng, kink, 2);
  for (Index b = 0; b < x.cols(); ++b)
    for (Index r = 0; r < x.rows(); ++r) {
      const double expected = x(r, b) > 0 ? 1.0 : 0.0;
      EXPECT_EQ(jt[static_cast<std::size_t>(b)](r, r), expected) << "x = " << x(r, b);
    }
  Jacobian<double> j;
  generated_jacobian_t(*layer, x, 1, &j);
  EXPECT_EQ(j.kind(), Kind::diagonal);
  EXPECT_EQ(j.count(), 3);
  // backward_input at the kinks: 0.
  Md y, g_in;
  layer->forward(x, y, 1);
  layer->backward_input(x, y, Md::Ones(in.size(), 3), g_in, 1);
  for (Index i = 0; i < x.size(); ++i)
    if (x.data()[i] == 0) {
      EXPECT_EQ(g_in.data()[i], 0.0);
    }
}

TEST(Activations, TanhJacobianMatchesFiniteDifferences) {
  Rng rng(302);
  const Shape3 in{3, 2, 5};
  auto layer = make<double>("tanh", in);
  const Md x = random_matrix(in.size(), 2, rng, 2.0);
  check_layer(*layer, x, 1e-5, 1e-9, rng, {}, 2);
  Jacobian<double> j;
  generated_jacobian_t(*layer, x, 1, &j);
  EXPECT_EQ(j.kind(), Kind::diagonal);
  EXPECT_EQ(j.count(), 2);
}

TEST(Activations, FlattenIsTheIdentityWithoutAJacobian) {
  auto layer = make<double>("flatten", {2, 3, 4});
  EXPECT_EQ(layer->out_shape(), (Shape3{24, 1, 1}));
  EXPECT_FALSE(layer->has_jacobian());
  Rng rng(303);
  const Md x = random_matrix(24, 2, rng);
  Md y, g;
  layer->forward(x, y, 1);
  EXPECT_EQ(y, x);
  layer->backward_input(x, y, x, g, 1);
  EXPECT_EQ(g, x);
  expect_error<InvalidArgument>([&] { layer->make_jacobian(2); }, {"identity"});
}

TEST(LinearLayer, DenseAndPrunedJacobiansMatchFiniteDifferences) {
  Rng rng(304);
  const Shape3 in{7, 1, 1};
  auto layer = make<double>("linear:5", in, true);
  randomize_params(*layer, rng);
  const Md x = random_matrix(7, 3, rng);
  const std::vector<Md> jt = check_layer(*layer, x, 1e-3, 1e-10, rng);
  Jacobian<double> j;
  generated_jacobian_t(*layer, x, 1, &j);
  EXPECT_EQ(j.kind(), Kind::dense);
  EXPECT_TRUE(j.shared());
  // W^T by definition: J^T[k, o] = W[o, k].
  const double* w = layer->params()[0].value;
  for (Index k = 0; k < 7; ++k)
    for (Index o = 0; o < 5; ++o) EXPECT_EQ(jt[0](k, o), w[o * 7 + k]);

  // Pruned: a CSR J^T over the kept weights only (an input with every weight pruned, an
  // output with every weight pruned), same values.
  std::vector<std::uint8_t> mask(35);
  for (auto& m : mask) m = oracle::uniform_int(rng, 0, 1);
  for (Index o = 0; o < 5; ++o) mask[static_cast<std::size_t>(o * 7 + 2)] = 0;  // input 2 unused
  for (Index k = 0; k < 7; ++k) mask[static_cast<std::size_t>(4 * 7 + k)] = 0;  // output 4 bias only
  layer->set_mask(mask);
  const std::vector<Md> pruned = check_layer(*layer, x, 1e-3, 1e-10, rng);
  generated_jacobian_t(*layer, x, 1, &j);
  EXPECT_EQ(j.kind(), Kind::csr);
  EXPECT_EQ(j.layout().pattern->nnz(), std::count(mask.begin(), mask.end(), 1));
  for (Index k = 0; k < 7; ++k)
    for (Index o = 0; o < 5; ++o)
      EXPECT_EQ(pruned[0](k, o), mask[static_cast<std::size_t>(o * 7 + k)] ? w[o * 7 + k] : 0.0);
  EXPECT_EQ(pattern_mask(*j.layout().pattern), structural(pruned[0], 0.0));

  // Unpruning restores the dense J^T.
  layer->set_mask({});
  generated_jacobian_t(*layer, x, 1, &j);
  EXPECT_EQ(j.kind(), Kind::dense);
}

// ---------------------------------------------------------------------------------------
// 4. The paper's Table 1 (docs/method.md §4): the first three operators of VGG-11 on one 3×32×32 image.

double sparsity(Index nnz, Index rows, Index cols) {
  return 1.0 - static_cast<double>(nnz) / (static_cast<double>(rows) * static_cast<double>(cols));
}

TEST(Table1, SparsitiesOfVgg11sFirstOperators) {
  const Window2d conv3{3, 3, 1, 1, 1, 1, 1, 1};
  const ConvPattern conv = conv2d_pattern({3, 32, 32}, 64, conv3);
  EXPECT_EQ(conv.pattern->rows(), 3072);
  EXPECT_EQ(conv.pattern->cols(), 65536);
  EXPECT_EQ(conv.pattern->nnz(), 1'696'512);
  // Closed form: per (output, input) channel pair the in-bounds (output, tap) pairs factor
  // over the axes; along one axis of 32 with padding 1 the 3 taps of the 32 outputs miss the
  // border twice: 32·3 − 2 = 94. 64·3·94² = 1,696,512.
  EXPECT_EQ(valid_pairs(32, 32, 3, 1, 1, 1), 94);
  EXPECT_EQ(64 * 3 * valid_pairs(32, 32, 3, 1, 1, 1) * valid_pairs(32, 32, 3, 1, 1, 1), conv.pattern->nnz());
  EXPECT_NEAR(sparsity(conv.pattern->nnz(), 3072, 65536), 0.991573, 5e-7);

  auto relu = make<float>("relu", {64, 32, 32});
  const Jacobian<float> rj = relu->make_jacobian(1);
  EXPECT_EQ(rj.kind(), Kind::diagonal);
  EXPECT_EQ(rj.rows(), 65536);
  EXPECT_EQ(rj.cols(), 65536);
  EXPECT_EQ(static_cast<Index>(rj.values().size()), 65'536);
  EXPECT_NEAR(sparsity(65'536, 65536, 65536), 0.9999847, 5e-8);

  const PoolPattern pool = pool2d_pattern({64, 32, 32}, {2, 2, 2, 2, 0, 0, 1, 1});
  EXPECT_EQ(pool.pattern->rows(), 65536);
  EXPECT_EQ(pool.pattern->cols(), 16384);
  EXPECT_EQ(pool.pattern->nnz(), 65'536);
  EXPECT_NEAR(sparsity(pool.pattern->nnz(), 65536, 16384), 0.9999390, 5e-8);

  // The layers of vgg11 build the same patterns.
  auto conv_layer = make<float>("conv:64:3:1:1", {3, 32, 32});
  EXPECT_EQ(conv_layer->make_jacobian(1).layout().pattern->nnz(), 1'696'512);
  auto pool_layer = make<float>("maxpool:2:2", {64, 32, 32});
  EXPECT_EQ(pool_layer->make_jacobian(1).layout().pattern->nnz(), 65'536);
}

// ---------------------------------------------------------------------------------------
// 5. ConvNet: BPPSA = BP on whole CNNs, BP = finite differences of the loss.

struct Batch {
  Index size = 0;
  std::vector<float> x;
  std::vector<std::int64_t> labels;
};

/// Inputs are multiples of 2^-12 in (−1, 1): exact in float and double alike.
Batch random_batch(const Shape3& in, Index batch, Index classes, Rng& rng) {
  Batch b{batch, {}, {}};
  std::uniform_int_distribution<int> q(-4095, 4095);
  for (Index i = 0; i < batch * in.size(); ++i) b.x.push_back(static_cast<float>(std::ldexp(q(rng), -12)));
  for (Index i = 0; i < batch; ++i) b.labels.push_back(oracle::uniform_int(rng, 0, classes - 1));
  return b;
}

template <class T>
ConvNet<T> make_net(const std::string& arch, const Shape3& in, LossType loss = LossType::cross_entropy) {
  return ConvNet<T>(ConvNetConfig{in, parse_arch(arch), loss});
}

template <class T>
std::vector<std::vector<double>> gradients(ConvNet<T>& net) {
  std::vector<std::vector<double>> out;
  for (const NamedParam<T>& p : net.parameters()) out.emplace_back(p.grad, p.grad + p.size);
  return out;
}

/// max |got − ref| / max |ref| of one tensor (∞ when ref is all zero: a vacuous comparison).
double relative_to_max(const std::vector<double>& got, const std::vector<double>& ref) {
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::abs(ref[i]));
    diff = std::max(diff, std::abs(got[i] - ref[i]));
  }
  return scale > 0 ? diff / scale : std::numeric_limits<double>::infinity();
}

/// Random masks (about 2/3 kept) for every layer with weights.
template <class T>
std::vector<std::vector<std::uint8_t>> random_masks(ConvNet<T>& net, Rng& rng) {
  std::vector<std::vector<std::uint8_t>> masks(static_cast<std::size_t>(net.size()));
  for (Index i = 0; i < net.size(); ++i) {
    const auto params = net.layer(i).params();
    if (params.empty()) continue;
    auto& m = masks[static_cast<std::size_t>(i)];
    m.resize(static_cast<std::size_t>(params[0].size));
    for (auto& v : m) v = oracle::uniform_int(rng, 0, 2) != 0;
  }
  return masks;
}

struct NetCase {
  std::string arch;
  Shape3 in;
  bool pruned = false;
  LossType loss = LossType::cross_entropy;
};

std::vector<NetCase> net_cases() {
  return {
      {"conv:4:3:1:1,relu,maxpool:2:2,conv:6:3:1:0,tanh,avgpool:2:2,flatten,linear:10", {2, 12, 12}},
      {"vgg11/16", {3, 32, 32}},  // VGG-11 with widths 4, 8, 16, 16, 32, 32, 32, 32
      // Overlapping max pooling with padding, rectangular and dilated windows, MSE.
      {"conv:3:2x3:1:0x1,relu,maxpool:3:2:1,tanh,conv:4:2:1:1:2,avgpool:2:1:1,flatten,linear:6,tanh",
       {2, 9, 7}, false, LossType::mse},
      {"conv:4:3:1:1,relu,maxpool:2:2,conv:6:3:1:0,tanh,avgpool:2:2,flatten,linear:10", {2, 12, 12}, true},
  };
}

template <class T>
void expect_scans_match_bp(const NetCase& c, double tol) {
  Rng rng(401);
  ConvNet<T> net = make_net<T>(c.arch, c.in, c.loss);
  net.reset_parameters(7);
  if (c.pruned) net.set_masks(random_masks(net, rng));
  const Batch data = random_batch(c.in, 3, net.classes(), rng);
  BackwardOptions bp;
  bp.method = BackwardMethod::bp;
  bp.threads = 2;
  std::vector<std::int64_t> bp_pred, pred;
  const T bp_loss = net.loss_and_grad(data.x, data.size, data.labels, bp, nullptr, &bp_pred);
  const auto ref = gradients(net);
  const auto params = net.parameters();

  struct Method {
    BackwardMethod m;
    int chunks;
    const char* name;
  };
  for (const Method& m : {Method{BackwardMethod::linear, 0, "linear"}, Method{BackwardMethod::blelloch, 0, "blelloch"},
                          Method{BackwardMethod::hybrid, 0, "hybrid"}, Method{BackwardMethod::hybrid, 3, "hybrid/3"}})
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(m.name) + ", " + std::to_string(threads) + " threads");
      BackwardOptions o;
      o.method = m.m;
      o.threads = threads;
      o.chunks = m.chunks;
      EXPECT_EQ(net.loss_and_grad(data.x, data.size, data.labels, o, nullptr, &pred), bp_loss);
      EXPECT_EQ(pred, bp_pred);
      const auto got = gradients(net);
      for (std::size_t k = 0; k < ref.size(); ++k) EXPECT_LE(relative_to_max(got[k], ref[k]), tol) << params[k].name;
    }

  // A partial last batch gets its own chain and plan; the batch of 3's stays valid.
  const Batch part{2, std::vector<float>(data.x.begin(), data.x.begin() + 2 * c.in.size()),
                   std::vector<std::int64_t>(data.labels.begin(), data.labels.begin() + 2)};
  BackwardOptions scan;
  scan.method = BackwardMethod::blelloch;
  scan.threads = 2;
  for (const Batch* b : {&part, &data}) {
    SCOPED_TRACE("batch " + std::to_string(b->size) + " after batch " + std::to_string(b == &part ? 3 : 2));
    net.loss_and_grad(b->x, b->size, b->labels, bp);
    const auto want = gradients(net);
    net.loss_and_grad(b->x, b->size, b->labels, scan);
    const auto got = gradients(net);
    for (std::size_t k = 0; k < want.size(); ++k) EXPECT_LE(relative_to_max(got[k], want[k]), tol) << params[k].name;
  }
}

TEST(ConvNet, BppsaEqualsBpDouble) {
  for (const NetCase& c : net_cases()) {
    SCOPED_TRACE(c.arch + (c.pruned ? " (pruned)" : ""));
    expect_scans_match_bp<double>(c, 1e-10);
  }
}

TEST(ConvNet, BppsaEqualsBpFloat) {
  for (const NetCase& c : net_cases()) {
    SCOPED_TRACE(c.arch + (c.pruned ? " (pruned)" : ""));
    expect_scans_match_bp<float>(c, 1e-4);
  }
}

TEST(ConvNet, ChainHoldsEachLayersCompactJacobian) {
  ConvNet<double> net = make_net<double>(
      "conv:4:3:1:1,relu,maxpool:2:2,conv:6:3:1:0,tanh,avgpool:2:2,flatten,linear:10", {2, 12, 12});
  const Chain<double>& chain = net.chain(3);
  ASSERT_EQ(chain.size(), 6);  // layers 1..7 but flatten (the identity); layer 0's J^T is not needed
  const std::vector<std::pair<Index, Kind>> expected = {{1, Kind::diagonal}, {2, Kind::csr}, {3, Kind::csr},
                                                        {4, Kind::diagonal}, {5, Kind::csr}, {7, Kind::dense}};
  for (Index k = 1; k <= chain.size(); ++k) {
    EXPECT_EQ(net.chain_layer(k), expected[static_cast<std::size_t>(k - 1)].first);
    EXPECT_EQ(chain.jacobian(k).kind(), expected[static_cast<std::size_t>(k - 1)].second) << "element " << k;
  }
  EXPECT_EQ(chain.jacobian(2).count(), 3);  // max pooling: per sample
  EXPECT_EQ(chain.jacobian(3).count(), 1);  // conv: shared
  expect_error<InvalidArgument>([&] { net.chain_layer(7); }, {"chain element 7", "1..6"});
}

TEST(ConvNet, BpMatchesFiniteDifferencesOfTheLoss) {
  // BP is the oracle of the scans, so check it against the loss itself. Kinks are avoided,
  // not tolerated: the test asserts that every ReLU input is ≥ 1e-3 from 0 and every max-pool
  // window's maximum beats its runner-up by ≥ 1e-3, while a step of 1e-6 on one parameter
  // moves activations by far less, so the loss is smooth on every difference taken.
  Rng rng(402);
  const std::string arch = "conv:3:3:1:1,tanh,maxpool:2:2,conv:4:2:1:0,relu,flatten,linear:5";
  const Shape3 in{1, 6, 6};
  ConvNet<double> net = make_net<double>(arch, in);
  net.reset_parameters(3);
  const Batch data = random_batch(in, 2, 5, rng);

  std::vector<Md> act{Md(Eigen::Map<const Eigen::MatrixXf>(data.x.data(), in.size(), 2).cast<double>())};
  for (Index i = 0; i < net.size(); ++i) {
    Md y;
    net.layer(i).forward(act.back(), y, 1);
    act.push_back(y);
  }
  const Md& relu_in = act[4];
  ASSERT_GT(relu_in.cwiseAbs().minCoeff(), 1e-3) << "pick another seed: a ReLU input is near its kink";
  const Layer<double>& pool = net.layer(2);
  const Shape3 pin = pool.in_shape(), pout = pool.out_shape();
  for (Index b = 0; b < 2; ++b)
    for (Index c = 0; c < pout.c; ++c)
      for (Index i = 0; i < pout.h; ++i)
        for (Index j = 0; j < pout.w; ++j) {
          std::vector<double> w;
          for (Index u = 0; u < 2; ++u)
            for (Index v = 0; v < 2; ++v) w.push_back(act[2]((c * pin.h + 2 * i + u) * pin.w + 2 * j + v, b));
          std::sort(w.rbegin(), w.rend());
          ASSERT_GT(w[0] - w[1], 1e-3) << "pick another seed: a near-tie in a max-pool window";
        }

  BackwardOptions bp;
  bp.method = BackwardMethod::bp;
  net.loss_and_grad(data.x, data.size, data.labels, bp);
  const auto grads = gradients(net);
  const auto params = net.parameters();
  ASSERT_EQ(params.size(), 6u);
  for (std::size_t k = 0; k < params.size(); ++k)
    for (Index i = 0; i < params[k].size; ++i) {
      double& v = params[k].value[i];
      const double v0 = v, h = 1e-6;
      v = v0 + h;
      const double lp = net.evaluate(data.x, data.size, data.labels);
      v = v0 - h;
      const double lm = net.evaluate(data.x, data.size, data.labels);
      v = v0;
      const double fd = (lp - lm) / ((v0 + h) - (v0 - h));
      EXPECT_NEAR(grads[k][static_cast<std::size_t>(i)], fd, 1e-8) << params[k].name << "[" << i << "]";
    }
}

TEST(ConvNet, FloatBpAgreesWithDoubleBp) {
  Rng rng(403);
  const NetCase c = net_cases()[0];
  ConvNet<double> d = make_net<double>(c.arch, c.in);
  ConvNet<float> f = make_net<float>(c.arch, c.in);
  d.reset_parameters(5);
  f.reset_parameters(5);
  const Batch data = random_batch(c.in, 3, 10, rng);
  BackwardOptions o;
  o.method = BackwardMethod::blelloch;
  o.threads = 2;
  EXPECT_NEAR(f.loss_and_grad(data.x, data.size, data.labels, o), d.loss_and_grad(data.x, data.size, data.labels, o),
              1e-5);
  const auto gd = gradients(d), gf = gradients(f);
  for (std::size_t k = 0; k < gd.size(); ++k) EXPECT_LE(relative_to_max(gf[k], gd[k]), 1e-4) << d.parameters()[k].name;
}

// ---------------------------------------------------------------------------------------
// 6. ConvNet: PyTorch names, state_dict, masks.

TEST(ConvNet, ParameterNamesAreNnSequentials) {
  ConvNet<float> net = make_net<float>(
      "conv:4:3:1:1,relu,maxpool:2:2,conv:6:3:1:0,tanh,avgpool:2:2,flatten,linear:10", {2, 12, 12});
  std::vector<std::pair<std::string, std::vector<Index>>> got;
  for (const auto& p : net.parameters()) got.emplace_back(p.name, p.shape);
  const std::vector<std::pair<std::string, std::vector<Index>>> expected = {
      {"0.weight", {4, 2, 3, 3}}, {"0.bias", {4}},  {"3.weight", {6, 4, 3, 3}},
      {"3.bias", {6}},            {"7.weight", {10, 24}}, {"7.bias", {10}}};
  EXPECT_EQ(got, expected);
  EXPECT_EQ(net.classes(), 10);
  EXPECT_EQ(net.layer(6).out_shape(), (Shape3{24, 1, 1}));

  // PyTorch's default initialisation: U(±1/√fan_in) for weight and bias, not all equal.
  net.reset_parameters(1);
  for (const auto& p : net.parameters()) {
    const double fan_in = p.name[0] == '0' ? 18 : p.name[0] == '3' ? 36 : 24;
    const float* v = p.value;
    const auto [lo, hi] = std::minmax_element(v, v + p.size);
    EXPECT_LE(std::max(std::abs(*lo), std::abs(*hi)), 1 / std::sqrt(fan_in) + 1e-7) << p.name;
    EXPECT_LT(*lo, *hi) << p.name;
  }
}

TEST(ConvNet, StateDictRoundTrip) {
  Rng rng(501);
  const NetCase c = net_cases()[0];
  ConvNet<float> net = make_net<float>(c.arch, c.in);
  net.reset_parameters(11);
  const TensorFile file = parse_safetensors(serialize_safetensors(net.state_dict()), "cnn.safetensors");
  EXPECT_EQ(file.metadata.at("bppsa.model"), "cnn");
  EXPECT_EQ(file.metadata.at("bppsa.arch"), c.arch);
  EXPECT_EQ(file.metadata.at("bppsa.input"), "2x12x12");
  const ConvNetConfig config = convnet_config_from_state_dict(file);
  EXPECT_EQ(config.input, c.in);
  EXPECT_EQ(config.layers, parse_arch(c.arch));
  EXPECT_EQ(config.loss, LossType::cross_entropy);

  ConvNet<float> fresh(config);
  fresh.load_state_dict(file);
  const auto a = net.parameters(), b = fresh.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k)
    EXPECT_TRUE(std::equal(a[k].value, a[k].value + a[k].size, b[k].value)) << a[k].name;
  const Batch data = random_batch(c.in, 2, 10, rng);
  EXPECT_EQ(fresh.evaluate(data.x, data.size, data.labels), net.evaluate(data.x, data.size, data.labels));
}

TEST(ConvNet, StrictLoadingErrorsLeaveParametersUnchanged) {
  const NetCase c = net_cases()[0];
  ConvNet<float> source = make_net<float>(c.arch, c.in);
  source.reset_parameters(12);
  const TensorFile good = source.state_dict();
  ConvNet<float> target = make_net<float>(c.arch, c.in);
  target.reset_parameters(13);
  const std::vector<float> before(target.parameters()[0].value, target.parameters()[0].value + 72);

  TensorFile missing = good;
  missing.tensors.erase("3.bias");
  expect_error<FormatError>([&] { target.load_state_dict(missing); }, {"'3.bias'", "0.weight"});

  TensorFile extra = good;
  extra.tensors["8.weight"] = Tensor::from_f32(std::vector<float>(4, 0.f), {2, 2});
  expect_error<FormatError>([&] { target.load_state_dict(extra); },
                            {"unexpected tensor '8.weight'", "0.weight [4, 2, 3, 3]", "7.bias [10]"});

  TensorFile misshaped = good;
  misshaped.tensors["0.weight"] = Tensor::from_f32(std::vector<float>(72, 0.f), {4, 2, 9});
  expect_error<ShapeError>([&] { target.load_state_dict(misshaped); }, {"'0.weight'", "[4, 2, 9]", "expected [4, 2, 3, 3]"});

  EXPECT_TRUE(std::equal(before.begin(), before.end(), target.parameters()[0].value));
}

TEST(ConvNet, MasksKeepPrunedWeightsAtZero) {
  Rng rng(502);
  const NetCase c = net_cases()[0];
  ConvNet<double> net = make_net<double>(c.arch, c.in);
  const auto masks = random_masks(net, rng);
  net.set_masks(masks);
  net.reset_parameters(21);
  const Batch data = random_batch(c.in, 2, 10, rng);

  auto expect_pruned_zero = [&](const char* when) {
    for (Index i = 0; i < net.size(); ++i) {
      const auto& m = masks[static_cast<std::size_t>(i)];
      if (m.empty()) continue;
      const ParamRef<double> w = net.layer(i).params()[0];
      for (Index e = 0; e < w.size; ++e)
        if (!m[static_cast<std::size_t>(e)]) {
          EXPECT_EQ(w.value[e], 0.0) << when << ": layer " << i << " weight " << e;
          EXPECT_EQ(w.grad[e], 0.0) << when << ": layer " << i << " grad " << e;
        }
    }
  };
  expect_pruned_zero("after reset_parameters");
  for (BackwardMethod m : {BackwardMethod::bp, BackwardMethod::blelloch}) {
    BackwardOptions o;
    o.method = m;
    o.threads = 2;
    net.loss_and_grad(data.x, data.size, data.labels, o);
    expect_pruned_zero(to_string(m));
    // An SGD step keeps them zero (their gradients are zero).
    for (const auto& p : net.parameters())
      for (Index e = 0; e < p.size; ++e) p.value[e] -= 0.1 * p.grad[e];
    expect_pruned_zero("after a step");
  }
  // Loading a dense checkpoint into a pruned model: the mask wins.
  ConvNet<double> dense = make_net<double>(c.arch, c.in);
  dense.reset_parameters(22);
  net.load_state_dict(dense.state_dict());
  expect_pruned_zero("after load_state_dict");
  // Pruning made the scan's patterns sparser (the layers' J^T lost the pruned taps).
  const Chain<double>& pruned_chain = net.chain(2);
  const Chain<double>& dense_chain = dense.chain(2);
  EXPECT_LT(pruned_chain.jacobian(3).layout().pattern->nnz(), dense_chain.jacobian(3).layout().pattern->nnz());
  EXPECT_EQ(pruned_chain.jacobian(6).kind(), Kind::csr);
  EXPECT_EQ(dense_chain.jacobian(6).kind(), Kind::dense);

  expect_error<InvalidArgument>([&] { net.layer(1).set_mask({1, 0}); }, {"no weights to prune"});
  expect_error<ShapeError>([&] { net.layer(0).set_mask({1, 0, 1}); }, {"mask has 3 entries", "72"});
  expect_error<ShapeError>([&] { net.set_masks({{}, {}}); }, {"2 masks for 8 layers"});
}

// ---------------------------------------------------------------------------------------
// 7. Architecture strings and shape errors.

TEST(Arch, ParsesRoundTripsAndExpandsVgg11) {
  const std::vector<LayerSpec> l = parse_arch(" conv:8:3x5:2x1:1x2:1x2 , relu,maxpool:3:2:1,avgpool:2x3:1:1x0,tanh,flatten,linear:10");
  ASSERT_EQ(l.size(), 7u);
  EXPECT_EQ(l[0].type, LayerType::conv);
  EXPECT_EQ(l[0].out, 8);
  EXPECT_EQ(l[0].window, (Window2d{3, 5, 2, 1, 1, 2, 1, 2}));
  EXPECT_EQ(l[2].window, (Window2d{3, 3, 2, 2, 1, 1, 1, 1}));
  EXPECT_EQ(l[3].type, LayerType::avgpool);
  EXPECT_EQ(l[3].window, (Window2d{2, 3, 1, 1, 1, 0, 1, 1}));
  EXPECT_EQ(l[6].out, 10);
  const std::string canonical = arch_string(l);
  EXPECT_EQ(canonical, "conv:8:3x5:2x1:1x2:1x2,relu,maxpool:3:2:1,avgpool:2x3:1:1x0,tanh,flatten,linear:10");
  EXPECT_EQ(parse_arch(canonical), l);
  EXPECT_EQ(arch_string(parse_arch("conv:4:3:1:1:1,maxpool:2:2:0")), "conv:4:3:1:1,maxpool:2:2");

  const std::string vgg =
      "conv:64:3:1:1,relu,maxpool:2:2,conv:128:3:1:1,relu,maxpool:2:2,conv:256:3:1:1,relu,conv:256:3:1:1,relu,"
      "maxpool:2:2,conv:512:3:1:1,relu,conv:512:3:1:1,relu,maxpool:2:2,conv:512:3:1:1,relu,conv:512:3:1:1,relu,"
      "maxpool:2:2,flatten,linear:10";
  const auto v = parse_arch("vgg11");
  EXPECT_EQ(arch_string(v), vgg);
  EXPECT_EQ(std::count_if(v.begin(), v.end(), [](const LayerSpec& s) { return s.type == LayerType::conv; }), 8);
  EXPECT_EQ(std::count_if(v.begin(), v.end(), [](const LayerSpec& s) { return s.type == LayerType::maxpool; }), 5);
  EXPECT_EQ(parse_arch(vgg), v);
  std::vector<Index> widths;
  for (const LayerSpec& s : parse_arch("vgg11/8"))
    if (s.type == LayerType::conv) widths.push_back(s.out);
  EXPECT_EQ(widths, (std::vector<Index>{8, 16, 32, 32, 64, 64, 64, 64}));
  widths.clear();
  for (const LayerSpec& s : parse_arch("vgg11/1000"))
    if (s.type == LayerType::conv) widths.push_back(s.out);
  EXPECT_EQ(widths, std::vector<Index>(8, 1));  // at least one channel each

  // VGG-11 on CIFAR-10 shapes: 3×32×32 → … → 512×1×1 → 10.
  ConvNet<float> net(ConvNetConfig{{3, 32, 32}, parse_arch("vgg11/8"), LossType::cross_entropy});
  EXPECT_EQ(net.layer(net.size() - 3).out_shape(), (Shape3{64, 1, 1}));
  EXPECT_EQ(net.classes(), 10);
}

TEST(Arch, BadSpecsNameTheToken) {
  expect_error<InvalidArgument>([] { parse_arch("conv:64:3"); }, {"layer 0 'conv:64:3'", "conv:OUT:K:S:P"});
  expect_error<InvalidArgument>([] { parse_arch("relu,conv:a:3:1:1"); }, {"layer 1 'conv:a:3:1:1'", "OUT 'a'", "not an integer"});
  expect_error<InvalidArgument>([] { parse_arch("conv:4:3:1:1,pool:2:2"); }, {"layer 1 'pool:2:2'", "unknown layer 'pool'", "maxpool"});
  expect_error<InvalidArgument>([] { parse_arch("flatten,linear"); }, {"layer 1 'linear'", "linear:OUT"});
  expect_error<InvalidArgument>([] { parse_arch(""); }, {"empty architecture", "vgg11"});
  expect_error<InvalidArgument>([] { parse_arch("relu,,flatten"); }, {"layer 1 ''", "empty layer"});
  expect_error<InvalidArgument>([] { parse_arch("maxpool:2:2:2"); }, {"layer 0 'maxpool:2:2:2'", "padding", "half the kernel"});
  expect_error<InvalidArgument>([] { parse_arch("vgg11/0"); }, {"'vgg11/0'", "width divisor 0"});
  expect_error<InvalidArgument>([] { parse_arch("conv:4:3:0:1"); }, {"layer 0", "stride 0"});
  expect_error<InvalidArgument>([] { parse_arch("conv:4:3x:1:1"); }, {"layer 0", "kernel ''"});
  expect_error<InvalidArgument>([] { parse_arch("relu:2"); }, {"layer 0 'relu:2'"});
}

TEST(Arch, ShapeErrorsNameTheLayerAndTheFix) {
  auto build = [](const std::string& arch, Shape3 in) {
    return [arch, in] { ConvNet<float> net(ConvNetConfig{in, parse_arch(arch), LossType::cross_entropy}); };
  };
  expect_error<ShapeError>(build("conv:4:3:1:1,linear:10", {1, 6, 6}),
                           {"layer 1 (linear:10)", "4×6×6", "not flat", "add 'flatten'"});
  expect_error<ShapeError>(build("flatten,conv:4:3:1:1,linear:10", {1, 6, 6}),
                           {"layer 1 (conv:4:3:1:1)", "already flat", "before 'flatten'"});
  expect_error<ShapeError>(build("conv:4:5:1:0,flatten,linear:2", {1, 3, 3}),
                           {"layer 0 (conv:4:5:1:0)", "5×5", "does not fit", "1×3×3"});
  expect_error<ShapeError>(build("conv:4:3:1:1,maxpool:2:2,maxpool:2:2,maxpool:2:2,flatten,linear:2", {1, 4, 4}),
                           {"layer 3 (maxpool:2:2)", "does not fit", "4×1×1"});
  expect_error<ShapeError>(build("conv:4:3:1:1,relu", {1, 6, 6}), {"4×6×6", "not a vector of class scores", "flatten"});

  ConvNet<float> net(ConvNetConfig{{1, 6, 6}, parse_arch("conv:2:3:1:1,flatten,linear:3"), LossType::cross_entropy});
  const std::vector<float> x(72, 0.5f);
  const std::vector<std::int64_t> labels = {0, 2};
  expect_error<ShapeError>([&] { net.forward_loss(std::span(x).first(70), 2, labels); },
                           {"input holds 70 values", "[2, 1, 6, 6] = 72"});
  expect_error<ShapeError>([&] { net.forward_loss(x, 2, std::vector<std::int64_t>{0, 1, 2}); },
                           {"3 labels for a batch of 2"});
  expect_error<InvalidArgument>([&] { net.backward({}); }, {"forward_loss"});
}

TEST(Arch, WindowsThatDoNotFitAreRejectedForEveryStride) {
  // An effective kernel larger than the padded input never fits, whatever the stride: the
  // output size ⌊(in + 2p − d(k − 1) − 1)/s⌋ + 1 is ≤ 0 (floor, not truncation toward zero).
  for (Index s : {1, 2, 3})
    for (Index k : {4, 5}) {
      SCOPED_TRACE("kernel " + std::to_string(k) + ", stride " + std::to_string(s));
      const Window2d w{k, k, s, s, 0, 0, 1, 1};
      EXPECT_LE(w.out_h(3), 0);
      expect_error<ShapeError>([&] { conv2d_pattern({1, 3, 3}, 2, w); }, {"does not fit", "1×3×3"});
      expect_error<ShapeError>([&] { pool2d_pattern({1, 3, 3}, w); }, {"does not fit"});
      const std::string token = "conv:2:" + std::to_string(k) + ":" + std::to_string(s) + ":0";
      expect_error<ShapeError>(
          [&] { ConvNet<float>(ConvNetConfig{{1, 3, 3}, parse_arch(token + ",flatten,linear:2"), LossType::mse}); },
          {"layer 0 (" + token + ")", "does not fit"});
    }
  // Dilation counts: a 3-tap kernel with dilation 2 spans 5.
  EXPECT_EQ((Window2d{3, 3, 1, 1, 0, 0, 2, 2}.out_h(5)), 1);
  EXPECT_LE((Window2d{3, 3, 2, 2, 0, 0, 2, 2}.out_h(4)), 0);
}

}  // namespace
