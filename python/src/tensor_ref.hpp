// What crosses the Python boundary: a view of a tensor's storage (pointer, dtype, shape and
// strides in elements, device), never owned and never copied by itself. Every use checks it
// against what the operation expects and throws a bppsa error naming the tensor otherwise.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bppsa/core/types.hpp"

namespace bppsa::python {

struct TensorRef {
  std::uintptr_t data = 0;
  std::string dtype;  ///< "float32", "float64", "int32", "int64", …
  std::vector<Index> shape;
  std::vector<Index> strides;  ///< in elements, as torch.Tensor.stride()
  std::string device = "cpu";  ///< "cpu", "cuda", …
  int device_index = -1;

  Index numel() const;
  bool c_contiguous() const;
  /// "float32 [16, 1000, 1] on cpu".
  std::string describe() const;
};

/// Where a call's tensors must be: "cpu", or "cuda" with a device index.
struct Place {
  std::string device = "cpu";
  int index = -1;
  /// "cpu", "cuda:0".
  std::string describe() const;
  bool holds(const TensorRef& t) const { return t.device == device && (device == "cpu" || t.device_index == index); }
};

template <class T>
const char* dtype_name();

/// The tensor's data as T*, after checking that `t` is a C-contiguous `dtype_name<T>()` tensor
/// on the CPU whose shape is `shape` (−1 matches any extent). Throws ShapeError (shape),
/// InvalidArgument (dtype, layout) or UnsupportedError (device), naming `op` and `what`.
template <class T>
T* checked_data(const TensorRef& t, const std::vector<Index>& shape, const char* op, const std::string& what);
/// The same on `place`: a tensor elsewhere is an InvalidArgument naming both devices.
template <class T>
T* checked_data(const TensorRef& t, const std::vector<Index>& shape, const char* op, const std::string& what,
                const Place& place);

/// TensorRef of a torch.Tensor, read through its Python attributes (data_ptr(), dtype, shape,
/// stride(), device); None for None.
pybind11::object tensor_ref(pybind11::handle tensor);

/// An argument that is a torch.Tensor (read as tensor_ref reads it, without a Python TensorRef
/// made in between), a TensorRef, or None (nullopt). Needs the GIL.
std::optional<TensorRef> ref_of(pybind11::handle arg);

/// The most OpenMP threads a call from Python may ask for. Far more than any machine's cores;
/// past a few tens of thousands libgomp aborts or the process runs out of stack (issue 22).
inline constexpr int kMaxThreads = 1024;

/// `threads` after checking 0 ≤ threads ≤ kMaxThreads (InvalidArgument naming `op` otherwise).
int checked_threads(int threads, const char* op);

/// "[16, 1000, 1]" with −1 shown as "*".
std::string shape_text(const std::vector<Index>& shape);

}  // namespace bppsa::python
