// Scanner on Device::cuda against the CPU engine: every element kind and algorithm, under each
// product policy (bppsa's kernels, cuBLAS/cuSPARSE, the automatic mix); exact operand order on
// small integers; the sizes (N up to 30000, d 1…256, batch 1…64); errors as on the CPU.
// GpuSmall.* stays small enough for compute-sanitizer; GpuScan.* holds the large cases.
#include <cuda_runtime_api.h>

#include <limits>

#include "bppsa/scan/resident_scanner.hpp"
#include "core/cuda/buffer.hpp"
#include "cuda/gpu_compare.hpp"
#include "expect_error.hpp"

namespace {

using namespace bppsa;
using gpu_test::all_products;
using gpu_test::gpu_matches_cpu;
using gpu_test::pick;
using oracle::Rng;
using Sizes = std::vector<Index>;

/// Every builder: linear, blelloch, hybrid with chunks that do not divide N, automatic
/// (reduced: blelloch and hybrid, whose chunk 0 is the linear schedule).
std::vector<oracle::AlgoCase> small_algorithms() {
  return pick<std::vector<oracle::AlgoCase>>(
      {{Algorithm::linear, 0, "linear"},
       {Algorithm::blelloch, 0, "blelloch"},
       {Algorithm::hybrid, 3, "hybrid/3"},
       {Algorithm::automatic, 0, "auto"}},
      {{Algorithm::blelloch, 0, "blelloch"}, {Algorithm::hybrid, 3, "hybrid/3"}});
}

// ---------------------------------------------------------------------------------------------
// Small cases (also run under compute-sanitizer memcheck and racecheck)

TEST(GpuSmall, EveryKindSharingAndAffineUnderEveryProductPolicy) {
  for (const ChainKind kind :
       {ChainKind::dense, ChainKind::diagonal, ChainKind::csr, ChainKind::shared_dense_diag, ChainKind::mixed})
    for (const Index n : pick<Sizes>({1, 2, 5, 9}, {2, 9}))
      for (const Index batch : pick<Sizes>({1, 3}, {3})) {
        const bool shared = kind != ChainKind::mixed && n % 2 == 1, affine = (n + batch) % 2 == 0;
        const auto p =
            random_problem<float>({n, 5, batch, kind, shared, affine, static_cast<std::uint64_t>(n + 10 * batch)});
        for (const auto products : all_products())
          for (const auto& a : small_algorithms())
            ASSERT_TRUE(gpu_matches_cpu(p.chain, p.g_last, oracle::options_for(a), products, false))
                << to_string(kind) << (shared ? " shared" : "") << (affine ? " affine" : "");
      }
}

TEST(GpuSmall, SmallIntegerChainsAreExactUnderEveryProductPolicy) {
  // Exact arithmetic: equal to the naive oracle bit for bit, so operand order is proven.
  Rng rng(5);
  const std::vector<oracle::AlgoCase> algorithms = pick(oracle::all_algorithms(), small_algorithms());
  for (const Index n : pick<Sizes>({1, 2, 3, 8, 17}, {3, 17}))
    for (const Index batch : pick<Sizes>({1, 2}, {2})) {
      const Chain<double> mixed = oracle::small_int_chain<double>(n, batch, rng);
      const Matrix<double> g = oracle::small_int_matrix<double>(mixed.dim(n), batch, rng);
      const Chain<float> perm = oracle::signed_permutation_chain<float>(n, 4, batch, rng);
      const Matrix<float> gp = oracle::small_int_matrix<float>(4, batch, rng);
      for (const auto products : all_products())
        for (const auto& a : algorithms) {
          ASSERT_TRUE(gpu_matches_cpu(mixed, g, oracle::options_for(a), products, true));
          ASSERT_TRUE(gpu_matches_cpu(perm, gp, oracle::options_for(a), products, true));
        }
    }
}

TEST(GpuSmall, AffineSmallIntegerChainsAreExact) {
  Rng rng(6);
  for (const Index n : pick<Sizes>({1, 2, 6, 13}, {6})) {
    Chain<double> chain = oracle::signed_permutation_chain<double>(n, 3, 2, rng);
    for (Index k = 0; k < n; ++k)
      if (k % 3 != 1) chain.set_injection(k, oracle::small_int_matrix<double>(3, 2, rng));
    const Matrix<double> g = oracle::small_int_matrix<double>(3, 2, rng);
    for (const auto products : all_products())
      for (const auto& a : small_algorithms())
        ASSERT_TRUE(gpu_matches_cpu(chain, g, oracle::options_for(a), products, true));
  }
}

TEST(GpuSmall, DegenerateElementsIdentityChainsEmptyCsrAndOneDimensionalStates) {
  Rng rng(7);
  for (const Index n : pick<Sizes>({1, 2, 9}, {9})) {
    Chain<double> ids(2);
    for (Index k = 0; k < n; ++k) ids.push_back(Jacobian<double>::identity(3));
    Chain<double> mixed(3);
    for (Index k = 0; k < n; ++k) {
      const Index rows = k % 3 == 0 ? 1 : 2, cols = k % 3 == 2 ? 1 : 2;
      if (k == n / 2)
        mixed.push_back(
            Jacobian<double>::csr(make_csr_pattern(rows, cols, std::vector<std::int32_t>(rows + 1, 0), {}), 3));
      else
        mixed.push_back(oracle::small_int_jacobian<double>(k % 2 ? Kind::dense : Kind::csr, rows, cols, 1, rng));
    }
    for (const auto products : all_products())
      for (const auto& a : small_algorithms()) {
        ASSERT_TRUE(
            gpu_matches_cpu(ids, oracle::small_int_matrix<double>(3, 2, rng), oracle::options_for(a), products, true));
        ASSERT_TRUE(gpu_matches_cpu(mixed, oracle::small_int_matrix<double>(mixed.dim(n), 3, rng),
                                    oracle::options_for(a), products, true));
      }
  }
}

TEST(GpuSmall, PlanReuseSeesNewValuesAndAnUpdatedSharedMatrix) {
  // Training rewrites values in place (and an RNN's W_hh^T behind its shared pointer): the
  // plan is reused and every run uploads what the chain holds now.
  const Index n = 12, h = 6, batch = 4;
  auto s = std::make_shared<Matrix<float>>(Matrix<float>::Random(h, h));
  Chain<float> chain(batch);
  for (Index k = 0; k < n; ++k) chain.push_back(Jacobian<float>::shared_dense_diag(s, batch));
  Rng rng(8);
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  for (const auto products : all_products()) {
    const gpu_test::ProductsScope scope(products);
    Scanner<float> gpu(ScanOptions{Algorithm::blelloch, 2, 0, true, Device::cuda});
    for (int step = 0; step < 3; ++step) {
      for (Index k = 1; k <= n; ++k)
        for (float& v : chain.jacobian(k).values()) v = u(rng);
      *s = Matrix<float>::Random(h, h);
      const Matrix<float> g = Matrix<float>::Random(h, batch);
      Gradients<float> got;
      const ScanStats& st = gpu.run(chain, g, got);
      EXPECT_EQ(st.plan_reused, step > 0);
      const Gradients<float> want = backward(chain, g, ScanOptions{Algorithm::linear, 2, 0, true});
      EXPECT_TRUE(oracle::close_to(got, gpu_test::as_double(want), 1e-5)) << "step " << step;
    }
  }
}

TEST(GpuSmall, SequentialBpOnTheGpuIsOneLaunchPerElement) {
  const auto p = random_problem<float>({40, 20, 16, ChainKind::shared_dense_diag, false, false, 9});
  const gpu_test::ProductsScope scope(detail::CudaProducts::kernels);
  Scanner<float> gpu(ScanOptions{Algorithm::linear, 2, 0, true, Device::cuda});
  Gradients<float> got;
  const ScanStats& st = gpu.run(p.chain, p.g_last, got);
  EXPECT_EQ(st.launches, 40);
  EXPECT_EQ(st.device, Device::cuda);
  EXPECT_EQ(st.workspace_bytes, 0u);
}

/// The chain written into a ResidentScanner's device buffers, run on a stream of the test's
/// own, and every g_k read back: what a caller with its Jacobians on the GPU does.
template <class T>
Gradients<T> resident_run(const Chain<T>& chain, const Matrix<T>& g_last, const ScanOptions& options, ScanStats* stats,
                          bool untransposed = false) {
  ResidentChain<T> rc;
  rc.batch = chain.batch();
  for (Index k = 1; k <= chain.size(); ++k) rc.jacobian.push_back(&chain.jacobian(k).layout());
  for (Index k = 0; k < chain.size(); ++k) rc.injection.push_back(chain.injection(k) != nullptr);
  ResidentScanner<T> scan(rc, options);
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto put = [&](T* dst, const T* src, Index n) {
    ASSERT_EQ(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
  };
  std::vector<std::vector<T>> given;  // untransposed: the values of J_k, uploaded and kept until the stream is done
  std::vector<detail::cuda::DeviceBuffer<T>> staged;
  for (Index k = 1; k <= chain.size(); ++k) {
    const Jacobian<T>& j = chain.jacobian(k);
    if (untransposed && (j.kind() == Kind::dense || j.kind() == Kind::csr)) {
      // J_k from J_k^T on the host: dense, each J_k column-major is J_k^T row-major; csr, J_k's
      // entries in the transposed pattern's order.
      std::vector<T>& v = given.emplace_back(j.values().size());
      if (j.kind() == Kind::dense) {
        for (Index smp = 0; smp < j.count(); ++smp) {
          const Eigen::Map<const Matrix<T>> jt(j.sample(smp).data(), j.rows(), j.cols());
          Eigen::Map<RowMatrix<T>>(v.data() + smp * j.rows() * j.cols(), j.rows(), j.cols()) = jt;
        }
      } else {
        const CsrTranspose t = transpose(*j.layout().pattern);
        const std::size_t nnz = t.source.size();
        for (std::size_t smp = 0; smp < static_cast<std::size_t>(j.count()); ++smp)
          for (std::size_t q = 0; q < nnz; ++q)
            v[smp * nnz + q] = j.values()[smp * nnz + static_cast<std::size_t>(t.source[q])];
      }
      detail::cuda::DeviceBuffer<T>& d = staged.emplace_back(v.size());
      put(d.data(), v.data(), static_cast<Index>(v.size()));
      scan.set_values_transposed(k, d.data(), stream);
    } else if (T* v = scan.values(k)) {
      put(v, j.values().data(), static_cast<Index>(j.values().size()));
    }
    if (T* m = scan.shared_matrix(k)) put(m, j.layout().shared_dense->data(), j.layout().shared_dense->size());
    if (const Matrix<T>* e = chain.injection(k - 1)) put(scan.injection(k - 1), e->data(), e->size());
  }
  put(scan.g_last(), g_last.data(), g_last.size());
  scan.run(stream);
  std::vector<Index> dims;
  for (Index k = 0; k <= chain.size(); ++k) dims.push_back(chain.dim(k));
  Gradients<T> out;
  out.resize(dims, chain.batch(), 1);
  for (Index k = 0; k <= chain.size(); ++k)
    EXPECT_EQ(cudaMemcpyAsync(out.g(k).data(), scan.gradient(k), static_cast<std::size_t>(out.g(k).size()) * sizeof(T),
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  if (stats) *stats = scan.stats();
  return out;
}

TEST(GpuSmall, AResidentChainGivesTheCpuEnginesGradients) {
  // Values written on the device by the caller, the scan ordered on the caller's stream: the
  // same schedule as Scanner's and its gradients, for every kind, shared S and affine parts.
  for (const ChainKind kind :
       {ChainKind::dense, ChainKind::diagonal, ChainKind::csr, ChainKind::shared_dense_diag, ChainKind::mixed})
    for (const Index n : pick<Sizes>({1, 2, 9, 40}, {9}))
      for (const auto& a :
           {oracle::AlgoCase{Algorithm::linear, 0, "linear"}, oracle::AlgoCase{Algorithm::blelloch, 0, "blelloch"},
            oracle::AlgoCase{Algorithm::hybrid, 3, "hybrid/3"}}) {
        const bool shared = kind != ChainKind::mixed && n % 2 == 1, affine = n % 3 != 0;
        const auto p = random_problem<float>({n, 6, 3, kind, shared, affine, static_cast<std::uint64_t>(40 + n)});
        const ScanOptions options = oracle::options_for(a);
        Scanner<float> cpu(options);
        Gradients<float> want;
        const ScanStats cpu_stats = cpu.run(p.chain, p.g_last, want);
        ScanStats stats;
        const Gradients<float> got = resident_run(p.chain, p.g_last, options, &stats);
        const std::string where = std::string(to_string(kind)) + " N " + std::to_string(n) + " " + a.name;
        // The planner's schedule (hybrid's chunks balanced for one worker here, for the CPU's
        // threads there: compared by algorithm and chunk count).
        EXPECT_EQ(stats.device, Device::cuda) << where;
        EXPECT_EQ(stats.algorithm, cpu_stats.algorithm) << where;
        EXPECT_EQ(stats.chunks, cpu_stats.chunks) << where;
        EXPECT_GT(stats.launches, 0) << where;
        EXPECT_TRUE(oracle::close_to(got, gpu_test::as_double(want), gpu_test::kTol<float>)) << where;
      }
}

TEST(GpuSmall, AResidentScannerTakesJacobiansUntransposed) {
  // set_values_transposed: dense J_k column-major and csr J_k in its own pattern's order give the
  // gradients of J_k^T written directly (the CPU engine's, within float tolerance).
  for (const ChainKind kind : {ChainKind::dense, ChainKind::csr, ChainKind::mixed})
    for (const Index n : {1, 7})
      for (const bool shared : {false, true}) {
        if (shared && kind == ChainKind::mixed) continue;
        const auto p = random_problem<float>({n, 5, 3, kind, shared, n % 2 == 1, static_cast<std::uint64_t>(60 + n)});
        const ScanOptions options{Algorithm::blelloch};
        Scanner<float> cpu(options);
        Gradients<float> want;
        cpu.run(p.chain, p.g_last, want);
        const Gradients<float> got = resident_run(p.chain, p.g_last, options, nullptr, true);
        EXPECT_TRUE(oracle::close_to(got, gpu_test::as_double(want), gpu_test::kTol<float>))
            << to_string(kind) << " N " << n << (shared ? " shared" : "");
      }
  // Rectangular elements, dense and CSR (non-symmetric patterns), shared and per sample: a
  // transposition that swapped rows and columns, or a gather run backwards, gives other values.
  Rng rng(61);
  const std::vector<Index> d{4, 6, 3, 5, 2, 7};
  const Index batch = 3;
  Chain<double> chain(batch);
  for (std::size_t k = 1; k < d.size(); ++k)
    chain.push_back(
        oracle::small_int_jacobian<double>(k % 2 ? Kind::csr : Kind::dense, d[k - 1], d[k], k % 3 ? batch : 1, rng));
  const Matrix<double> g = oracle::small_int_matrix<double>(d.back(), batch, rng);
  const Gradients<double> got = resident_run(chain, g, ScanOptions{Algorithm::blelloch}, nullptr, true);
  EXPECT_TRUE(oracle::equal_to(got, oracle::naive_backward(chain, g)));
}

TEST(GpuSmall, AResidentScannerFlagsNonFiniteBuffers) {
  // A NaN written into J_3^T's values and an Inf into e_1: exactly those flags among the inputs;
  // after the run, g_k is NaN for every k < 3 (dense products spread it) and finite above.
  const Index n = 6, batch = 2;
  auto p = random_problem<double>({n, 4, batch, ChainKind::dense, false, true, 9});
  ResidentChain<double> rc;
  rc.batch = batch;
  for (Index k = 1; k <= n; ++k) rc.jacobian.push_back(&p.chain.jacobian(k).layout());
  for (Index k = 0; k < n; ++k) rc.injection.push_back(p.chain.injection(k) != nullptr);
  ResidentScanner<double> scan(rc, ScanOptions{Algorithm::blelloch});
  auto put = [](double* dst, const double* src, Index count) {
    ASSERT_EQ(cudaMemcpy(dst, src, static_cast<std::size_t>(count) * sizeof(double), cudaMemcpyHostToDevice),
              cudaSuccess);
  };
  p.chain.jacobian(3).values()[2] = std::numeric_limits<double>::quiet_NaN();
  for (Index k = 1; k <= n; ++k) {
    const auto& j = p.chain.jacobian(k);
    put(scan.values(k), j.values().data(), static_cast<Index>(j.values().size()));
    if (const Matrix<double>* e = p.chain.injection(k - 1)) {
      Matrix<double> v = *e;
      if (k == 2) v(0, 1) = std::numeric_limits<double>::infinity();
      put(scan.injection(k - 1), v.data(), v.size());
    }
  }
  put(scan.g_last(), p.g_last.data(), p.g_last.size());
  const std::vector<bool> values = scan.nonfinite_values(nullptr);
  ASSERT_EQ(values.size(), static_cast<std::size_t>(n));
  for (Index k = 1; k <= n; ++k) EXPECT_EQ(values[static_cast<std::size_t>(k - 1)], k == 3) << "J_" << k << "^T";
  const std::vector<bool> added = scan.nonfinite_injections(nullptr);
  ASSERT_EQ(added.size(), static_cast<std::size_t>(n));
  for (Index k = 0; k < n; ++k) EXPECT_EQ(added[static_cast<std::size_t>(k)], k == 1 && rc.injection[1]) << "e_" << k;
  EXPECT_FALSE(scan.nonfinite_gradients(nullptr)[static_cast<std::size_t>(n)]);  // g_N
  scan.run(nullptr);
  const std::vector<bool> grads = scan.nonfinite_gradients(nullptr);
  ASSERT_EQ(grads.size(), static_cast<std::size_t>(n + 1));
  for (Index k = 0; k <= n; ++k) EXPECT_EQ(grads[static_cast<std::size_t>(k)], k < 3) << "g_" << k;
}

TEST(GpuSmall, AResidentSmallIntegerChainIsExact) {
  Rng rng(12);
  for (const Index n : {1, 5, 17}) {
    const Chain<double> chain = oracle::small_int_chain<double>(n, 2, rng);
    const Matrix<double> g = oracle::small_int_matrix<double>(chain.dim(n), 2, rng);
    const Gradients<double> got = resident_run(chain, g, ScanOptions{Algorithm::blelloch}, nullptr);
    EXPECT_TRUE(oracle::equal_to(got, oracle::naive_backward(chain, g))) << "N " << n;
  }
}

TEST(GpuSmall, ErrorsAreTheCpuEnginesErrors) {
  using testutil::message_of;
  const auto p = random_problem<double>({6, 4, 2, ChainKind::mixed, false, false, 3});
  ScanOptions cpu{Algorithm::blelloch, 2, 0, true};
  ScanOptions gpu = cpu;
  gpu.device = Device::cuda;
  // A g_N of the wrong shape.
  const Matrix<double> bad = Matrix<double>::Ones(p.g_last.rows() + 1, 2);
  EXPECT_EQ(message_of<ShapeError>([&] { backward(p.chain, bad, gpu); }),
            message_of<ShapeError>([&] { backward(p.chain, bad, cpu); }));
  // NaN in an element: reported before anything runs, identically.
  RandomProblem<double> q = random_problem<double>({6, 4, 2, ChainKind::dense, false, false, 4});
  q.chain.jacobian(3).values()[1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(message_of<NonFiniteError>([&] { backward(q.chain, q.g_last, gpu); }),
            message_of<NonFiniteError>([&] { backward(q.chain, q.g_last, cpu); }));
  // Without input checks, the NaN travels through the GPU's products into the gradients and the
  // output check names the same g_k as on the CPU.
  cpu.check_inputs = gpu.check_inputs = false;
  for (const auto products : all_products()) {
    const gpu_test::ProductsScope scope(products);
    EXPECT_EQ(message_of<NonFiniteError>([&] { backward(q.chain, q.g_last, gpu); }),
              message_of<NonFiniteError>([&] { backward(q.chain, q.g_last, cpu); }));
  }
}

// ---------------------------------------------------------------------------------------------
// The sizes: N ∈ {1, 2, 3, 2^k ± 1, 1000, 30000}, d ∈ {1, 20, 32, 33, 64, 256},
// B ∈ {1, 16, 64}, as a covering set rather than the cross product.

struct Case {
  ChainKind kind;
  Index n, dim, batch;
  bool shared, affine;
  bool libraries;  ///< also under CudaProducts::libraries (per-sample cuSPARSE SpGEMM)
};

std::string name(const Case& c) {
  return std::string(to_string(c.kind)) + " N " + std::to_string(c.n) + " d " + std::to_string(c.dim) + " B " +
         std::to_string(c.batch) + (c.shared ? " shared" : "") + (c.affine ? " affine" : "");
}

template <class T>
void check_case(const Case& c, const std::vector<oracle::AlgoCase>& algorithms) {
  const auto p = random_problem<T>({c.n, c.dim, c.batch, c.kind, c.shared, c.affine, static_cast<std::uint64_t>(c.n)});
  std::vector<detail::CudaProducts> products{detail::CudaProducts::automatic, detail::CudaProducts::kernels};
  if (c.libraries) products.push_back(detail::CudaProducts::libraries);
  for (const auto& a : algorithms)
    for (const auto pr : products)
      EXPECT_TRUE(gpu_matches_cpu(p.chain, p.g_last, oracle::options_for(a, 0), pr, false)) << name(c);
}

const std::vector<oracle::AlgoCase>& large_algorithms() {
  static const std::vector<oracle::AlgoCase> a{
      {Algorithm::linear, 0, "linear"}, {Algorithm::blelloch, 0, "blelloch"}, {Algorithm::hybrid, 64, "hybrid/64"}};
  return a;
}

TEST(GpuScan, PaperRnnShapesT30000) {
  // The paper's RNN: W_hh^T·diag(1 − h²), H 20, batch 16, T 30000.
  check_case<float>({ChainKind::shared_dense_diag, 30000, 20, 16, false, false, false}, large_algorithms());
}

TEST(GpuScan, RecurrentShapesAcrossBatchAndWidth) {
  check_case<float>({ChainKind::shared_dense_diag, 1000, 20, 64, false, true, false}, large_algorithms());
  check_case<float>({ChainKind::shared_dense_diag, 1025, 64, 16, false, false, false}, large_algorithms());
  check_case<double>({ChainKind::shared_dense_diag, 1000, 20, 16, false, false, false}, large_algorithms());
}

TEST(GpuScan, DenseChainsPerSampleAndShared) {
  check_case<float>({ChainKind::dense, 1025, 32, 16, false, false, false}, large_algorithms());
  check_case<float>({ChainKind::dense, 1023, 33, 64, true, false, false}, large_algorithms());
  check_case<float>({ChainKind::dense, 257, 256, 1, true, false, false}, large_algorithms());
  check_case<float>({ChainKind::dense, 65, 256, 16, false, true, false}, large_algorithms());
}

TEST(GpuScan, DiagonalChainsDownToOneDimension) {
  check_case<float>({ChainKind::diagonal, 30000, 64, 64, false, false, false}, large_algorithms());
  check_case<float>({ChainKind::diagonal, 30001, 1, 64, false, true, false}, large_algorithms());
  check_case<double>({ChainKind::diagonal, 4097, 33, 16, true, false, false}, large_algorithms());
}

TEST(GpuScan, CsrChainsPerSampleAndShared) {
  check_case<float>({ChainKind::csr, 513, 256, 16, false, false, true}, large_algorithms());
  check_case<float>({ChainKind::csr, 511, 64, 64, true, false, true}, large_algorithms());
  check_case<float>({ChainKind::csr, 1000, 20, 1, true, true, true}, large_algorithms());
}

TEST(GpuScan, MixedRectangularChains) {
  for (const Index n : {1, 2, 3, 31, 33, 1000})
    check_case<float>({ChainKind::mixed, n, 20, 16, false, n % 2 == 0, true}, large_algorithms());
  check_case<double>({ChainKind::mixed, 257, 33, 3, false, true, true}, large_algorithms());
  check_case<float>({ChainKind::mixed, 129, 64, 1, false, false, true}, large_algorithms());
}

TEST(GpuScan, LaunchesOfTheSequentialBaselineAndOfBlelloch) {
  // What the timings will rest on: BP is N dependent launches, Blelloch about 2⌈log2(N+1)⌉.
  const auto p = random_problem<float>({1000, 20, 16, ChainKind::shared_dense_diag, false, false, 2});
  const gpu_test::ProductsScope scope(detail::CudaProducts::kernels);
  Gradients<float> got;
  Scanner<float> bp(ScanOptions{Algorithm::linear, 0, 0, true, Device::cuda});
  EXPECT_EQ(bp.run(p.chain, p.g_last, got).launches, 1000);
  Scanner<float> blelloch(ScanOptions{Algorithm::blelloch, 0, 0, true, Device::cuda});
  const ScanStats& st = blelloch.run(p.chain, p.g_last, got);
  EXPECT_LE(st.launches, 2 * st.levels);
  EXPECT_LE(st.levels, 2 * 10 + 1);
}

}  // namespace
