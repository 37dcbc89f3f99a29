#!/usr/bin/env python3
"""Checks bench/headline/headline.py's file against what the lease issue asks of it, on the CPU (CI has no
GPU): runs the script with --device cpu on the T ≤ 1000 rows, then reads headline.json as a reader
of the file would: the top-level fields, one row per (model, H, B, T, side) for every configuration
named, the measured fields' types, bppsa.nn's gradients against torch.nn's (max_rel_err ≤ 1e-4 in
float32 on the same weights), the graphed sides as error rows (no CUDA graphs on a CPU), and the
Markdown table; then a run with no budget, every row an error saying so.

  python3 bench/headline/test_headline.py [--out DIR]   (the interpreter must import torch and bppsa)"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# What the issue names: (model, H, B, T), the sides, the fields.
WANTED = [("rnn", 20, 16, 1000), ("rnn", 20, 16, 30000), ("gru", 20, 16, 1000), ("gru", 20, 16, 10000),
          ("lstm", 64, 16, 1000), ("rnn", 256, 16, 1000)]
SIDES = ["torch.nn", "torch.nn graphed", "bppsa.nn", "bppsa.nn graphed"]
TOP = ["commit", "dirty", "gpu", "driver", "cuda", "torch", "cudnn", "rows"]
MEASURED = ["forward_ms", "backward_ms", "iteration_ms", "gpu_ms", "forward_us_per_step", "max_rel_err"]
MAX_STEPS = 1000


def run(out, *extra):
    cmd = [sys.executable, os.path.join(HERE, "headline.py"), "--device", "cpu", "--out", out,
           "--max-steps", str(MAX_STEPS), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.exit(f"test_headline: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    with open(os.path.join(out, "headline.json")) as f:
        doc = json.load(f)
    with open(os.path.join(out, "headline.md")) as f:
        return doc, f.read()


def check(cond, what, failures):
    if not cond:
        failures.append(what)


def check_measured(doc, md, failures):
    for k in TOP:
        check(k in doc, f"top-level field {k!r} missing", failures)
    check(bool(re.fullmatch(r"[0-9a-f]{40}", doc.get("commit") or "")), f"commit {doc.get('commit')!r} is no hash",
          failures)
    check(isinstance(doc.get("dirty"), bool), f"dirty {doc.get('dirty')!r} is not a boolean", failures)
    check(doc.get("gpu") is None and doc.get("driver") is None, "a CPU run names a GPU or a driver", failures)
    rows = doc.get("rows", [])
    keys = [(r.get("model"), r.get("H"), r.get("B"), r.get("T"), r.get("side")) for r in rows]
    check(len(keys) == len(set(keys)), "a (model, H, B, T, side) appears twice", failures)
    want = [(m, h, b, t, s) for m, h, b, t in WANTED if t <= MAX_STEPS for s in SIDES]
    check(sorted(keys) == sorted(want), f"rows {sorted(keys)} are not {sorted(want)}", failures)
    for r in rows:
        name = f"{r.get('model')} H{r.get('H')} T{r.get('T')} {r.get('side')}"
        check(all(isinstance(r.get(k), int) for k in ("H", "B", "T")), f"{name}: H, B, T are not numbers", failures)
        if r.get("side", "").endswith("graphed"):
            check("CUDA" in r.get("error", ""), f"{name}: a graphed side on the CPU is not an error naming CUDA",
                  failures)
            continue
        check("error" not in r, f"{name}: {r.get('error')}", failures)
        for k in ("forward_ms", "backward_ms", "iteration_ms", "forward_us_per_step"):
            check(isinstance(r.get(k), float) and r[k] > 0, f"{name}: {k} = {r.get(k)!r}", failures)
        check(r.get("iteration_ms", 0) >= r.get("forward_ms", 1), f"{name}: iteration shorter than its forward",
              failures)
        check("gpu_ms" in r and r["gpu_ms"] is None, f"{name}: gpu_ms on the CPU is {r.get('gpu_ms')!r}", failures)
        if r["side"] == "bppsa.nn":
            err = r.get("max_rel_err")
            check(isinstance(err, float) and err <= 1e-4, f"{name}: gradients against torch.nn's: {err!r}", failures)
        else:
            check("max_rel_err" in r and r["max_rel_err"] is None, f"{name}: the reference has an error", failures)
    table = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| model")]
    check(len(table) == len(rows), f"the Markdown table has {len(table)} rows for {len(rows)}", failures)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "build", "headline-cpu"))
    a = ap.parse_args()
    failures = []
    doc, md = run(a.out, "--reps", "2", "--warmup", "1", "--budget", "1500")  # a slow machine is no failure
    check_measured(doc, md, failures)
    spent, _ = run(a.out + "-no-budget", "--budget", "0")
    check(spent["rows"] and all("budget" in r.get("error", "") for r in spent["rows"]),
          "with --budget 0 a row was measured or its error does not say why", failures)
    if failures:
        print("test_headline: FAILED\n  " + "\n  ".join(failures))
        return 1
    print(f"test_headline: the headline file of {len(doc['rows'])} rows has every field; bppsa.nn's gradients within "
          f"{max(r['max_rel_err'] for r in doc['rows'] if r['side'] == 'bppsa.nn'):.1e} of torch.nn's; "
          f"{len(spent['rows'])} rows past the budget are errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
