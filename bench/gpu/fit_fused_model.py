#!/usr/bin/env python3
"""Fits the fused scan's cost-model constants (FusedModel, src/scan/cuda/fused/options.hpp; the model is plan.hpp) to the
plans a `bench_fused_scan --sweep` timed on a GPU, and says how well the model then predicts and
ranks them.

The model itself is the C++ planner: `bench_fused_model` plans every timed record again with its
choices forced and prints the estimate for each set of constants it is given. The fit minimises
the mean squared log ratio of estimate to measured median over all used records, plus a ranking
term (the ratio's spread inside each configuration), by scipy's Powell on the constants' logs
within bounds. Reported, for the defaults and for the fit:

- the estimate's error: measured / estimate per record (median, 90th percentile, worst);
- the ranking: per configuration, the swept plan the model ranks first and its measured time
  over the fastest swept plan's (1.00 = the model picks the fastest plan that was timed);
- leave-one-configuration-out: the fit on the other configurations, judged on the one left out
  (what to expect on a shape the sweep did not hold);
- the plan the planner chooses on its own with each set of constants, and its measured time when
  the sweep timed that plan (`bench_fused_scan --plan PLAN --model FIT.json` times the fit's).
First it checks that every record is planned again faithfully: the tool's estimate with the
constants the record was planned with equals the one recorded (exit 1 otherwise). scipy comes with
jax in the project's environment.

Usage:
  fit_fused_model.py --tool build/bench_fused_model --sweep SWEEP.jsonl [--out REPORT.md] [--json FIT.json]
                     [--max-median-error R]
Exit 1 when the fit's median max(r, 1/r) is above R (CI: the fit still works on the kept sweep).
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys

import numpy as np
from scipy.optimize import minimize

# FusedModel's constants, the defaults' order, and how far a fit may move them (bounds).
PARAMS = ["launch", "issue", "step", "step_sync", "latency", "latency_sync", "unit", "row",
          "w_load", "l2_bytes", "carry_step"]
BOUNDS = {"launch": (300, 50000), "issue": (0.05, 1.0), "step": (0.1, 5000), "step_sync": (0.1, 5000),
          "latency": (1, 50000), "latency_sync": (0.1, 50000), "unit": (0.02, 50), "row": (0.01, 50),
          "w_load": (10, 200000), "l2_bytes": (1, 1024), "carry_step": (10, 50000)}
# Weight of the ranking term: the error's spread inside each configuration (what picks a plan).
RANK_WEIGHT = 5.0


class Model:
    """bench_fused_model as a function: constants → estimates (µs) per record."""

    def __init__(self, tool, sweep):
        try:
            self.proc = subprocess.Popen([tool, "--sweep", sweep], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True)
        except OSError as e:
            sys.exit(f"fit_fused_model: cannot run the model tool {tool} ({e.strerror}); build it "
                     "(cmake --build build --target bench_fused_model) or pass --tool")
        first = self.proc.stdout.readline()
        if not first:
            sys.exit(f"fit_fused_model: {tool} --sweep {sweep} printed nothing (see its error above)")
        self.records = json.loads(first)["records"]

    def estimates(self, constants):
        self.proc.stdin.write(json.dumps(constants) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit("fit_fused_model: bench_fused_model stopped answering")
        out = json.loads(line)
        self.plans = out["plans"]
        return out["estimates"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def used(records, ids=None):
    return [i for i, r in enumerate(records) if r["used"] and (ids is None or r["id"] in ids)]


def log_errors(records, est, rows):
    return [math.log(records[i]["measured_us"] / est[i]) for i in rows]


def loss(x, model, rows):
    """Mean squared log error, plus RANK_WEIGHT × its mean squared deviation from each
    configuration's mean (a constant factor per configuration does not change its ranking)."""
    c = {p: float(math.exp(v)) for p, v in zip(PARAMS, x)}
    est = model.estimates(c)
    e = log_errors(model.records, est, rows)
    by = {}
    for i, v in zip(rows, e):
        by.setdefault(model.records[i]["id"], []).append(v)
    spread = sum((v - statistics.fmean(vs)) ** 2 for vs in by.values() for v in vs)
    return (sum(v * v for v in e) + RANK_WEIGHT * spread) / len(e)


def fit(model, rows, start):
    x0 = np.array([math.log(start[p]) for p in PARAMS])
    bounds = [(math.log(BOUNDS[p][0]), math.log(BOUNDS[p][1])) for p in PARAMS]
    x0 = np.clip(x0, [b[0] for b in bounds], [b[1] for b in bounds])
    best = minimize(loss, x0, args=(model, rows), method="Powell", bounds=bounds,
                    options={"maxiter": 20000, "xtol": 1e-4, "ftol": 1e-7})
    return {p: float(math.exp(v)) for p, v in zip(PARAMS, best.x)}


def error_summary(model, est, rows):
    r = sorted(math.exp(v) for v in log_errors(model.records, est, rows))
    absr = sorted(max(v, 1 / v) for v in r)
    return {"median_ratio": statistics.median(r), "median_abs": statistics.median(absr),
            "p90_abs": absr[min(len(absr) - 1, int(0.9 * len(absr)))], "worst_abs": absr[-1]}


def picks(model, est, rows):
    """Per configuration: measured time of the first-ranked swept plan over the fastest's."""
    out = {}
    for cid in sorted({model.records[i]["id"] for i in rows}):
        mine = [i for i in rows if model.records[i]["id"] == cid]
        first = min(mine, key=lambda i: est[i])
        fastest = min(model.records[i]["measured_us"] for i in mine)
        out[cid] = model.records[first]["measured_us"] / fastest
    return out


def check_recorded(model, rows):
    """The tool must give every used record the estimate bench_fused_scan recorded for it, with
    the constants it was planned with (the plan is rebuilt faithfully); exits 1 otherwise."""
    groups = {}
    for i in rows:
        c = model.records[i]["constants"]
        groups.setdefault(json.dumps({} if c == "defaults" else c, sort_keys=True), []).append(i)
    worst = 0.0
    for key, members in groups.items():
        est = model.estimates(json.loads(key))
        worst = max([worst] + [abs(est[i] / model.records[i]["recorded_us"] - 1) for i in members])
    if worst > 1e-9:
        sys.exit(f"fit_fused_model: the replanned records' estimates differ from those recorded by up to "
                 f"{worst:.3g} (relative): today's planner or its defaults are not those the sweep ran with "
                 "(records without model_constants were planned with the defaults of their time)")
    return worst


def free_picks(model, rows):
    """Per configuration: the plan the model chooses freely (model.plans, from the last
    estimates() call), as its measured time over the fastest swept plan's when that plan was
    timed, else None."""
    out = {}
    for cid in sorted({model.records[i]["id"] for i in rows}):
        mine = [i for i in rows if model.records[i]["id"] == cid]
        fastest = min(model.records[i]["measured_us"] for i in mine)
        want = {k: v for k, v in model.plans.get(cid, {}).items() if k != "estimate_us"}
        hit = [i for i in mine if model.records[i]["plan"] == want]
        out[cid] = (min(model.records[i]["measured_us"] for i in hit) / fastest if hit else None, want)
    return out


def plan_defaults():
    """FusedModel's defaults, read from options.hpp (the tool applies them to an empty object)."""
    here = os.path.dirname(os.path.abspath(__file__))
    src = open(os.path.join(here, "..", "..", "src", "scan", "cuda", "fused", "options.hpp")).read()
    block = src[src.index("struct FusedModel {"):]
    block = block[:block.index("};")]
    vals = {}
    for p in PARAMS:
        m = re.search(r"double\s+" + p + r"\s*=\s*([0-9.eE+-]+)\s*;", block)
        if not m:
            sys.exit(f"fit_fused_model: FusedModel::{p} not found in options.hpp")
        vals[p] = float(m.group(1))
    return vals


def fmt(x):
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="the bench_fused_model program")
    ap.add_argument("--sweep", required=True, help="JSON lines of bench_fused_scan --sweep")
    ap.add_argument("--out", help="Markdown report")
    ap.add_argument("--json", help="the fitted constants, JSON")
    ap.add_argument("--max-median-error", type=float, help="fail when the fit's median error ratio is above this")
    a = ap.parse_args()

    model = Model(a.tool, a.sweep)
    recs = model.records
    rows = used(recs)
    if not rows:
        sys.exit(f"fit_fused_model: no record of {a.sweep} can be planned again")
    defaults = plan_defaults()
    check_recorded(model, rows)
    est0 = model.estimates({})
    s0, p0, f0 = error_summary(model, est0, rows), picks(model, est0, rows), free_picks(model, rows)
    fitted = fit(model, rows, defaults)
    est1 = model.estimates(fitted)
    s1, p1, f1 = error_summary(model, est1, rows), picks(model, est1, rows), free_picks(model, rows)
    # Leave one configuration out.
    loo = {}
    for cid in sorted({recs[i]["id"] for i in rows}):
        train = [i for i in rows if recs[i]["id"] != cid]
        test = [i for i in rows if recs[i]["id"] == cid]
        c = fit(model, train, defaults)
        e = model.estimates(c)
        loo[cid] = (error_summary(model, e, test)["median_abs"], picks(model, e, test)[cid])
    model.close()

    skipped = sorted({r["why"] for r in recs if not r["used"]})
    lines = [
        "# The fused scan's cost model fitted to a sweep",
        "",
        f"Sweep: `{a.sweep}`, {len(rows)} timed plans used of {len(recs)} "
        f"({len(recs) - len(rows)} left out: {', '.join(skipped) or '-'}); every used one replanned with the "
        "estimate recorded for it. "
        "Command: `bench/gpu/fit_fused_model.py --tool build/bench_fused_model --sweep SWEEP "
        "--out REPORT.md --json FIT.json`.",
        "",
        "| constant | before | fitted |",
        "|---|---:|---:|",
    ]
    lines += [f"| {p} | {fmt(defaults[p])} | {fmt(fitted[p])} |" for p in PARAMS]
    lines += [
        "",
        "| estimate error (measured / estimate) | before | fitted |",
        "|---|---:|---:|",
        f"| median ratio | {s0['median_ratio']:.2f} | {s1['median_ratio']:.2f} |",
        f"| median of max(r, 1/r) | {s0['median_abs']:.2f} | {s1['median_abs']:.2f} |",
        f"| 90th percentile | {s0['p90_abs']:.2f} | {s1['p90_abs']:.2f} |",
        f"| worst | {s0['worst_abs']:.2f} | {s1['worst_abs']:.2f} |",
        "",
        "First-ranked swept plan's measured time over the fastest swept plan's, per configuration "
        "(left out: the fit on the other configurations):",
        "",
        "| configuration | before | fitted | left out: pick | left out: median error |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {cid} | {p0[cid]:.2f} | {p1[cid]:.2f} | {loo[cid][1]:.2f} | {loo[cid][0]:.2f} |" for cid in p1]

    def plan_text(v):
        ratio, want = v
        desc = (f"L {want.get('chunk')}, reduce {want.get('reduce_tile')}×{want.get('reduce_columns')}, "
                f"push {want.get('push_tile')}" + ("" if want.get("w_shared", True) else ", W global"))
        return f"{desc}: " + (f"{ratio:.2f}" if ratio is not None else "not timed")

    lines += [
        "",
        "The plan the planner chooses on its own (over every chunk length and mapping), and its measured "
        "time over the fastest swept plan's when the sweep timed it:",
        "",
        "| configuration | before | fitted |",
        "|---|---|---|",
    ]
    lines += [f"| {cid} | {plan_text(f0[cid])} | {plan_text(f1[cid])} |" for cid in f1]
    report = "\n".join(lines) + "\n"
    print(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(report)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"fitted": fitted, "before": defaults, "sweep": a.sweep}, f, indent=1)
    if a.max_median_error is not None and s1["median_abs"] > a.max_median_error:
        sys.exit(f"fit_fused_model: the fit's median error ratio {s1['median_abs']:.3f} is above "
                 f"{a.max_median_error}")


if __name__ == "__main__":
    main()
