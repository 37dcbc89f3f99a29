#!/usr/bin/env python3
"""Summarises `bench_fused_scan --sweep` records (JSON lines) as a Markdown table: per configuration,
the cost model's own plan against the fastest plan the sweep found, with both estimates, so that
the model's ranking and its absolute error can be read off.

Usage: summarize_sweep.py SWEEP.jsonl [--out SWEEP.md]"""
import argparse
import json
import os
import sys


def plan_text(r):
    text = f"L {r['chunk']} (C {r['chunks']})"
    if r["chunks"] > 1:
        text += f", reduce {r['reduce_tile']}×{r['reduce_columns']}"
    text += f", push {r['push_tile']}"
    if not r["w_shared"]:
        text += ", W_hh global"
    return text


def summarize(records):
    by_id = {}
    for r in records:
        by_id.setdefault(r["id"], []).append(r)
    lines = ["| configuration | plans timed | model's plan | ms | estimate µs | fastest plan | ms | estimate µs | "
             "model / fastest |",
             "|---|---:|---|---:|---:|---|---:|---:|---:|"]
    for cid, rs in by_id.items():
        timed = [r for r in rs if "time" in r]
        model = next((r for r in timed if not r.get("forced")), None)
        if model is None or not timed:
            lines.append(f"| {cid} | {len(timed)} | (not timed) | | | | | | |")
            continue
        best = min(timed, key=lambda r: r["time"]["median"])
        m, b = model["time"]["median"] * 1e3, best["time"]["median"] * 1e3
        lines.append(f"| {cid} | {len(timed)} | {plan_text(model)} | {m:.3f} | {model['estimate_us']:.0f} | "
                     f"{plan_text(best)} | {b:.3f} | {best['estimate_us']:.0f} | {m / b:.2f}× |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep")
    p.add_argument("--out")
    a = p.parse_args()
    try:
        with open(a.sweep) as f:
            records = [json.loads(line) for line in f if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"summarize_sweep: cannot read {a.sweep}: {e}")
    if not records:
        sys.exit(f"summarize_sweep: {a.sweep} holds no records")
    device = records[0].get("device", {}).get("name", "unknown GPU")
    text = (f"# Fused scan: the cost model's plan against the fastest of a sweep ({device})\n\n"
            f"From `{os.path.basename(a.sweep)}` (`bench_fused_scan --sweep`): medians of each plan's timed runs; "
            "the sweep forces every chunk length of a ×2 ladder, every compiled reduce tile × columns and push "
            "tile at the model's chunk length, and W_hh in global memory.\n\n" + summarize(records))
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.out)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
