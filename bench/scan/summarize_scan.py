#!/usr/bin/env python3
"""Summarise a bench_scan Google Benchmark JSON file as Markdown.

Usage: summarize_scan.py RESULTS.json [--out RESULTS.md] [--command CMD] [--wall-seconds S] [--note TEXT]...

Prints (and with --out writes) a table per (case, threads): median wall time of linear,
blelloch and hybrid, and each one's speedup over linear measured in the same run
(linear median / algorithm median; > 1 means faster than sequential BP), followed by the
run's counters. Standard library only.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # bench/common
from cpuinfo import cpu_model  # noqa: E402

ALGOS = ("linear", "blelloch", "hybrid")
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_name(run_name):
    """'dense_d20_n2000_b16/linear/threads:1/real_time' -> (case, algo, threads)."""
    parts = run_name.split("/")
    if len(parts) < 3 or not parts[2].startswith("threads:"):
        return None
    return parts[0], parts[1], int(parts[2].split(":", 1)[1])


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = {}  # (case, algo, threads) -> {stat: entry}
    order = []
    errors = []
    for b in data.get("benchmarks", []):
        key = parse_name(b.get("run_name", b["name"]))
        if key is None:
            continue
        if b.get("error_occurred"):
            errors.append((b["name"], b.get("error_message", "")))
            continue
        if key not in runs:
            runs[key] = {}
            order.append(key)
        if b.get("run_type") == "aggregate":
            runs[key][b["aggregate_name"]] = b
        else:  # single repetition (or aggregates not requested): keep every run
            runs[key].setdefault("_iterations", []).append(b)
    return data, runs, order, errors


def stat_ms(entry_map, stat):
    """Median / stddev of real time in ms (single runs: their median and spread)."""
    e = entry_map.get(stat)
    if e is not None:
        return e["real_time"] * TO_MS[e.get("time_unit", "ns")]
    its = entry_map.get("_iterations")
    if not its:
        return None
    ts = sorted(i["real_time"] * TO_MS[i.get("time_unit", "ns")] for i in its)
    if stat == "median":
        n = len(ts)
        return ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])
    if stat == "stddev":
        if len(ts) < 2:
            return 0.0
        m = sum(ts) / len(ts)
        return (sum((t - m) ** 2 for t in ts) / (len(ts) - 1)) ** 0.5
    return None


def repetitions(entry_map):
    e = entry_map.get("median")
    if e is not None:
        return e.get("repetitions")
    return len(entry_map.get("_iterations", []))


def counter(entry_map, name, stat="median"):
    e = entry_map.get(stat)
    if e is not None:
        return e.get(name)
    its = entry_map.get("_iterations") or []
    vals = [i[name] for i in its if name in i]
    if not vals:
        return None
    return sum(vals) / len(vals) if stat == "mean" else sorted(vals)[len(vals) // 2]


SUSPECT = 0.05  # share of the machine's CPU used by other processes during a benchmark


def others(entry_map):
    return counter(entry_map, "others_cpu", "mean")


def fmt_ms(v):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def fmt_num(v, digits=3):
    if v is None:
        return "—"
    if float(v).is_integer():
        return f"{int(v)}"
    return f"{v:.{digits}g}"


def summarize(path, command=None, wall_seconds=None, notes=()):
    data, runs, order, errors = load(path)
    ctx = data.get("context", {})
    lines = []
    lines.append("# bppsa scan benchmark (CPU)")
    lines.append("")
    model = ctx.get("cpu_model") or cpu_model(None) or "unknown"
    lines.append(f"- Machine: {model}; {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz"
                 f" (host {ctx.get('host_name', '?')}); load average at start {ctx.get('load_avg', '?')}")
    lines.append(f"- Date: {ctx.get('date', '?')}; OpenMP max threads {ctx.get('omp_max_threads', '?')};"
                 f" precision {ctx.get('precision', '?')}; tiny mode {ctx.get('bppsa_tiny', '?')}")
    lines.append(f"- bench_scan JSON: `{os.path.relpath(path)}`")
    if command:
        lines.append(f"- Command: `{command}`")
    if wall_seconds is not None:
        lines.append(f"- Total wall time (build + run): {wall_seconds:.0f} s")
    for note in notes:
        lines.append(f"- {note}")
    reps = sorted({r for r in (repetitions(runs[k]) for k in order) if r})
    lines.append(f"- Repetitions per benchmark: {', '.join(map(str, reps)) or '?'}; times are medians"
                 " (± sample stddev) of the per-repetition mean wall time of `Scanner::run` with the plan reused;"
                 " speedup = linear median / algorithm median at the same thread count, same run (> 1: faster"
                 " than sequential BP).")
    lines.append("")

    cases = []
    for c, _, t in order:
        if (c, t) not in cases:
            cases.append((c, t))
    lines.append("| case | threads | linear ms | blelloch ms | hybrid ms | blelloch vs linear | hybrid vs linear |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for c, t in cases:
        cells = []
        med = {}
        for a in ALGOS:
            m = runs.get((c, a, t))
            if m is None:
                cells.append("—")
                continue
            med[a] = stat_ms(m, "median")
            sd = stat_ms(m, "stddev")
            cells.append(fmt_ms(med[a]) + (f" ± {fmt_ms(sd)}" if sd else ""))
        noisy = [a for a in ALGOS if (c, a, t) in runs and (others(runs[(c, a, t)]) or 0) > SUSPECT]
        sp = []
        for a in ("blelloch", "hybrid"):
            if med.get("linear") and med.get(a):
                sp.append(f"{med['linear'] / med[a]:.2f}×")
            else:
                sp.append("—")
        flag = f" ⚠ {', '.join(noisy)}" if noisy else ""
        lines.append(f"| {c}{flag} | {t} | " + " | ".join(cells) + " | " + " | ".join(sp) + " |")
    if any((others(runs[k]) or 0) > SUSPECT for k in order):
        lines.append("")
        lines.append(f"⚠: other processes used more than {SUSPECT:.0%} of the machine's CPU time while the named"
                     " benchmarks ran (column others_cpu below); their times are suspect.")
    lines.append("")

    lines.append("Counters (per chain: levels = critical path of the schedule as executed (phases × longest task), depth = longest chain of dependent products, mm / mv = products;"
                 " GFLOP/s over the whole batch; workspace and plan time of the first, untimed run;"
                 " rel_err = max relative error vs sequential BP; others_cpu = mean share of the machine's CPU time used by other"
                 " processes during the timed loops):")
    lines.append("")
    lines.append("| case | algorithm | threads | chunks | levels | depth | mm | mv | GFLOP/s | workspace MB | plan ms | rel_err | others_cpu |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in order:
        c, a, t = key
        m = runs[key]
        lines.append(f"| {c} | {a} | {t} | {fmt_num(counter(m, 'chunks'))} | {fmt_num(counter(m, 'levels'))}"
                     f" | {fmt_num(counter(m, 'depth'))}"
                     f" | {fmt_num(counter(m, 'mm'))} | {fmt_num(counter(m, 'mv'))} | {fmt_num(counter(m, 'GFLOP/s'))}"
                     f" | {fmt_num(counter(m, 'workspace_MB'))} | {fmt_num(counter(m, 'plan_ms'))}"
                     f" | {fmt_num(counter(m, 'rel_err'), 2)} | {fmt_num(others(m), 2)} |")
    if errors:
        lines.append("")
        lines.append("Errors:")
        lines.append("")
        for name, msg in errors:
            lines.append(f"- `{name}`: {msg}")
    lines.append("")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("--out")
    ap.add_argument("--command")
    ap.add_argument("--wall-seconds", type=float)
    ap.add_argument("--note", action="append", default=[], help="extra line for the header (repeatable)")
    args = ap.parse_args()
    md = summarize(args.json, args.command, args.wall_seconds, args.note)
    sys.stdout.write(md)
    if args.out:
        with open(args.out, "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
