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
__all__ = ["nn", "scan", "default_threads", "build_info", "load_cost_model", "cost_model_source", "__version__"]


def build_info():
    """What this process runs: the native engine's ``version``, the CPU level it was compiled for
    (``cpu_isa``, its flag ``cpu_flag``), what Eigen vectorises with there (``vectorization``),
    ``cuda``; the ``variant`` module loaded, the x86-64 levels this CPU runs (``cpu_supports``,
    best last; ``cpu_best``), the variants ``installed``, and ``override`` ($BPPSA_CPU_ISA or None)."""
    loaded = _native.LOADED
    info = dict(_C.build_info())
    info.update(variant=_C.__name__, cpu_supports=list(loaded.supported),
                cpu_best=loaded.supported[-1] if loaded.supported else None,
                installed=list(loaded.installed), override=loaded.override)
    return info


def default_threads():
    """The number of threads bppsa uses when ``threads`` is not given: ``torch.get_num_threads()``
    now (``threads=0`` means every core this process may use)."""
    return _native.resolve_threads(None)
