# The boundary to bppsa's native engine (bppsa._C, the one variant _variants chose for this CPU):
# tensors cross as TensorRef views of their storage (pointer, dtype, shape, strides, device), checked
# again on the C++ side.
import os

import torch

from . import _variants

LOADED = _variants.load()
_C = LOADED.module


def _forked_child():
    """This process is a child multiprocessing forked: its OpenMP runtime may hold the parent's record
    of threads it does not have (libgomp waits for them forever). A child forked after bppsa was
    loaded is known to the library itself (pthread_atfork)."""
    import multiprocessing
    return multiprocessing.parent_process() is not None and multiprocessing.get_start_method(allow_none=True) == "fork"


# The engine's teams run on the OpenMP runtime's threads, those of torch's own ops: torch's idle
# threads spin for milliseconds after each op, and a pool of bppsa's own beside them would compete
# with them for the cores (docs/pytorch.md, "The threads"). $BPPSA_TEAM_THREADS=own chooses the pool,
# as does a forked child whatever the variable says.
_C.set_team_threads(os.environ.get("BPPSA_TEAM_THREADS") or "openmp", "$BPPSA_TEAM_THREADS")
if _forked_child():
    _C.set_team_threads("own")

SUPPORTED_FLOATS = (torch.float32, torch.float64)


# ref(t): a TensorRef view of tensor t (None stays None); the tensor must outlive the call. Native:
# one call per tensor.
ref = _C.tensor_ref


def check_float(what, t, devices=("cpu", "cuda")):
    """Raises for tensors the engine does not take: other dtypes, other devices."""
    if t.dtype not in SUPPORTED_FLOATS:
        raise NotImplementedError(
            f"bppsa: {what} has dtype {t.dtype}; bppsa computes in float32 or float64 "
            f"(convert with .float() or .double())")
    if t.device.type not in devices:
        where = " and ".join(devices)
        raise NotImplementedError(f"bppsa: {what} is on {t.device}; this runs on {where} tensors: move it with "
                                  f"{' or '.join('.' + d + '()' for d in devices)}")
    if t.layout != torch.strided:
        raise NotImplementedError(f"bppsa: {what} has layout {t.layout}; expected a dense (strided) tensor")


# Looked up once: both run at every module call.
_IS_COMPILING = getattr(getattr(torch, "compiler", None), "is_compiling", None)
_IS_EXPORTING = getattr(getattr(torch, "compiler", None), "is_exporting", None)


def is_compiling():
    """torch.compiler.is_compiling(), False on a PyTorch without torch.compiler (< 2.1)."""
    return _IS_COMPILING is not None and _IS_COMPILING()


def is_exporting():
    """torch.compiler.is_exporting(), False on a PyTorch without it."""
    return _IS_EXPORTING is not None and _IS_EXPORTING()


def is_fake(t):
    """t is a FakeTensor (shape propagation, torch.export's non-strict tracing)."""
    fake = getattr(getattr(torch, "_subclasses", None), "FakeTensor", None)
    return fake is not None and isinstance(t, fake)


def in_functorch_transform():
    """A torch.func transform (grad, vjp, jacrev, vmap …) is active: functorch's wrapped tensors
    hold no memory an engine could read."""
    functorch = getattr(torch._C, "_functorch", None)
    peek = getattr(functorch, "peek_interpreter_stack", None)
    return peek is not None and peek() is not None


def in_dispatch_mode():
    """A TorchDispatchMode is active (make_fx and other tracers record through one): operators
    that write through raw pointers would be invisible to it."""
    if not _dispatch_mode_getter:  # imported at the first call (once: it runs at every forward)
        try:
            from torch.utils._python_dispatch import _get_current_dispatch_mode
        except ImportError:
            _get_current_dispatch_mode = None
        _dispatch_mode_getter.append(_get_current_dispatch_mode)
    getter = _dispatch_mode_getter[0]
    return getter is not None and getter() is not None


_dispatch_mode_getter = []


def layer_engine(dtype, cell, input_size, hidden_size, nonlinearity, proj_size=0, device=None):
    """A layer engine for tensors of `dtype` on `device` (None: the CPU; or one CUDA device)."""
    cls = _C.LayerEngineF32 if dtype == torch.float32 else _C.LayerEngineF64
    device = torch.device("cpu") if device is None else torch.device(device)
    index = -1 if device.index is None else device.index
    if device.type == "cuda" and index < 0:
        index = torch.cuda.current_device()
    return cls(cell, input_size, hidden_size, nonlinearity, proj_size, device.type, index)


def stream_of(t):
    """The cudaStream_t that work on t's device is queued on: PyTorch's current stream there (0
    on the CPU, where it is not used)."""
    if t.device.type != "cuda":
        return 0
    return torch.cuda.current_stream(t.device).cuda_stream


def cuda_available():
    """Whether this build of bppsa has its CUDA backend and this machine a CUDA device."""
    return _C.cuda_built() and _C.cuda_device_count() > 0


def affine_scan(dtype):
    """The native scan for `dtype` (its front picks the CPU or CUDA half by the tensors' device)."""
    return _C.affine_scan_f32 if dtype == torch.float32 else _C.affine_scan_f64


MAX_THREADS = _C.MAX_THREADS


def check_threads(where, threads, name="threads"):
    """threads as given, after checking it is None or an int in 0..MAX_THREADS (ValueError naming
    `where` and `name` otherwise): past a few tens of thousands, thread creation aborts the process."""
    if threads is None:
        return None
    if not isinstance(threads, int) or isinstance(threads, bool) or not 0 <= threads <= MAX_THREADS:
        raise ValueError(f"{where}: {name} must be None (follow torch.get_num_threads(), {torch.get_num_threads()} "
                         f"now) or an int in 0..{MAX_THREADS} (0 = every core this process may use, "
                         f"{resolve_threads(0)} here), got {threads!r}")
    return threads


def check_memory(op, what, items, fix):
    """The C++ engine's memory guard for buffers Python is about to allocate: MemoryError with
    the numbers when `items` ((what, bytes) pairs) do not fit in this machine's memory."""
    _C.check_memory(op, what, [(name, float(b)) for name, b in items], fix)


def resolve_threads(threads):
    """None follows torch.get_num_threads() (as torch.nn's modules do), read at each call; 0 means
    every core this process may run on."""
    if threads is None:
        return max(1, torch.get_num_threads())
    if threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
