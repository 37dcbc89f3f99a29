// Memory guards: every path that sizes buffers from its input refuses, before allocating, what
// cannot fit (ResourceError with the numbers and the fix), and what it estimates is what it
// then allocates. A lowered limit (set_memory_limit) stands in for a small machine.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "expect_error.hpp"
#include "jacobian/cpu/spgemm.hpp"
#include "oracle.hpp"

namespace {

using namespace bppsa;
using testutil::expect_error;
using testutil::message_of;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack)

/// Lowers the memory limit for one test and restores the machine's on exit.
struct Limit {
  explicit Limit(double bytes) { set_memory_limit(bytes); }
  ~Limit() { set_memory_limit(0); }
};

/// Sets an environment variable for one test and unsets it on exit.
struct Env {
  Env(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~Env() { unsetenv(name_); }
  const char* name_;
};

TEST(MemoryGuard, TheMachinesMemoryIsPhysicalOrLessAndCanBeOverridden) {
  unsetenv("BPPSA_MEMORY_LIMIT");
  const double physical = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  ASSERT_GT(physical, 0);
  EXPECT_GT(memory_limit_bytes(), 0);
  EXPECT_LE(memory_limit_bytes(), physical);  // a cgroup can only lower it
  {
    Limit limit(12345);
    EXPECT_EQ(memory_limit_bytes(), 12345);
  }
  {
    Env env("BPPSA_MEMORY_LIMIT", "1.5M");
    EXPECT_EQ(memory_limit_bytes(), 1.5 * 1024 * 1024);
    Env env2("BPPSA_MEMORY_LIMIT", "2g");
    EXPECT_EQ(memory_limit_bytes(), 2.0 * 1024 * 1024 * 1024);
    Env env3("BPPSA_MEMORY_LIMIT", "4096");
    EXPECT_EQ(memory_limit_bytes(), 4096);
    Limit limit(777);  // the override wins over the environment
    EXPECT_EQ(memory_limit_bytes(), 777);
  }
  for (const char* bad : {"abc", "-1G", "0", "1X", "nan", "inf", "8GB"}) {
    Env env("BPPSA_MEMORY_LIMIT", bad);
    expect_error<InvalidArgument>([] { memory_limit_bytes(); }, {"BPPSA_MEMORY_LIMIT", bad, "8G"});
  }
  EXPECT_LE(memory_limit_bytes(), physical);  // unset again: the machine's
  EXPECT_THROW(set_memory_limit(-1), InvalidArgument);
  EXPECT_THROW(set_memory_limit(std::nan("")), InvalidArgument);
}

TEST(MemoryGuard, CheckMemoryNamesTheOperationTheBytesTheMachineAndTheFix) {
  Limit limit(1e9);  // one request may use 0.8 GB
  EXPECT_NO_THROW(check_memory("op", "a small thing", {{"part", 0.8e9}}, "fix it"));
  const std::string m = message_of<ResourceError>([] {
    check_memory("scan", "a big thing", {{"Jacobians", 0.6e9}, {"nothing", 0}, {"workspace", 0.3e9}}, "use less");
  });
  EXPECT_EQ(m.rfind("[scan] a big thing needs about 900 MB", 0), 0u) << m;
  EXPECT_CONTAINS(m, "Jacobians 600 MB, workspace 300 MB");
  EXPECT_EQ(m.find("nothing"), std::string::npos) << "empty items are left out: " << m;
  EXPECT_CONTAINS(m, "this machine has 1.00 GB (set by set_memory_limit)");
  EXPECT_CONTAINS(m, "80 %");
  EXPECT_CONTAINS(m, "; use less");
  static_assert(std::is_base_of_v<Error, ResourceError>, "the CLI maps every bppsa::Error to exit 1");
  // Sizes computed from absurd inputs overflow to inf or NaN: never "fits".
  EXPECT_THROW(check_memory("op", "x", {{"inf", INFINITY}}, "f"), ResourceError);
  EXPECT_THROW(check_memory("op", "x", {{"nan", std::nan("")}}, "f"), ResourceError);
  EXPECT_FALSE(fits_in_memory(std::nan("")));
}

TEST(MemoryGuard, FormatBytes) {
  EXPECT_EQ(format_bytes(12), "12 B");
  EXPECT_EQ(format_bytes(1234), "1.23 kB");
  EXPECT_EQ(format_bytes(45.6e6), "45.6 MB");
  EXPECT_EQ(format_bytes(999.6e6), "1.00 GB");
  EXPECT_EQ(format_bytes(123e9), "123 GB");
  EXPECT_EQ(format_bytes(4e15), "4.00 PB");
}

/// Bytes of g_0 … g_N for a chain (closed form).
double gradient_bytes(const Chain<float>& c) {
  double values = 0;
  for (Index k = 0; k <= c.size(); ++k) values += static_cast<double>(c.dim(k) * c.batch());
  return values * sizeof(float);
}

// The Scanner's estimate, checked against what it then allocates: refused 1 byte below the
// workspace (ScanStats::workspace_bytes, the capacity actually reserved) plus the gradients;
// accepted 1 MB above (the schedule's bookkeeping is the only other part).
TEST(MemoryGuard, ScannerRefusesBeforeAllocatingAndItsEstimateIsWhatItAllocates) {
  RandomChainSpec spec;
  spec.n = 300;
  spec.dim = 24;
  spec.batch = 8;
  spec.kind = ChainKind::dense;
  const RandomProblem<float> p = random_problem<float>(spec);
  for (Algorithm a : {Algorithm::blelloch, Algorithm::hybrid, Algorithm::linear}) {
    ScanOptions o;
    o.algorithm = a;
    o.threads = 2;
    Gradients<float> out;
    const double need =
        static_cast<double>(Scanner<float>(o).run(p.chain, p.g_last, out).workspace_bytes) + gradient_bytes(p.chain);
    if (a == Algorithm::blelloch) {
      EXPECT_GT(need, 2 * gradient_bytes(p.chain)) << "Blelloch keeps products";
    }
    {
      Limit limit((need - 1) / kMemoryShare);
      Scanner<float> scanner(o);
      Gradients<float> fresh;
      const std::string m = message_of<ResourceError>([&] { scanner.run(p.chain, p.g_last, fresh); });
      EXPECT_CONTAINS(m, "[scan]");
      EXPECT_CONTAINS(m, std::string(to_string(a)) + " scan of 300 Jacobians × batch 8");
      EXPECT_CONTAINS(m, "gradients g_0 … g_N");
      EXPECT_CONTAINS(m, "linear algorithm");
      EXPECT_EQ(fresh.size(), 0) << "nothing allocated";
    }
    {
      Limit limit((need + 1e6) / kMemoryShare);
      Scanner<float> scanner(o);
      Gradients<float> fresh;
      EXPECT_NO_THROW(scanner.run(p.chain, p.g_last, fresh)) << to_string(a);
      for (Index k = 0; k <= p.chain.size(); ++k) EXPECT_EQ(fresh.g(k), out.g(k)) << "same plan, same result";
    }
  }
}

// Products of banded CSR Jacobians fill in: the plan stops as soon as its patterns together
// (the planner's count) or one pattern (the symbolic SpGEMM) pass what memory allows, before
// growing them further. Here the patterns of the lower levels together pass first.
TEST(MemoryGuard, SymbolicSpgemmRefusesAFillInPatternThatCannotFit) {
  RandomChainSpec spec;
  spec.n = 64;
  spec.dim = 4000;
  spec.batch = 1;
  spec.kind = ChainKind::csr;
  spec.shared = true;
  const RandomProblem<float> p = random_problem<float>(spec);
  ScanOptions o;
  o.algorithm = Algorithm::blelloch;
  Gradients<float> out;
  // Band 3 → products of up to 64 elements hold up to 129 diagonals: ~500,000 entries. A
  // 2 MB limit allows 0.8 · 2 MB / 8 = 200,000.
  Limit limit(2e6);
  const std::string m = message_of<ResourceError>([&] { Scanner<float>(o).run(p.chain, p.g_last, out); });
  EXPECT_CONTAINS(m, "[plan] the SpGEMM fill-in patterns of the first");
  EXPECT_CONTAINS(m, "--backward bp");
  o.algorithm = Algorithm::linear;  // no products: fits
  EXPECT_NO_THROW(Scanner<float>(o).run(p.chain, p.g_last, out));
  // One product alone: a 4000 × 1 column times a 1 × 4000 row is 16 million entries; the
  // symbolic SpGEMM stops past 200,000 (4 bytes each: half of what one request may use).
  std::vector<std::int32_t> column_ptr(4001), zeros(4000, 0), row(4000);
  for (std::int32_t i = 0; i < 4000; ++i) column_ptr[static_cast<std::size_t>(i) + 1] = i + 1, row[i] = i;
  const auto column = make_csr_pattern(4000, 1, column_ptr, zeros), across = make_csr_pattern(1, 4000, {0, 4000}, row);
  const std::string one = message_of<ResourceError>([&] { (void)detail::spgemm_symbolic(*column, *across); });
  EXPECT_CONTAINS(one, "[spgemm] the fill-in pattern of a 4000×1 · 1×4000 CSR product");
}

TEST(MemoryGuard, RecurrentModelsRefuseWeightsForwardAndBackwardThatCannotFit) {
  // 10^6 hidden units: 10^12 weights. Refused by the constructor, nothing allocated.
  expect_error<ResourceError>(
      [] {
        Recurrent<float>({CellType::gru, 1, 1000000, 1});
      },
      {"[Recurrent]", "weights", "--hidden"});

  Recurrent<float> rnn({CellType::lstm, 3, 64, 2});
  const Index steps = 200, batch = 16;
  const Matrix<float> x = Matrix<float>::Ones(3, steps * batch);
  {
    // The forward record: 2 layers × (x, h, c, gates, aux, ax) ≈ 2 · 4.4M floats = 35 MB.
    Limit limit(10e6);
    expect_error<ResourceError>([&] { rnn.forward(x, steps, batch); },
                                {"[Recurrent::forward]", "forward record", "--batch"});
    EXPECT_EQ(rnn.steps(), 0) << "refused before recording anything";
  }
  rnn.forward(x, steps, batch);
  const Matrix<float> g = Matrix<float>::Zero(64, steps * batch);
  BackwardOptions o;
  o.method = BackwardMethod::blelloch;
  {
    // A Blelloch backward: 2 layers × 3200 Jacobians of 128² floats, and as many products.
    Limit limit(100e6);
    expect_error<ResourceError>([&] { rnn.backward(g, false, o); },
                                {"[Recurrent::backward]", "blelloch scan", "Jacobians", "--backward bp"});
    o.method = BackwardMethod::bp;  // stores no Jacobians: fits
    EXPECT_NO_THROW(rnn.backward(g, false, o));
    // BP is checked too: its gradients and the forward record need ~60 MB.
    Limit tiny(20e6);
    expect_error<ResourceError>([&] { rnn.backward(g, false, o); }, {"BP backward", "--batch"});
    expect_error<ResourceError>([&] { rnn.check_backward_memory(steps, batch, o); }, {"BP backward"});
  }
}

TEST(MemoryGuard, ConvNetsRefuseWeightsActivationsAndScansThatCannotFit) {
  Limit limit(60e6);  // one request may use 48 MB
  // 1×1000×1000 → linear:100: 10^8 weights, 800 MB with their gradients.
  expect_error<ResourceError>(
      [] {
        ConvNet<float>(ConvNetConfig{{1, 1000, 1000}, parse_arch("flatten,linear:100"), LossType::cross_entropy});
      },
      {"[cnn]", "weights and their gradients", "layer 1 (linear:100)"});

  ConvNet<float> net(ConvNetConfig{
      {1, 32, 32}, parse_arch("conv:64:3:1:1,relu,maxpool:2:2,flatten,linear:10"), LossType::cross_entropy});
  net.reset_parameters(1);
  // Per sample the forward keeps ~0.77 MB: conv output and ReLU 64K floats each, im2col 9K,
  // pool 16K and its taps. Batch 128: ~98 MB.
  const Index big = 128;
  const std::vector<float> x(static_cast<std::size_t>(big * 1024), 0.5f);
  const std::vector<std::int64_t> y(static_cast<std::size_t>(big), 3);
  expect_error<ResourceError>([&] { net.forward_loss(x, big, y); },
                              {"[cnn]", "forward pass of batch 128", "activations"});
  // Batch 32: the forward (25 MB) and BP (its gradients: 46 MB in all) fit, the scan does not:
  // ReLU's diagonal and max-pool's values per sample and the scan's gradients (53 MB in all).
  const Index small = 32;
  std::span<const float> xs(x.data(), static_cast<std::size_t>(small * 1024));
  std::span<const std::int64_t> ys(y.data(), static_cast<std::size_t>(small));
  BackwardOptions o;
  o.method = BackwardMethod::blelloch;
  expect_error<ResourceError>([&] { net.loss_and_grad(xs, small, ys, o); },
                              {"[cnn]", "BPPSA scan of batch 32", "Jacobians", "--backward bp"});
  o.method = BackwardMethod::bp;
  EXPECT_NO_THROW(net.loss_and_grad(xs, small, ys, o));
}

}  // namespace
