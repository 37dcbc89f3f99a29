// bppsa.scan's CPU half (scan.hpp): tensors in host memory → Chain → Scanner → tensors.
#include "scan.hpp"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/scan/scanner.hpp"

namespace bppsa::python {

namespace {
constexpr const char* kOp = "bppsa.scan";

/// Element i of the scan array as a Jacobian of the engine: A (rows × cols) or A^T.
template <class T>
Jacobian<T> make_element(const ElementRef& e, Index i, bool transpose, Index batch) {
  const std::string what = "jacobians[" + std::to_string(i) + "]";
  if (e.count != 1 && e.count != batch)
    detail::raise<ShapeError>(kOp, what + " has " + std::to_string(e.count) + " matrices; expected 1 (shared) or " +
                                       std::to_string(batch) + " (one per sample)");
  const Index r = e.rows, c = e.cols;
  if (e.kind == "dense") {
    const T* p = checked_data<T>(e.values, {e.count, r, c}, kOp, what);
    Jacobian<T> j = transpose ? Jacobian<T>::dense(c, r, e.count) : Jacobian<T>::dense(r, c, e.count);
    for (Index s = 0; s < e.count; ++s) {
      const T* a = p + s * r * c;
      if (transpose)  // A^T column-major is A row-major
        j.dense_map(s) = Eigen::Map<const Matrix<T>>(a, c, r);
      else
        j.dense_map(s) = Eigen::Map<const RowMatrix<T>>(a, r, c);
    }
    return j;
  }
  if (e.kind != "csr") detail::raise<InvalidArgument>(kOp, what + ": unknown element kind '" + e.kind + "'");
  if (e.count != 1) detail::raise<InvalidArgument>(kOp, what + ": CSR elements are shared by the batch");
  std::vector<std::int32_t> crow = csr_indices(e.crow, r + 1, kOp, what + " crow_indices");
  const Index nnz = crow.back();
  if (crow.front() != 0 || nnz < 0 || (e.values.shape.size() == 1 && e.values.shape[0] != nnz))
    detail::raise<InvalidArgument>(
        kOp, what + ": crow_indices must start at 0 and end at nnz (" + std::to_string(e.values.numel()) + ")");
  std::vector<std::int32_t> col = csr_indices(e.col, nnz, kOp, what + " col_indices");
  const T* v = checked_data<T>(e.values, {nnz}, kOp, what + " values");
  auto pattern = std::make_shared<CsrPattern>(r, c, crow, col);
  pattern->require_valid(std::string(kOp) + ": " + what);
  if (!transpose) {
    Jacobian<T> j = Jacobian<T>::csr(pattern);
    std::copy(v, v + nnz, j.values().begin());
    return j;
  }
  // A^T in CSR: its pattern, and each entry's value from A's.
  const CsrTranspose t = bppsa::transpose(*pattern);
  Jacobian<T> j = Jacobian<T>::csr(t.pattern);
  T* dst = j.values().data();
  for (std::size_t p = 0; p < t.source.size(); ++p) dst[p] = v[t.source[p]];
  return j;
}

/// The Scanners of the last kScannersKept chain structures (their plans, SpGEMM patterns and
/// workspace), kept for the next call of the same structure as the CUDA half keeps its plans; one
/// whose workspace passes kKeptWorkspaceBytes is not kept (a large scan's memory is returned when
/// it ends). A Scanner serves one caller at a time: a concurrent caller of a busy structure runs a
/// fresh one. Never destroyed (pool threads may outlive static destruction at exit).
constexpr std::size_t kScannersKept = 8;
constexpr std::size_t kKeptWorkspaceBytes = std::size_t{64} << 20;

template <class T>
class ScannerCache {
 public:
  struct Entry {
    std::mutex busy;
    Scanner<T> scanner;
  };
  /// The kept Scanner of `key` (locked in `lock`), or nullptr when another caller holds it.
  static ScannerCache& instance() {
    static auto* cache = new ScannerCache();
    return *cache;
  }
  /// Forgets `key`'s Scanner (its caller, which holds it, frees it when done).
  static void drop(const std::string& key) {
    ScannerCache& cache = instance();
    std::lock_guard<std::mutex> guard(cache.mutex_);
    if (cache.entries_.erase(key) != 0) cache.order_.erase(std::find(cache.order_.begin(), cache.order_.end(), key));
  }
  static std::shared_ptr<Entry> take(const std::string& key, std::unique_lock<std::mutex>& lock) {
    ScannerCache* cache = &instance();
    std::shared_ptr<Entry> e;
    {
      std::lock_guard<std::mutex> guard(cache->mutex_);
      auto [it, inserted] = cache->entries_.try_emplace(key, nullptr);
      if (inserted) {
        it->second = std::make_shared<Entry>();
        cache->order_.push_back(key);
        if (cache->order_.size() > kScannersKept) {
          cache->entries_.erase(cache->order_.front());  // a caller holding it keeps it alive
          cache->order_.pop_front();
        }
      }
      e = it->second;
    }
    lock = std::unique_lock<std::mutex>(e->busy, std::try_to_lock);
    return lock.owns_lock() ? e : nullptr;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  std::deque<std::string> order_;
};

/// What a Scanner's plan depends on (the Scanner itself checks the chain again before reusing one).
template <class T>
std::string structure_key(const Chain<T>& chain, const ScanOptions& o) {
  std::string key = std::to_string(sizeof(T)) + "|" + to_string(o.algorithm) + "|" + std::to_string(o.threads) + "|" +
                    (o.check_inputs ? "c" : "") + "|" + std::to_string(chain.batch()) + "|";
  for (Index k = 1; k <= chain.size(); ++k) {
    const Jacobian<T>& j = chain.jacobian(k);
    key += std::to_string(static_cast<int>(j.kind())) + ":" + std::to_string(j.rows()) + "x" +
           std::to_string(j.cols()) + ":" + std::to_string(j.count()) + ":" + std::to_string(j.values().size()) + ";";
  }
  for (Index k = 0; k < chain.size(); ++k) key += chain.injection(k) != nullptr ? '1' : '0';
  return key;
}
}  // namespace

template <class T>
void affine_scan_cpu(const std::vector<ElementRef>& elements, const TensorRef& g_last,
                     const std::vector<TensorRef>& out, const std::vector<TensorRef>& injections, bool transpose,
                     const std::string& algorithm, int threads, bool check_finite) {
  const Index n = static_cast<Index>(elements.size());
  const Index batch = g_last.shape[0];
  // The chain's copies of the elements, checked before any is made.
  double chain_bytes = 0;
  for (const ElementRef& e : elements)
    chain_bytes += e.kind == "csr" ? static_cast<double>(e.values.numel()) * (sizeof(T) + 2 * sizeof(std::int32_t))
                                   : static_cast<double>(e.count) * static_cast<double>(e.rows) *
                                         static_cast<double>(e.cols) * sizeof(T);
  check_memory(kOp, "a scan over " + std::to_string(n) + " elements", {{"the elements' copies", chain_bytes}},
               "pass fewer or smaller elements, or share one (rows, cols) matrix by the batch instead of one per "
               "sample");

  // Forward (layer) order: J_k^T = a_{N−k+1}, so the chain is the scan array reversed.
  Chain<T> chain(batch);
  for (Index k = 1; k <= n; ++k) {
    const Index i = n - k;  // elements[i] = a_{i+1}
    chain.push_back(make_element<T>(elements[static_cast<std::size_t>(i)], i, transpose, batch));
  }
  for (Index i = 0; i < static_cast<Index>(injections.size()); ++i) {
    const TensorRef& e = injections[static_cast<std::size_t>(i)];
    if (e.data == 0 && e.shape.empty()) continue;
    const Index k = n - 1 - i;  // e_{i+1} is added to s_{i+1} = g_{N−i−1}
    const Index d = chain.dim(k);
    const T* p = checked_data<T>(e, {batch, d}, kOp, "injection " + std::to_string(i + 1));
    chain.set_injection(k, Eigen::Map<const Matrix<T>>(p, d, batch));
  }
  const Index d_last = chain.empty() ? (g_last.shape.size() == 2 ? g_last.shape[1] : 0) : chain.dim(n);
  const T* gp = checked_data<T>(g_last, {batch, d_last}, kOp, "g_last");
  const Eigen::Map<const Matrix<T>> g(gp, d_last, batch);

  ScanOptions options;
  options.algorithm = parse_algorithm(algorithm);
  options.threads = threads;
  options.check_inputs = options.check_outputs = check_finite;
  Gradients<T> grads;
  if (n == 0) {
    T* o = checked_data<T>(out[0], {batch, d_last}, kOp, "output 0");
    Eigen::Map<Matrix<T>>(o, d_last, batch) = g;
    return;
  }
  std::unique_lock<std::mutex> held;
  const std::string key = structure_key(chain, options);
  const auto kept = ScannerCache<T>::take(key, held);
  std::optional<Scanner<T>> fresh;
  Scanner<T>& scanner = kept ? kept->scanner : fresh.emplace(options);
  scanner.set_options(options);
  scanner.run(chain, g, grads);
  if (kept && scanner.stats().workspace_bytes > kKeptWorkspaceBytes) ScannerCache<T>::drop(key);
  for (Index i = 0; i <= n; ++i) {
    const Matrix<T>& gk = grads.g(n - i);
    T* o = checked_data<T>(out[static_cast<std::size_t>(i)], {batch, gk.rows()}, kOp, "output " + std::to_string(i));
    Eigen::Map<Matrix<T>>(o, gk.rows(), batch) = gk;
  }
}

BPPSA_SCAN_HALF(affine_scan_cpu, const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                const std::vector<TensorRef>&, bool, const std::string&, int, bool)

}  // namespace bppsa::python
