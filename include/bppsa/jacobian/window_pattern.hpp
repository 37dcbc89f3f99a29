// Structural patterns of the transposed Jacobians of sliding-window operators (docs/method.md §4):
// Conv2d, MaxPool2d and AvgPool2d. The pattern depends only on shapes (and a fixed pruning
// mask), so it is built once per architecture; per step only values are written, through
// the index maps built here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bppsa/jacobian/csr_pattern.hpp"

namespace bppsa {

/// A C × H × W activation; element (c, y, x) sits at (c·H + y)·W + x (row-major, as PyTorch).
/// A flat vector of n features is n × 1 × 1.
struct Shape3 {
  Index c = 0, h = 0, w = 0;
  Index size() const { return c * h * w; }
  bool flat() const { return h == 1 && w == 1; }
  bool operator==(const Shape3&) const = default;
  /// "3×32×32"
  std::string str() const;
};

/// Kernel, stride, padding and dilation of a 2-D sliding window (PyTorch's conventions,
/// ceil_mode = false): out = ⌊(in + 2·pad − dil·(k − 1) − 1) / stride⌋ + 1.
struct Window2d {
  Index kh = 1, kw = 1;
  Index sh = 1, sw = 1;
  Index ph = 0, pw = 0;
  Index dh = 1, dw = 1;
  Index taps() const { return kh * kw; }
  bool operator==(const Window2d&) const = default;
  /// Output height and width for an input of h × w; ≤ 0 when the window does not fit.
  Index out_h(Index h) const { return out_extent(h, kh, sh, ph, dh); }
  Index out_w(Index w) const { return out_extent(w, kw, sw, pw, dw); }
  /// One axis: the floor of (n + 2p − d(k − 1) − 1)/s, plus 1. C++ division truncates toward
  /// zero, which would turn a window 1..s−1 too wide into one output: test the span first.
  static Index out_extent(Index n, Index k, Index s, Index p, Index d) {
    const Index span = n + 2 * p - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
  }
  /// "3×3 s1 p1" (dilation shown when ≠ 1).
  std::string str() const;
};

/// J^T of a Conv2d (in → out_channels, weight [O, C, KH, KW]): one row per input element,
/// one column per output element; entry ((c, y, x), (o, i, j)) = w[o, c, u, v] for every
/// in-bounds tap y = i·sh − ph + u·dh, x = j·sw − pw + v·dw whose weight is not pruned.
/// Values are shared by the whole batch: value p = w[weight_index[p]] (weight row-major).
struct ConvPattern {
  CsrPatternPtr pattern;
  std::vector<std::int32_t> weight_index;
};

/// `mask` (optional): O·C·KH·KW bytes, 0 = pruned tap (left out of the pattern). Throws
/// ShapeError when the window does not fit the input or the mask has the wrong size, and
/// InvalidArgument when the pattern would exceed 2^31 − 1 entries (the CSR index type).
ConvPattern conv2d_pattern(const Shape3& in, Index out_channels, const Window2d& window,
                           std::span<const std::uint8_t> mask = {});

/// J^T of a MaxPool2d / AvgPool2d over each channel: entry ((c, y, x), (c, i, j)) for every
/// in-bounds tap of window (i, j) — overlapping windows give an input several entries. The
/// pattern keeps every tap (max pooling: value 1 at the window's argmax, an explicit 0
/// elsewhere), so it never changes from sample to sample.
/// tap_position[q·taps + t] is the entry of output q's tap t (t = u·kw + v), −1 when the
/// tap falls in the padding.
struct PoolPattern {
  CsrPatternPtr pattern;
  std::vector<std::int32_t> tap_position;
};

PoolPattern pool2d_pattern(const Shape3& in, const Window2d& window);

/// Output shape of a window over `in` with `out_channels` channels; ShapeError naming `what`
/// when it does not fit.
Shape3 window_output(const Shape3& in, Index out_channels, const Window2d& window, const std::string& what);

}  // namespace bppsa
