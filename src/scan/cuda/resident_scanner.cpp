// The public scan for chains resident on the GPU (bppsa/scan/resident_scanner.hpp): the
// layouts checked, then the scan's resident entry (resident_scan.hpp, which the GPU model uses
// too), its buffers handed out by chain index.
#include "bppsa/scan/resident_scanner.hpp"

#include <cuda_runtime_api.h>

#include <map>

#include "bppsa/core/error.hpp"
#include "core/cuda/check.hpp"
#include "scan/cuda/resident_kernels.hpp"
#include "scan/cuda/resident_scan.hpp"
#include "scan/plan.hpp"

namespace bppsa {

template <class T>
struct ResidentScanner<T>::Impl {
  std::unique_ptr<detail::ResidentScan<T>> scan;
  Index n = 0, batch = 1;
  std::vector<Index> dims;         ///< d_0 … d_N
  std::vector<int> shared;         ///< by k = 1 … N (index k − 1): its S in the program's list, or −1
  std::vector<Layout<T>> layouts;  ///< J_1^T … J_N^T
  /// By k − 1, made at the first set_values_transposed of a CSR J_k^T: for each of its entries,
  /// the entry of J_k's CSR it comes from.
  std::vector<detail::cuda::DeviceBuffer<std::int32_t>> from_transpose;
  detail::cuda::DeviceBuffer<std::int32_t> flags;  ///< the finiteness checks' flags, N + 1

  /// One flag per buffer list: flag i set when a value of lists[i] is not finite (read back).
  std::vector<bool> nonfinite(const std::vector<std::vector<std::pair<const T*, Index>>>& lists, void* stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    if (flags.size() < lists.size()) flags = detail::cuda::DeviceBuffer<std::int32_t>(lists.size());
    if (!lists.empty()) BPPSA_CUDA_CHECK(cudaMemsetAsync(flags.data(), 0, lists.size() * sizeof(std::int32_t), s));
    for (std::size_t i = 0; i < lists.size(); ++i)
      for (const auto& [p, count] : lists[i])
        if (p != nullptr) detail::gpu::launch_flag_nonfinite(p, count, flags.data() + i, s);
    std::vector<std::int32_t> host(lists.size());
    if (!lists.empty())
      BPPSA_CUDA_CHECK(
          cudaMemcpyAsync(host.data(), flags.data(), host.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s));
    BPPSA_CUDA_CHECK(cudaStreamSynchronize(s));
    return {host.begin(), host.end()};
  }

  Index position(Index k, Index first, Index last, const char* what) const {
    if (k < first || k > last)
      detail::raise<InvalidArgument>("ResidentScanner", std::string(what) + " index k = " + std::to_string(k) +
                                                            " is outside " + std::to_string(first) + ".." +
                                                            std::to_string(last));
    return n - k;  // position i holds J_{N−i+1}^T, e_{N−i} and s_i = g_{N−i}
  }
  detail::DeviceScan<T>& buffers() const { return scan->buffers(); }
};

template <class T>
ResidentScanner<T>::ResidentScanner(const ResidentChain<T>& chain, const ScanOptions& options)
    : impl_(std::make_unique<Impl>()) {
  const char* op = "ResidentScanner";
  const std::vector<detail::ElementInfo<T>> elements = detail::resident_elements(chain, op);
  Impl& s = *impl_;
  s.n = static_cast<Index>(chain.jacobian.size());
  s.batch = chain.batch;
  const int chunks = detail::resident_chunks(options, s.n, op);
  s.scan = std::make_unique<detail::ResidentScan<T>>(elements, s.batch, options.algorithm, chunks);
  s.dims.push_back(chain.jacobian.front()->rows);
  for (const Layout<T>* l : chain.jacobian) {
    s.dims.push_back(l->cols);
    s.layouts.push_back(*l);
  }
  s.from_transpose.resize(static_cast<std::size_t>(s.n));
  // Each S is one device copy, found through the element the program keeps it for.
  std::map<const Matrix<T>*, int> index;
  const auto& list = s.scan->program().shared_matrices;
  for (std::size_t m = 0; m < list.size(); ++m)
    index[chain.jacobian[static_cast<std::size_t>(s.n - list[m].position)]->shared_dense.get()] = static_cast<int>(m);
  for (const Layout<T>* l : chain.jacobian) {
    const auto it = l->kind == Kind::shared_dense_diag ? index.find(l->shared_dense.get()) : index.end();
    s.shared.push_back(it == index.end() ? -1 : it->second);
  }
}

template <class T>
ResidentScanner<T>::~ResidentScanner() = default;
template <class T>
ResidentScanner<T>::ResidentScanner(ResidentScanner&&) noexcept = default;
template <class T>
ResidentScanner<T>& ResidentScanner<T>::operator=(ResidentScanner&&) noexcept = default;

template <class T>
Index ResidentScanner<T>::size() const {
  return impl_->n;
}
template <class T>
Index ResidentScanner<T>::batch() const {
  return impl_->batch;
}
template <class T>
Index ResidentScanner<T>::dim(Index k) const {
  impl_->position(k, 0, impl_->n, "dim");
  return impl_->dims[static_cast<std::size_t>(k)];
}
template <class T>
T* ResidentScanner<T>::values(Index k) {
  return impl_->buffers().element_values(impl_->position(k, 1, impl_->n, "values") + 1);
}
template <class T>
T* ResidentScanner<T>::shared_matrix(Index k) {
  impl_->position(k, 1, impl_->n, "shared_matrix");
  const int m = impl_->shared[static_cast<std::size_t>(k - 1)];
  return m < 0 ? nullptr : impl_->buffers().shared_matrix(static_cast<std::size_t>(m));
}
template <class T>
T* ResidentScanner<T>::injection(Index k) {
  const Index i = impl_->position(k, 0, impl_->n - 1, "injection");
  return impl_->buffers().injection(i);
}
template <class T>
T* ResidentScanner<T>::g_last() {
  return impl_->buffers().prefix(0);
}
template <class T>
const T* ResidentScanner<T>::gradient(Index k) const {
  return impl_->buffers().prefix(impl_->position(k, 0, impl_->n, "gradient"));
}

template <class T>
void ResidentScanner<T>::set_values_transposed(Index k, const T* src, void* stream) {
  Impl& s = *impl_;
  T* dst = values(k);
  const Layout<T>& l = s.layouts[static_cast<std::size_t>(k - 1)];
  const auto st = static_cast<cudaStream_t>(stream);
  if (l.kind == Kind::dense) {
    detail::gpu::launch_transpose_each(src, l.count, l.rows, l.cols, dst, st);  // J_k column-major = J_k^T row-major
    return;
  }
  if (l.kind != Kind::csr)
    detail::raise<InvalidArgument>("ResidentScanner", "set_values_transposed: J_" + std::to_string(k) + "^T is " +
                                                          l.describe() + "; only dense and csr kinds are given so");
  detail::cuda::DeviceBuffer<std::int32_t>& from = s.from_transpose[static_cast<std::size_t>(k - 1)];
  const Index nnz = l.pattern->nnz();
  if (from.size() == 0 && nnz > 0) {
    // J_k's CSR is the transpose of J_k^T's; entry q of J_k is entry source[q] of J_k^T.
    const CsrTranspose t = transpose(*l.pattern);
    std::vector<std::int32_t> inverse(static_cast<std::size_t>(nnz));
    for (Index q = 0; q < nnz; ++q)
      inverse[static_cast<std::size_t>(t.source[static_cast<std::size_t>(q)])] = static_cast<std::int32_t>(q);
    detail::cuda::DeviceBuffer<std::int32_t> made(inverse.size());
    made.upload(inverse.data(), inverse.size());
    from = std::move(made);
  }
  detail::gpu::launch_gather_each(src, from.data(), l.count, nnz, dst, st);
}

template <class T>
std::vector<bool> ResidentScanner<T>::nonfinite_values(void* stream) {
  Impl& s = *impl_;
  std::vector<std::vector<std::pair<const T*, Index>>> lists;
  for (Index k = 1; k <= s.n; ++k) {
    const Layout<T>& l = s.layouts[static_cast<std::size_t>(k - 1)];
    lists.push_back({{values(k), l.values_per_sample() * l.count}});
    if (const T* m = shared_matrix(k)) lists.back().emplace_back(m, static_cast<Index>(l.shared_dense->size()));
  }
  return s.nonfinite(lists, stream);
}

template <class T>
std::vector<bool> ResidentScanner<T>::nonfinite_injections(void* stream) {
  Impl& s = *impl_;
  std::vector<std::vector<std::pair<const T*, Index>>> lists;
  for (Index k = 0; k < s.n; ++k) lists.push_back({{injection(k), dim(k) * s.batch}});
  return s.nonfinite(lists, stream);
}

template <class T>
std::vector<bool> ResidentScanner<T>::nonfinite_gradients(void* stream) {
  Impl& s = *impl_;
  std::vector<std::vector<std::pair<const T*, Index>>> lists;
  for (Index k = 0; k <= s.n; ++k) lists.push_back({{gradient(k), dim(k) * s.batch}});
  return s.nonfinite(lists, stream);
}

template <class T>
void ResidentScanner<T>::run(void* stream) {
  impl_->scan->run(static_cast<cudaStream_t>(stream));
}

template <class T>
const ScanStats& ResidentScanner<T>::stats() const {
  return impl_->scan->stats();
}
template <class T>
std::size_t ResidentScanner<T>::device_bytes() const {
  return impl_->scan->device_bytes();
}

template class ResidentScanner<float>;
template class ResidentScanner<double>;

}  // namespace bppsa
