#!/usr/bin/env python3
"""bppsa.nn's own BP (backward='bp') through time at large states, at 1 and at N threads: the
per-step W_hh^T GEMM and the parameter-gradient GEMMs are shared among the threads.

  scripts/python.sh bench/pytorch/pytorch_bp_threads.py [--threads 1,2] [--reps 5]

For GRU H 256, GRU H 64 and LSTM H 64 (input 1, T 1000, batch 16) it times loss.backward() after
an untimed forward, `--reps` times after one warm-up, and prints the median in ms."""
import argparse
import statistics
import time

import torch

import bppsa


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    print(f"bppsa {bppsa.__version__}, torch {torch.__version__}")
    for threads in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(threads)
        for kind, hidden in (("GRU", 256), ("GRU", 64), ("LSTM", 64)):
            torch.manual_seed(0)
            m = getattr(bppsa.nn, kind)(1, hidden, backward="bp", threads=threads)
            x = torch.randn(1000, 16, 1)
            times = []
            for _ in range(a.reps + 1):
                out, _ = m(x)
                loss = out[-1].sum()
                t0 = time.perf_counter()
                loss.backward()
                times.append(time.perf_counter() - t0)
            print(f"{kind} H{hidden} T1000 B16, {threads} thread(s): backward {statistics.median(times[1:]) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
