#!/usr/bin/env python3
"""What keeping a small record between calls saves (BPPSA_KEPT_RECORD_MB, docs/pytorch.md
"Memory"): bppsa.nn's forward and backward of the paper's RNN (H 20, input 1, one layer,
backward='bp', T 1000) with the record freed after each backward (0), kept within the default
budget (16) and within a larger one (64), at each batch and thread count.

  scripts/python.sh bench/pytorch/kept_record.py [--batch 4,16,64] [--threads 1,2] [--budgets 0,16,64]
                                                  [--reps 40] [--runs 3]

Each (budget, batch, threads) runs in `--runs` processes of its own (the budget is the process's;
whether glibc returns a freed record to the kernel depends on the process's allocation history,
so a process's figure can differ from the next one's), each timing `--reps` steps after 5
warm-ups; the table gives the median over the processes of their medians, in ms."""
import argparse
import os
import statistics
import subprocess
import sys
import time


def worker(batch, threads, steps, reps):
    import torch
    import bppsa.nn as bnn
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    m = bnn.RNN(1, 20, backward="bp", threads=threads)
    head = torch.nn.Linear(20, 10)
    x, y = torch.randn(steps, batch, 1), torch.randint(0, 10, (batch,))

    def step():
        t0 = time.perf_counter()
        out, _ = m(x)
        loss = torch.nn.functional.cross_entropy(head(out[-1]), y)
        t1 = time.perf_counter()
        loss.backward()
        return t1 - t0, time.perf_counter() - t1

    for _ in range(5):
        step()
    f, b = zip(*[step() for _ in range(reps)])
    print(f"{1e3 * statistics.median(f):.3f} {1e3 * statistics.median(b):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", default="4,16,64")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--budgets", default="0,16,64")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker[0], a.worker[1], a.steps, a.reps)
    print(f"RNN H20 I1 T{a.steps}, backward='bp': forward / backward ms, the median of {a.runs} processes' "
          f"medians of {a.reps} steps")
    print("| batch | threads | " + " | ".join(f"kept {k} MiB" for k in a.budgets.split(",")) + " |")
    print("|---|---|" + "---|" * len(a.budgets.split(",")))
    for b in a.batch.split(","):
        for t in a.threads.split(","):
            cells = []
            for k in a.budgets.split(","):
                env = dict(os.environ, BPPSA_KEPT_RECORD_MB=k)
                runs = [subprocess.run([sys.executable, __file__, "--steps", str(a.steps), "--reps", str(a.reps),
                                        "--worker", b, t], env=env, capture_output=True, text=True,
                                       check=True).stdout.split() for _ in range(a.runs)]
                fwd, bwd = (statistics.median(float(r[i]) for r in runs) for i in (0, 1))
                cells.append(f"{fwd:.3f} / {bwd:.3f}")
            print(f"| {b} | {t} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
