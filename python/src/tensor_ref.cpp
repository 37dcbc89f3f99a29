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

std::string Place::describe() const {
  return device == "cpu" || index < 0 ? device : device + ":" + std::to_string(index);
}

template <class T>
T* checked_data(const TensorRef& t, const std::vector<Index>& shape, const char* op, const std::string& what) {
  if (t.device != "cpu")
    detail::raise<UnsupportedError>(
        op, what + " is on " + t.device + ": this operation runs on the CPU; move its tensors there with .cpu()");
  return checked_data<T>(t, shape, op, what, Place{});
}

template <class T>
T* checked_data(const TensorRef& t, const std::vector<Index>& shape, const char* op, const std::string& what,
                const Place& place) {
  if (!place.holds(t)) {
    const Place here{t.device, t.device_index};
    detail::raise<InvalidArgument>(op, what + " is on " + here.describe() + " but this call runs on " +
                                           place.describe() + ": every tensor of a call must be on one device; move " +
                                           "them with .to(" + place.describe() + ")");
  }
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

#define BPPSA_CHECKED_DATA(T)                                                                                \
  template T* checked_data<T>(const TensorRef&, const std::vector<Index>&, const char*, const std::string&); \
  template T* checked_data<T>(const TensorRef&, const std::vector<Index>&, const char*, const std::string&,  \
                              const Place&);
BPPSA_CHECKED_DATA(float)
BPPSA_CHECKED_DATA(double)
BPPSA_CHECKED_DATA(std::int64_t)
BPPSA_CHECKED_DATA(std::int32_t)
#undef BPPSA_CHECKED_DATA

}  // namespace bppsa::python
