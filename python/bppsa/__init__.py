"""bppsa: back-propagation by parallel scan (Wang, Bai & Pekhimenko, MLSys 2020) for PyTorch.

- ``bppsa.nn.RNN``, ``bppsa.nn.GRU``, ``bppsa.nn.LSTM``: drop-in torch.nn modules whose backward
  pass through time is a BPPSA scan (``import bppsa.nn as nn`` keeps the rest of torch.nn).
- ``bppsa.scan(jacobians, g_last)``: the scan engine itself, differentiable.
- ``bppsa.load_cost_model(path)``, ``bppsa.cost_model_source()``: the step cost model behind
  ``backward='auto'`` (docs/cost_model.md).
"""
from . import _native
from ._native import _C
from . import nn
from ._scan import scan
from ._auto import cost_model_source, load_cost_model

__version__ = _C.__version__
__all__ = ["nn", "scan", "default_threads", "build_info", "load_cost_model", "cost_model_source", "team_threads",
           "set_team_threads", "__version__"]


def build_info():
    """What this process runs: the native engine's ``version``, the CPU level it was compiled for
    (``cpu_isa``, its flag ``cpu_flag``), what Eigen vectorises with there (``vectorization``),
    ``cuda``; the ``variant`` module loaded, the x86-64 levels this CPU runs (``cpu_supports``,
    best last; ``cpu_best``), the variants ``installed``, and ``override`` ($BPPSA_CPU_ISA or None);
    the threads the engine's teams run on (``team_threads``) and the OpenMP runtime's file
    (``openmp_runtime``)."""
    loaded = _native.LOADED
    info = dict(_C.build_info())
    info.update(variant=_C.__name__, cpu_supports=list(loaded.supported),
                cpu_best=loaded.supported[-1] if loaded.supported else None,
                installed=list(loaded.installed), override=loaded.override,
                team_threads=_C.team_threads(), openmp_runtime=_C.openmp_runtime())
    return info


def team_threads():
    """The threads the engine's teams run on: ``"openmp"`` (the default: the OpenMP runtime's,
    those of torch's own ops) or ``"own"`` (bppsa's pool)."""
    return _C.team_threads()


def set_team_threads(threads):
    """Chooses the threads the engine's teams run on, for the whole process: ``"openmp"`` (the
    OpenMP runtime's threads, shared with torch's ops, whose idle threads otherwise spin beside
    bppsa's for milliseconds after each op) or ``"own"`` (bppsa's pool, whose caller never waits for
    a thread the OS has not started: better when another process holds a core). The environment
    variable ``BPPSA_TEAM_THREADS`` sets it at import. Any other string raises ValueError, anything
    but a string TypeError."""
    if not isinstance(threads, str):
        raise TypeError(f"bppsa.set_team_threads: threads is {type(threads).__name__}; pass 'openmp' or 'own'")
    _C.set_team_threads(threads, "bppsa.set_team_threads(threads)")


def default_threads():
    """The number of threads bppsa uses when ``threads`` is not given: ``torch.get_num_threads()``
    now (``threads=0`` means every core this process may use)."""
    return _native.resolve_threads(None)
