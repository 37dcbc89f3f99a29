// Checks of tensors handed over from Python (see tensor_ref.hpp).
#include "tensor_ref.hpp"

#include <cstdint>

#include "bppsa/core/error.hpp"

namespace bppsa::python {

Index TensorRef::numel() const {
  Index n = 1;
  for (Index e : shape) n *= e;
  return n;
}

bool TensorRef::c_contiguous() const {
  if (strides.size() != shape.size()) return false;
  if (numel() == 0) return true;  // nothing to lay out (torch gives empty tensors any strides)
  Index expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;  // extents of 1 may have any stride
    expected *= shape[i];
  }
  return true;
}

int checked_threads(int threads, const char* op) {
  if (threads < 0 || threads > kMaxThreads)
    detail::raise<InvalidArgument>(op, "threads must be in 0.." + std::to_string(kMaxThreads) +
                                           " (0 = every core this process may use), got " + std::to_string(threads));
  return threads;
}

std::string shape_text(const std::vector<Index>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? "*" : std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TensorRef::describe() const {
  return dtype + " " + shape_text(shape) + " on " + device +
         (device_index >= 0 ? ":" + std::to_string(device_index) : "");
}

template <>
const char* dtype_name<float>() {
  return "float32";
}
template <>
const char* dtype_name<double>() {
  return "float64";
}
template <>
const char* dtype_name<std::int64_t>() {
  return "int64";
}
template <>
const char* dtype_name<std::int32_t>() {
  return "int32";
}

template <class T>
T* checked_data(const TensorRef& t, const std::vector<Index>& shape, const char* op, const std::string& what) {
  if (t.device != "cpu")
    detail::raise<UnsupportedError>(
        op, what + " is on " + t.device +
                ": bppsa's PyTorch modules run on the CPU engine only (the CUDA backend is not wired to Python "
                "yet); move the module and its inputs to the CPU with .cpu()");
  if (t.dtype != dtype_name<T>())
    detail::raise<InvalidArgument>(
        op, what + " is " + t.dtype + ", expected " + dtype_name<T>() + " (like the other tensors of this call)");
  bool same = t.shape.size() == shape.size();
  for (std::size_t i = 0; same && i < shape.size(); ++i) same = shape[i] < 0 || shape[i] == t.shape[i];
  if (!same)
    detail::raise<ShapeError>(op, what + " has shape " + shape_text(t.shape) + ", expected " + shape_text(shape));
  if (!t.c_contiguous())
    detail::raise<InvalidArgument>(op, what + " (" + t.describe() + ") is not contiguous; pass .contiguous()");
  if (t.data == 0 && t.numel() > 0) detail::raise<InvalidArgument>(op, what + " has no storage");
  return reinterpret_cast<T*>(t.data);
}

template float* checked_data<float>(const TensorRef&, const std::vector<Index>&, const char*, const std::string&);
template double* checked_data<double>(const TensorRef&, const std::vector<Index>&, const char*, const std::string&);
template std::int64_t* checked_data<std::int64_t>(const TensorRef&, const std::vector<Index>&, const char*,
                                                  const std::string&);
template std::int32_t* checked_data<std::int32_t>(const TensorRef&, const std::vector<Index>&, const char*,
                                                  const std::string&);

}  // namespace bppsa::python
