// Structural patterns of sliding-window Jacobians: one builder serves Conv2d (every input
// channel feeds every output channel) and pooling (channel c feeds channel c).
#include "bppsa/jacobian/window_pattern.hpp"

#include <limits>

#include "bppsa/core/error.hpp"

namespace bppsa {

std::string Shape3::str() const {
  return std::to_string(c) + "×" + std::to_string(h) + "×" + std::to_string(w);
}

std::string Window2d::str() const {
  auto pair = [](Index a, Index b) { return a == b ? std::to_string(a) : std::to_string(a) + "×" + std::to_string(b); };
  std::string s = std::to_string(kh) + "×" + std::to_string(kw) + " s" + pair(sh, sw) + " p" + pair(ph, pw);
  if (dh != 1 || dw != 1) s += " d" + pair(dh, dw);
  return s;
}

Shape3 window_output(const Shape3& in, Index out_channels, const Window2d& w, const std::string& what) {
  if (w.kh < 1 || w.kw < 1 || w.sh < 1 || w.sw < 1 || w.dh < 1 || w.dw < 1 || w.ph < 0 || w.pw < 0)
    detail::raise<ShapeError>(what, "window " + w.str() + ": kernel, stride and dilation must be ≥ 1, padding ≥ 0");
  if (in.c < 1 || in.h < 1 || in.w < 1)
    detail::raise<ShapeError>(what, "input " + in.str() + " is empty");
  const Shape3 out{out_channels, w.out_h(in.h), w.out_w(in.w)};
  if (out.h < 1 || out.w < 1)
    detail::raise<ShapeError>(what, "window " + w.str() + " does not fit an input of " + in.str() +
                                        " (output would be " + std::to_string(out.h) + "×" + std::to_string(out.w) +
                                        "); use a smaller kernel or more padding, or remove a pooling layer");
  return out;
}

namespace {

/// Calls visit(row, col, channel_in, tap) for every in-bounds (input, output) pair, columns
/// (outputs) in increasing order. depthwise: channel o reads channel o only.
template <class Visit>
void for_each_tap(const Shape3& in, const Shape3& out, const Window2d& w, bool depthwise, Visit&& visit) {
  for (Index o = 0; o < out.c; ++o)
    for (Index i = 0; i < out.h; ++i)
      for (Index j = 0; j < out.w; ++j) {
        const Index col = (o * out.h + i) * out.w + j;
        const Index c0 = depthwise ? o : 0, c1 = depthwise ? o + 1 : in.c;
        for (Index c = c0; c < c1; ++c)
          for (Index u = 0; u < w.kh; ++u) {
            const Index y = i * w.sh - w.ph + u * w.dh;
            if (y < 0 || y >= in.h) continue;
            for (Index v = 0; v < w.kw; ++v) {
              const Index x = j * w.sw - w.pw + v * w.dw;
              if (x < 0 || x >= in.w) continue;
              visit((c * in.h + y) * in.w + x, col, c, u * w.kw + v);
            }
          }
      }
}

/// Two passes over the taps: count per row, then place. `keep` filters taps; `sized(nnz)` is
/// called between the passes; `record` then sees each kept tap with its entry index.
template <class Keep, class Sized, class Record>
CsrPatternPtr build(const Shape3& in, const Shape3& out, const Window2d& w, bool depthwise, const char* what,
                    Keep&& keep, Sized&& sized, Record&& record) {
  std::vector<std::int64_t> count(static_cast<std::size_t>(in.size()) + 1, 0);
  for_each_tap(in, out, w, depthwise, [&](Index row, Index col, Index c, Index t) {
    if (keep(col, c, t)) ++count[static_cast<std::size_t>(row) + 1];
  });
  for (std::size_t r = 1; r < count.size(); ++r) count[r] += count[r - 1];
  if (count.back() > std::numeric_limits<std::int32_t>::max())
    detail::raise<InvalidArgument>(what, "the Jacobian of " + in.str() + " → " + out.str() + " has " +
                                             std::to_string(count.back()) +
                                             " entries, more than CSR's 32-bit indices hold; use a smaller input");
  std::vector<std::int32_t> row_ptr(count.begin(), count.end());
  std::vector<std::int32_t> col_idx(static_cast<std::size_t>(count.back()));
  std::vector<std::int64_t> next(count.begin(), count.end() - 1);
  sized(count.back());
  for_each_tap(in, out, w, depthwise, [&](Index row, Index col, Index c, Index t) {
    if (!keep(col, c, t)) return;
    const auto p = next[static_cast<std::size_t>(row)]++;
    col_idx[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(col);
    record(p, col, c, t);
  });
  return make_csr_pattern(in.size(), out.size(), std::move(row_ptr), std::move(col_idx));
}

}  // namespace

ConvPattern conv2d_pattern(const Shape3& in, Index out_channels, const Window2d& w, std::span<const std::uint8_t> mask) {
  const char* what = "Conv2d";
  const Shape3 out = window_output(in, out_channels, w, what);
  const Index per_out = in.c * w.taps();
  if (!mask.empty() && static_cast<Index>(mask.size()) != out.c * per_out)
    detail::raise<ShapeError>(what, "pruning mask has " + std::to_string(mask.size()) + " entries, expected " +
                                        std::to_string(out.c * per_out) + " (the weight's [O, C, KH, KW])");
  const Index plane = out.h * out.w;
  auto widx = [&](Index col, Index c, Index t) { return (col / plane) * per_out + c * w.taps() + t; };
  ConvPattern p;
  p.pattern = build(
      in, out, w, false, what,
      [&](Index col, Index c, Index t) { return mask.empty() || mask[static_cast<std::size_t>(widx(col, c, t))] != 0; },
      [&](std::int64_t nnz) { p.weight_index.resize(static_cast<std::size_t>(nnz)); },
      [&](std::int64_t e, Index col, Index c, Index t) {
        p.weight_index[static_cast<std::size_t>(e)] = static_cast<std::int32_t>(widx(col, c, t));
      });
  return p;
}

PoolPattern pool2d_pattern(const Shape3& in, const Window2d& w) {
  const char* what = "Pool2d";
  const Shape3 out = window_output(in, in.c, w, what);
  PoolPattern p;
  p.tap_position.assign(static_cast<std::size_t>(out.size() * w.taps()), -1);
  p.pattern = build(
      in, out, w, true, what, [](Index, Index, Index) { return true; }, [](std::int64_t) {},
      [&](std::int64_t e, Index col, Index, Index t) {
        p.tap_position[static_cast<std::size_t>(col * w.taps() + t)] = static_cast<std::int32_t>(e);
      });
  return p;
}

}  // namespace bppsa
