// Bad input (shapes, empty chain, bad CSR, counts, NaN/Inf, overflow) raises errors naming the place.
#include <limits>

#include "bppsa/nn/conv_net.hpp"
#include "bppsa/nn/model.hpp"
#include "bppsa/scan/resident_scanner.hpp"
#include "expect_error.hpp"
#include "oracle.hpp"

namespace {

using testutil::expect_error;
using testutil::message_of;

using namespace bppsa;
using oracle::Rng;

static_assert(std::is_base_of_v<Error, ShapeError> && std::is_base_of_v<Error, InvalidArgument> &&
              std::is_base_of_v<Error, NonFiniteError>);

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack)

Chain<double> square_chain(Index n, Index d, Index batch, Rng& rng) {
  Chain<double> c(batch);
  for (Index k = 0; k < n; ++k) c.push_back(oracle::small_int_jacobian<double>(Kind::dense, d, d, batch, rng, -1, 1));
  return c;
}

TEST(Errors, PushBackShapeMismatchNamesElementAndBothShapes) {
  Chain<double> c(2);
  c.push_back(Jacobian<double>::dense(3, 4, 1));
  c.push_back(Jacobian<double>::dense(4, 5, 2));
  const std::string m = message_of<ShapeError>([&] { c.push_back(Jacobian<double>::dense(4, 2, 1)); });
  EXPECT_CONTAINS(m, "J_3^T");
  EXPECT_CONTAINS(m, "J_2^T");
  EXPECT_CONTAINS(m, shape_string(4, 5));  // J_2^T
  EXPECT_CONTAINS(m, shape_string(4, 2));  // J_3^T
  EXPECT_CONTAINS(m, "×");                 // U+00D7, as shape_string writes it
  EXPECT_EQ(c.size(), 2) << "a rejected element is not kept";
}

// Long chains are validated in parallel (kParallelElements): the error still names the first
// bad element, the same at every thread count.
TEST(Errors, LongChainReportsTheFirstBadElementAtAnyThreadCount) {
  const Index n = kParallelElements + 900;
  Chain<float> c(1);
  for (Index k = 0; k < n; ++k) c.push_back(Jacobian<float>::diagonal(3, 1));
  c.jacobian(kParallelElements + 500) = Jacobian<float>::diagonal(4, 1);  // fits neither neighbour
  c.jacobian(kParallelElements + 800) = Jacobian<float>::diagonal(5, 1);
  const std::string first = "J_" + std::to_string(kParallelElements + 500) + "^T";
  for (int threads : {1, 2, 3, 8}) {
    ScanOptions o;
    o.threads = threads;
    o.algorithm = Algorithm::blelloch;
    const std::string m = message_of<ShapeError>([&] { backward(c, Matrix<float>::Ones(3, 1).eval(), o); });
    EXPECT_CONTAINS(m, first + " (chain element");
    EXPECT_EQ(m.find("J_" + std::to_string(kParallelElements + 800) + "^T"), std::string::npos) << m;
  }
}

TEST(Errors, InPlaceReplacementMismatchIsCaughtByRun) {
  Rng rng(1);
  Chain<double> c = square_chain(5, 4, 2, rng);
  c.jacobian(3) = Jacobian<double>::dense(4, 5, 1);  // its columns no longer fit J_4^T's rows
  for (const auto& alg : oracle::all_algorithms()) {
    const std::string m =
        message_of<ShapeError>([&] { backward(c, Matrix<double>::Ones(4, 2).eval(), oracle::options_for(alg)); });
    EXPECT_CONTAINS(m, "J_4^T");
    EXPECT_CONTAINS(m, "J_3^T");
    EXPECT_CONTAINS(m, shape_string(4, 5));
    EXPECT_CONTAINS(m, shape_string(4, 4));
  }
  c.jacobian(3) = Jacobian<double>::dense(5, 4, 1);  // now its rows do not fit J_2^T
  Scanner<double> scanner;
  Gradients<double> out;
  const std::string m = message_of<ShapeError>([&] { scanner.run(c, Matrix<double>::Ones(4, 2).eval(), out); });
  EXPECT_CONTAINS(m, "J_3^T");
  EXPECT_CONTAINS(m, "J_2^T");
  EXPECT_CONTAINS(m, shape_string(5, 4));
  c.jacobian(3) = Jacobian<double>::dense(4, 4, 1);  // fixed: the same scanner runs again
  EXPECT_NO_THROW(scanner.run(c, Matrix<double>::Ones(4, 2).eval(), out));
}

TEST(Errors, EmptyChainIsInvalidArgument) {
  Chain<double> c(2);
  Scanner<double> scanner;
  Gradients<double> out;
  EXPECT_CONTAINS(message_of<InvalidArgument>([&] { scanner.run(c, Matrix<double>::Ones(3, 2).eval(), out); }),
                  "empty");
  EXPECT_THROW(backward(c, Matrix<double>::Ones(3, 2).eval()), InvalidArgument);
  EXPECT_THROW(Chain<double>(0), InvalidArgument);
}

struct BadCsr {
  const char* what;
  std::vector<std::int32_t> row_ptr, col_idx;
};

std::vector<BadCsr> bad_patterns() {  // all 3 × 4
  return {{"unsorted columns", {0, 2, 3, 4}, {2, 1, 0, 3}}, {"duplicate column", {0, 2, 3, 4}, {1, 1, 0, 3}},
          {"column out of range", {0, 1, 2, 3}, {0, 4, 1}}, {"negative column", {0, 1, 2, 3}, {0, -1, 1}},
          {"row_ptr too short", {0, 1, 2}, {0, 1}},         {"row_ptr not starting at 0", {1, 1, 2, 3}, {0, 1, 2}},
          {"row_ptr decreasing", {0, 2, 1, 3}, {0, 1, 2}},  {"row_ptr end != nnz", {0, 1, 2, 2}, {0, 1, 2}}};
}

TEST(Errors, MalformedCsrIsInvalidArgumentNamingElementAndShape) {
  Rng rng(2);
  for (const BadCsr& b : bad_patterns()) {
    SCOPED_TRACE(b.what);
    EXPECT_THROW(make_csr_pattern(3, 4, b.row_ptr, b.col_idx), InvalidArgument);
    const auto pattern = std::make_shared<const CsrPattern>(3, 4, b.row_ptr, b.col_idx);  // records, never throws
    EXPECT_FALSE(pattern->valid());
    EXPECT_CONTAINS(pattern->error(), shape_string(3, 4));

    Chain<double> c(2);
    c.push_back(Jacobian<double>::dense(2, 3, 1));
    std::string m = message_of<InvalidArgument>([&] { c.push_back(Jacobian<double>::csr(pattern, 1)); });
    EXPECT_CONTAINS(m, "J_2^T");
    EXPECT_CONTAINS(m, shape_string(3, 4));

    // Replaced in place after the chain was built: the scan's validation reports it.
    c.push_back(Jacobian<double>::dense(3, 4, 1));
    c.push_back(Jacobian<double>::dense(4, 2, 2));
    c.jacobian(2) = Jacobian<double>::csr(pattern, 2);
    m = message_of<InvalidArgument>([&] { backward(c, Matrix<double>::Ones(2, 2).eval()); });
    EXPECT_CONTAINS(m, "J_2^T");
    EXPECT_CONTAINS(m, shape_string(3, 4));
  }
}

TEST(Errors, CountNeitherOneNorBatchIsShapeError) {
  Chain<double> c(3);
  c.push_back(Jacobian<double>::dense(2, 2, 3));
  std::string m = message_of<ShapeError>([&] { c.push_back(Jacobian<double>::diagonal(2, 2)); });
  EXPECT_CONTAINS(m, "J_2^T");
  c.push_back(Jacobian<double>::diagonal(2, 1));
  c.jacobian(2) = Jacobian<double>::diagonal(2, 4);
  m = message_of<ShapeError>([&] { backward(c, Matrix<double>::Ones(2, 3).eval()); });
  EXPECT_CONTAINS(m, "J_2^T");
}

TEST(Errors, WrongGLastShapeIsShapeError) {
  Rng rng(3);
  const Chain<double> c = square_chain(4, 3, 2, rng);
  for (auto [rows, cols] : {std::pair<Index, Index>{4, 2}, {3, 1}, {3, 3}, {0, 0}}) {
    const std::string m = message_of<ShapeError>([&] { backward(c, Matrix<double>::Ones(rows, cols).eval()); });
    EXPECT_CONTAINS(m, shape_string(rows, cols));
    EXPECT_CONTAINS(m, shape_string(3, 2));  // what was expected
  }
}

TEST(Errors, InjectionShapesAndIndices) {
  Rng rng(4);
  Chain<double> c = square_chain(4, 3, 2, rng);
  EXPECT_THROW(c.set_injection(1, Matrix<double>::Ones(3, 1)), ShapeError);
  EXPECT_THROW(c.set_injection(4, Matrix<double>::Ones(3, 2)), InvalidArgument);  // e_k only for k < N
  EXPECT_THROW(c.set_injection(-1, Matrix<double>::Ones(3, 2)), InvalidArgument);
  c.set_injection(2, Matrix<double>::Ones(3, 2));
  c.jacobian(2) = Jacobian<double>::dense(3, 5, 1);  // d_2 becomes 5: e_2 no longer fits
  c.jacobian(3) = Jacobian<double>::dense(5, 3, 1);
  EXPECT_CONTAINS(message_of<ShapeError>([&] { backward(c, Matrix<double>::Ones(3, 2).eval()); }), "e_2");
}

TEST(Errors, BadOptionsAndNames) {
  ScanOptions o;
  o.threads = -1;
  EXPECT_THROW(Scanner<double>{o}, InvalidArgument);
  o.threads = 0;
  o.chunks = -2;
  EXPECT_THROW(Scanner<double>{o}, InvalidArgument);
  EXPECT_THROW(parse_algorithm("quick"), InvalidArgument);
  EXPECT_EQ(parse_algorithm("auto"), Algorithm::automatic);
  EXPECT_THROW(parse_chain_kind("sparse"), InvalidArgument);
  EXPECT_THROW(Jacobian<double>(Layout<double>{Kind::diagonal, 3, 4, 1, nullptr, nullptr}), ShapeError);
  EXPECT_THROW(Jacobian<double>::dense(3, 3, 0), InvalidArgument);
  EXPECT_THROW(Jacobian<double>::csr(nullptr, 1), InvalidArgument);
  EXPECT_THROW(Jacobian<double>::shared_dense_diag(nullptr, 1), InvalidArgument);
  Chain<double> c(1);
  c.push_back(Jacobian<double>::identity(2));
  EXPECT_THROW(c.jacobian(0), InvalidArgument);
  EXPECT_THROW(c.jacobian(2), InvalidArgument);
}

TEST(Errors, FusedIsTheGpusScanAndTheCpuEnginesRefuseIt) {
  // The name is known (the GPU runs it and reports it), but no CPU engine swaps it for another.
  EXPECT_EQ(parse_backward("fused"), BackwardMethod::fused);
  EXPECT_STREQ(to_string(BackwardMethod::fused), "fused");
  EXPECT_STREQ(to_string(Algorithm::fused), "fused");
  EXPECT_THROW(parse_algorithm("fused"), InvalidArgument);
  expect_error<InvalidArgument>([] { Scanner<double>{ScanOptions{.algorithm = Algorithm::fused}}; },
                                {"Scanner", "fused", "blelloch"});

  ModelConfig config;
  config.rnn = RecurrentConfig{.cell = CellType::gru, .input = 2, .hidden = 3};
  config.classes = 2;
  SequenceClassifier<float> model(config);
  model.reset_parameters(1);
  const std::vector<float> x(2 * 4 * 2, 0.5f);
  const std::vector<std::int64_t> y{0, 1};
  const BackwardOptions fused{.method = BackwardMethod::fused};
  expect_error<InvalidArgument>([&] { model.rnn().check_backward_memory(4, 2, fused); }, {"fused", "--device cuda"});
  model.forward_loss(x, 2, 4, y);
  expect_error<InvalidArgument>([&] { model.backward(fused); }, {"Recurrent::backward", "fused", "blelloch"});

  ConvNet<float> net(ConvNetConfig{Shape3{1, 4, 4}, parse_arch("conv:2:3:1:1,relu,flatten,linear:2")});
  net.reset_parameters(1);
  const std::vector<float> img(2 * 16, 0.25f);
  expect_error<InvalidArgument>([&] { net.loss_and_grad(img, 2, y, fused); }, {"ConvNet::backward", "fused"});
}

// ---------------------------------------------------------------------------------------
// Non-finite values.

/// A 4-element chain (dense, csr, shared_dense_diag, diagonal; batch 2) with one poisoned
/// value at `where`: 1..4 an element's values (sample 1), 5 S of the sdd, 6 e_1, 7 g_N.
struct Poisoned {
  Chain<float> chain{2};
  Matrix<float> g_last = Matrix<float>::Ones(3, 2);
};

Poisoned poisoned(int where, float bad) {
  Rng rng(5);
  Poisoned p;
  p.chain.push_back(oracle::small_int_jacobian<float>(Kind::dense, 3, 3, 2, rng));
  p.chain.push_back(Jacobian<float>::csr(make_csr_pattern(3, 3, {0, 2, 3, 4}, {0, 2, 1, 0}), 2));
  for (float& x : p.chain.jacobian(2).values()) x = float(oracle::uniform_int(rng, 1, 2));
  auto s = std::make_shared<Matrix<float>>(Matrix<float>::Ones(3, 3));
  p.chain.push_back(Jacobian<float>::shared_dense_diag(s, 2));
  for (float& x : p.chain.jacobian(3).values()) x = 0.5f;
  p.chain.push_back(Jacobian<float>::diagonal(3, 2));
  for (float& x : p.chain.jacobian(4).values()) x = -1.0f;
  p.chain.set_injection(1, Matrix<float>::Ones(3, 2));
  if (where >= 1 && where <= 4) {
    auto v = p.chain.jacobian(where).sample(1);
    v[v.size() - 1] = bad;
  }
  if (where == 5) (*s)(2, 1) = bad;  // S is shared; poisoned through our own handle
  if (where == 6) (*p.chain.injection(1))(2, 1) = bad;
  if (where == 7) p.g_last(1, 1) = bad;
  return p;
}

TEST(Errors, AResidentChainIsCheckedBeforeTheDeviceIsTouched) {
  // Every check below runs in any build, before a GPU is looked for: the error is the same
  // on a machine with one, without one, and in a build without CUDA.
  const Layout<float> d34{Kind::dense, 3, 4, 2, nullptr, nullptr}, d45{Kind::dense, 4, 5, 2, nullptr, nullptr},
      d24{Kind::dense, 2, 4, 2, nullptr, nullptr}, bad_count{Kind::dense, 4, 5, 3, nullptr, nullptr},
      diag_rect{Kind::diagonal, 4, 5, 2, nullptr, nullptr};
  const ScanOptions blelloch{Algorithm::blelloch};
  auto make = [](ResidentChain<float> c, ScanOptions o) { return [c, o] { ResidentScanner<float> s(c, o); }; };

  expect_error<InvalidArgument>(make({2, {}, {}}, blelloch), {"empty"});
  expect_error<InvalidArgument>(make({0, {&d34}, {}}, blelloch), {"batch size"});
  expect_error<InvalidArgument>(make({2, {&d34, nullptr}, {}}, blelloch), {"J_2^T", "null"});
  expect_error<ShapeError>(make({2, {&d34, &d24}, {}}, blelloch), {"J_2^T", "J_1^T", "d_1"});
  expect_error<ShapeError>(make({2, {&d34, &bad_count}, {}}, blelloch), {"J_2^T", "3 samples", "batch has 2"});
  expect_error<ShapeError>(make({2, {&diag_rect}, {}}, blelloch), {"J_1^T", "square"});
  expect_error<ShapeError>(make({2, {&d34, &d45}, {true}}, blelloch), {"1 injection flags for 2 elements"});
  expect_error<InvalidArgument>(make({2, {&d34, &d45}, {}}, ScanOptions{Algorithm::automatic}), {"name the algorithm"});
  expect_error<InvalidArgument>(make({2, {&d34, &d45}, {}}, ScanOptions{Algorithm::fused}), {"fused"});
  expect_error<InvalidArgument>(make({2, {&d34, &d45}, {}}, ScanOptions{Algorithm::hybrid, 0, -1}), {"chunks"});

  // A consistent chain gets as far as the device: a build without CUDA or a machine without a
  // GPU says so (bppsa_test_gpu runs the scan itself against the CPU engine).
  const ResidentChain<float> good{2, {&d34, &d45}, {false, true}};
  if (cuda_device_count() == 0) {
    testutil::expect_no_gpu_error([&] { ResidentScanner<float> s(good, blelloch); });
    return;
  }
  ResidentScanner<float> s(good, blelloch);
  EXPECT_EQ(s.size(), 2);
  EXPECT_EQ(s.dim(0), 3);
  EXPECT_EQ(s.dim(2), 5);
  EXPECT_NE(s.injection(1), nullptr);
  EXPECT_EQ(s.injection(0), nullptr);
  expect_error<InvalidArgument>([&] { s.values(3); }, {"values", "k = 3", "1..2"});
}

TEST(Errors, NonFiniteInputsAreReportedWhereTheyAre) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const char* names[] = {"", "J_1^T", "J_2^T", "J_3^T", "J_4^T", " S ", "e_1", "g_N"};
  for (float bad : {nan, inf, -inf})
    for (int where = 1; where <= 7; ++where) {
      const Poisoned p = poisoned(where, bad);
      SCOPED_TRACE(std::string("poisoned ") + names[where] + " with " + std::to_string(bad));
      const std::string m = message_of<NonFiniteError>([&] { backward(p.chain, p.g_last); });
      EXPECT_CONTAINS(m, names[where]);
      if (where <= 4) {
        EXPECT_CONTAINS(m, "sample 1");
      }
      if (where == 5) {
        EXPECT_CONTAINS(m, "J_3^T");
      }
    }
  const Poisoned clean = poisoned(0, 0);  // control: the same chain without poison runs
  EXPECT_NO_THROW(backward(clean.chain, clean.g_last));
}

TEST(Errors, WithoutInputChecksNonFiniteInputsStillFailTheOutputCheck) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const auto& alg : oracle::all_algorithms())
    for (float bad : {nan, inf})
      for (int where = 1; where <= 7; ++where) {
        const Poisoned p = poisoned(where, bad);
        ScanOptions o = oracle::options_for(alg);
        o.check_inputs = false;
        EXPECT_THROW(backward(p.chain, p.g_last, o), NonFiniteError) << alg.name << ", poison at " << where;
      }
}

TEST(Errors, WithoutInputChecksANonFiniteGNIsNotCalledFinite) {
  // The output check runs from g_{N-1} down and blames the first non-finite g_k on the
  // products "although g_{k+1} is finite"; for a poisoned g_N that statement is false.
  const Poisoned p = poisoned(7, std::numeric_limits<float>::quiet_NaN());
  ScanOptions o;
  o.check_inputs = false;
  const std::string m = message_of<NonFiniteError>([&] { backward(p.chain, p.g_last, o); });
  EXPECT_EQ(m.find("g_4 is finite"), std::string::npos) << "message: " << m;
}

TEST(Errors, FloatOverflowIsNonFiniteError) {
  for (Kind kind : {Kind::diagonal, Kind::dense, Kind::csr}) {
    Chain<float> cf(2);
    Chain<double> cd(2);
    for (int k = 0; k < 8; ++k) {  // gain 1e6 per element: 1e48 overflows float, not double
      auto jf = kind == Kind::dense ? Jacobian<float>::dense(3, 3, 2)
                : kind == Kind::csr ? Jacobian<float>::csr(make_csr_pattern(3, 3, {0, 1, 2, 3}, {0, 1, 2}), 2)
                                    : Jacobian<float>::diagonal(3, 2);
      if (kind == Kind::dense)
        for (Index s = 0; s < 2; ++s) jf.dense_map(s) = Matrix<float>::Identity(3, 3) * 1e6f;
      else
        for (float& x : jf.values()) x = 1e6f;
      cd.push_back(Jacobian<double>(Layout<double>{jf.kind(), 3, 3, 2, jf.layout().pattern, nullptr}));
      std::copy(jf.values().begin(), jf.values().end(), cd.jacobian(k + 1).values().begin());
      cf.push_back(std::move(jf));
    }
    for (const auto& alg : oracle::all_algorithms()) {
      const std::string m =
          message_of<NonFiniteError>([&] { backward(cf, Matrix<float>::Ones(3, 2).eval(), oracle::options_for(alg)); });
      EXPECT_CONTAINS(m, "overflow") << alg.name;
      EXPECT_NO_THROW(backward(cd, Matrix<double>::Ones(3, 2).eval(), oracle::options_for(alg))) << alg.name;
    }
  }
}

}  // namespace
