// The public scan for chains resident on the GPU (bppsa/scan/resident_scanner.hpp): the
// layouts checked, then the scan's resident entry (resident_scan.hpp, which the GPU model uses
// too), its buffers handed out by chain index.
#include "bppsa/scan/resident_scanner.hpp"

#include <cuda_runtime_api.h>

#include <map>

#include "bppsa/core/error.hpp"
#include "scan/cuda/resident_scan.hpp"
#include "scan/plan.hpp"

namespace bppsa {

template <class T>
struct ResidentScanner<T>::Impl {
  std::unique_ptr<detail::ResidentScan<T>> scan;
  Index n = 0, batch = 1;
  std::vector<Index> dims;  ///< d_0 … d_N
  std::vector<int> shared;  ///< by k = 1 … N (index k − 1): its S in the program's list, or −1

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
  for (const Layout<T>* l : chain.jacobian) s.dims.push_back(l->cols);
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
