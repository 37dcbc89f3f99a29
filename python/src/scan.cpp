// bppsa.scan's front (scan.hpp): what every device shares checked, then the half of g_last's
// device.
#include "scan.hpp"

#include <algorithm>
#include <limits>

#include "bppsa/core/error.hpp"

namespace bppsa::python {

std::vector<std::int32_t> csr_indices(const TensorRef& t, Index n, const char* op, const std::string& what) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  if (t.dtype == "int32") {
    const auto* p = checked_data<std::int32_t>(t, {n}, op, what);
    std::copy(p, p + n, v.begin());
    return v;
  }
  const auto* p = checked_data<std::int64_t>(t, {n}, op, what);
  for (Index i = 0; i < n; ++i) {
    if (p[i] < 0 || p[i] > std::numeric_limits<std::int32_t>::max())
      detail::raise<InvalidArgument>(op, what + " entry " + std::to_string(i) + " = " + std::to_string(p[i]) +
                                             " is out of range (indices must fit in int32)");
    v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(p[i]);
  }
  return v;
}

template <class T>
void affine_scan(const std::vector<ElementRef>& elements, const TensorRef& g_last, const std::vector<TensorRef>& out,
                 const std::vector<TensorRef>& injections, bool transpose, const std::string& algorithm, int threads,
                 bool check_finite, std::uintptr_t stream) {
  constexpr const char* op = "bppsa.scan";
  const auto n = elements.size();
  if (g_last.shape.size() != 2)
    detail::raise<ShapeError>(op, "g_last has shape " + shape_text(g_last.shape) + ", expected (batch, d_N)");
  if (out.size() != n + 1) detail::raise<InvalidArgument>(op, "expected " + std::to_string(n + 1) + " output buffers");
  if (!injections.empty() && injections.size() != n)
    detail::raise<InvalidArgument>(op, "expected " + std::to_string(n) + " injections (or none)");
  checked_threads(threads, op);
  if (g_last.device == "cuda")
    affine_scan_cuda<T>(elements, g_last, out, injections, transpose, algorithm, check_finite, stream);
  else if (g_last.device == "cpu")
    affine_scan_cpu<T>(elements, g_last, out, injections, transpose, algorithm, threads, check_finite);
  else
    detail::raise<UnsupportedError>(op, "g_last is on " + g_last.device +
                                            "; the scan runs on the CPU and on CUDA devices: move the tensors with "
                                            ".cpu() or .cuda()");
}

BPPSA_SCAN_HALF(affine_scan, const std::vector<ElementRef>&, const TensorRef&, const std::vector<TensorRef>&,
                const std::vector<TensorRef>&, bool, const std::string&, int, bool, std::uintptr_t)

}  // namespace bppsa::python
