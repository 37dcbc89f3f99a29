#!/usr/bin/env python3
"""bppsa.nn's forward + backward with each CPU variant of the installed package (bppsa._C_<level>, chosen
with BPPSA_CPU_ISA), one process per variant and round, the variants interleaved round by round so that a
slow spell of the machine hits each. Each figure is the median over rounds of each round's median call.

    scripts/python.sh bench/pytorch/pytorch_cpu_variants.py [--cell GRU] [--hidden 64] [--steps 100] [--batch 16]
        [--backward auto] [--threads 2] [--rounds 5] [--calls 20]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

WORKER = r"""
import json, statistics, sys, time, torch, bppsa
cell, hidden, steps, batch, backward, threads, calls = sys.argv[1:8]
hidden, steps, batch, threads, calls = int(hidden), int(steps), int(batch), int(threads), int(calls)
torch.set_num_threads(threads)
torch.manual_seed(0)
m = getattr(bppsa.nn, cell)(hidden, hidden, backward=backward)
x = torch.randn(steps, batch, hidden)
times = []
for i in range(calls + 3):
    t0 = time.perf_counter()
    m(x)[0].square().sum().backward()
    if i >= 3:  # warm-up calls
        times.append(time.perf_counter() - t0)
print(json.dumps({"info": bppsa.build_info(), "median_s": statistics.median(times)}))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cell", default="GRU")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--backward", default="auto")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()

    def run(level):
        env = dict(os.environ)
        if level is None:
            env.pop("BPPSA_CPU_ISA", None)
        else:
            env["BPPSA_CPU_ISA"] = level
        out = subprocess.run([sys.executable, "-c", WORKER, args.cell, str(args.hidden), str(args.steps),
                              str(args.batch), args.backward, str(args.threads), str(args.calls)],
                             env=env, capture_output=True, text=True, check=True).stdout
        return json.loads(out.splitlines()[-1])

    info = run(None)["info"]
    levels = [lv for lv in info["installed"] if lv in info["cpu_supports"] or lv in ("native", "generic")]
    samples = {lv: [] for lv in levels}
    vector = {}
    for _ in range(args.rounds):
        for lv in levels:
            r = run(lv)
            samples[lv].append(r["median_s"])
            vector[lv] = r["info"]["vectorization"]
    base = statistics.median(samples[levels[0]])
    print(f"bppsa.nn.{args.cell} H {args.hidden} T {args.steps} batch {args.batch}, backward={args.backward}, "
          f"{args.threads} threads, forward + backward; median of {args.rounds} rounds × {args.calls} calls; "
          f"CPU runs {', '.join(info['cpu_supports']) or 'no x86-64 level'}")
    rows = []
    for lv in levels:
        med = statistics.median(samples[lv])
        rows.append({"level": lv, "vectorization": vector[lv], "median_ms": med * 1e3,
                     "min_ms": min(samples[lv]) * 1e3, "max_ms": max(samples[lv]) * 1e3, "speedup": base / med})
        print(f"  {lv:10s} ({vector[lv]:8s}) {med * 1e3:8.2f} ms  (rounds {min(samples[lv]) * 1e3:.2f}–"
              f"{max(samples[lv]) * 1e3:.2f})  {base / med:.2f}× {levels[0]}'s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "cpu_supports": info["cpu_supports"], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
