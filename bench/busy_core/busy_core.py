#!/usr/bin/env python3
"""The CPU engine on a shared machine: the backward pass of the paper's RNN (H 20) timed on an
idle machine and with one core kept busy by another process, interleaved in one run.

  scripts/python.sh bench/busy_core/busy_core.py --build build --out bench/results/cpu/busy [--quick]
      [--baseline OTHER_BUILD]   (the same runs with another build's bench_paper, e.g. an older commit)

For each configuration (T, batch, backward method, thread count) it runs `bench_paper time` (a
whole training iteration; the backward median is reported) idle, then with a busy-loop process
pinned to the last core, alternating the two `--rounds` times; the figure per cell is the median
of the rounds' medians. A busy core costs at best a share of that core: the slowdown column is
busy / idle. Writes OUT/busy.json (every sample, the machine, the commits) and OUT/busy.md."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # bench/common
from cpuinfo import cpu_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Hog:
    """A process that keeps one core busy (pinned to it) until stopped."""

    def __init__(self, core):
        self.core = core
        self.proc = None

    def __enter__(self):
        code = f"import os\nos.sched_setaffinity(0, {{{self.core}}})\nwhile True:\n    pass\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(0.2)  # let it reach its loop
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def commit_of(build):
    """The commit a build folder was built from: its COMMIT file (a copied build), else the HEAD
    of the source folder its CMakeCache names."""
    try:
        with open(os.path.join(build, "COMMIT")) as f:
            return f.read().strip()
    except OSError:
        pass
    src = ROOT
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:INTERNAL="):
                    src = line.split("=", 1)[1].strip()
    except OSError:
        pass
    r = subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def time_once(binary, cfg, reps, warmup):
    cmd = [binary, "time", "--cell", "rnn", "--hidden", "20", "--data", "bitstream", "--steps", str(cfg["T"]),
           "--batch", str(cfg["batch"]), "--method", cfg["method"], "--threads", str(cfg["threads"]),
           "--reps", str(reps), "--warmup", str(warmup)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"busy_core: FAILED ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])["backward"]["median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--baseline", help="another build folder whose bench_paper runs beside (e.g. an older commit)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "cpu", "busy"))
    ap.add_argument("--quick", action="store_true", help="smoke test: two configurations, one round")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    if cores < 2:
        sys.exit("busy_core: needs at least 2 cores (one is kept busy)")
    builds = [("this", a.build)] + ([("baseline", a.baseline)] if a.baseline else [])
    for _, b in builds:
        if not os.access(os.path.join(b, "bench_paper"), os.X_OK):
            sys.exit(f"busy_core: {b}/bench_paper missing: build the target bench_paper there")
    threads = min(cores, 2) if a.quick else cores
    configs = [{"T": T, "batch": B, "method": m, "threads": threads}
               for T in ((10, 1000) if a.quick else (10, 100, 1000))
               for B in ((16,) if a.quick else (1, 16))
               for m in (("blelloch",) if a.quick else ("bp", "blelloch", "hybrid"))]
    rounds = 1 if a.quick else a.rounds
    reps, warmup = (5, 2) if a.quick else (21, 5)
    rows = []
    for cfg in configs:
        for name, b in builds:
            samples = {"idle": [], "busy": []}
            for _ in range(rounds):
                samples["idle"].append(time_once(os.path.join(b, "bench_paper"), cfg, reps, warmup))
                with Hog(cores - 1):
                    samples["busy"].append(time_once(os.path.join(b, "bench_paper"), cfg, reps, warmup))
            row = dict(cfg, build=name, idle=statistics.median(samples["idle"]),
                       busy=statistics.median(samples["busy"]), samples=samples)
            rows.append(row)
            print(f"  {name:8s} T {cfg['T']:5d} batch {cfg['batch']:3d} {cfg['method']:8s} threads {cfg['threads']}: "
                  f"idle {1e3 * row['idle']:8.3f} ms, busy {1e3 * row['busy']:8.3f} ms", file=sys.stderr)
    doc = {"machine": f"{cpu_model()}, {cores} cores", "busy_core": cores - 1, "reps": reps, "warmup": warmup,
           "rounds": rounds, "commits": {n: commit_of(b) for n, b in builds}, "quick": a.quick, "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "busy.json.tmp"), "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(os.path.join(a.out, "busy.json.tmp"), os.path.join(a.out, "busy.json"))
    lines = [f"# Backward pass with one core busy ({doc['machine']})", "",
             f"RNN H 20 (the paper's), `bench_paper time`, backward median of {reps} after {warmup} warm-ups, "
             f"median over {rounds} alternating idle/busy rounds; busy: a spinning process pinned to core "
             f"{cores - 1}. Builds: " + ", ".join(f"{n} = commit {c}" for n, c in doc["commits"].items()) + ".", "",
             "| T | batch | backward | threads | build | idle ms | one core busy ms | slowdown |",
             "|---:|---:|---|---:|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['T']} | {r['batch']} | {r['method']} | {r['threads']} | {r['build']} | "
                     f"{1e3 * r['idle']:.3f} | {1e3 * r['busy']:.3f} | {r['busy'] / r['idle']:.2f}× |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "busy.md.tmp"), "w") as f:
        f.write(text)
    os.replace(os.path.join(a.out, "busy.md.tmp"), os.path.join(a.out, "busy.md"))
    print(text)


if __name__ == "__main__":
    main()
