#!/usr/bin/env python3
"""Copies one GPU-machine run into the repository: bench/results/gpu/<gpu-name>/ (for whoever ran
scripts/gpu_check.sh or bench/gpu/run.sh on a GPU, back on the development machine).

Usage: keep_results.py RUN_DIR [--dest bench/results/gpu] [--allow-quick]

RUN_DIR is scripts/gpu_check.sh's OUT_DIR (its benchmark/ and cpu_scaling/ folders, header.txt,
summary.txt and summary.json are taken; of a --lease run, headline/headline.{json,md},
kernel_profile/kernel_profile.{json,md} and fused_plans/fused_fit.md, with the check files named
lease_*) or bench/gpu/run.sh's. <gpu-name> is the GPU's name
from the results, lower-cased with dashes (e.g. nvidia-h100-80gb-hbm3). Files are written
atomically; figures missing from the run (no matplotlib on the GPU machine) are drawn here when
matplotlib is. Quick runs are refused without --allow-quick (they are smoke tests, not results)."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BENCH_FILES = ["gpu_bench.json", "gpu_bench.md", "gpu_fig8_sweeps.png", "gpu_shapes.png", "gpu_memory.png",
               "gpu_roofline.png"]
SCALING_FILES = ["cpu_scaling.json", "cpu_scaling.md", "cpu_scaling.png"]
CHECK_FILES = {"header.txt": "gpu_check_header.txt", "summary.txt": "gpu_check_summary.txt",
               "summary.json": "gpu_check_summary.json"}
# A --lease run: (file in the run, name kept); the headline file is the lease's result.
LEASE_FILES = [("headline/headline.json", "headline.json"), ("headline/headline.md", "headline.md"),
               ("kernel_profile/kernel_profile.json", "kernel_profile.json"),
               ("kernel_profile/kernel_profile.md", "kernel_profile.md"), ("fused_plans/fused_fit.md", "fused_plans.md"),
               ("header.txt", "lease_header.txt"), ("summary.txt", "lease_summary.txt"),
               ("summary.json", "lease_summary.json")]


def keep_lease(run, dest_root):
    """A --lease run: its files under bench/results/gpu/<the headline's GPU>/."""
    with open(os.path.join(run, "headline", "headline.json")) as f:
        doc = json.load(f)
    if doc.get("device") != "cuda" or not doc.get("gpu"):
        sys.exit(f"keep_results: {run}/headline/headline.json was measured on {doc.get('device')}, not a GPU")
    slug = re.sub(r"[^a-z0-9]+", "-", doc["gpu"].lower()).strip("-")
    dest = os.path.join(dest_root, slug)
    os.makedirs(dest, exist_ok=True)
    copied = []
    for src, name in LEASE_FILES:
        if os.path.isfile(os.path.join(run, src)):
            copy_atomic(os.path.join(run, src), os.path.join(dest, name))
            copied.append(name)
    print(f"keep_results: the lease on {doc['gpu']} at {doc['commit']}{' (dirty)' if doc['dirty'] else ''}: "
          f"{len(copied)} files in {dest}: {', '.join(copied)}")
    return 0


def find(run, name):
    for sub in ("", "benchmark", "cpu_scaling"):
        p = os.path.join(run, sub, name)
        if os.path.isfile(p):
            return p
    return None


def gpu_name(doc):
    for g in doc.get("machine", {}).get("gpus") or []:
        return g["name"]
    for r in doc.get("records", []):
        if r.get("gpu"):
            return r["gpu"]
    return None


def copy_atomic(src, dst):
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="scripts/gpu_check.sh's or bench/gpu/run.sh's OUT_DIR")
    p.add_argument("--dest", default=os.path.join(ROOT, "bench", "results", "gpu"))
    p.add_argument("--allow-quick", action="store_true")
    a = p.parse_args()
    bench = find(a.run, "gpu_bench.json")
    if not bench and os.path.isfile(os.path.join(a.run, "headline", "headline.json")):
        return keep_lease(a.run, a.dest)
    if not bench:
        sys.exit(f"keep_results: {a.run} holds no gpu_bench.json (nor benchmark/gpu_bench.json)")
    with open(bench) as f:
        doc = json.load(f)
    if doc.get("quick") and not a.allow_quick:
        sys.exit("keep_results: this is a --quick run (a smoke test); pass --allow-quick to keep it anyway")
    if doc.get("device") != "cuda":
        sys.exit(f"keep_results: this run used --device {doc.get('device')}, not a GPU")
    name = gpu_name(doc)
    if not name:
        sys.exit("keep_results: the results do not name their GPU (no nvidia-smi and no PyTorch record)")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    dest = os.path.join(a.dest, slug)
    os.makedirs(dest, exist_ok=True)
    copied = []
    for n in BENCH_FILES + SCALING_FILES:
        src = find(a.run, n)
        if src:
            copy_atomic(src, os.path.join(dest, n))
            copied.append(n)
    for n, as_name in CHECK_FILES.items():
        src = os.path.join(a.run, n)
        if os.path.isfile(src):
            copy_atomic(src, os.path.join(dest, as_name))
            copied.append(as_name)
    py = sys.executable
    if "gpu_fig8_sweeps.png" not in copied:
        subprocess.run([py, os.path.join(HERE, "plot_gpu.py"), dest])
    if "cpu_scaling.json" in copied and "cpu_scaling.png" not in copied:
        subprocess.run([py, os.path.join(HERE, "..", "cpu_scaling", "plot_cpu_scaling.py"), dest])
    print(f"keep_results: {len(copied)} files of the run on {name} in {dest}: {', '.join(copied)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
