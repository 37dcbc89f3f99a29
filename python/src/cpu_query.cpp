// bppsa._cpu: the x86-64 levels this CPU and its OS run, for choosing the one native variant to load
// (bppsa/_variants.py). Python's C API only and compiled for baseline x86-64 (or the compiler's default
// elsewhere), so that any machine can import it before a variant is chosen.
#include <Python.h>

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// libgcc's and compiler-rt's CPU model: a feature counts only when the OS saves its registers (XGETBV).
bool runs_level(int level) {
  __builtin_cpu_init();
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  switch (level) {
    case 2: return __builtin_cpu_supports("x86-64-v2");
    case 3: return __builtin_cpu_supports("x86-64-v3");
    case 4: return __builtin_cpu_supports("x86-64-v4");
  }
#else
  const bool v2 = __builtin_cpu_supports("sse3") && __builtin_cpu_supports("ssse3") &&
                  __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("sse4.2") &&
                  __builtin_cpu_supports("popcnt");
  const bool v3 = v2 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
                  __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("f16c") && __builtin_cpu_supports("movbe");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  switch (level) {
    case 2: return v2;
    case 3: return v3;
    case 4: return v4;
  }
#endif
  return level == 1;
}
#endif

// supported_levels() -> tuple of str: ("x86-64", "x86-64-v2", ...) up to the highest this machine runs;
// () on a processor that is not x86-64.
PyObject* supported_levels(PyObject*, PyObject*) {
  PyObject* out = PyList_New(0);
  if (out == nullptr) return nullptr;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const char* const names[] = {"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"};
  for (int level = 1; level <= 4 && runs_level(level); ++level) {
    PyObject* name = PyUnicode_FromString(names[level - 1]);
    if (name == nullptr || PyList_Append(out, name) != 0) {
      Py_XDECREF(name);
      Py_DECREF(out);
      return nullptr;
    }
    Py_DECREF(name);
  }
#endif
  PyObject* tuple = PyList_AsTuple(out);
  Py_DECREF(out);
  return tuple;
}

PyMethodDef methods[] = {
    {"supported_levels", supported_levels, METH_NOARGS,
     "The x86-64 levels (x86-64, x86-64-v2, x86-64-v3, x86-64-v4) this CPU and OS run, lowest first; () elsewhere."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu", "Which CPU levels this machine runs (bppsa chooses its variant)",
                      -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__cpu() { return PyModule_Create(&module); }
