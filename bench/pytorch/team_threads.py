#!/usr/bin/env python3
"""Whose threads run bppsa's teams in a PyTorch process (docs/pytorch.md, "The threads"): one
layer's training step (forward, loss, backward, Adam) with the engine's teams on the OpenMP runtime's
threads (`BPPSA_TEAM_THREADS=openmp`, the package's default) against bppsa's own pool (`own`), and
torch.nn beside them; every measurement in a fresh process, the three alternating `--rounds` times.

  scripts/python.sh bench/pytorch/team_threads.py [--shapes "LSTM:512:28:16:bp,…"] [--threads 2]
                                                  [--rounds 5] [--seconds 2] [--out FILE.md]

A shape is CELL:H:T:B:METHOD (input size 28). Each process runs steps for `--seconds` after two
warm-up steps and reports its median; a cell of the table is the median over the rounds (ms), and
the ratios are own / openmp and torch.nn / openmp (above 1: openmp faster)."""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # bench/common
from cpuinfo import cpu_model  # noqa: E402

DEFAULT_SHAPES = ("LSTM:512:28:16:bp,LSTM:512:28:64:bp,RNN:512:28:64:bp,RNN:1024:100:16:bp,GRU:256:100:16:bp,"
                  "LSTM:64:100:16:bp,LSTM:1024:100:1:bp,GRU:256:1:1:bp,RNN:20:1000:16:auto,GRU:16:1000:64:auto")
RUNS = ("openmp", "own", "torch.nn")


def worker(run, cell, hidden, steps, batch, method, threads, seconds):
    import torch
    import bppsa.nn as bnn
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    m = getattr(torch.nn, cell)(28, hidden) if run == "torch.nn" else \
        getattr(bnn, cell)(28, hidden, backward=method, threads=threads)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x = torch.randn(steps, batch, 28)
    times = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        y, _ = m(x)
        y.square().mean().backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    ran = getattr(m, "last_backward", None) if run != "torch.nn" else None
    print(json.dumps({"ms": 1e3 * statistics.median(times[2:]), "steps": len(times) - 2, "ran": ran}))


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 5 or parts[0] not in ("RNN", "GRU", "LSTM") or not all(p.isdigit() for p in parts[1:4]):
            sys.exit(f"team_threads: --shapes item {item!r}: expected CELL:H:T:B:METHOD, e.g. LSTM:512:28:16:bp")
        shapes.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3]), parts[4]))
    return shapes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--out", help="also write the table (with the run's facts) to this Markdown file")
    ap.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        run, cell, h, t, b, method, threads = a.worker
        worker(run, cell, int(h), int(t), int(b), method, int(threads), a.seconds)
        return
    if a.rounds < 1:
        sys.exit(f"team_threads: --rounds {a.rounds}: expected 1 or more")
    shapes = parse_shapes(a.shapes)
    import torch
    import bppsa
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    lines = [f"{cpu_model(platform.processor() or platform.machine())}, {os.cpu_count()} cores, {a.threads} threads; "
             f"torch {torch.__version__}, bppsa {bppsa.__version__} ({bppsa.build_info()['variant']}), "
             f"OpenMP runtime {bppsa.build_info()['openmp_runtime']}; commit {commit}; "
             f"median of {a.rounds} fresh processes each, alternating, {a.seconds:g} s of steps per process.", "",
             "| shape | method | openmp ms | own ms | torch.nn ms | own / openmp | torch.nn / openmp |",
             "|---|---|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    records = []
    for cell, h, t, b, method in shapes:
        ms = {r: [] for r in RUNS}
        ran = set()
        for _ in range(a.rounds):
            for r in RUNS:
                env = dict(os.environ, BPPSA_TEAM_THREADS="own" if r == "own" else "openmp")
                cmd = [sys.executable, __file__, "--seconds", str(a.seconds),
                       "--worker", r, cell, str(h), str(t), str(b), method, str(a.threads)]
                out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                                env=env).stdout.splitlines()[-1])
                ms[r].append(out["ms"])
                got = out["ran"]
                ran.update(str(g) for g in (got if isinstance(got, list) else [got] if got else []))
        med = {r: statistics.median(v) for r, v in ms.items()}
        shown = method + (f" ({'/'.join(sorted(ran))})" if method == "auto" and ran else "")
        row = (f"| {cell} H {h} T {t} B {b} | {shown} | {med['openmp']:.2f} | {med['own']:.2f} | "
               f"{med['torch.nn']:.2f} | {med['own'] / med['openmp']:.2f} | {med['torch.nn'] / med['openmp']:.2f} |")
        lines.append(row)
        records.append({"cell": cell, "hidden": h, "steps": t, "batch": b, "method": method, "ran": sorted(ran),
                        "ms": ms})
        print(row, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("# bppsa's teams on OpenMP's threads or its own pool (bench/pytorch/team_threads.py)\n\n")
            f.write("\n".join(lines) + "\n")
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump({"threads": a.threads, "rounds": a.rounds, "seconds": a.seconds, "commit": commit,
                       "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
