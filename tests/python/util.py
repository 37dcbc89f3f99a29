# Helpers of the bppsa Python tests: the torch.nn twin of a bppsa module, gradients of both,
# relative errors.
import torch

import bppsa

TORCH = {"RNN": torch.nn.RNN, "GRU": torch.nn.GRU, "LSTM": torch.nn.LSTM}
BPPSA = {"RNN": bppsa.nn.RNN, "GRU": bppsa.nn.GRU, "LSTM": bppsa.nn.LSTM}


def twins(kind, *args, seed=0, dtype=torch.float32, backward="auto", threads=0, **kwargs):
    """torch.nn.<kind> and bppsa.nn.<kind> built from the same seed (so the same weights)."""
    torch.manual_seed(seed)
    ref = TORCH[kind](*args, **kwargs).to(dtype)
    torch.manual_seed(seed)
    ours = BPPSA[kind](*args, backward=backward, threads=threads, **kwargs).to(dtype)
    return ref, ours


def rel_err(a, b):
    """max |a − b| / max |b| (the absolute error when b is all zero)."""
    a, b = a.detach().double(), b.detach().double()
    scale = b.abs().max().item() if b.numel() else 0.0
    diff = (a - b).abs().max().item() if b.numel() else 0.0
    return diff / scale if scale > 0 else diff


def flat_state(h):
    return list(h) if isinstance(h, tuple) else [h]


def run(module, x, hx, head):
    """Output, final states and the gradients of a scalar loss that uses the output at every step
    (weighted by `head`) and the final states."""
    out, h = module(x, hx)
    loss = (out * head).sum() + sum((s * (i + 2)).sum() for i, s in enumerate(flat_state(h)))
    inputs = [t for t in [x] + flat_state(hx if hx is not None else ()) if t is not None and t.requires_grad]
    grads = torch.autograd.grad(loss, inputs + list(module.parameters()))
    return out, flat_state(h), grads
