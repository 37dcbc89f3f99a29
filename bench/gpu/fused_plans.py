#!/usr/bin/env python3
"""The fused scan's plans chosen by the fitted cost model against the defaults', same run, same card:
bench_fused_scan times each configuration of PLAN with the built-in constants, then with FIT's
(bench/gpu/fit_fused_model.py --json), half the budget each; the table (report.fit_table) says which
plan each chose and fitted / default (below 1: the fit's plan is faster).

  python3 bench/gpu/fused_plans.py --build BUILD --out DIR [--budget 100] [--reps 10]
      [--plan bench/gpu/sweep_plan.json] [--model bench/results/gpu/nvidia-h100-80gb-hbm3/fused_fit.json]

Writes DIR/fused_default.jsonl, DIR/fused_fit.jsonl (each record stamped with the commit, the dirty
flag and the GPU) and DIR/fused_fit.md. Exit 1 when a program failed or nothing was compared."""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))  # bench/common: machine
import machine as mach  # noqa: E402
import gpu_report as report  # noqa: E402

FIT = os.path.join(HERE, "..", "results", "gpu", "nvidia-h100-80gb-hbm3", "fused_fit.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=100, help="seconds for both runs together")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--plan", default=os.path.join(HERE, "sweep_plan.json"))
    ap.add_argument("--model", default=FIT)
    a = ap.parse_args()
    tool = os.path.join(a.build, "bench_fused_scan")
    if not os.access(tool, os.X_OK):
        print(f"fused_plans: {tool} is not built (CUDA builds with BPPSA_BUILD_BENCH=ON)")
        return 1
    os.makedirs(a.out, exist_ok=True)
    info = mach.machine()
    sides = {}
    for name, extra in (("default", []), ("fit", ["--model", a.model])):
        path = os.path.join(a.out, f"fused_{name}.jsonl")
        mach.write_text(path, "")
        cmd = [tool, "--plan", a.plan, "--out", path, "--reps", str(a.reps), "--budget", str(max(1.0, a.budget / 2 - 5))]
        print("fused_plans:", " ".join(cmd + extra), flush=True)
        try:
            rc = subprocess.run(cmd + extra, timeout=a.budget / 2 + 30).returncode
        except subprocess.TimeoutExpired:
            rc = "timed out"
        if rc != 0:
            print(f"fused_plans: bench_fused_scan ({name} constants) failed: {rc}")
        sides[name] = mach.stamp_jsonl(path, info)
    lines = report.fit_table(sides["default"], sides["fit"])
    head = [f"# The fused scan's plans: the fitted cost model ({os.path.relpath(a.model, os.path.join(HERE, '..', '..'))})"
            " against the defaults", "",
            f"- GPU {info['gpu']}; bppsa commit {info['commit']}{' (dirty)' if info['dirty'] else ''}; {info['date']}",
            f"- medians of {a.reps} runs of each plan"]
    mach.write_text(os.path.join(a.out, "fused_fit.md"), "\n".join(head + lines[1:]) + "\n")
    print("\n".join(head + lines[1:]))
    return 0 if lines else 1


if __name__ == "__main__":
    sys.exit(main())
