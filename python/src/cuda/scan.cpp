// bppsa.scan's CUDA half (scan.hpp): the resident scan (bppsa/scan/resident_scanner.hpp), planned
// once per layout, device and stream and kept; the caller's tensors are copied into the plan's
// device buffers (an element the scan multiplies by untransposed is transposed there) and the
// results out of them, all queued on the caller's stream.
#include "scan.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "bppsa/core/device.hpp"
#include "bppsa/core/error.hpp"
#include "bppsa/scan/resident_scanner.hpp"
#include "core/cuda/check.hpp"

namespace bppsa::python {
namespace {

constexpr const char* kOp = "bppsa.scan";
constexpr std::size_t kPlansKept = 16;

template <class T>
struct Plan {
  explicit Plan(int device) : device(device) {}
  ~Plan() {
    try {
      const CudaDeviceScope scope(device);  // freed on its own device (an eviction runs under another's)
      scanner.reset();
    } catch (...) {
    }
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  int device;
  std::vector<Layout<T>> layouts;  ///< J_1^T … J_N^T
  std::unique_ptr<ResidentScanner<T>> scanner;
  std::mutex queueing;  ///< one caller queues its copies, run and reads at a time
};

/// The plans made so far (the most recent kPlansKept). Never destroyed: plans hold device memory,
/// which must not be freed after the CUDA runtime has shut down at exit.
template <class T>
class Plans {
 public:
  static Plans& instance() {
    static auto* plans = new Plans();
    return *plans;
  }
  std::shared_ptr<Plan<T>> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = plans_.find(key);
    return it == plans_.end() ? nullptr : it->second;
  }
  std::shared_ptr<Plan<T>> keep(const std::string& key, std::shared_ptr<Plan<T>> plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto [it, inserted] = plans_.emplace(key, std::move(plan));
    if (inserted) {
      order_.push_back(key);
      if (order_.size() > kPlansKept) {
        plans_.erase(order_.front());  // a caller holding it keeps it alive
        order_.pop_front();
      }
    }
    return it->second;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Plan<T>>> plans_;
  std::deque<std::string> order_;
};

std::uint64_t fnv(std::uint64_t h, std::span<const std::int32_t> v) {
  for (const std::int32_t x : v) {
    h ^= static_cast<std::uint32_t>(x);
    h *= 1099511628211ULL;
  }
  return h;
}

template <class T>
bool same_layouts(const std::vector<Layout<T>>& a, const std::vector<Layout<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].rows != b[i].rows || a[i].cols != b[i].cols || a[i].count != b[i].count)
      return false;
    if (a[i].kind == Kind::csr) {
      const auto &p = *a[i].pattern, &q = *b[i].pattern;
      if (!std::ranges::equal(p.row_ptr(), q.row_ptr()) || !std::ranges::equal(p.col_idx(), q.col_idx())) return false;
    }
  }
  return true;
}

void copy(void* dst, std::uintptr_t src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > 0)
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(dst, reinterpret_cast<const void*>(src), bytes, cudaMemcpyDeviceToDevice, stream));
}

/// A CSR index tensor on `place` (int32 or int64, n entries) read to the host after the work
/// queued on `stream`, as int32 (csr_indices' checks).
std::vector<std::int32_t> device_indices(const TensorRef& t, Index n, const std::string& what, const Place& place,
                                         cudaStream_t stream) {
  const bool wide = t.dtype == "int64";
  if (!wide && t.dtype != "int32")
    detail::raise<InvalidArgument>(kOp, what + " is " + t.describe() + "; expected int32 or int64 indices");
  const std::size_t size = wide ? sizeof(std::int64_t) : sizeof(std::int32_t);
  const std::uintptr_t p = wide
                               ? reinterpret_cast<std::uintptr_t>(checked_data<std::int64_t>(t, {n}, kOp, what, place))
                               : reinterpret_cast<std::uintptr_t>(checked_data<std::int32_t>(t, {n}, kOp, what, place));
  std::vector<std::int64_t> host(static_cast<std::size_t>(n));  // room for either width
  if (n > 0) {
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(host.data(), reinterpret_cast<const void*>(p), static_cast<std::size_t>(n) * size,
                                     cudaMemcpyDeviceToHost, stream));
    BPPSA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  TensorRef on_host = t;
  on_host.data = reinterpret_cast<std::uintptr_t>(host.data());
  on_host.device = "cpu";
  on_host.device_index = -1;
  return csr_indices(on_host, n, kOp, what);
}

/// NonFiniteError naming the first flagged buffer: what(i) for flags[i].
template <class Name>
void raise_nonfinite(const std::vector<bool>& flags, const Name& what) {
  for (std::size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) detail::raise<NonFiniteError>(kOp, what(i) + " has NaN/Inf values");
}

}  // namespace

template <class T>
void affine_scan_cuda(const std::vector<ElementRef>& elements, const TensorRef& g_last,
                      const std::vector<TensorRef>& out, const std::vector<TensorRef>& injections, bool transpose,
                      const std::string& algorithm, bool check_finite, std::uintptr_t stream) {
  const Index n = static_cast<Index>(elements.size());
  const Place place{"cuda", g_last.device_index};
  const Index batch = g_last.shape[0];
  const CudaDeviceScope scope(place.index);
  const auto s = reinterpret_cast<cudaStream_t>(stream);

  // The layouts, in the chain's (layer) order: J_k^T = M of elements[N − k], the matrix the scan
  // multiplies by (A, or A^T when transpose); `given_transposed`: the element's values are M^T's.
  std::vector<Layout<T>> layouts(static_cast<std::size_t>(n));
  std::vector<bool> given_transposed(static_cast<std::size_t>(n));
  std::uint64_t hash = 1469598103934665603ULL;
  for (Index k = 1; k <= n; ++k) {
    const Index i = n - k;
    const ElementRef& e = elements[static_cast<std::size_t>(i)];
    const std::string what = "jacobians[" + std::to_string(i) + "]";
    Layout<T>& l = layouts[static_cast<std::size_t>(k - 1)];
    l.rows = transpose ? e.cols : e.rows;
    l.cols = transpose ? e.rows : e.cols;
    l.count = e.count;
    if (e.count != 1 && e.count != batch)
      detail::raise<ShapeError>(kOp, what + " has " + std::to_string(e.count) + " matrices; expected 1 (shared) or " +
                                         std::to_string(batch) + " (one per sample)");
    if (e.kind == "dense") {
      // A in C order is A^T column-major: M's values when M = A^T, M^T's when M = A.
      l.kind = Kind::dense;
      given_transposed[static_cast<std::size_t>(k - 1)] = !transpose;
      checked_data<T>(e.values, {e.count, e.rows, e.cols}, kOp, what, place);
    } else if (e.kind == "csr") {
      // A's CSR: M's values when M = A, M^T's when M = A^T.
      if (e.count != 1) detail::raise<InvalidArgument>(kOp, what + ": CSR elements are shared by the batch");
      given_transposed[static_cast<std::size_t>(k - 1)] = transpose;
      std::vector<std::int32_t> crow = device_indices(e.crow, e.rows + 1, what + " crow_indices", place, s);
      const Index nnz = crow.back();
      if (crow.front() != 0 || nnz < 0)
        detail::raise<InvalidArgument>(kOp, what + ": crow_indices must start at 0 and end at nnz");
      checked_data<T>(e.values, {nnz}, kOp, what + " values", place);  // before nnz sizes anything
      std::vector<std::int32_t> col = device_indices(e.col, nnz, what + " col_indices", place, s);
      auto pattern = std::make_shared<CsrPattern>(e.rows, e.cols, std::move(crow), std::move(col));
      pattern->require_valid(std::string(kOp) + ": " + what);
      l.kind = Kind::csr;
      l.pattern = transpose ? bppsa::transpose(*pattern).pattern : std::move(pattern);
      hash = fnv(fnv(hash, l.pattern->row_ptr()), l.pattern->col_idx());  // M's pattern, as same_layouts compares
    } else {
      detail::raise<InvalidArgument>(kOp, what + ": unknown element kind '" + e.kind + "'");
    }
    l.check(kOp);
  }
  const Index d_last = g_last.shape[1];
  if (n > 0 && layouts.back().cols != d_last)
    detail::raise<ShapeError>(kOp, "g_last has " + std::to_string(d_last) + " columns but the last element takes " +
                                       std::to_string(layouts.back().cols));
  checked_data<T>(g_last, {batch, d_last}, kOp, "g_last", place);
  // Every other tensor checked before anything is queued: d_k of g_k, e_k's data, s_i's buffer.
  std::vector<Index> dims(static_cast<std::size_t>(n + 1), d_last);
  for (Index k = 1; k <= n; ++k) dims[static_cast<std::size_t>(k - 1)] = layouts[static_cast<std::size_t>(k - 1)].rows;
  std::vector<bool> injected(static_cast<std::size_t>(n), false);
  std::vector<const T*> added(static_cast<std::size_t>(n), nullptr);
  for (Index i = 0; i < static_cast<Index>(injections.size()); ++i) {
    const TensorRef& e = injections[static_cast<std::size_t>(i)];
    if (e.data == 0 && e.shape.empty()) continue;
    const auto k = static_cast<std::size_t>(n - 1 - i);  // e_{i+1} is added to g_{N−i−1}
    injected[k] = true;
    added[k] = checked_data<T>(e, {batch, dims[k]}, kOp, "injection " + std::to_string(i + 1), place);
  }
  std::vector<T*> results(static_cast<std::size_t>(n + 1));
  for (Index i = 0; i <= n; ++i)  // out[i] = s_i = g_{N−i}
    results[static_cast<std::size_t>(i)] =
        checked_data<T>(out[static_cast<std::size_t>(i)], {batch, dims[static_cast<std::size_t>(n - i)]}, kOp,
                        "output " + std::to_string(i), place);

  ScanOptions options;
  options.algorithm = algorithm == "auto" ? Algorithm::blelloch : parse_algorithm(algorithm);
  options.device = Device::cuda;
  std::string key = std::to_string(place.index) + "|" + std::to_string(stream) + "|" + to_string(options.algorithm) +
                    "|" + std::to_string(batch) + "|" + std::to_string(hash) + "|";
  for (const Layout<T>& l : layouts) key += l.describe() + ";";
  for (const bool b : injected) key += b ? '1' : '0';

  if (n == 0) {
    copy(results[0], g_last.data, static_cast<std::size_t>(batch * d_last) * sizeof(T), s);
    return;
  }
  Plans<T>& plans = Plans<T>::instance();
  std::shared_ptr<Plan<T>> plan = plans.find(key);
  if (!plan || !same_layouts(plan->layouts, layouts)) {
    auto fresh = std::make_shared<Plan<T>>(place.index);
    fresh->layouts = std::move(layouts);
    ResidentChain<T> chain;
    chain.batch = batch;
    for (const Layout<T>& l : fresh->layouts) chain.jacobian.push_back(&l);
    chain.injection = injected;
    fresh->scanner = std::make_unique<ResidentScanner<T>>(chain, options);
    plan = plan ? fresh : plans.keep(key, fresh);  // a hash collision: used once, not kept
  }
  const bool kept = plan == plans.find(key);
  // A plan used once is freed on return: whatever path leaves, its queued work ends first.
  struct DrainOnExit {
    cudaStream_t stream;
    bool on;
    ~DrainOnExit() {
      if (on) (void)cudaStreamSynchronize(stream);
    }
  } const drain{s, !kept};
  ResidentScanner<T>& scan = *plan->scanner;
  std::lock_guard<std::mutex> lock(plan->queueing);
  for (Index k = 1; k <= n; ++k) {
    const ElementRef& e = elements[static_cast<std::size_t>(n - k)];
    const Layout<T>& l = plan->layouts[static_cast<std::size_t>(k - 1)];
    if (given_transposed[static_cast<std::size_t>(k - 1)])
      scan.set_values_transposed(k, reinterpret_cast<const T*>(e.values.data), s);
    else
      copy(scan.values(k), e.values.data, static_cast<std::size_t>(l.values_per_sample() * l.count) * sizeof(T), s);
  }
  for (Index k = 0; k < n; ++k)
    if (const T* p = added[static_cast<std::size_t>(k)])
      copy(scan.injection(k), reinterpret_cast<std::uintptr_t>(p),
           static_cast<std::size_t>(batch * scan.dim(k)) * sizeof(T), s);
  copy(scan.g_last(), g_last.data, static_cast<std::size_t>(batch * d_last) * sizeof(T), s);
  if (check_finite) {  // in scan order: g_last, the elements, the injections (each waits for the stream)
    if (scan.nonfinite_gradients(s)[static_cast<std::size_t>(n)])
      detail::raise<NonFiniteError>(kOp, "g_last has NaN/Inf values");
    const std::vector<bool> values = scan.nonfinite_values(s);
    raise_nonfinite(std::vector<bool>(values.rbegin(), values.rend()),
                    [](std::size_t i) { return "jacobians[" + std::to_string(i) + "]"; });
    const std::vector<bool> added = scan.nonfinite_injections(s);
    raise_nonfinite(std::vector<bool>(added.rbegin(), added.rend()),
                    [](std::size_t i) { return "injection " + std::to_string(i + 1); });
  }
  scan.run(s);
  for (Index i = 0; i <= n; ++i) {
    const Index k = n - i;
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(results[static_cast<std::size_t>(i)], scan.gradient(k),
                                     static_cast<std::size_t>(batch * scan.dim(k)) * sizeof(T),
                                     cudaMemcpyDeviceToDevice, s));
  }
  if (check_finite) {
    const std::vector<bool> results = scan.nonfinite_gradients(s);
    raise_nonfinite(std::vector<bool>(results.rbegin(), results.rend()),
                    [](std::size_t i) { return "the result s_" + std::to_string(i); });
  }
  if (!kept) BPPSA_CUDA_CHECK(cudaStreamSynchronize(s));  // its buffers are freed on return
}

BPPSA_SCAN_HALF(affine_scan_cuda, const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                const std::vector<TensorRef>&, bool, const std::string&, bool, std::uintptr_t)

}  // namespace bppsa::python
