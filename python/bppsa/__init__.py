"""bppsa: back-propagation by parallel scan (Wang, Bai & Pekhimenko, MLSys 2020) for PyTorch.

- ``bppsa.nn.RNN``, ``bppsa.nn.GRU``, ``bppsa.nn.LSTM``: drop-in torch.nn modules whose backward
  pass through time is a BPPSA scan (``import bppsa.nn as nn`` keeps the rest of torch.nn).
- ``bppsa.scan(jacobians, g_last)``: the scan engine itself, differentiable.
"""
from . import _C, _native
from . import nn
from ._scan import scan

__version__ = _C.__version__
__all__ = ["nn", "scan", "default_threads", "__version__"]


def default_threads():
    """The number of threads bppsa uses when ``threads`` is not given: ``torch.get_num_threads()``
    now (``threads=0`` means every core this process may use)."""
    return _native.resolve_threads(None)
