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

namespace {
namespace py = pybind11;

/// A sequence of Python ints (torch.Size, a tuple) as indices.
std::vector<Index> indices_of(PyObject* sequence) {
  if (sequence == nullptr) throw py::error_already_set();
  py::object owned = py::reinterpret_steal<py::object>(sequence);
  PyObject* fast = PySequence_Fast(sequence, "bppsa: expected a sequence of ints");
  if (fast == nullptr) throw py::error_already_set();
  py::object fast_owned = py::reinterpret_steal<py::object>(fast);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  std::vector<Index> out(static_cast<std::size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    out[static_cast<std::size_t>(i)] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (PyErr_Occurred()) throw py::error_already_set();
  }
  return out;
}

/// The attribute names, made once (a lookup by a str object skips building one per call).
struct Names {
  py::str data_ptr{"data_ptr"}, dtype{"dtype"}, shape{"shape"}, stride{"stride"}, device{"device"}, type{"type"},
      index{"index"}, is_cpu{"is_cpu"};
};

/// torch's dtype objects are singletons: their names, kept per object.
const std::string& dtype_name_of(PyObject* dtype) {
  static std::vector<std::pair<PyObject*, std::string>> known;
  for (const auto& [object, name] : known)
    if (object == dtype) return name;
  std::string name = py::str(dtype).cast<std::string>();  // "torch.float32"
  if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
  Py_INCREF(dtype);  // kept alive with its name
  known.emplace_back(dtype, std::move(name));
  return known.back().second;
}
}  // namespace

namespace {
/// The TensorRef of a tensor (not None).
TensorRef read_tensor(py::handle tensor) {
  static const Names* names = new Names();  // never destroyed: Python may be gone at exit
  TensorRef r;
  r.data = tensor.attr(names->data_ptr)().cast<std::uintptr_t>();
  r.dtype = dtype_name_of(tensor.attr(names->dtype).ptr());
  r.shape = indices_of(PyObject_GetAttr(tensor.ptr(), names->shape.ptr()));
  r.strides = indices_of(PyObject_CallMethodNoArgs(tensor.ptr(), names->stride.ptr()));
  // is_cpu, a bool, first: a torch.device object is made only for a tensor elsewhere.
  PyObject* is_cpu = PyObject_GetAttr(tensor.ptr(), names->is_cpu.ptr());
  if (is_cpu == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw py::error_already_set();
    PyErr_Clear();  // no is_cpu here: read the device
  }
  Py_XDECREF(is_cpu);               // only the pointer is compared below (Py_True is a static singleton)
  if (is_cpu == Py_True) return r;  // device "cpu", index -1
  const py::object device = tensor.attr(names->device);
  r.device = device.attr(names->type).cast<std::string>();
  const py::object index = device.attr(names->index);
  r.device_index = index.is_none() ? -1 : index.cast<int>();
  return r;
}
}  // namespace

pybind11::object tensor_ref(pybind11::handle tensor) {
  if (tensor.is_none()) return py::none();
  return py::cast(read_tensor(tensor));
}

std::optional<TensorRef> ref_of(pybind11::handle arg) {
  if (arg.is_none()) return std::nullopt;
  if (py::isinstance<TensorRef>(arg)) return arg.cast<TensorRef>();
  return read_tensor(arg);
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
