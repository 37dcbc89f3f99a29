#!/usr/bin/env python3
"""Where backward='auto' hands a layer to torch.nn, does the bppsa.nn module cost what torch.nn does?
One process, the same weights, the two modules' training steps (the LSTM's forward, the sum of the
last output, backward) alternated in ABBA order after warm-ups; prints the medians in ms and what
auto ran.

    scripts/python.sh bench/auto/handoff.py --hidden 512 --steps 28 --batch 16 [--threads 2] [--reps 15] [--profile]

--profile also prints the ATen operators of one step of each module (torch.profiler): where auto hands
the layer over they are the same (aten::mkldnn_rnn_layer and its backward on this VM). Two fresh
processes do not answer the question: torch.nn's own step at a shape differs between processes by up
to about 1.4x. Nor does plain alternation in one process: on this VM whichever module runs second in
each pair took 1.5x longer at H 1024, T 28, B 1 (both orders measured), hence ABBA
(bench/results/cpu/peers_large/after_refit/README.md)."""
import argparse
import statistics
import time

import torch

import bppsa


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--profile", action="store_true", help="print each module's ATen operators for one step")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    ref = torch.nn.LSTM(1, a.hidden)
    torch.manual_seed(0)
    ours = bppsa.nn.LSTM(1, a.hidden)  # backward='auto'
    x = torch.randn(a.steps, a.batch, 1)

    def step(m):
        out, _ = m(x)
        out[-1].sum().backward()

    for m in (ref, ours):
        for _ in range(3):
            step(m)
    times = {"torch.nn": [], "bppsa.nn auto": []}
    pair = (("torch.nn", ref), ("bppsa.nn auto", ours))
    for rep in range(a.reps):  # ABBA: the second of two calls pays for the first's (oneDNN re-reorders the weights)
        for name, m in (pair if rep % 2 == 0 else pair[::-1]):
            t0 = time.perf_counter()
            step(m)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"LSTM H {a.hidden} T {a.steps} B {a.batch}, {a.threads} threads: torch.nn {med['torch.nn']:.2f} ms, "
          f"bppsa.nn auto {med['bppsa.nn auto']:.2f} ms ({med['bppsa.nn auto'] / med['torch.nn']:.3f}x); "
          f"auto ran {ours.last_backward}")
    if a.profile:
        for name, m in (("torch.nn", ref), ("bppsa.nn auto", ours)):
            with torch.profiler.profile() as prof:
                step(m)
            print(f"{name}:", ", ".join(sorted({e.key for e in prof.key_averages() if e.key.startswith("aten::")})))


if __name__ == "__main__":
    main()
