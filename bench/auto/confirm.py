#!/usr/bin/env python3
"""Re-measures the shapes where the step cost model's `auto` missed its 10 % limit (issue 45, item 3).

    bench/auto/confirm.py [--dir bench/results/cpu/auto] [--rounds 5] [--limit 1.10] [--only-shapes N]

A sweep (bench/auto/run.sh) times each (shape, method) once, in one fresh process, and a step of
under a millisecond varies by up to 2× between processes. At every shape of DIR's sweeps where the
pick of DIR/model.json (as bench/auto/fit_auto.py computes it) measured more than --limit times the
fastest bppsa method, this runs the pick and that method again, alternating, --rounds fresh worker
processes each (bench/peers/peers_worker.py, as the sweep ran them), and compares the medians of
their medians. Writes DIR/confirm.jsonl (every worker's record) and DIR/confirm.md (per shape: the
sweep's regret and the re-measured one). Run on a quiet machine; exit 2 on bad arguments or files."""
import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import fit_auto  # noqa: E402
import peers  # noqa: E402
import peers_common as common  # noqa: E402


def misses(folder, limit):
    """[(key, pick, best, sweep regret)] where the model's pick measured over `limit` × the best."""
    sweeps = sorted(glob.glob(os.path.join(folder, "threads-*", "peers.json")) +
                    glob.glob(os.path.join(folder, "threads-*", "steps-*", "peers.json")))
    if not sweeps:
        sys.exit(f"confirm: no sweeps in {folder}/threads-N/; run bench/auto/run.sh first")
    try:
        with open(os.path.join(folder, "model.json")) as f:
            model = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"confirm: {folder}/model.json: {e}; run bench/auto/run.sh first")
    groups = {(g["cell"], g["candidate"], g["threads"]): g["coef"] for g in model["groups"]
              if g["candidate"] in fit_auto.METHODS}
    out = []
    for key, by in sorted(fit_auto.load_points(sweeps).items()):
        pick = fit_auto.choose(groups, key, fit_auto.auto_methods(key[2]))
        r = fit_auto.regret(by, pick, fit_auto.METHODS)
        if r is not None and r > limit:
            best = min((m for m in fit_auto.METHODS if m in by), key=lambda m: by[m])
            out.append((key, pick, best, r))
    return out


def commit():
    """The checkout's commit (and whether its sources differ), as the other benchmarks name it."""
    import subprocess
    root = os.path.join(HERE, "..", "..")
    try:
        rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "diff", "--quiet", "HEAD", "--", "include", "src", "python"]).returncode
        return rev + (" (uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(HERE, "..", "results", "cpu", "auto"))
    ap.add_argument("--rounds", type=int, default=5, help="fresh workers per method and shape")
    ap.add_argument("--limit", type=float, default=1.10)
    ap.add_argument("--only-shapes", type=int, default=0, help="the first N shapes only (0: all)")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    todo = misses(a.dir, a.limit)
    if a.only_shapes:
        todo = todo[:a.only_shapes]
    # the sweep's worker settings (bench/peers/peers.py's defaults, --grid cost-model)
    w = types.SimpleNamespace(reps=9, warmup=3, budget=4.0, cap=10.0, timeout=600.0, grid="cost-model",
                              perturb_jax_bppsa=0.0, threads=1)
    records, rows = [], []
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for key, pick, best, sweep_regret in todo:
            cell, hidden, steps, batch, features, threads = key
            cfg = common.config(cell.upper(), hidden, steps, batch, features)
            data = os.path.join(tmp, "data.npz")
            peers.make_data(cfg, data)
            w.threads = threads
            medians = {pick: [], best: []}
            for _ in range(a.rounds):
                for m in (pick, best):
                    rec = peers.run_worker(f"bppsa.nn {m}", cfg, data, w, check=False)
                    rec["threads"] = threads
                    records.append(rec)
                    if "step" in rec:
                        medians[m].append(1e3 * rec["step"]["median"])
                    else:
                        print(f"confirm: {cfg['name']} {m}: {rec.get('error') or rec.get('skipped')}", file=sys.stderr)
            ms = {m: statistics.median(v) if v else float("nan") for m, v in medians.items()}
            again = ms[pick] / ms[best]
            rows.append((key, pick, best, sweep_regret, ms, again, medians))
            print(f"{cell} H{hidden} I{features} T{steps} B{batch} {threads} thr: {pick} {ms[pick]:.3g} ms, {best} "
                  f"{ms[best]:.3g} ms: regret {sweep_regret:.2f} in the sweep, {again:.2f} re-measured", flush=True)
    with open(os.path.join(a.dir, "confirm.jsonl"), "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    held = sum(1 for r in rows if r[5] <= a.limit)
    lines = ["# auto's misses re-measured", "",
             f"bench/auto/confirm.py --rounds {a.rounds} --limit {a.limit}: every shape of the sweeps in this folder "
             f"where the pick of model.json measured more than {a.limit:.2f} × the fastest bppsa method; the pick and "
             f"that method again, alternating, {a.rounds} fresh worker processes each; medians of the workers' "
             f"medians (ms). {time.perf_counter() - t0:.0f} s. bppsa at {commit()}, {os.cpu_count()} cores, load before "
             f"the run {load}.", "",
             "| cell | H | I | T | B | threads | pick | best in the sweep | sweep regret | pick ms | best ms | "
             "re-measured regret | pick's workers | best's workers |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, pick, best, sr, ms, again, med in rows:
        cell, hidden, steps, batch, features, threads = key
        lines.append(f"| {cell} | {hidden} | {features} | {steps} | {batch} | {threads} | {pick} | {best} | {sr:.2f} | "
                     f"{ms[pick]:.3g} | {ms[best]:.3g} | {again:.2f} | "
                     f"{' '.join(f'{v:.3g}' for v in med[pick])} | {' '.join(f'{v:.3g}' for v in med[best])} |")
    lines += ["", f"Re-measured: auto's pick within {a.limit:.2f} × the other at {held} of {len(rows)} shapes."]
    with open(os.path.join(a.dir, "confirm.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"confirm: within {a.limit:.2f} at {held} of {len(rows)} re-measured shapes; wrote {a.dir}/confirm.md")


if __name__ == "__main__":
    main()
