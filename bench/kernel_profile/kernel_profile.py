#!/usr/bin/env python3
"""Where a persistent recurrent kernel's time goes, from Nsight Compute on one launch: cycles, cycles
and warp instructions per step, cycles per issued instruction, the stall reasons, and the SASS
instructions with the most stall samples.

  PYTHONPATH=<build>/python python3 bench/kernel_profile/kernel_profile.py --out DIR [--cell rnn] [--hidden 20]
      [--features 1] [--batch 16] [--steps 1000] [--backward bp|auto] [--kernels SPEC,…] [--ncu PATH]

The workload is a bppsa.nn layer on CUDA with backward 'bp' (so that the persistent BP kernel runs;
'auto' runs the fused chunked scan where its plan has several chunks): forward and backward three
times. A kernel SPEC is [LABEL=]NAME[@SKIP]: ncu profiles the launch after the first SKIP (default 1:
the first one loads the module) of the kernels whose name matches NAME, e.g. the fused scan's reduce
and push, two launches of one column kernel a backward: reduce=fused_columns_kernel@2,
push=fused_columns_kernel@3 (prepare, columns, carry, columns). ncu runs with --clock-control none
(the card's clocks are left as they are) and the sections SpeedOfLight, WarpStateStats and
SourceCounters. Per step, for the persistent kernels (forward_kernel, backward_kernel), which run
all T steps in one launch: cycles per step = elapsed cycles / T and warp instructions per step = the
warp instructions executed / (T × the launch's warps). Writes DIR/<label>.ncu-rep,
DIR/<label>_details.txt, DIR/<label>_sass.csv, DIR/kernel_profile.{md,json} (with the commit, the
dirty flag and the GPU); prints the table.
Exit 1 when a kernel could not be profiled (the reason is printed), 2 on bad arguments."""
import argparse
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "common"))  # bench/common: machine
from machine import machine  # noqa: E402


def workload(args):
    """The program ncu runs (--child)."""
    import torch
    import bppsa.nn

    torch.manual_seed(0)
    cls = {"rnn": bppsa.nn.RNN, "gru": bppsa.nn.GRU, "lstm": bppsa.nn.LSTM}[args.cell]
    m = cls(args.features, args.hidden, batch_first=True, backward=args.backward).cuda()
    x = torch.randn(args.batch, args.steps, args.features, device="cuda")
    for _ in range(3):
        out, _ = m(x)
        out[:, -1].sum().backward()
    torch.cuda.synchronize()


def find_ncu(given):
    if given:
        return given
    found = shutil.which("ncu") or shutil.which("ncu", path="/usr/local/cuda/bin")
    if found:
        return found
    versions = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"))
    return versions[-1] if versions else None


def number(text):
    """'940,875' → 940875.0; None for what is not a number."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


# ncu prints each metric in a unit it scales to the value (us, ms, s; Mhz, Ghz): factors to µs and GHz.
TIME_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
           "second": 1e6}
FREQ_GHZ = {"hz": 1e-9, "khz": 1e-6, "mhz": 1e-3, "ghz": 1.0, "cycle/nsecond": 1.0, "cycle/usecond": 1e-3}


def parse_details(text):
    """From `ncu --import R --print-details all`: the launch geometry of the header line and every
    'name  unit  value' row of its tables as (value, unit) (the first row of a name wins)."""
    out = {"metrics": {}}
    m = re.search(r"\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)", text)
    if m:
        g = [int(v) for v in m.groups()]
        out["grid"] = g[0] * g[1] * g[2]
        out["block"] = g[3] * g[4] * g[5]
    for line in text.splitlines():
        parts = re.split(r"\s{2,}", line.strip())
        if len(parts) < 2 or parts[0].startswith(("---", "Metric Name", "Section:", "Table Name")):
            continue
        value = number(parts[-1])
        if value is not None and parts[0] not in out["metrics"]:
            out["metrics"][parts[0]] = (value, parts[1] if len(parts) == 3 else "")
    return out


def scaled(metric, table):
    """A (value, unit) metric in the table's unit; None when absent or in a unit not in the table."""
    if metric is None:
        return None
    value, unit = metric
    factor = table.get(unit.lower())
    return None if factor is None else value * factor


def parse_sass(path, top=8):
    """From `ncu --import R --page source --csv --print-source sass`: the warp instructions executed
    in all, the stall samples in all, and the `top` instructions with the most samples."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = next(i for i, r in enumerate(rows) if "Source" in r and "Instructions Executed" in r)
    cols = rows[head]
    src, ex, st = cols.index("Source"), cols.index("Instructions Executed"), cols.index(
        "Warp Stall Sampling (All Samples)")
    body = [r for r in rows[head + 1:] if len(r) == len(cols)]
    executed = sum(number(r[ex]) or 0 for r in body)
    samples = sum(number(r[st]) or 0 for r in body)
    ranked = sorted(body, key=lambda r: -(number(r[st]) or 0))[:top]
    return {"executed": executed, "samples": samples,
            "top": [{"samples": number(r[st]) or 0, "executed": number(r[ex]) or 0, "sass": r[src].strip()}
                    for r in ranked]}


def summarize(kernel, details, sass, steps):
    """The per-step figures of one profiled launch."""
    m = details["metrics"]
    value = lambda name: m[name][0] if name in m else None  # noqa: E731 - unitless or cycles
    warps = details.get("grid", 0) * -(-details.get("block", 0) // 32)
    cycles = value("Elapsed Cycles")
    stalls = {k[len("Stall "):]: v for k, (v, _) in m.items() if k.startswith("Stall ") and v}
    return {
        "kernel": kernel, "steps": steps, "grid": details.get("grid"), "block": details.get("block"),
        "elapsed_cycles": cycles, "duration_us": scaled(m.get("Duration"), TIME_US),
        "sm_ghz": scaled(m.get("SM Frequency"), FREQ_GHZ),
        "cycles_per_step": cycles / steps if cycles and steps else None,
        "instructions_per_warp_step": sass["executed"] / (warps * steps) if warps and steps and sass["executed"] else None,
        "cycles_per_issued_instruction": value("Warp Cycles Per Issued Instruction"),
        "stalls_per_instruction": dict(sorted(stalls.items(), key=lambda kv: -kv[1])),
        "stall_samples": sass["samples"],
        "top": sass["top"],
    }


def fmt(v, digits=0):
    return "—" if v is None else f"{v:,.{digits}f}"


def table(rows, shape):
    lines = [f"# Kernel profile: {shape}", "",
             "| kernel | launch | cycles | µs | cycles / step | warp instructions / step | cycles / issued "
             "instruction | stalls (cycles per instruction) |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        stalls = ", ".join(f"{k} {v:.2f}" for k, v in list(r["stalls_per_instruction"].items())[:4])
        lines.append(f"| {r.get('label', r['kernel'])} | {r['grid']}×{r['block']} | {fmt(r['elapsed_cycles'])} | "
                     f"{fmt(r['duration_us'], 1)} | {fmt(r['cycles_per_step'])} | "
                     f"{fmt(r['instructions_per_warp_step'], 1)} | {fmt(r['cycles_per_issued_instruction'], 2)} | "
                     f"{stalls} |")
    for r in rows:
        lines += ["", f"{r.get('label', r['kernel'])} ({r['kernel']}): the instructions with the most stall samples (of {fmt(r['stall_samples'])})",
                  "", "| samples | share | executed | SASS |", "|---:|---:|---:|---|"]
        for t in r["top"]:
            share = t["samples"] / r["stall_samples"] if r["stall_samples"] else 0
            lines.append(f"| {fmt(t['samples'])} | {share:.1%} | {fmt(t['executed'])} | `{t['sass']}` |")
    return "\n".join(lines) + "\n"


PERSISTENT = ("forward_kernel", "backward_kernel")  # one launch runs all T steps (forward_kernel_warp too)


def parse_spec(spec):
    """'[LABEL=]NAME[@SKIP]' → (label, name, skip); ValueError naming the spec otherwise."""
    label, _, rest = spec.rpartition("=")
    name, _, skip = rest.partition("@")
    if not name or (skip and not skip.isdigit()):
        raise ValueError(f"--kernels: '{spec}' is not [LABEL=]NAME[@SKIP] (e.g. reduce=fused_columns_kernel@2)")
    return label or name, name, int(skip or 1)


def profile(args, ncu, spec):
    """Runs ncu on the workload for one kernel spec; returns (summary, None) or (None, reason)."""
    label, kernel, skip = parse_spec(spec)
    base = os.path.join(args.out, label)
    child = [sys.executable, HERE, "--child", "--cell", args.cell, "--hidden", str(args.hidden), "--features",
             str(args.features), "--batch", str(args.batch), "--steps", str(args.steps), "--backward", args.backward]
    cmd = [ncu, "--clock-control", "none", "--kernel-name", f"regex:{kernel}", "--launch-skip", str(skip),
           "--launch-count", "1", "--section", "SpeedOfLight", "--section", "WarpStateStats", "--section",
           "SourceCounters", "-o", base, "-f"] + child
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{type(e).__name__}: {e}"
    if run.returncode != 0 or not os.path.exists(base + ".ncu-rep"):
        return None, f"ncu exit {run.returncode}: " + (run.stdout + run.stderr).strip()[-600:]
    try:
        details = subprocess.run([ncu, "--import", base + ".ncu-rep", "--print-details", "all"],
                                 capture_output=True, text=True, timeout=args.timeout).stdout
        with open(base + "_details.txt", "w") as f:
            f.write(details)
        with open(base + "_sass.csv", "w") as f:
            f.write(subprocess.run([ncu, "--import", base + ".ncu-rep", "--page", "source", "--csv",
                                    "--print-source", "sass"], capture_output=True, text=True,
                                   timeout=args.timeout).stdout)
        steps = args.steps if kernel.startswith(PERSISTENT) else None
        r = summarize(kernel, parse_details(details), parse_sass(base + "_sass.csv"), steps)
        r.update(label=label, launch_skip=skip)
        return r, None
    except (OSError, subprocess.TimeoutExpired, StopIteration, ValueError) as e:
        return None, f"reading the report: {type(e).__name__}: {e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--cell", choices=["rnn", "gru", "lstm"], default="rnn")
    ap.add_argument("--hidden", type=int, default=20)
    ap.add_argument("--features", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--kernels", default="forward_kernel,backward_kernel",
                    help="comma-separated [LABEL=]NAME[@SKIP] (see above)")
    ap.add_argument("--backward", choices=["bp", "auto"], default="bp")
    ap.add_argument("--ncu")
    ap.add_argument("--timeout", type=float, default=120, help="seconds for each ncu run")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if min(args.hidden, args.features, args.batch, args.steps) < 1:
        ap.error("--hidden, --features, --batch and --steps must be ≥ 1")
    if args.child:
        workload(args)
        return 0
    try:
        specs = [parse_spec(k) and k for k in args.kernels.split(",") if k]
    except ValueError as e:
        ap.error(str(e))
    if not args.out:
        ap.error("--out is required")
    ncu = find_ncu(args.ncu)
    if ncu is None:
        print("kernel_profile: ncu not found (PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute/*); give --ncu")
        return 1
    os.makedirs(args.out, exist_ok=True)
    shape = f"{args.cell.upper()} I{args.features} H{args.hidden} B{args.batch} T{args.steps}, backward {args.backward}"
    info = machine(extra={"ncu": ncu})
    prov = {k: info[k] for k in ("commit", "dirty", "gpu", "bppsa_commit", "date")}
    rows, failed = [], 0
    for spec in specs:
        r, why = profile(args, ncu, spec)
        if r is None:
            print(f"kernel_profile: {spec} not profiled: {why}")
            failed = 1
        else:
            rows.append(r)
        # Written after each kernel: a run stopped later keeps what it measured.
        with open(os.path.join(args.out, "kernel_profile.json"), "w") as f:
            json.dump({"shape": shape, "ncu": ncu, **prov, "kernels": rows}, f, indent=1)
        with open(os.path.join(args.out, "kernel_profile.md"), "w") as f:
            f.write(table(rows, shape))
    print(table(rows, shape))
    return failed


if __name__ == "__main__":
    sys.exit(main())
