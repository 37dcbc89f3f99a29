// bppsa.scan on CUDA tensors (scan.hpp): the resident scan (bppsa/scan/resident_scanner.hpp),
// planned once per layout, device and stream and kept; the caller's tensors are copied into the
// plan's device buffers and the gradients out of them, all queued on the caller's stream.
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
#include "scan.hpp"

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

}  // namespace

template <class T>
void affine_scan_gpu(const std::vector<ElementRef>& elements, const TensorRef& g_last,
                     const std::vector<TensorRef>& out, const std::vector<TensorRef>& injections,
                     const std::string& algorithm, std::uintptr_t stream) {
  const Index n = static_cast<Index>(elements.size());
  if (g_last.shape.size() != 2)
    detail::raise<ShapeError>(kOp, "g_last has shape " + shape_text(g_last.shape) + ", expected (batch, d_N)");
  if (g_last.device != "cuda") detail::raise<InvalidArgument>(kOp, "the CUDA scan got g_last on " + g_last.device);
  const Place place{"cuda", g_last.device_index};
  const Index batch = g_last.shape[0];
  if (static_cast<Index>(out.size()) != n + 1)
    detail::raise<InvalidArgument>(kOp, "expected " + std::to_string(n + 1) + " output buffers");
  if (!injections.empty() && static_cast<Index>(injections.size()) != n)
    detail::raise<InvalidArgument>(kOp, "expected " + std::to_string(n) + " injections (or none)");

  // The layouts, in the chain's (layer) order: J_k^T = M of elements[N − k].
  std::vector<Layout<T>> layouts(static_cast<std::size_t>(n));
  std::uint64_t hash = 1469598103934665603ULL;
  for (Index k = 1; k <= n; ++k) {
    const Index i = n - k;
    const ElementRef& e = elements[static_cast<std::size_t>(i)];
    const std::string what = "jacobians[" + std::to_string(i) + "]";
    Layout<T>& l = layouts[static_cast<std::size_t>(k - 1)];
    l.rows = e.rows;
    l.cols = e.cols;
    l.count = e.count;
    if (e.count != 1 && e.count != batch)
      detail::raise<ShapeError>(kOp, what + " has " + std::to_string(e.count) + " matrices; expected 1 (shared) or " +
                                         std::to_string(batch) + " (one per sample)");
    if (e.kind == "dense") {
      l.kind = Kind::dense;
      checked_data<T>(e.values, {e.count, e.cols, e.rows}, kOp, what, place);
    } else if (e.kind == "csr") {
      if (e.count != 1) detail::raise<InvalidArgument>(kOp, what + ": CSR elements are shared by the batch");
      std::vector<std::int32_t> crow = csr_indices(e.crow, e.rows + 1, kOp, what + " crow_indices");
      const Index nnz = crow.back();
      if (crow.front() != 0 || nnz < 0)
        detail::raise<InvalidArgument>(kOp, what + ": crow_indices must start at 0 and end at nnz");
      checked_data<T>(e.values, {nnz}, kOp, what + " values", place);  // before nnz sizes anything
      std::vector<std::int32_t> col = csr_indices(e.col, nnz, kOp, what + " col_indices");
      hash = fnv(fnv(hash, crow), col);
      auto pattern = std::make_shared<CsrPattern>(e.rows, e.cols, std::move(crow), std::move(col));
      pattern->require_valid(std::string(kOp) + ": " + what);
      l.kind = Kind::csr;
      l.pattern = std::move(pattern);
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
  std::vector<bool> injected(static_cast<std::size_t>(n), false);
  for (Index i = 0; i < static_cast<Index>(injections.size()); ++i)
    if (!(injections[static_cast<std::size_t>(i)].data == 0 && injections[static_cast<std::size_t>(i)].shape.empty()))
      injected[static_cast<std::size_t>(n - 1 - i)] = true;  // e_{i+1} is added to g_{N−i−1}

  ScanOptions options;
  options.algorithm = algorithm == "auto" ? Algorithm::blelloch : parse_algorithm(algorithm);
  options.device = Device::cuda;
  std::string key = std::to_string(place.index) + "|" + std::to_string(stream) + "|" + to_string(options.algorithm) +
                    "|" + std::to_string(batch) + "|" + std::to_string(hash) + "|";
  for (const Layout<T>& l : layouts) key += l.describe() + ";";
  for (const bool b : injected) key += b ? '1' : '0';

  const CudaDeviceScope scope(place.index);
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (n == 0) {
    copy(reinterpret_cast<void*>(checked_data<T>(out[0], {batch, d_last}, kOp, "output 0", place)), g_last.data,
         static_cast<std::size_t>(batch * d_last) * sizeof(T), s);
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
  ResidentScanner<T>& scan = *plan->scanner;
  std::lock_guard<std::mutex> lock(plan->queueing);
  for (Index k = 1; k <= n; ++k) {
    const ElementRef& e = elements[static_cast<std::size_t>(n - k)];
    const Layout<T>& l = plan->layouts[static_cast<std::size_t>(k - 1)];
    copy(scan.values(k), e.values.data, static_cast<std::size_t>(l.values_per_sample() * l.count) * sizeof(T), s);
  }
  for (Index i = 0; i < static_cast<Index>(injections.size()); ++i) {
    const Index k = n - 1 - i;
    if (!injected[static_cast<std::size_t>(k)]) continue;
    const T* p = checked_data<T>(injections[static_cast<std::size_t>(i)], {batch, scan.dim(k)}, kOp,
                                 "injection " + std::to_string(i + 1), place);
    copy(scan.injection(k), reinterpret_cast<std::uintptr_t>(p),
         static_cast<std::size_t>(batch * scan.dim(k)) * sizeof(T), s);
  }
  copy(scan.g_last(), g_last.data, static_cast<std::size_t>(batch * d_last) * sizeof(T), s);
  scan.run(s);
  for (Index i = 0; i <= n; ++i) {
    const Index k = n - i;  // out[i] = s_i = g_{N−i}
    T* o = checked_data<T>(out[static_cast<std::size_t>(i)], {batch, scan.dim(k)}, kOp, "output " + std::to_string(i),
                           place);
    BPPSA_CUDA_CHECK(cudaMemcpyAsync(o, scan.gradient(k), static_cast<std::size_t>(batch * scan.dim(k)) * sizeof(T),
                                     cudaMemcpyDeviceToDevice, s));
  }
  if (!kept) BPPSA_CUDA_CHECK(cudaStreamSynchronize(s));  // its buffers are freed on return
}

template void affine_scan_gpu<float>(const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                                     const std::vector<TensorRef>&, const std::string&, std::uintptr_t);
template void affine_scan_gpu<double>(const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                                      const std::vector<TensorRef>&, const std::string&, std::uintptr_t);

}  // namespace bppsa::python
