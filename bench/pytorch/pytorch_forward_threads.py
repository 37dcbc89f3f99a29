#!/usr/bin/env python3
"""bppsa.nn's sequential forward and its BP training step against torch.nn's at large states, at 1
and at N threads: the input projection (one GEMM over every step, in blocks of columns) and each
step's W_hh GEMM (in blocks of rows) are shared among the threads.

  scripts/python.sh bench/pytorch/pytorch_forward_threads.py [--threads 1,2] [--reps 7] [--json FILE]

For each cell at H 256 (input 256, T 300, batch 16 and 64) it times, in one process, the forward
(no autograd record) and the step (forward + loss.backward(), backward='bp') of bppsa.nn and of
torch.nn with the same weights, `--reps` times after one warm-up, and prints medians in ms and
the ratio bppsa / torch. bppsa.nn runs its own engine (BPPSA_COST_MODEL is pinned to a model without
a fit, so that no call is handed to torch.nn)."""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("BPPSA_COST_MODEL",
                      os.path.join(HERE, "..", "..", "tests", "python", "cost_model_none.json"))

import torch  # noqa: E402

import bppsa  # noqa: E402


def median_ms(f, reps):
    f()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", default="16,64")
    ap.add_argument("--cells", default="RNN,GRU,LSTM")
    ap.add_argument("--json", help="also append one JSON line per shape to this file")
    a = ap.parse_args()
    info = bppsa.build_info()
    print(f"bppsa {bppsa.__version__} ({info['variant']}, {info['vectorization']}) from {bppsa.__file__}; "
          f"torch {torch.__version__}", flush=True)
    print("| cell | H | T | B | threads | bppsa fwd ms | torch fwd ms | fwd ratio | bppsa step ms | torch step ms "
          "| step ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    H, T = a.hidden, a.steps
    for threads in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(threads)
        for kind in a.cells.split(","):
            for B in [int(b) for b in a.batch.split(",")]:
                torch.manual_seed(0)
                ref = getattr(torch.nn, kind)(H, H)
                ours = getattr(bppsa.nn, kind)(H, H, backward="bp", threads=threads)
                ours.load_state_dict(ref.state_dict())
                x = torch.randn(T, B, H)

                def fwd(m):
                    with torch.no_grad():
                        m(x)

                def step(m):
                    out, _ = m(x)
                    out.square().mean().backward()

                row = {"cell": kind, "hidden": H, "steps": T, "batch": B, "threads": threads,
                       "bppsa_forward_ms": median_ms(lambda: fwd(ours), a.reps),
                       "torch_forward_ms": median_ms(lambda: fwd(ref), a.reps),
                       "bppsa_step_ms": median_ms(lambda: step(ours), a.reps),
                       "torch_step_ms": median_ms(lambda: step(ref), a.reps),
                       "variant": info["variant"], "bppsa": bppsa.__version__, "torch": torch.__version__}
                print(f"| {kind} | {H} | {T} | {B} | {threads} | {row['bppsa_forward_ms']:.2f} | "
                      f"{row['torch_forward_ms']:.2f} | {row['bppsa_forward_ms'] / row['torch_forward_ms']:.2f} | "
                      f"{row['bppsa_step_ms']:.2f} | {row['torch_step_ms']:.2f} | "
                      f"{row['bppsa_step_ms'] / row['torch_step_ms']:.2f} |", flush=True)
                if a.json:
                    with open(a.json, "a") as f:
                        f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
