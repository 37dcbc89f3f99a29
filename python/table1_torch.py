#!/usr/bin/env python3
"""The paper's Table-1 baseline: a layer's dense Jacobian built one basis vector at a time
with PyTorch autograd (one vector-Jacobian product per output element, as in docs/method.md §4).

For each of the first three ops of VGG-11 on one 3×32×32 image (Conv2d 3→64 3×3 pad 1, ReLU,
MaxPool 2×2) it times `--vectors` basis vectors (rows of J = columns of J^T) written into a
dense matrix, and extrapolates to all output elements: the full baseline would take minutes
to hours and, for ReLU, a 17 GB matrix. Prints one JSON object.

    scripts/python.sh python/table1_torch.py --vectors 512 --threads 2
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vectors", type=int, default=512, help="basis vectors timed per op (≥ 16)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repetitions (median reported)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.vectors < 16 or a.repeats < 1:
        sys.exit("table1_torch.py: --vectors must be ≥ 16 and --repeats ≥ 1")
    try:
        import torch
    except ImportError:
        print(json.dumps({"error": "PyTorch is not installed for " + sys.executable}))
        return 77
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x0 = torch.randn(1, 3, 32, 32)
    conv = torch.nn.Conv2d(3, 64, 3, padding=1)
    with torch.no_grad():
        c0 = conv(x0)
        r0 = torch.relu(c0)
    ops = [
        ("conv", conv, x0),
        ("relu", torch.nn.ReLU(), c0),
        ("maxpool", torch.nn.MaxPool2d(2, 2), r0),
    ]
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "vectors": a.vectors,
           "repeats": a.repeats, "ops": {}}
    for name, op, xin in ops:
        x = xin.detach().clone().requires_grad_(True)
        y = op(x)
        n_out, n_in = y.numel(), x.numel()
        k = min(a.vectors, n_out)
        times = []
        for _ in range(a.repeats + 1):  # the first is a warm-up
            rows = torch.empty(k, n_in)
            e = torch.zeros(n_out)
            t0 = time.perf_counter()
            for q in range(k):
                e.zero_()
                e[q] = 1
                (g,) = torch.autograd.grad(y, x, grad_outputs=e.view_as(y), retain_graph=True)
                rows[q] = g.reshape(-1)
            times.append(time.perf_counter() - t0)
        t = statistics.median(times[1:])
        out["ops"][name] = {
            "outputs": n_out, "inputs": n_in, "measured_vectors": k, "seconds_measured": t,
            "samples": times[1:], "seconds_per_vector": t / k, "seconds_extrapolated": t / k * n_out,
            "extrapolated": k < n_out,
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
