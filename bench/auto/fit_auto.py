#!/usr/bin/env python3
"""Fits the step cost model behind `auto` (bppsa/nn/cost_model.hpp) to measured training steps.

    bench/auto/fit_auto.py SWEEP.json [SWEEP.json …] --out DIR [--write-builtin FILE] [--max-regret 1.10]
                           [--newton NEWTON.jsonl …] [--compare MODEL]

SWEEP.json: what bench/peers/peers.py writes (bench/auto/run.sh runs it on the cost model's grid
at every thread count): per shape and thread count the median training step of torch.nn and of
bppsa.nn with backward bp, blelloch and hybrid. For every (cell, candidate, thread count) the
model is a non-negative combination of the features below, fitted by non-negative least squares
on relative errors. Writes DIR/model.json (load it with BPPSA_COST_MODEL=DIR/model.json or
bppsa::load_cost_model), DIR/fit.md (the fit's errors, in-sample and leave-one-shape-out, and at
every shape what auto picks against the best measured method, and what a bppsa.nn module with
backward='auto' runs, torch.nn's kernels included, against the fastest measured; with --compare MODEL
also what another model runs on the same sweeps) and, with --write-builtin, the
model as the library's built-in fit (src/nn/cost_model_fit.inc). Exit 3 when auto's pick at some
shape of the sweep is slower than the best bppsa method measured there by more than --max-regret
(in-sample), 2 on bad arguments or files.

NEWTON.jsonl: what bench/newton/run.sh writes (bench_newton: per shape and thread count the median
sequential forward and Newton forward, and Newton's iterations). They fit the forward model behind
forward='auto': per (cell, thread count) the sequential forward ("sequential forward") and one
Newton iteration ("newton iteration": the Newton forward's time over its iterations, runs that fell
back left out), with the median iterations of the group's runs (what auto expects of a layer). auto
runs Newton where floor(sequential / iteration) > iterations, inside both fits' spans, allowing it
that many iterations (src/nn/cost_model.cpp, resolve_forward); fit.md shows its pick at every
measured shape."""
import argparse
import json
import math
import os
import statistics
import sys

import numpy as np
from scipy.optimize import nnls

FORMAT = "bppsa-cost-model/1"
FEATURES = ["1", "T", "T*B*S", "T*B*S^2", "T*B*S^3", "T*B*S*I", "T*S^2"]
CANDIDATES = {"bppsa.nn bp": "bp", "bppsa.nn blelloch": "blelloch", "bppsa.nn hybrid": "hybrid",
              "torch.nn": "torch.nn"}
METHODS = ["bp", "hybrid", "blelloch"]  # auto's choices, in the library's order of preference on a tie
HANDOFF_MARGIN = 1.10  # bppsa.nn runs torch.nn unless bppsa is predicted this much faster (bppsa/_auto.py)


def auto_methods(steps):
    """What auto chooses among at T steps: BP alone at T 1 (one step: no scan to run), as the library."""
    return METHODS[:1] if steps <= 1 else METHODS


def state_size(cell, hidden, proj=0):
    return (proj or hidden) + hidden if cell == "lstm" else hidden


def features(cell, hidden, steps, batch, inputs, proj=0):
    """The model's features of a shape, as src/nn/cost_model.cpp computes them."""
    s, t = float(state_size(cell, hidden, proj)), float(steps)
    tb = t * batch
    return [1.0, t, tb * s, tb * s * s, tb * s ** 3, tb * s * inputs, t * s * s]


def load_points(paths):
    """{(cell, hidden, steps, batch, inputs, threads): {candidate: ms or inf (skipped as over budget)}}."""
    shapes, source = {}, {}
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
            records = doc["records"]
            default_threads = doc["machine"]["threads"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"fit_auto: {path}: not a sweep written by bench/peers/peers.py ({e}); rerun bench/auto/run.sh")
        for r in records:
            cand = CANDIDATES.get(r.get("peer"))
            if cand is None:
                continue
            key = (r["cell"].lower(), int(r["hidden"]), int(r["steps"]), int(r["batch"]),
                   int(r.get("features", 1)), int(r.get("threads", default_threads)))
            if (key, cand) in source and source[(key, cand)] != path:
                print(f"fit_auto: note: {cand} at {key} is in {source[(key, cand)]} and {path}: {path}'s counts "
                      "(the sweeps are read in order: a partial re-measurement after the whole grid's)",
                      file=sys.stderr)
            source[(key, cand)] = path
            if "step" in r:
                shapes.setdefault(key, {})[cand] = 1e3 * r["step"]["median"]
            elif "over budget" in str(r.get("skipped", "")):
                shapes.setdefault(key, {})[cand] = math.inf
    return shapes


FORWARD = ("sequential forward", "newton iteration")


def load_forward_points(paths):
    """bench_newton's records: a list of (key, {"sequential forward": ms, "newton": ms, "newton iteration": ms,
    "iterations": n, "fell_back": bool, "radius": r}) with key (cell, hidden, steps, batch, inputs, threads)."""
    out = []
    for path in paths:
        try:
            with open(path) as f:
                recs = [json.loads(ln) for ln in f if ln.strip()]
            for r in recs:
                key = (r["cell"], int(r["hidden"]), int(r["steps"]), int(r["batch"]), int(r.get("input", 4)),
                       int(r["threads"]))
                it = int(r["iterations"])
                out.append((key, {"sequential forward": float(r["sequential_ms"]), "newton": float(r["newton_ms"]),
                                  "newton iteration": float(r["newton_ms"]) / max(it, 1), "iterations": it,
                                  "fell_back": bool(r["fell_back"]), "radius": float(r.get("spectral_radius", 0))}))
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"fit_auto: {path}: not bench_newton's JSON lines ({e}); rerun bench/newton/run.sh")
    return out


def fit_forward(records):
    """The forward groups {(cell, candidate, threads): coef}, their points as fit() gives them, and
    each newton iteration group's median iterations."""
    points, iterations = {}, {}
    for key, m in records:
        cell, hidden, steps, batch, inputs, threads = key
        row = features(cell, hidden, steps, batch, inputs)
        points.setdefault((cell, FORWARD[0], threads), []).append((key, row, m[FORWARD[0]]))
        if not m["fell_back"]:  # a fallback's time is Newton's iterations plus a sequential forward
            points.setdefault((cell, FORWARD[1], threads), []).append((key, row, m[FORWARD[1]]))
            iterations.setdefault((cell, FORWARD[1], threads), []).append(m["iterations"])
    groups = {g: fit_group([p[1] for p in pts], [p[2] for p in pts]) for g, pts in sorted(points.items())
              if len(pts) >= 2}
    expected = {g: int(round(statistics.median(v))) for g, v in iterations.items() if g in groups}
    return groups, points, expected


def auto_forward(groups, expected, key, spans=None):
    """What forward='auto' runs at a shape, as src/nn/cost_model.cpp's resolve_forward: ("newton", the
    iterations it allows) or ("sequential", 0). spans: {group: span()} (None: every shape)."""
    cell, hidden, steps, batch, inputs, threads = key
    seq, it = (cell, FORWARD[0], threads), (cell, FORWARD[1], threads)
    if steps <= 1 or seq not in groups or it not in groups:
        return "sequential", 0
    at = {"steps": steps, "batch": batch, "hidden": hidden}
    for g in (seq, it):
        if spans is not None and any(not lo <= at[d] <= hi for d, (lo, hi) in spans[g].items()):
            return "sequential", 0  # extrapolated
    row = features(cell, hidden, steps, batch, inputs)
    s, i = predict(groups[seq], row), predict(groups[it], row)
    if not (s > 0 and i > 0):
        return "sequential", 0
    affordable = math.floor(s / i)
    return ("newton", affordable) if affordable > expected[it] else ("sequential", 0)


def fit_group(rows, times):
    """NNLS on relative errors (each row divided by its time), columns scaled to unit maximum."""
    a = np.array(rows) / np.array(times)[:, None]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(a / scale, np.ones(len(times)), maxiter=50 * len(FEATURES))
    return (coef / scale).tolist()


def predict(coef, row):
    return float(np.dot(coef, row))


def fit(shapes):
    """The groups of the model, and per group its points (key, row, measured ms)."""
    points = {}
    for key, by_cand in shapes.items():
        cell, hidden, steps, batch, inputs, threads = key
        row = features(cell, hidden, steps, batch, inputs)
        for cand, ms in by_cand.items():
            if math.isfinite(ms):
                points.setdefault((cell, cand, threads), []).append((key, row, ms))
    groups = {}
    for g, pts in sorted(points.items()):
        if len(pts) < 2:
            continue  # one point fits anything: no model
        groups[g] = fit_group([p[1] for p in pts], [p[2] for p in pts])
    return groups, points


def span(pts):
    """The smallest and largest T, B and H of a group's points: where bppsa.nn trusts its
    predictions enough to run torch.nn (src/nn/cost_model.cpp, cost_model_spans)."""
    keys = [p[0] for p in pts]
    return {dim: [min(k[i] for k in keys), max(k[i] for k in keys)] for dim, i in (("steps", 2), ("batch", 3),
                                                                                  ("hidden", 1))}


def loo_predictions(points):
    """Each point predicted by its group's model fitted without the point's shape."""
    out = {}
    for g, pts in points.items():
        for i, (key, row, ms) in enumerate(pts):
            rest = pts[:i] + pts[i + 1:]
            if len(rest) >= 2:
                out[(g, key)] = predict(fit_group([p[1] for p in rest], [p[2] for p in rest]), row)
    return out


def group_for(groups, cell, cand, threads):
    """The group serving a request at `threads`, as the library picks it: that thread count's, else the
    nearest fitted one (the largest below, else the smallest above); None without one."""
    counts = sorted(t for c, k, t in groups if (c, k) == (cell, cand))
    if not counts:
        return None
    below = [t for t in counts if t <= threads]
    return (cell, cand, below[-1] if below else counts[0])


def choose(groups, key, cands, predictions=None):
    """The candidate of `cands` with the least prediction at a shape (None: no fit)."""
    cell, hidden, steps, batch, inputs, threads = key
    row = features(cell, hidden, steps, batch, inputs)
    best, least = None, math.inf
    for c in cands:
        g = group_for(groups, cell, c, threads)
        if g is None:
            continue
        if predictions is not None and (g, key) in predictions:
            ms = predictions[(g, key)]
        elif g in groups:
            ms = predict(groups[g], row)
        else:
            continue
        if ms < least:
            best, least = c, ms
    return best


def regret(by_cand, pick, cands):
    measured = {c: by_cand[c] for c in cands if c in by_cand}
    if pick is None or not measured:
        return None
    best = min(measured.values())
    return by_cand.get(pick, math.inf) / best if best > 0 else None


def rel_errors(groups, points, predictions=None):
    errs = {}
    for g, pts in points.items():
        if g not in groups:
            continue
        for key, row, ms in pts:
            p = predictions.get((g, key)) if predictions is not None else predict(groups[g], row)
            if p is not None:
                errs.setdefault(g, []).append(abs(p - ms) / ms)
    return errs


def in_span(spans, g, key):
    """Whether group g was fitted on T, B and H spanning the shape (no span recorded: every shape)."""
    s = (spans or {}).get(g)
    if not s:
        return True
    return all(lo <= v <= hi for v, (lo, hi) in ((key[2], s.get("steps", [1, math.inf])),
                                                 (key[3], s.get("batch", [1, math.inf])),
                                                 (key[1], s.get("hidden", [1, math.inf]))))


def what_auto_runs(groups, spans, key):
    """What a one-layer bppsa.nn module with backward='auto' runs at a shape: its pick among bppsa's
    methods, or "torch.nn" where torch.nn's group spans the shape and the pick is not predicted at
    least HANDOFF_MARGIN faster (as bppsa.nn decides); None without a fit."""
    pick = choose(groups, key, auto_methods(key[2]))
    if pick is None:
        return None
    g, row = group_for(groups, key[0], "torch.nn", key[5]), features(*key[:5])
    if (g is not None and in_span(spans, g, key)
            and predict(groups[g], row) < HANDOFF_MARGIN * predict(groups[group_for(groups, key[0], pick, key[5])], row)):
        return "torch.nn"
    return pick


def load_model(path):
    """The step groups and spans of a model.json or of a built-in fit (src/nn/cost_model_fit.inc)."""
    try:
        with open(path) as f:
            text = f.read()
        if 'R"json(' in text:
            text = text[text.index('R"json(') + len('R"json('):text.rindex(')json"')]
        model = json.loads(text)
        step = [g for g in model["groups"] if g["candidate"] in CANDIDATES.values()]
        groups = {(g["cell"], g["candidate"], int(g["threads"])): g["coef"] for g in step}
        spans = {(g["cell"], g["candidate"], int(g["threads"])): g.get("span") for g in step}
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"fit_auto: --compare {path}: not a cost model written by fit_auto.py ({e})")
    return groups, spans


def runs_summary(groups, spans, shapes):
    """Per part of the sweep (T 1 calls, T >= 2): what auto runs against the fastest of the four
    measured (geometric mean), the shapes it hands to torch.nn, and those where it runs more than
    10 % slower than the fastest and than torch.nn. Also {shape: what it runs}, and the shapes where what
    it runs measured more than 1.10× torch.nn's step."""
    runs, parts, behind = {}, {}, []
    for key in sorted(shapes):
        by = shapes[key]
        ran = what_auto_runs(groups, spans, key)
        runs[key] = ran
        measured = [v for v in by.values() if math.isfinite(v)]
        if ran is None or ran not in by or not math.isfinite(by[ran]) or not measured:
            continue
        part = parts.setdefault("T 1" if key[2] <= 1 else "T ≥ 2", {"n": 0, "log": 0.0, "torch": 0, "slow": 0,
                                                                    "behind_torch": 0})
        best = min(measured)
        part["n"] += 1
        part["log"] += math.log(by[ran] / best)
        part["torch"] += ran == "torch.nn"
        part["slow"] += by[ran] > 1.10 * best
        if "torch.nn" in by and by[ran] > 1.10 * by["torch.nn"]:
            part["behind_torch"] += 1
            behind.append(key)
    return parts, runs, behind


def runs_lines(label, parts):
    lines = [f"{label}:", "", "| shapes | n | what auto runs / fastest of the four (geometric mean) | handed to torch.nn | "
             "> 1.10× the fastest | > 1.10× torch.nn |", "|---|---|---|---|---|---|"]
    for name in sorted(parts):
        p = parts[name]
        lines.append(f"| {name} | {p['n']} | {math.exp(p['log'] / p['n']):.4f} | {p['torch']} | {p['slow']} | "
                     f"{p['behind_torch']} |")
    return lines + [""]


def forward_report(groups, points, expected, records):
    """fit.md's section on the forward model: its errors, and auto's pick at every measured shape."""
    ins = rel_errors(groups, points)
    out_of = rel_errors(groups, points, loo_predictions({g: p for g, p in points.items() if g in groups}))
    lines = ["", "## The forward: sequential against Newton (forward='auto')", "",
             "Relative error of the predicted sequential forward and Newton iteration, in-sample and leave-one-out; "
             "the iterations auto expects (the median its group's runs took).", "",
             "| cell | candidate | threads | points | median | max | LOO median | LOO max | iterations |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g in groups:
        e, lo = ins.get(g, []), out_of.get(g, [])
        lines.append(f"| {g[0]} | {g[1]} | {g[2]} | {len(points[g])} | {statistics.median(e):.1%} | {max(e):.1%} | "
                     + (f"{statistics.median(lo):.1%} | {max(lo):.1%} |" if lo else "– | – |")
                     + f" {expected.get(g, '–')} |")
    lines += ["", "At every measured shape: the sequential and Newton forwards (ms), Newton's iterations, and "
              "what auto runs (with the iterations it allows) against the faster of the two measured.", "",
              "| cell | H | I | T | B | threads | spectral radius | sequential | newton | iterations | auto | "
              "allowed | auto / best |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    worst = 1.0
    for key, m in sorted(records, key=lambda r: (r[0], r[1]["radius"])):
        pick, allowed = auto_forward(groups, expected, key, {g: span(p) for g, p in points.items()})
        best = min(m["sequential forward"], m["newton"])
        # auto's Newton costs the measured Newton forward when it certifies within what it allows;
        # else about `allowed` iterations and the sequential forward
        mine = m["sequential forward"] if pick == "sequential" else (
            m["newton"] if m["iterations"] <= allowed and not m["fell_back"]
            else allowed * m["newton iteration"] + m["sequential forward"])
        worst = max(worst, mine / best)
        cell, hidden, steps, batch, inputs, threads = key
        lines.append(f"| {cell} | {hidden} | {inputs} | {steps} | {batch} | {threads} | {m['radius'] or '–'} | "
                     f"{m['sequential forward']:.3g} | {m['newton']:.3g} | {m['iterations']}"
                     f"{' (fell back)' if m['fell_back'] else ''} | {pick} | {allowed or '–'} | {mine / best:.2f} |")
    lines += ["", f"Worst forward regret: {worst:.2f} (auto's forward over the faster of the two measured)."]
    return lines


def fmt_ms(ms):
    return "skipped" if ms is None else ("over budget" if math.isinf(ms) else f"{ms:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", nargs="+", help="peers.json files of bench/peers/peers.py")
    ap.add_argument("--out", required=True, help="folder for model.json and fit.md")
    ap.add_argument("--write-builtin", help="also write the model as the library's built-in fit (a .inc file)")
    ap.add_argument("--max-regret", type=float, default=1.10,
                    help="exit 3 when auto's pick is slower than the best bppsa method by more than this (in-sample)")
    ap.add_argument("--compare", metavar="MODEL",
                    help="also report what another model (a model.json or a built-in .inc) runs on the same sweeps")
    ap.add_argument("--newton", nargs="+", default=[],
                    help="bench_newton's JSON lines (bench/newton/run.sh): fit the forward model too")
    a = ap.parse_args()
    shapes = load_points(a.sweeps)
    forward = load_forward_points(a.newton)
    if not shapes:
        sys.exit(f"fit_auto: no bppsa.nn or torch.nn step times in {', '.join(a.sweeps)}; rerun bench/auto/run.sh")
    groups, points = fit(shapes)
    loo = loo_predictions({g: p for g, p in points.items() if g in groups})
    fitted_on = sorted({os.path.basename(os.path.dirname(os.path.abspath(p))) or p for p in a.sweeps})
    machines = set()
    for p in a.sweeps:
        with open(p) as f:
            doc = json.load(f)
        m = doc["machine"]
        # bppsa's version as its workers imported it (a build tree's package is not installed).
        bppsa = doc["versions"].get("bppsa") or next(
            (r["versions"]["bppsa"] for r in doc["records"] if (r.get("versions") or {}).get("bppsa")), None)
        machines.add(f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, bppsa {bppsa}, "
                     f"torch {doc['versions'].get('torch')}")
    model = {"format": FORMAT, "fitted_on": "; ".join(sorted(machines)), "sweeps": fitted_on, "features": FEATURES,
             "groups": [{"cell": c, "candidate": cand, "threads": t, "coef": coef, "points": len(points[(c, cand, t)]),
                         "span": span(points[(c, cand, t)])}
                        for (c, cand, t), coef in groups.items()]}
    fgroups, fpoints, expected = fit_forward(forward)
    for (c, cand, t), coef in fgroups.items():
        g = {"cell": c, "candidate": cand, "threads": t, "coef": coef, "points": len(fpoints[(c, cand, t)]),
             "span": span(fpoints[(c, cand, t)])}
        if cand == FORWARD[1]:
            g["iterations"] = expected[(c, cand, t)]
        model["groups"].append(g)
    if a.newton:
        model["forward_sweeps"] = [os.path.relpath(p) for p in a.newton]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "model.json"), "w") as f:
        json.dump(model, f, indent=1)
        f.write("\n")
    if a.write_builtin:
        with open(a.write_builtin, "w") as f:
            f.write("// Written by bench/auto/fit_auto.py --write-builtin: the built-in step cost model (JSON).\n")
            f.write('R"json(' + json.dumps(model, separators=(", ", ": ")) + ')json"\n')

    ins, out_of = rel_errors(groups, points), rel_errors(groups, points, loo)
    lines = ["# The step cost model behind `auto`, fitted to measured steps", "",
             f"Sweeps: {', '.join(a.sweeps)}. Machine: {model['fitted_on']}.", "",
             "Relative error of the predicted step time: in-sample, and with each shape left out of its "
             "group's fit (leave-one-out).", "",
             "| cell | candidate | threads | points | median | max | LOO median | LOO max |", "|---|---|---|---|---|---|---|---|"]
    for g in groups:
        e, lo = ins.get(g, []), out_of.get(g, [])
        lines.append(f"| {g[0]} | {g[1]} | {g[2]} | {len(points[g])} | {statistics.median(e):.1%} | {max(e):.1%} | "
                     + (f"{statistics.median(lo):.1%} | {max(lo):.1%} |" if lo else "– | – |"))
    lines += ["", "At every shape: auto's pick among bppsa's methods (in-sample; leave-one-out) against the best "
              "measured, and whether bppsa.nn runs torch.nn's kernels there instead (its fallback: torch.nn's fit spans the "
              f"shape and the pick is not predicted {HANDOFF_MARGIN:.2f}× faster).", "",
              "| cell | H | I | T | B | threads | " + " | ".join(METHODS) + " | torch.nn | auto | regret | LOO auto | "
              "LOO regret | runs torch.nn |", "|---|---|---|---|---|---|" + "---|" * (len(METHODS) + 6)]
    spans = {g: span(points[g]) for g in groups}
    parts, runs, behind = runs_summary(groups, spans, shapes)
    worst, worst_loo, failures = 1.0, 1.0, []
    for key in sorted(shapes):
        by = shapes[key]
        pick = choose(groups, key, auto_methods(key[2]))
        pick_loo = choose(groups, key, auto_methods(key[2]), loo)
        r, rl = regret(by, pick, METHODS), regret(by, pick_loo, METHODS)
        if r is not None:
            worst = max(worst, r)
            if r > a.max_regret:
                failures.append(f"{key}: auto picks {pick} at {r:.2f}× the best")
        if rl is not None:
            worst_loo = max(worst_loo, rl)
        torch_wins = runs[key] == "torch.nn" if pick else None
        cell, hidden, steps, batch, inputs, threads = key
        lines.append(f"| {cell} | {hidden} | {inputs} | {steps} | {batch} | {threads} | "
                     + " | ".join(fmt_ms(by.get(m)) for m in METHODS) + f" | {fmt_ms(by.get('torch.nn'))} | "
                     f"{pick} | {'–' if r is None else f'{r:.2f}'} | {pick_loo} | {'–' if rl is None else f'{rl:.2f}'} | "
                     f"{'–' if torch_wins is None else ('yes' if torch_wins else 'no')} |")
    lines += ["", f"Worst regret: {worst:.2f} in-sample, {worst_loo:.2f} leave-one-out (limit {a.max_regret:.2f}, "
              "in-sample).", "", "## What auto runs", "",
              "What a one-layer bppsa.nn module with backward='auto' runs at each shape of the sweeps (its pick, or "
              "torch.nn's kernels where torch.nn's fit spans the shape and the pick is not predicted "
              f"{HANDOFF_MARGIN:.2f}× faster), against the fastest of the four measured there and against torch.nn.", ""]
    lines += runs_lines("This fit", parts)
    lines += [f"Where what it runs measured more than 1.10× torch.nn's step ({len(behind)} shapes):", "",
              "| cell | H | I | T | B | threads | runs | ms | torch.nn ms | ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for k in behind:
        cell, hidden, steps, batch, inputs, threads = k
        ms, tms = shapes[k][runs[k]], shapes[k]["torch.nn"]
        lines.append(f"| {cell} | {hidden} | {inputs} | {steps} | {batch} | {threads} | {runs[k]} | {fmt_ms(ms)} | "
                     f"{fmt_ms(tms)} | {ms / tms:.2f} |")
    lines.append("")
    if a.compare:
        ogroups, ospans = load_model(a.compare)
        oparts, oruns, _ = runs_summary(ogroups, ospans, shapes)
        lines += runs_lines(f"The model in {a.compare}, on the same measurements", oparts)
        differ = [k for k in sorted(shapes) if runs[k] != oruns[k]]
        lines += [f"Where the two run different things ({len(differ)} shapes; ms measured):", "",
                  "| cell | H | I | T | B | threads | this fit runs | ms | the other runs | ms |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for k in differ:
            cell, hidden, steps, batch, inputs, threads = k
            lines.append(f"| {cell} | {hidden} | {inputs} | {steps} | {batch} | {threads} | {runs[k]} | "
                         f"{fmt_ms(shapes[k].get(runs[k]))} | {oruns[k]} | {fmt_ms(shapes[k].get(oruns[k]))} |")
        lines.append("")
    if fgroups:
        lines += forward_report(fgroups, fpoints, expected, forward)
    with open(os.path.join(a.out, "fit.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"fit_auto: {len(groups)} groups from {len(shapes)} shapes; worst regret {worst:.2f} in-sample, "
          f"{worst_loo:.2f} leave-one-out; wrote {a.out}/model.json and fit.md")
    if failures:
        print("fit_auto: auto is more than the limit slower than the best method at:\n  " + "\n  ".join(failures),
              file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
