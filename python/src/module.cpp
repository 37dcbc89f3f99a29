// The native half of the `bppsa` Python package (bppsa._C, built once per CPU level): the recurrent
// layer engine and the scan, taking tensors as TensorRef views (no libtorch: one build serves any
// PyTorch), with bppsa's errors turned into the matching Python exceptions.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bppsa/core/build_info.hpp"
#include "bppsa/core/threads.hpp"
#include "bppsa/core/device.hpp"
#include "bppsa/core/error.hpp"
#include "bppsa/core/memory.hpp"
#include "bppsa/nn/cost_model.hpp"
#include "recurrent_layer.hpp"
#include "scan.hpp"

namespace py = pybind11;
using namespace bppsa;
using namespace bppsa::python;

namespace {

/// A tensor argument that may not be None.
TensorRef required(py::handle arg, const char* name) {
  std::optional<TensorRef> r = ref_of(arg);
  if (!r) detail::raise<InvalidArgument>("bppsa.nn", std::string(name) + " is None; pass a tensor");
  return std::move(*r);
}

template <class T>
void bind_layer(py::module_& m, const char* name) {
  py::class_<LayerEngine<T>>(m, name, py::dynamic_attr())  // Python keeps its weights' TensorRefs on it
      .def(py::init<const std::string&, Index, Index, const std::string&, Index, const std::string&, int>(),
           py::arg("cell"), py::arg("input_size"), py::arg("hidden_size"), py::arg("nonlinearity") = "tanh",
           py::arg("proj_size") = 0, py::arg("device") = "cpu", py::arg("device_index") = -1)
      // Tensors or TensorRefs: each read here, under the GIL, then the engine runs without it.
      .def(
          "forward",
          [](LayerEngine<T>& e, py::handle x, py::handle h0, py::handle c0, py::handle w_ih, py::handle w_hh,
             py::handle b_ih, py::handle b_hh, py::handle w_hr, const std::vector<Index>& lengths, py::handle out,
             py::handle h_n, py::handle c_n, std::uintptr_t stream, bool record) {
            const TensorRef rx = required(x, "x"), rw_ih = required(w_ih, "w_ih"), rw_hh = required(w_hh, "w_hh"),
                            rout = required(out, "out"), rh_n = required(h_n, "h_n");
            const OptRef rh0 = ref_of(h0), rc0 = ref_of(c0), rb_ih = ref_of(b_ih), rb_hh = ref_of(b_hh),
                         rw_hr = ref_of(w_hr), rc_n = ref_of(c_n);
            const py::gil_scoped_release unlocked;
            e.forward(rx, rh0, rc0, rw_ih, rw_hh, rb_ih, rb_hh, rw_hr, lengths, rout, rh_n, rc_n, stream, record);
          },
          py::arg("x"), py::arg("h0"), py::arg("c0"), py::arg("w_ih"), py::arg("w_hh"), py::arg("b_ih"),
          py::arg("b_hh"), py::arg("w_hr"), py::arg("lengths"), py::arg("out"), py::arg("h_n"), py::arg("c_n"),
          py::arg("stream") = 0, py::arg("record") = true)
      .def(
          "backward",
          [](LayerEngine<T>& e, py::handle w_ih, py::handle w_hh, py::handle b_ih, py::handle b_hh, py::handle w_hr,
             py::handle grad_out, py::handle grad_hn, py::handle grad_cn, const std::string& method, int threads,
             int chunks, py::handle grad_x, py::handle grad_h0, py::handle grad_c0, py::handle grad_w_ih,
             py::handle grad_w_hh, py::handle grad_b_ih, py::handle grad_b_hh, py::handle grad_w_hr, bool check_finite,
             std::uintptr_t stream) {
            const TensorRef rw_ih = required(w_ih, "w_ih"), rw_hh = required(w_hh, "w_hh");
            const OptRef rb_ih = ref_of(b_ih), rb_hh = ref_of(b_hh), rw_hr = ref_of(w_hr), rgo = ref_of(grad_out),
                         rghn = ref_of(grad_hn), rgcn = ref_of(grad_cn), rgx = ref_of(grad_x), rgh0 = ref_of(grad_h0),
                         rgc0 = ref_of(grad_c0), rgw_ih = ref_of(grad_w_ih), rgw_hh = ref_of(grad_w_hh),
                         rgb_ih = ref_of(grad_b_ih), rgb_hh = ref_of(grad_b_hh), rgw_hr = ref_of(grad_w_hr);
            const py::gil_scoped_release unlocked;
            return e.backward(rw_ih, rw_hh, rb_ih, rb_hh, rw_hr, rgo, rghn, rgcn, method, threads, chunks, rgx, rgh0,
                              rgc0, rgw_ih, rgw_hh, rgb_ih, rgb_hh, rgw_hr, check_finite, stream);
          },
          py::arg("w_ih"), py::arg("w_hh"), py::arg("b_ih"), py::arg("b_hh"), py::arg("w_hr"), py::arg("grad_out"),
          py::arg("grad_hn"), py::arg("grad_cn"), py::arg("method"), py::arg("threads"), py::arg("chunks"),
          py::arg("grad_x"), py::arg("grad_h0"), py::arg("grad_c0"), py::arg("grad_w_ih"), py::arg("grad_w_hh"),
          py::arg("grad_b_ih"), py::arg("grad_b_hh"), py::arg("grad_w_hr"), py::arg("check_finite"),
          py::arg("stream") = 0)
      .def("set_forward", &LayerEngine<T>::set_forward, py::arg("method"), py::arg("threads") = 0)
      .def("forward_report", &LayerEngine<T>::forward_report)
      .def("release_record", &LayerEngine<T>::release_record)
      .def_property_readonly("steps", &LayerEngine<T>::steps)
      .def_property_readonly("batch", &LayerEngine<T>::batch);
}

}  // namespace

// BPPSA_MODULE_NAME: _C_<level>, one module per CPU level (python/CMakeLists.txt; bppsa/_variants.py loads one).
PYBIND11_MODULE(BPPSA_MODULE_NAME, m) {
  m.doc() = "bppsa's native engine (use the bppsa package, not this module)";
  m.attr("__version__") = BPPSA_VERSION;
  m.def(
      "build_info",
      [] {
        const BuildInfo info = bppsa::build_info();
        py::dict d;
        d["version"] = info.version;
        d["cpu_isa"] = info.cpu_isa;
        d["cpu_flag"] = info.cpu_flag;
        d["vectorization"] = info.vectorization;
        d["cuda"] = info.cuda;
        return d;
      },
      "The library copy's build: version, cpu_isa, cpu_flag, vectorization (Eigen's widest SIMD), cuda");
  m.def(
      "set_team_threads",
      [](const std::string& threads, const std::string& what) {
        bppsa::set_team_threads(bppsa::parse_team_threads(threads, what));
      },
      py::arg("threads"), py::arg("what") = "threads",
      "The threads the engine's teams run on: 'own' (bppsa's pool) or 'openmp' (the OpenMP runtime's)");
  m.def("team_threads", [] { return bppsa::to_string(bppsa::team_threads()); });
  m.def("openmp_runtime", &bppsa::openmp_runtime, "The file of the OpenMP runtime the engine calls");

  // bppsa::Error → Python: shapes and arguments are ValueErrors, NaN/Inf FloatingPointError,
  // memory MemoryError, files OSError, missing features NotImplementedError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ShapeError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const NonFiniteError& e) {
      PyErr_SetString(PyExc_FloatingPointError, e.what());
    } catch (const ResourceError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const UnsupportedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });

  py::class_<TensorRef>(m, "TensorRef")
      .def(py::init([](std::uintptr_t data, std::string dtype, std::vector<Index> shape, std::vector<Index> strides,
                       std::string device, int device_index) {
             return TensorRef{data,        std::move(dtype), std::move(shape), std::move(strides), std::move(device),
                              device_index};
           }),
           py::arg("data"), py::arg("dtype"), py::arg("shape"), py::arg("strides"), py::arg("device") = "cpu",
           py::arg("device_index") = -1)
      .def(py::init<>())
      .def_readonly("data", &TensorRef::data)
      .def_readonly("dtype", &TensorRef::dtype)
      .def_readonly("shape", &TensorRef::shape)
      .def_readonly("strides", &TensorRef::strides)
      .def_readonly("device", &TensorRef::device)
      .def_readonly("device_index", &TensorRef::device_index)
      .def("__repr__", [](const TensorRef& t) { return "<TensorRef " + t.describe() + ">"; });
  // One native call per tensor (a call's few microseconds of Python at T 1 were these views).
  m.def("tensor_ref", &tensor_ref, py::arg("tensor"),
        "A TensorRef view of a torch.Tensor (None stays None): its data_ptr(), dtype, shape, stride() and "
        "device. The tensor must outlive the call.");

  py::class_<ElementRef>(m, "ElementRef")
      .def(py::init([](std::string kind, Index rows, Index cols, Index count, TensorRef values, TensorRef crow,
                       TensorRef col) {
             return ElementRef{std::move(kind), rows, cols, count, std::move(values), std::move(crow), std::move(col)};
           }),
           py::arg("kind"), py::arg("rows"), py::arg("cols"), py::arg("count"), py::arg("values"),
           py::arg("crow") = TensorRef{}, py::arg("col") = TensorRef{});

  m.attr("MAX_THREADS") = kMaxThreads;
  // What this build and machine offer (bppsa/core/device.hpp).
  m.def("cuda_built", &cuda_built);
  m.def("cuda_device_count", &cuda_device_count);
  m.def("cuda_summary", &cuda_summary);
  // The memory guard of the C++ engine (bppsa/core/memory.hpp), for what Python allocates:
  // MemoryError with the numbers and `fix` when the items do not fit.
  m.def(
      "check_memory",
      [](const std::string& op, const std::string& what, const std::vector<std::pair<std::string, double>>& items,
         const std::string& fix) {
        std::vector<MemoryItem> v;
        for (const auto& [name, bytes] : items) v.push_back({name, bytes});
        check_memory(op, what, v, fix);
      },
      py::arg("op"), py::arg("what"), py::arg("items"), py::arg("fix"));

  // The step cost model behind backward='auto' (bppsa/nn/cost_model.hpp): one layer's predicted
  // step in ms per candidate (NaN: no fit) and whether each candidate's fit spans the shape (key
  // "<candidate> spans"), the model's source, and loading another.
  const auto step_shape = [](const std::string& cell, Index input, Index hidden, Index proj, Index steps, Index batch,
                             int threads) {
    return StepShape{.cell = parse_cell(cell),
                     .input = input,
                     .hidden = hidden,
                     .proj = proj,
                     .steps = steps,
                     .batch = batch,
                     .threads = threads};
  };
  m.def(
      "predict_step",
      [step_shape](const std::string& cell, Index input, Index hidden, Index proj, Index steps, Index batch,
                   int threads) {
        const StepShape s = step_shape(cell, input, hidden, proj, steps, batch, threads);
        py::dict out;
        for (StepCandidate c :
             {StepCandidate::bp, StepCandidate::blelloch, StepCandidate::hybrid, StepCandidate::torch_nn}) {
          out[to_string(c)] = predict_step_ms(s, c);
          out[(std::string(to_string(c)) + " spans").c_str()] = cost_model_spans(s, c);
        }
        return out;
      },
      py::arg("cell"), py::arg("input"), py::arg("hidden"), py::arg("proj"), py::arg("steps"), py::arg("batch"),
      py::arg("threads"));
  // The method `auto` runs for a layer of this shape (resolve_backward): bp, blelloch, hybrid, or
  // auto (no fit: the scan's own choice).
  m.def(
      "auto_method",
      [step_shape](const std::string& cell, Index input, Index hidden, Index proj, Index steps, Index batch,
                   int threads) {
        BackwardOptions o;
        o.method = BackwardMethod::automatic;
        o.threads = threads;
        return std::string(
            to_string(resolve_backward(o, step_shape(cell, input, hidden, proj, steps, batch, threads))));
      },
      py::arg("cell"), py::arg("input"), py::arg("hidden"), py::arg("proj"), py::arg("steps"), py::arg("batch"),
      py::arg("threads"));
  m.def("cost_model_source", &cost_model_source);
  m.def("load_cost_model", &load_cost_model, py::arg("path"));

  bind_layer<float>(m, "LayerEngineF32");
  bind_layer<double>(m, "LayerEngineF64");

  // bppsa.scan's front (scan.hpp): its half by g_last's device; stream: the CUDA half's cudaStream_t.
  m.def("affine_scan_f32", &affine_scan<float>, py::arg("elements"), py::arg("g_last"), py::arg("out"),
        py::arg("injections"), py::arg("transpose"), py::arg("algorithm"), py::arg("threads"), py::arg("check_finite"),
        py::arg("stream") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("affine_scan_f64", &affine_scan<double>, py::arg("elements"), py::arg("g_last"), py::arg("out"),
        py::arg("injections"), py::arg("transpose"), py::arg("algorithm"), py::arg("threads"), py::arg("check_finite"),
        py::arg("stream") = 0, py::call_guard<py::gil_scoped_release>());
}
