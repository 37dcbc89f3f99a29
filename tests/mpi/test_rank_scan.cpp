// The scan across ranks' algebra (bppsa/mpi/rank_scan.hpp), without MPI: composing stage
// transfers and their wire format, against per-sample matrices applied one after another by
// the oracle's textbook loops. Most transfers cover only their first samples (Transfer::width:
// samples that ended before a stage), the rest being the identity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "bppsa/mpi/rank_scan.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"

namespace {

using bppsa::Index;
using bppsa::Jacobian;
using bppsa::Matrix;
using bppsa::mpi::Transfer;
using oracle::Md;
using oracle::Rng;

/// A transfer and, independently, what it means: one dense matrix per sample and the added vector.
struct Case {
  Transfer<double> t;
  std::vector<Md> block;  ///< per sample (the identity past t.width included)
  Md v;                   ///< S × B (zeros when t.v is absent)
};

constexpr Index S = 4, B = 5;

/// width: 0 = a block for every sample; −1 = no M (the identity); otherwise the first `width` samples.
Case make(Rng& rng, Index width, bool affine) {
  Case c;
  c.block.assign(B, Md::Identity(S, S));
  if (width >= 0) {
    const Index n = width == 0 ? B : width;
    Jacobian<double> m = Jacobian<double>::dense(S, S, n);
    for (Index k = 0; k < n; ++k) {
      m.dense_map(k) = oracle::small_int_matrix<double>(S, S, rng, -2, 2);
      c.block[k] = oracle::densify(m, k);
    }
    c.t.m = std::move(m);
    c.t.width = width;
  }
  c.v = Md::Zero(S, B);
  if (affine) {
    Matrix<double> v = oracle::small_int_matrix<double>(S, B, rng);
    if (width > 0) v.rightCols(B - width).setZero();  // a stage injects nothing for an ended sample
    c.v = v;
    c.t.v = std::move(v);
  }
  return c;
}

/// Applies the cases in order (first = closest to the loss) to g, sample by sample, by textbook loops.
Md oracle_apply(const std::vector<Case>& cs, Md g) {
  for (const Case& c : cs) {
    Md y(S, B);
    for (Index k = 0; k < B; ++k) y.col(k) = oracle::matmul(c.block[k], g.col(k)) + c.v.col(k);
    g = y;
  }
  return g;
}

Transfer<double> fold_left(const std::vector<Case>& cs, std::size_t from, std::size_t to) {
  Transfer<double> acc = cs[from].t;
  for (std::size_t i = from + 1; i < to; ++i) acc = bppsa::mpi::then(acc, cs[i].t);
  return acc;
}

// Every association order of a chain of transfers of mixed widths equals applying them one by one.
TEST(RankScanTransfers, LeadingBlocksComposeAsTheirSampleMatrices) {
  Rng rng(7);
  const std::vector<Index> widths{0, 1, 2, 3, 4, -1};
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = static_cast<std::size_t>(oracle::uniform_int(rng, 2, 6));
    std::vector<Case> cs;
    for (std::size_t i = 0; i < n; ++i)
      cs.push_back(
          make(rng, widths[static_cast<std::size_t>(oracle::uniform_int(rng, 0, 5))], oracle::uniform_int(rng, 0, 1)));
    const Md g = oracle::small_int_matrix<double>(S, B, rng);
    const Md want = oracle_apply(cs, g);
    const std::size_t split = static_cast<std::size_t>(oracle::uniform_int(rng, 1, static_cast<Index>(n) - 1));
    const Transfer<double> left = fold_left(cs, 0, n);
    const Transfer<double> split_fold = bppsa::mpi::then(fold_left(cs, 0, split), fold_left(cs, split, n));
    for (const Transfer<double>* t : {&left, &split_fold}) {
      const Md got = t->apply(g);
      ASSERT_EQ(got, want) << "trial " << trial;  // small integers: exact
      if (t->m) {                                 // a product covers exactly the samples some factor covers
        Index widest = 0;
        bool every = false;
        for (const Case& c : cs)
          if (c.t.m) {
            every = every || c.t.width == 0;
            widest = std::max(widest, c.t.width);
          }
        EXPECT_EQ(t->width, every ? 0 : widest) << "trial " << trial;
      }
    }
    // The stage holding the loss first: a constant vector, as the scan's prefixes are.
    Transfer<double> loss = Transfer<double>::vector(g);
    for (const Case& c : cs) loss = bppsa::mpi::then(loss, c.t);
    ASSERT_TRUE(loss.constant);
    ASSERT_EQ(Md(*loss.v), want) << "trial " << trial;
  }
}

// The wire carries the width and only the running samples' blocks; a decoded transfer acts as the original.
TEST(RankScanTransfers, LeadingBlocksTravelWithoutTheEndedSamples) {
  Rng rng(11);
  const Case partial = make(rng, 2, true);
  Case expanded = partial;  // the same map with the ended samples' identity blocks written out
  Jacobian<double> all = Jacobian<double>::dense(S, S, B);
  for (Index k = 0; k < B; ++k) all.dense_map(k) = partial.block[k];
  expanded.t.m = std::move(all);
  expanded.t.width = 0;

  const std::vector<Transfer<double>> one{partial.t}, other{expanded.t};
  const auto bytes = bppsa::mpi::encode<double>(one), bytes_all = bppsa::mpi::encode<double>(other);
  EXPECT_EQ(static_cast<Index>(bytes_all.size() - bytes.size()),
            (B - 2) * S * S * static_cast<Index>(sizeof(double)) - static_cast<Index>(sizeof(std::int64_t)));
  const auto back = bppsa::mpi::decode<double>(bytes);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].width, 2);
  const Md g = oracle::small_int_matrix<double>(S, B, rng);
  EXPECT_EQ(back[0].apply(g), oracle_apply({partial}, g));
  EXPECT_EQ(expanded.t.apply(g), oracle_apply({partial}, g));
  // A width means nothing without M: a constant transfer travels as a vector alone.
  Transfer<double> loss = Transfer<double>::vector(g);
  loss.width = 2;
  const std::vector<Transfer<double>> constant{loss};
  const auto decoded = bppsa::mpi::decode<double>(bppsa::mpi::encode<double>(constant));
  ASSERT_EQ(decoded.size(), 1u);
  EXPECT_TRUE(decoded[0].constant);
  EXPECT_EQ(decoded[0].width, 0);
  EXPECT_EQ(Md(*decoded[0].v), g);
}

TEST(RankScanTransfers, MalformedLeadingTransfersAreRefused) {
  Rng rng(3);
  Case c = make(rng, 3, false);
  // A gradient of fewer samples than the blocks.
  testutil::expect_error<bppsa::ShapeError>([&] { c.t.apply(Matrix<double>::Zero(S, 2)); },
                                            {"first 3 samples", "disagree"});
  // A width that does not match the blocks.
  Transfer<double> bad = c.t;
  bad.width = 2;
  testutil::expect_error<bppsa::ShapeError>([&] { bad.apply(Matrix<double>::Zero(S, B)); },
                                            {"first 2 samples", "dense"});
  // A shared map (every sample the same) cannot meet one of the first samples only.
  Transfer<double> shared = Transfer<double>::linear(Jacobian<double>::dense(S, S, 1));
  testutil::expect_error<bppsa::ShapeError>([&] { bppsa::mpi::then(shared, c.t); }, {"cannot be chained"});
  // On the wire: the width's count differs from the blocks'.
  const std::vector<Transfer<double>> one{c.t};
  auto bytes = bppsa::mpi::encode<double>(one);
  const Index jac_end = static_cast<Index>(bytes.size()) - static_cast<Index>(sizeof(std::int64_t));
  std::int64_t two = 2;
  std::memcpy(bytes.data() + jac_end, &two, sizeof two);
  testutil::expect_error<bppsa::mpi::CommError>([&] { bppsa::mpi::decode<double>(bytes); }, {"first samples"});
  // Truncated inside the width.
  bytes.resize(bytes.size() - 3);
  testutil::expect_error<bppsa::mpi::CommError>([&] { bppsa::mpi::decode<double>(bytes); }, {});
}

}  // namespace
