#!/usr/bin/env python3
"""Forward and backward of one recurrent layer at small batches (docs/performance.md, "Batch 1"):
torch.nn against bppsa.nn with backward='bp', each in a process of its own, 2 threads by default.

  scripts/python.sh bench/pytorch/small_batch.py [--cell LSTM] [--hidden 1024] [--batch 1,2,3,4]
                                                 [--steps 1000] [--input 28] [--threads 2] [--reps 5]

Each process times `--reps` forward + backward passes (y.sum().backward()) after one warm-up; the
table gives their medians in ms."""
import argparse
import json
import statistics
import subprocess
import sys
import time


def worker(which, cell, hidden, batch, steps, features, threads, reps):
    import torch
    import bppsa.nn as bnn
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    m = getattr(torch.nn, cell)(features, hidden) if which == "torch.nn" else \
        getattr(bnn, cell)(features, hidden, backward="bp", threads=threads)
    x = torch.randn(steps, batch, features)
    fw, bw = [], []
    for r in range(reps + 1):
        t0 = time.perf_counter()
        y, _ = m(x)
        t1 = time.perf_counter()
        y.sum().backward()
        t2 = time.perf_counter()
        if r:
            fw.append(t1 - t0)
            bw.append(t2 - t1)
    print(json.dumps({"forward_ms": 1e3 * statistics.median(fw), "backward_ms": 1e3 * statistics.median(bw)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cell", default="LSTM", choices=("RNN", "GRU", "LSTM"))
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--batch", default="1,2,3,4", help="comma-separated batch sizes")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--input", type=int, default=28)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.cell, a.hidden, int(a.worker[1]), a.steps, a.input, a.threads, a.reps)
        return
    try:
        batches = [int(b) for b in a.batch.split(",")]
    except ValueError:
        sys.exit(f"small_batch: --batch {a.batch!r}: expected comma-separated numbers such as 1,2,4")
    print(f"{a.cell} H {a.hidden}, input {a.input}, T {a.steps}, {a.threads} threads; median ms of {a.reps}\n")
    print("| batch | torch.nn forward | torch.nn backward | bppsa bp forward | bppsa bp backward |")
    print("|---:|---:|---:|---:|---:|")
    for b in batches:
        row = []
        for which in ("torch.nn", "bppsa"):
            cmd = [sys.executable, __file__, "--cell", a.cell, "--hidden", str(a.hidden), "--steps", str(a.steps),
                   "--input", str(a.input), "--threads", str(a.threads), "--reps", str(a.reps),
                   "--worker", which, str(b)]
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            row += [f"{out['forward_ms']:.1f}", f"{out['backward_ms']:.1f}"]
        print(f"| {b} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
