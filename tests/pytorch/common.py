"""Shared by the PyTorch cross-checks: the relative error they all use, running the bppsa
binary, and the skip (exit 77 for CTest) when PyTorch is missing."""
import subprocess
import sys

import numpy as np


def require_torch():
    """Imports torch, or exits 77 (CTest: skipped) with the Debian package to install."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("PyTorch is not installed for this interpreter (scripts/setup.sh makes the project's environment, with PyTorch); skipping")
        sys.exit(77)


def rel_err(a, b):
    """max |a − b| / max |b| (the absolute error when b is all zeros)."""
    den = float(np.max(np.abs(b))) if b.size else 0.0
    num = float(np.max(np.abs(a - b))) if b.size else 0.0
    return num / den if den > 0 else num


def worst_grad_error(gpath, model, loss):
    """The largest rel_err over the loss and every parameter gradient of `model` (after its
    loss.backward()) against the safetensors bppsa wrote to gpath, as (name, error); None
    (and a message naming it) when the loss or a gradient is missing: callers count that as a
    failed check."""
    import safetensors_np as st

    g, _ = st.load(gpath)
    if "loss" not in g:
        print(f"missing loss in {gpath}")
        return None
    errs = {"loss": rel_err(g["loss"].astype(np.float64), np.float64(loss.item()))}
    for name, p in model.named_parameters():
        if name not in g:
            print(f"missing gradient {name} in {gpath}")
            return None
        errs[name] = rel_err(g[name].astype(np.float64), p.grad.numpy().astype(np.float64))
    return max(errs.items(), key=lambda kv: kv[1])


def run(cmd):
    """Runs cmd; on failure prints it with its output and exits 1."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAILED:", " ".join(cmd), "\n", r.stdout, r.stderr)
        sys.exit(1)
    return r.stdout
