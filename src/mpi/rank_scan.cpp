// The scan across ranks (bppsa/mpi/rank_scan.hpp): transfers, their wire format, and the
// recursive-doubling and Blelloch schedules over point-to-point messages.
#include "bppsa/mpi/rank_scan.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "bppsa/jacobian/product.hpp"

namespace bppsa::mpi {

template <class T>
Transfer<T> Transfer<T>::vector(Matrix<T> g) {
  Transfer t;
  t.constant = true;
  t.v = std::move(g);
  return t;
}

template <class T>
Transfer<T> Transfer<T>::linear(Jacobian<T> m) {
  Transfer t;
  t.m = std::move(m);
  return t;
}

template <class T>
Transfer<T> Transfer<T>::affine(Jacobian<T> m, Matrix<T> v) {
  Transfer t;
  t.m = std::move(m);
  t.v = std::move(v);
  return t;
}

namespace {
/// M as Transfer::width > 0 requires: square and dense, one block for each of the first `width` samples.
template <class T>
bool leading_blocks(const Jacobian<T>& m, Index width) {
  return m.layout().kind == Kind::dense && m.count() == width && m.rows() == m.cols();
}

/// ShapeError unless a transfer with `width` > 0 has leading_blocks.
template <class T>
void check_leading(const Jacobian<T>& m, Index width) {
  if (width > 0 && !leading_blocks(m, width))
    throw ShapeError("[rank scan] a transfer of the first " + std::to_string(width) +
                     " samples must be square and dense with one block each, not " + m.layout().describe() +
                     ": the stages disagree about the model");
}

/// Block k of m (its shared value when shared) as a dense matrix; tmp holds it when m is not dense.
template <class T>
Eigen::Map<const Matrix<T>> dense_block(const Jacobian<T>& m, Index k, Matrix<T>& tmp) {
  const Index s = m.shared() ? 0 : k;
  if (m.layout().kind == Kind::dense) return m.dense_map(s);
  tmp = m.to_dense(s);
  return Eigen::Map<const Matrix<T>>(tmp.data(), tmp.rows(), tmp.cols());
}

/// M · g, M covering its first `width` samples when width > 0 (Transfer::width).
template <class T>
Matrix<T> apply_m(const Jacobian<T>& m, Index width, const Matrix<T>& g) {
  check_leading(m, width);
  if (width > 0) {
    if (m.cols() != g.rows() || width > g.cols())
      throw ShapeError("[rank scan] a stage's transfer of the first " + std::to_string(width) + " samples is " +
                       m.layout().describe() + " but the gradient it receives is " + shape_string(g.rows(), g.cols()) +
                       ": the stages disagree about the model");
    Matrix<T> y = g;  // the samples past width pass unchanged
    for (Index k = 0; k < width; ++k) y.col(k).noalias() = m.dense_map(k) * g.col(k);
    return y;
  }
  if (m.cols() != g.rows() || (!m.shared() && m.count() != g.cols()))
    throw ShapeError("[rank scan] a stage's transfer is " + m.layout().describe() +
                     " but the gradient it receives is " + shape_string(g.rows(), g.cols()) +
                     ": the stages disagree about the model");
  Matrix<T> y(m.rows(), g.cols());
  Scratch<T> scratch;
  apply(view(m), 0, g.cols(), g.data(), g.rows(), y.data(), y.rows(), false, scratch);
  return y;
}

/// a · b sample by sample, where a (b) covers its first wa (wb) samples and is the identity past
/// them (Transfer::width; 0: every sample). Only the samples both cover cost a product; the
/// result covers the samples either covers: (product, its width).
template <class T>
std::pair<Jacobian<T>, Index> multiply_leading(const Jacobian<T>& a, Index wa, const Jacobian<T>& b, Index wb) {
  check_leading(a, wa);
  check_leading(b, wb);
  if (wa == 0 && wb == 0) return {multiply(a, b), 0};
  const Jacobian<T>* every = wa == 0 ? &a : wb == 0 ? &b : nullptr;  // a map of every sample bounds the batch
  const Index n = every ? every->count() : std::max(wa, wb);
  if (a.cols() != b.rows() || (every && (every->shared() || n < std::max(wa, wb))))
    throw ShapeError("[rank scan] transfers " + a.layout().describe() + " and " + b.layout().describe() +
                     " cannot be chained: the stages disagree about the model");
  Jacobian<T> c = Jacobian<T>::dense(a.rows(), b.cols(), n);
  Matrix<T> ta, tb;
  for (Index k = 0; k < n; ++k) {
    const bool has_a = wa == 0 || k < wa, has_b = wb == 0 || k < wb;
    if (has_a && has_b)
      c.dense_map(k).noalias() = dense_block(a, k, ta) * dense_block(b, k, tb);
    else if (has_a)
      c.dense_map(k) = dense_block(a, k, ta);
    else if (has_b)
      c.dense_map(k) = dense_block(b, k, tb);
    else
      c.dense_map(k).setIdentity();
  }
  return {std::move(c), every ? 0 : n};
}
}  // namespace

template <class T>
Matrix<T> Transfer<T>::apply(const Matrix<T>& g) const {
  if (constant) return *v;
  Matrix<T> y = m ? apply_m(*m, width, g) : g;
  if (v) y += *v;
  return y;
}

template <class T>
Transfer<T> then(const Transfer<T>& first, const Transfer<T>& second) {
  if (first.constant) return Transfer<T>::vector(second.apply(*first.v));
  if (second.constant) return second;
  Transfer<T> out;
  if (first.m && second.m) {
    auto [m, width] = multiply_leading(*second.m, second.width, *first.m, first.width);
    out.m = std::move(m);
    out.width = width;
  } else if (first.m) {
    out.m = *first.m;
    out.width = first.width;
  } else if (second.m) {
    out.m = *second.m;
    out.width = second.width;
  }
  if (first.v) {
    out.v = second.m ? apply_m(*second.m, second.width, *first.v) : *first.v;
    if (second.v) *out.v += *second.v;
  } else if (second.v) {
    out.v = *second.v;
  }
  return out;
}

// --- wire format -------------------------------------------------------------------------

namespace {

constexpr std::uint32_t kMagic = 0x42505341;  // "BPSA"

struct Writer {
  std::vector<std::byte> out;
  template <class V>
  void put(const V& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof(V));
  }
  template <class V>
  void put_array(const V* data, std::size_t n) {
    put(static_cast<std::uint64_t>(n));
    const auto* p = reinterpret_cast<const std::byte*>(data);
    out.insert(out.end(), p, p + n * sizeof(V));
  }
};

struct Reader {
  std::span<const std::byte> in;
  std::size_t pos = 0;
  [[noreturn]] void bad(const std::string& why) const {
    throw CommError("[rank scan] malformed transfer message (" + why + " at byte " + std::to_string(pos) + " of " +
                    std::to_string(in.size()) + "): the ranks run different builds or configurations");
  }
  template <class V>
  V get() {
    if (pos + sizeof(V) > in.size()) bad("truncated");
    V v;
    std::memcpy(&v, in.data() + pos, sizeof(V));
    pos += sizeof(V);
    return v;
  }
  template <class V>
  std::vector<V> get_array(std::size_t expected = SIZE_MAX) {
    const auto n = get<std::uint64_t>();
    if (expected != SIZE_MAX && n != expected)
      bad("array of " + std::to_string(n) + ", expected " + std::to_string(expected));
    if (n > (in.size() - pos) / sizeof(V)) bad("truncated array");
    std::vector<V> v(n);
    if (n) std::memcpy(v.data(), in.data() + pos, n * sizeof(V));
    pos += n * sizeof(V);
    return v;
  }
};

template <class T>
void put_matrix(Writer& w, const Matrix<T>& m) {
  w.put(static_cast<std::int64_t>(m.rows()));
  w.put(static_cast<std::int64_t>(m.cols()));
  w.put_array(m.data(), static_cast<std::size_t>(m.size()));
}

template <class T>
Matrix<T> get_matrix(Reader& r) {
  const auto rows = r.get<std::int64_t>(), cols = r.get<std::int64_t>();
  if (rows < 0 || cols < 0) r.bad("negative shape");
  auto values = r.get_array<T>(static_cast<std::size_t>(rows * cols));
  return Eigen::Map<Matrix<T>>(values.data(), rows, cols);
}

template <class T>
void put_jacobian(Writer& w, const Jacobian<T>& j) {
  const Layout<T>& l = j.layout();
  w.put(static_cast<std::uint8_t>(l.kind));
  w.put(static_cast<std::int64_t>(l.rows));
  w.put(static_cast<std::int64_t>(l.cols));
  w.put(static_cast<std::int64_t>(l.count));
  if (l.kind == Kind::csr) {
    w.put_array(l.pattern->row_ptr().data(), l.pattern->row_ptr().size());
    w.put_array(l.pattern->col_idx().data(), l.pattern->col_idx().size());
  } else if (l.kind == Kind::shared_dense_diag) {
    put_matrix(w, *l.shared_dense);
  }
  w.put_array(j.values().data(), j.values().size());
}

template <class T>
Jacobian<T> get_jacobian(Reader& r) {
  Layout<T> l;
  const auto kind = r.get<std::uint8_t>();
  if (kind >= kKindCount) r.bad("unknown Jacobian kind " + std::to_string(kind));
  l.kind = static_cast<Kind>(kind);
  l.rows = r.get<std::int64_t>();
  l.cols = r.get<std::int64_t>();
  l.count = r.get<std::int64_t>();
  if (l.rows < 0 || l.cols < 0 || l.count < 1) r.bad("bad Jacobian shape");
  if (l.kind == Kind::csr) {
    auto row_ptr = r.get_array<std::int32_t>(static_cast<std::size_t>(l.rows + 1));
    auto col_idx = r.get_array<std::int32_t>();
    auto pattern = std::make_shared<const CsrPattern>(l.rows, l.cols, std::move(row_ptr), std::move(col_idx));
    if (!pattern->valid()) r.bad("invalid CSR pattern: " + pattern->error());
    l.pattern = std::move(pattern);
  } else if (l.kind == Kind::shared_dense_diag) {
    l.shared_dense = std::make_shared<const Matrix<T>>(get_matrix<T>(r));
  }
  Jacobian<T> j(std::move(l));
  auto values = r.get_array<T>(j.values().size());
  std::copy(values.begin(), values.end(), j.values().begin());
  return j;
}

}  // namespace

template <class T>
std::vector<std::byte> encode(std::span<const Transfer<T>> transfers) {
  Writer w;
  w.put(kMagic);
  w.put(static_cast<std::uint8_t>(sizeof(T)));
  w.put(static_cast<std::uint64_t>(transfers.size()));
  for (const Transfer<T>& t : transfers) {
    const bool leading = t.width > 0 && t.m && !t.constant;  // Transfer::width, only where M is sent
    const std::uint8_t flags =
        static_cast<std::uint8_t>((t.constant ? 1 : 0) | (t.m ? 2 : 0) | (t.v ? 4 : 0) | (leading ? 8 : 0));
    w.put(flags);
    if (t.m && !t.constant) put_jacobian(w, *t.m);
    if (leading) w.put(static_cast<std::int64_t>(t.width));
    if (t.v) put_matrix(w, *t.v);
  }
  return std::move(w.out);
}

template <class T>
std::vector<Transfer<T>> decode(std::span<const std::byte> bytes) {
  Reader r{bytes};
  if (r.get<std::uint32_t>() != kMagic) r.bad("not a transfer message");
  if (r.get<std::uint8_t>() != sizeof(T)) r.bad("scalar size differs (float vs double)");
  const auto n = r.get<std::uint64_t>();
  if (n > bytes.size()) r.bad("implausible count");
  std::vector<Transfer<T>> out(n);
  for (auto& t : out) {
    const auto flags = r.get<std::uint8_t>();
    t.constant = flags & 1;
    if ((flags & 2) && !t.constant) t.m = get_jacobian<T>(r);
    if (flags & 8) {
      t.width = r.get<std::int64_t>();
      if (!t.m || t.width < 1 || !leading_blocks(*t.m, t.width))
        r.bad("a transfer of the first samples without its square dense blocks, one per sample");
    }
    if (flags & 4) t.v = get_matrix<T>(r);
    if (t.constant && !t.v) r.bad("constant transfer without a vector");
  }
  if (r.pos != bytes.size()) r.bad("trailing bytes");
  return out;
}

// --- schedules ---------------------------------------------------------------------------

const char* to_string(RankScan s) { return s == RankScan::doubling ? "doubling" : "blelloch"; }

RankScan parse_rank_scan(std::string_view name) {
  if (name == "doubling") return RankScan::doubling;
  if (name == "blelloch") return RankScan::blelloch;
  throw InvalidArgument("[model-parallel] unknown rank scan '" + std::string(name) + "'; use doubling or blelloch");
}

namespace {
int ceil_log2(int k) {
  int l = 0;
  while ((1 << l) < k) ++l;
  return l;
}
}  // namespace

int scan_rounds(RankScan s, int ranks) {
  if (ranks <= 1) return 0;
  const int l = ceil_log2(ranks);
  return s == RankScan::doubling ? l : 2 * l - 1;
}

namespace {

template <class T>
std::vector<Transfer<T>> then_all(const std::vector<Transfer<T>>& first, const std::vector<Transfer<T>>& second,
                                  RankScanStats& st) {
  if (first.size() != second.size())
    throw CommError("[rank scan] " + std::to_string(first.size()) + " micro-batches met " +
                    std::to_string(second.size()) + ": the ranks run different --micro-batches");
  std::vector<Transfer<T>> out;
  out.reserve(first.size());
  for (std::size_t i = 0; i < first.size(); ++i) out.push_back(then(first[i], second[i]));
  st.products += static_cast<std::int64_t>(first.size());
  return out;
}

/// Rank of scan index i (index 0 = the stage holding the loss = the last rank).
int rank_of(int i, int k) { return k - 1 - i; }

template <class T>
std::vector<Transfer<T>> trade(const Comm& pipe, const std::vector<Transfer<T>>* out, int to, bool receive, int from,
                               int tag, const char* what, RankScanStats& st) {
  std::vector<std::byte> bytes;
  if (out) bytes = encode<T>(*out);
  st.bytes_sent += static_cast<std::int64_t>(bytes.size());
  const std::string label = std::string("the stage transfers of ") + what;
  if (out && receive && to == from) {
    ++st.rounds;
    return decode<T>(pipe.exchange(bytes, to, tag, label));
  }
  if (out) pipe.send(bytes, to, tag, label);
  if (!receive) return {};
  ++st.rounds;
  return decode<T>(pipe.recv(from, tag, label));
}

template <class T>
std::vector<Transfer<T>> doubling(const Comm& pipe, std::vector<Transfer<T>> partial, int tag, RankScanStats& st) {
  const int k = pipe.size(), i = rank_of(pipe.rank(), k);
  std::vector<Transfer<T>> result;
  bool have = false;
  for (int mask = 1, level = 0; mask < k; mask <<= 1, ++level) {
    const int partner = i ^ mask;
    if (partner >= k) continue;
    auto theirs =
        trade<T>(pipe, &partial, rank_of(partner, k), true, rank_of(partner, k), tag + level, "a doubling round", st);
    if (partner < i) {  // theirs is closer to the loss: it comes first
      result = have ? then_all(theirs, result, st) : theirs;
      have = true;
      partial = then_all(theirs, partial, st);
    } else {
      partial = then_all(partial, theirs, st);
    }
  }
  return result;
}

template <class T>
std::vector<Transfer<T>> blelloch(const Comm& pipe, std::vector<Transfer<T>> a, int tag, RankScanStats& st) {
  const int k = pipe.size(), n = k - 1, me = rank_of(pipe.rank(), k);
  const int levels = ceil_log2(k) - 1;  // L: the up-sweep skips the root level
  auto block = [&](int d, int& i0, int& l, int& r) {
    i0 = me & ~((2 << d) - 1);
    l = i0 + (1 << d) - 1;
    r = std::min(i0 + (2 << d) - 1, n);
  };
  for (int d = 0; d < levels; ++d) {
    int i0, l, r;
    block(d, i0, l, r);
    if (!(l < r && l <= n - 1)) continue;
    if (me == l) trade<T>(pipe, &a, rank_of(r, k), false, -1, tag + d, "a Blelloch up-sweep", st);
    if (me == r)
      a = then_all(trade<T>(pipe, nullptr, -1, true, rank_of(l, k), tag + d, "a Blelloch up-sweep", st), a, st);
  }
  for (int d = levels; d >= 0; --d) {
    int i0, l, r;
    block(d, i0, l, r);
    if (!(l < r && l <= n - 1)) continue;
    const int t = tag + 32 + d;
    if (i0 == 0) {  // the prefix before the block is the identity: r takes l's total as its prefix
      if (me == l) trade<T>(pipe, &a, rank_of(r, k), false, -1, t, "a Blelloch down-sweep", st);
      if (me == r) a = trade<T>(pipe, nullptr, -1, true, rank_of(l, k), t, "a Blelloch down-sweep", st);
    } else if (me == l || me == r) {
      const int peer = me == l ? r : l;
      auto theirs = trade<T>(pipe, &a, rank_of(peer, k), true, rank_of(peer, k), t, "a Blelloch down-sweep", st);
      if (me == l)
        a = std::move(theirs);  // l takes the block's prefix
      else
        a = then_all(a, theirs, st);  // r: the block's prefix, then l's subtree total
    }
  }
  return me == 0 ? std::vector<Transfer<T>>{} : a;
}

}  // namespace

template <class T>
std::vector<Matrix<T>> exclusive_scan(const Comm& pipe, std::vector<Transfer<T>> mine, RankScan algorithm, int tag,
                                      RankScanStats* stats) {
  RankScanStats st;
  const int k = pipe.size();
  const bool holds_loss = pipe.rank() == k - 1;
  for (const auto& t : mine)
    if (t.constant != holds_loss)
      throw InvalidArgument(std::string("[rank scan] rank ") + std::to_string(pipe.rank()) +
                            (holds_loss ? " holds the loss, so its transfers must be constant vectors"
                                        : " does not hold the loss, so its transfers must not be constant"));
  std::vector<Matrix<T>> out;
  if (k > 1) {
    auto prefix = algorithm == RankScan::doubling ? doubling(pipe, std::move(mine), tag, st)
                                                  : blelloch(pipe, std::move(mine), tag, st);
    for (auto& p : prefix) {
      if (!p.constant)
        throw CommError("[rank scan] the prefix reaching rank " + std::to_string(pipe.rank()) +
                        " is not a gradient: the ranks disagree about which stage holds the loss");
      out.push_back(std::move(*p.v));
    }
  }
  if (stats) *stats = st;
  return out;
}

#define BPPSA_INSTANTIATE(T)                                            \
  template struct Transfer<T>;                                          \
  template Transfer<T> then(const Transfer<T>&, const Transfer<T>&);    \
  template std::vector<std::byte> encode(std::span<const Transfer<T>>); \
  template std::vector<Transfer<T>> decode(std::span<const std::byte>); \
  template std::vector<Matrix<T>> exclusive_scan(const Comm&, std::vector<Transfer<T>>, RankScan, int, RankScanStats*);
BPPSA_INSTANTIATE(float)
BPPSA_INSTANTIATE(double)
#undef BPPSA_INSTANTIATE

}  // namespace bppsa::mpi
