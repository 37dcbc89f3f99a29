#!/usr/bin/env python3
"""Per-call cost of a T 1 call (a decoder step): torch.nn.X against bppsa.nn.X, GRU/LSTM/RNN at
H 256, T 1, batch 1, in one process with the same weights. Forward alone (under no_grad, as a
decoder at inference) and forward + backward (output.sum().backward(), every parameter
gradient). bppsa.nn twice: as constructed by default (backward='auto', which may run torch.nn's
implementation: the `auto ran` column) and with backward='bp' (bppsa's engine always). Each
figure is the median over --rounds rounds of --calls calls; the sides run interleaved round by
round, so that a slow spell of the machine hits all of them.

    scripts/python.sh bench/pytorch/pytorch_per_call.py [--threads 2] [--hidden 256] [--rounds 15] [--calls 200]
"""
import argparse
import os
import platform
import statistics
import time

import torch

import bppsa
import bppsa.nn


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--cells", default="GRU,LSTM,RNN")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # bppsa flushes subnormals; so must the baseline (see pytorch.py)
    H = args.hidden
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, threads {args.threads}, "
          f"torch {torch.__version__}, bppsa {bppsa.__version__}; H {H}, T 1, batch 1; "
          f"µs per call, median of {args.rounds} rounds × {args.calls} calls")
    print(f"{'cell':5} {'pass':8} {'torch.nn':>9} {'auto':>9} {'ratio':>6} {'engine':>9} {'ratio':>6}  auto ran")
    for cell in args.cells.split(","):
        torch.manual_seed(0)
        ref = getattr(torch.nn, cell)(H, H)
        auto = getattr(bppsa.nn, cell)(H, H)
        engine = getattr(bppsa.nn, cell)(H, H, backward="bp")
        auto.load_state_dict(ref.state_dict())
        engine.load_state_dict(ref.state_dict())
        x = torch.randn(1, 1, H)

        def fwd(m):
            with torch.no_grad():
                m(x)

        def fwd_bwd(m):
            out = m(x)[0]
            out.sum().backward()

        sides = (("torch", ref), ("auto", auto), ("engine", engine))
        for name, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
            times = {side: [] for side, _ in sides}
            for _, m in sides:
                for _ in range(20):
                    fn(m)
            for _ in range(args.rounds):
                for side, m in sides:
                    t0 = time.perf_counter()
                    for _ in range(args.calls):
                        fn(m)
                    times[side].append((time.perf_counter() - t0) / args.calls * 1e6)
            a, b, c = (statistics.median(times[side]) for side, _ in sides)
            ran = "torch.nn" if auto._auto_runs_torch(x) else "bppsa"
            print(f"{cell:5} {name:8} {a:9.1f} {b:9.1f} {b / a:6.2f} {c:9.1f} {c / a:6.2f}  {ran}", flush=True)

if __name__ == "__main__":
    main()
