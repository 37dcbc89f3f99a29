#!/usr/bin/env python3
"""The Python package on an interpreter without pytest (the GPU machine's Python 3.12 + PyTorch
2.x; run by scripts/gpu_check.sh): bppsa.nn.RNN/GRU/LSTM against torch.nn with the same weights,
outputs and every gradient within 1e-5 relative, for every backward method, and bppsa.scan
against a loop of matrix-vector products. Exit 1 on a mismatch.
    scripts/python.sh tests/python/smoke_vs_torch.py   (the installed package; or PYTHONPATH=<build>/python)"""
import sys

import torch

import bppsa


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def main():
    torch.manual_seed(0)
    worst, failures = 0.0, []
    for kind in ("RNN", "GRU", "LSTM"):
        for backward in ("auto", "blelloch", "hybrid", "bp"):
            ref = getattr(torch.nn, kind)(3, 8, num_layers=2, batch_first=True, bidirectional=True)
            ours = getattr(bppsa.nn, kind)(3, 8, num_layers=2, batch_first=True, bidirectional=True, backward=backward)
            ours.load_state_dict(ref.state_dict())
            x = torch.randn(4, 50, 3)
            xs = [x.clone().requires_grad_(True) for _ in range(2)]
            outs = [m(xi)[0] for m, xi in zip((ref, ours), xs)]
            w = torch.randn_like(outs[0])
            for o in outs:
                (o * w).sum().backward()
            pairs = [("output", outs[1], outs[0]), ("input grad", xs[1].grad, xs[0].grad)]
            pairs += [(n, p.grad, q.grad) for (n, p), q in zip(ours.named_parameters(), ref.parameters())]
            for name, got, want in pairs:
                e = rel(got, want)
                worst = max(worst, e)
                if e > 1e-5:
                    failures.append(f"{kind} {backward} {name}: relative error {e:.2e}")
    n, d, b = 40, 5, 3
    jac = torch.randn(n, d, d) * 0.5
    g = torch.randn(b, d)
    got = bppsa.scan(jac, g)
    s = g
    for i in range(n):
        s = s @ jac[i].T  # s_i = A_i s_(i-1), per sample (rows)
        e = rel(got[i + 1], s)
        worst = max(worst, e)
        if e > 1e-5:
            failures.append(f"scan element {i + 1}: relative error {e:.2e}")
    print(f"bppsa {bppsa.__version__} on Python {sys.version.split()[0]}, torch {torch.__version__}: "
          f"largest relative error {worst:.2e}")
    for f in failures:
        print("FAILED", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
