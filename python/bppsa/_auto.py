"""backward='auto' at the module level: unless the step cost model (bppsa/nn/cost_model.hpp, fitted by
bench/auto/fit_auto.py) predicts bppsa's fastest method at least HANDOFF_MARGIN faster than torch.nn's
own kernels for a module's training step, the module runs torch.nn's forward and autograd (it is a
subclass of the torch.nn class). CPU tensors in eager mode only; elsewhere bppsa's engine runs as asked."""
import math

from . import _native

# bppsa's engine runs only where it is predicted at least 1.10× faster than torch.nn: a smaller
# predicted gain is within the fit's errors, and torch.nn's kernels are what the module stands in for
# (docs/cost_model.md). bench/auto/fit_auto.py reports with the same margin.
HANDOFF_MARGIN = 1.10
_CACHE_SIZE = 64  # decisions kept per module, by (steps, batch, threads, model generation)
BPPSA_METHODS = ("bp", "hybrid", "blelloch")
_generation = 0  # bumped by load_cost_model: every module's cached decisions are then stale


def load_cost_model(path=""):
    """Replaces the step cost model behind backward='auto' for the whole process by the model.json
    bench/auto/fit_auto.py wrote (also the CLI's and the C++ library's; "" returns to
    BPPSA_COST_MODEL or the built-in fit). Raises OSError/ValueError naming the file on a fault."""
    global _generation
    _native._C.load_cost_model(path)
    _generation += 1


def cost_model_source():
    """Where the model in use came from: a file, "BPPSA_COST_MODEL=<path>", "built-in (<machine>)"
    or "none" (no fit: bppsa's engine always runs, its methods chosen by the batch rule)."""
    return _native._C.cost_model_source()


def predictions(module, steps, batch, threads):
    """Predicted ms of one training step of the whole module: {candidate: ms}, NaN where the model
    has no fit. bppsa's layer-directions each resolve their own method, so "bppsa" sums the
    prediction of the method each one's auto runs (the least predicted; BP at T 1). "torch.nn spans": whether torch.nn's fit spans every
    layer's shape (cost_model_spans)."""
    total = {"bppsa": 0.0, "torch.nn": 0.0, "torch.nn spans": True}
    for spec in module._specs:  # each layer-direction's sizes
        shape = (spec.cell, spec.input_size, spec.hidden_size, spec.proj_size, steps, batch, threads)
        p = _native._C.predict_step(*shape)
        method = _native._C.auto_method(*shape)  # what the library's auto runs for this layer
        total["bppsa"] += p[method] if method in BPPSA_METHODS else math.nan
        total["torch.nn"] += p["torch.nn"]
        total["torch.nn spans"] = total["torch.nn spans"] and p["torch.nn spans"]
    return total


def runs_torch(module, steps, batch, threads):
    """Whether backward='auto' runs torch.nn's implementation for this call's shape: bppsa not
    predicted at least HANDOFF_MARGIN faster than torch.nn by a fit that spans the shape (never where
    the model lacks either prediction, nor where torch.nn's is extrapolated: T, B or H outside what
    its fit measured)."""
    cache = module.__dict__.setdefault("_bppsa_auto_cache", {})
    key = (steps, batch, threads, _generation)
    hit = cache.get(key)
    if hit is None:
        p = predictions(module, steps, batch, threads)
        hit = bool(p["torch.nn spans"] and p["torch.nn"] < HANDOFF_MARGIN * p["bppsa"])  # NaN compares False
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = hit
    return hit
