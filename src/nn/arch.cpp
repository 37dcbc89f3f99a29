// Parsing of Sequential CNN architecture strings (bppsa/nn/arch.hpp).
#include "bppsa/nn/arch.hpp"

#include <charconv>

#include "bppsa/core/error.hpp"

namespace bppsa {
namespace {

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = s.find(sep, start);
    std::string part(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    const auto b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    out.push_back(b == std::string::npos ? "" : part.substr(b, e - b + 1));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

const char* usage(LayerType t) {
  switch (t) {
    case LayerType::conv: return "conv:OUT:K:S:P or conv:OUT:K:S:P:D (e.g. conv:64:3:1:1)";
    case LayerType::maxpool: return "maxpool:K:S or maxpool:K:S:P (e.g. maxpool:2:2)";
    case LayerType::avgpool: return "avgpool:K:S or avgpool:K:S:P (e.g. avgpool:2:2)";
    case LayerType::linear: return "linear:OUT (e.g. linear:10)";
    default: return to_string(t);
  }
}

struct Token {
  std::string where;
  [[noreturn]] void fail(const std::string& why) const { detail::raise<InvalidArgument>("arch", where + ": " + why); }

  Index integer(const std::string& s, Index min, const char* what) const {
    Index v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size())
      fail(std::string(what) + " '" + s + "' is not an integer");
    if (v < min || v > (Index{1} << 24)) fail(std::string(what) + " " + s + " is outside [" + std::to_string(min) + ", 2^24]");
    return v;
  }
  /// "3" → (3, 3); "3x5" → (3, 5).
  std::pair<Index, Index> pair(const std::string& s, Index min, const char* what) const {
    const auto x = s.find_first_of("xX");
    if (x == std::string::npos) {
      const Index v = integer(s, min, what);
      return {v, v};
    }
    return {integer(s.substr(0, x), min, what), integer(s.substr(x + 1), min, what)};
  }
};

LayerSpec parse_token(const std::string& text, Index position) {
  const Token tok{"layer " + std::to_string(position) + " '" + text + "'"};
  if (text.empty()) tok.fail("empty layer (two commas in a row, or a trailing comma?)");
  const auto f = split(text, ':');
  LayerSpec l;
  const std::string& name = f[0];
  static const std::pair<const char*, LayerType> kNames[] = {
      {"conv", LayerType::conv},       {"maxpool", LayerType::maxpool}, {"avgpool", LayerType::avgpool},
      {"relu", LayerType::relu},       {"tanh", LayerType::tanh},       {"flatten", LayerType::flatten},
      {"linear", LayerType::linear}};
  bool found = false;
  for (const auto& [n, t] : kNames)
    if (name == n) {
      l.type = t;
      found = true;
    }
  if (!found)
    tok.fail("unknown layer '" + name + "'; use conv:OUT:K:S:P[:D], maxpool:K:S[:P], avgpool:K:S[:P], relu, tanh, "
             "flatten, linear:OUT, or a named architecture (vgg11, vgg11/N)");
  const std::size_t args = f.size() - 1;
  auto need = [&](std::size_t lo, std::size_t hi) {
    if (args < lo || args > hi) tok.fail(std::string(to_string(l.type)) + " needs " + usage(l.type));
  };
  Window2d& w = l.window;
  switch (l.type) {
    case LayerType::conv:
      need(4, 5);
      l.out = tok.integer(f[1], 1, "OUT");
      std::tie(w.kh, w.kw) = tok.pair(f[2], 1, "kernel");
      std::tie(w.sh, w.sw) = tok.pair(f[3], 1, "stride");
      std::tie(w.ph, w.pw) = tok.pair(f[4], 0, "padding");
      if (args == 5) std::tie(w.dh, w.dw) = tok.pair(f[5], 1, "dilation");
      break;
    case LayerType::maxpool:
    case LayerType::avgpool:
      need(2, 3);
      std::tie(w.kh, w.kw) = tok.pair(f[1], 1, "kernel");
      std::tie(w.sh, w.sw) = tok.pair(f[2], 1, "stride");
      if (args == 3) std::tie(w.ph, w.pw) = tok.pair(f[3], 0, "padding");
      if (2 * w.ph > w.kh || 2 * w.pw > w.kw) tok.fail("padding must be at most half the kernel (PyTorch's limit)");
      break;
    case LayerType::linear:
      need(1, 1);
      l.out = tok.integer(f[1], 1, "OUT");
      break;
    default:
      need(0, 0);
  }
  return l;
}

std::vector<LayerSpec> vgg11(Index divisor) {
  std::vector<LayerSpec> out;
  const Index widths[] = {64, -1, 128, -1, 256, 256, -1, 512, 512, -1, 512, 512, -1};
  for (Index c : widths) {
    LayerSpec l;
    if (c < 0) {
      l.type = LayerType::maxpool;
      l.window = {2, 2, 2, 2, 0, 0, 1, 1};
      out.push_back(l);
      continue;
    }
    l.type = LayerType::conv;
    l.out = std::max<Index>(1, c / divisor);
    l.window = {3, 3, 1, 1, 1, 1, 1, 1};
    out.push_back(l);
    out.push_back({LayerType::relu, 0, {}});
  }
  out.push_back({LayerType::flatten, 0, {}});
  out.push_back({LayerType::linear, 10, {}});
  return out;
}

}  // namespace

std::vector<LayerSpec> parse_arch(std::string_view spec) {
  const std::string s(spec);
  if (s == "vgg11") return vgg11(1);
  if (s.rfind("vgg11/", 0) == 0) {
    const Token tok{"architecture '" + s + "'"};
    return vgg11(tok.integer(s.substr(6), 1, "width divisor"));
  }
  if (s.find_first_not_of(" \t,") == std::string::npos)
    detail::raise<InvalidArgument>("arch", "empty architecture; give a layer list such as "
                                           "'conv:8:3:1:1,relu,maxpool:2:2,flatten,linear:10' or a name (vgg11, vgg11/8)");
  std::vector<LayerSpec> out;
  const auto tokens = split(s, ',');
  for (std::size_t i = 0; i < tokens.size(); ++i) out.push_back(parse_token(tokens[i], static_cast<Index>(i)));
  return out;
}

std::string arch_string(const std::vector<LayerSpec>& layers) {
  std::string s;
  for (const auto& l : layers) {
    if (!s.empty()) s += ',';
    s += l.str();
  }
  return s;
}

}  // namespace bppsa
