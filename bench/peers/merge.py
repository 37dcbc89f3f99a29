#!/usr/bin/env python3
"""Merges runs of the peers sweep, each a slice of it (bench/peers/run.sh --steps T --out DIR), into
one peers.json with its tables and figure, as one run of the whole sweep would write them:

    scripts/python.sh bench/peers/merge.py --out bench/results/cpu/peers RUN_DIR [RUN_DIR ...]

The records of every run are kept, in the grid's order. A (configuration, peer) measured by two
runs keeps the later run's record (runs are read in the order given), and the merge prints which
ones. Runs are merged only when they measured the same thing: none may be a quick run, and all must
have the same grid, threads, CPU and versions of Python, torch, JAX and bppsa. Otherwise the merge
exits 1 and names the run and the field. The output lists every run: its folder, the step counts it
ran, the commit, its load average before the run, and its settings and wall time."""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers_common as common  # noqa: E402
import peers_report as report  # noqa: E402

SAME = (("grid",), ("machine", "cpu"), ("machine", "cores"), ("machine", "threads"), ("versions",))


def field(doc, path):
    for k in path:
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc


def load(run):
    path = os.path.join(run, "peers.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        sys.exit(f"merge: {path}: no such file (a folder bench/peers/run.sh --out wrote is expected)")
    except json.JSONDecodeError as e:
        sys.exit(f"merge: {path}: not JSON ({e}); was the run interrupted?")
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list) or "machine" not in doc:
        sys.exit(f"merge: {path}: not a peers.json (no records or machine)")
    if doc.get("quick"):
        sys.exit(f"merge: {path}: a --quick run (tiny shapes, few reps) is not merged into a sweep")
    return doc


def merge(runs):
    """The merged document of the runs' documents [(folder, doc)], and the replaced keys."""
    first_dir, first = runs[0]
    for d, doc in runs[1:]:
        for path in SAME:
            if field(doc, path) != field(first, path):
                sys.exit(f"merge: {d}/peers.json: {'.'.join(path)} is {field(doc, path)!r} where "
                         f"{first_dir}/peers.json has {field(first, path)!r}; merge runs of one machine and environment")
    order = {c["name"]: i for i, c in enumerate(common.configs(False, first.get("grid", "peers")))}
    records, replaced = {}, []
    for d, doc in runs:
        for r in doc["records"]:
            key = (r["config"], r["peer"])
            if key in records:
                replaced.append((key, d))
            records[key] = r
    peers = list(dict.fromkeys(r["peer"] for _, doc in runs for r in doc["records"]))
    merged = sorted(records.values(), key=lambda r: (order.get(r["config"], len(order)), peers.index(r["peer"])))
    # What differs between the runs (commit, load, settings, wall time) is listed per run, not once.
    out = {k: v for k, v in first.items()
           if k not in ("records", "steps", "cells", "hidden", "batch", "wall_s", "stopped", "source")}
    out["records"] = merged
    out["runs"] = [{"dir": d, "steps": doc.get("steps"), "cells": doc.get("cells"), "hidden": doc.get("hidden"),
                    "batch": doc.get("batch"), "source": doc.get("source"),
                    "load_before": doc["machine"].get("load_before"), "settings": doc.get("settings"),
                    "wall_s": doc.get("wall_s"), "stopped": doc.get("stopped")} for d, doc in runs]
    out["wall_s"] = sum(doc.get("wall_s") or 0 for _, doc in runs)
    out["stopped"] = next((f"{d}: {doc['stopped']}" for d, doc in runs if doc.get("stopped")), None)
    return out, replaced


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for the merged peers.json, peers.csv, fig_peers.png, README.md")
    ap.add_argument("runs", nargs="+", help="folders of runs (each holds a peers.json)")
    a = ap.parse_args()
    runs = [(os.path.normpath(d), load(d)) for d in a.runs]
    doc, replaced = merge(runs)
    for (config, peer), d in replaced:
        print(f"merge: {config}, {peer}: the record of {d} replaces an earlier run's")
    os.makedirs(a.out, exist_ok=True)
    report.write(doc, a.out)


if __name__ == "__main__":
    main()
