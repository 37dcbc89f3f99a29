#!/usr/bin/env python3
"""The GPU benchmark (issue 14, item 8): bppsa's GPU training step against torch.nn.RNN/GRU/LSTM with
cuDNN on the same GPU, in the same run, with the same weights and data. Run by bench/gpu/run.sh.

1. The plan (the paper's sweeps, docs/method.md §5): RNN H 20 on bitstream at batch 16 over T ∈ {10 … 30000};
   at T 1000 over batch ∈ {2 … 256}; the GRU at the IRMAS s/m/l shapes (F 38/24/12, T 259/517/1034,
   H 20, batch 16, 11 classes); the RNN at H ∈ {64, 256} and an LSTM (T 1000, batch 16). --quick:
   a handful of those points.
2. torch_gpu.py export: the weights (torch's default init) and batches, written once, read by both.
3. torch_gpu.py time: PyTorch on CUDA (exit 77 here when there is no CUDA device: nothing else runs).
4. bench_gpu_step (when built; bench/CMakeLists.txt builds it once the GPU training API is in
   the headers): bppsa with --backward bp, fused (the fused scan) and hybrid (the generic scan).
5. bench_fused_scan (when built): the fused scan alone, its FLOPs and bytes against the GPU's FP32
   and memory roofline; then again with the cost model's constants fitted to the H100 sweep
   (FIT below, bench/gpu/fit_fused_model.py), its plans timed against the defaults' in the same
   run (OUT/fused_fit.md).
6. OUT/gpu_bench.json (the machine, every record, the ratios to PyTorch from this run, what was
   skipped and why) and OUT/gpu_bench.md, rewritten after every phase; the raw records (JSON lines,
   appended by each program as it goes) and the plan stay in OUT/records/. The figures are
   bench/gpu/plot_gpu.py's.
The first loss of every bppsa record must equal PyTorch's to 1e-4 (relative), as in bench/paper/paper.py;
a mismatch is reported and makes the exit status 3. Exit 0 otherwise (1 when a program failed: an
error exit or its own timeout; what the time budget leaves out or stops is skipped, not failed).

Usage: gpu.py --build DIR --out DIR [--quick] [--budget SECONDS] [--device cuda|cpu]"""
import argparse
import os
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))  # bench/common: machine, budget
import machine as mach  # noqa: E402
from budget import BudgetDriver  # noqa: E402
import gpu_report as report  # noqa: E402

NO_DEVICE = 77
# The cost model's constants fitted to the H100's sweep (not the defaults until a GPU times its plans).
FIT = os.path.join(HERE, "..", "results", "gpu", "nvidia-h100-80gb-hbm3", "fused_fit.json")
GRU_SHAPES = {"s": (259, 38), "m": (517, 24), "l": (1034, 12)}  # (T, F) of the IRMAS presets
LOSS_TOLERANCE = 1e-4


def plan(quick):
    """The configurations; one per distinct shape, listing the sweeps it belongs to."""
    configs = {}

    def add(sweep, cell, hidden, steps, batch, features=1, classes=10, data="bitstream", **extra):
        cid = f"{cell}_H{hidden}_T{steps}_B{batch}" + (f"_F{features}" if features != 1 else "")
        c = configs.setdefault(cid, {"id": cid, "cell": cell, "hidden": hidden, "steps": steps, "batch": batch,
                                     "features": features, "classes": classes, "data": data, "lr": 3e-5,
                                     "sweeps": []})
        c["sweeps"].append(sweep)
        c.update(extra)

    ts = [100, 1000, 10000] if quick else [10, 30, 100, 300, 1000, 3000, 10000, 30000]
    bs = [16, 64] if quick else [2, 4, 8, 16, 32, 64, 128, 256]
    for t in ts:
        add("rnn_T", "rnn", 20, t, 16, tf32_also=t in (1000, 30000))
    for b in bs:
        add("rnn_B", "rnn", 20, 1000, b)
    for name in (["s"] if quick else ["s", "m", "l"]):
        t, f = GRU_SHAPES[name]
        add(f"gru_{name}", "gru", 20, t, 16, features=f, classes=11, data="gaussian", lr=3e-4)
    for h in ([20, 64] if quick else [20, 64, 256]):
        add("rnn_H", "rnn", h, 1000, 16)
    if not quick:
        add("lstm", "lstm", 20, 1000, 16)
    # The kernel list of one iteration for each distinct (cell, hidden): which cuDNN algorithm ran.
    seen = set()
    for c in configs.values():
        key = (c["cell"], c["hidden"])
        c["profile"] = key not in seen and (c["steps"] == 1000 or c["cell"] == "gru")
        if c["profile"]:
            seen.add(key)
    return {"seed": 4202, "quick": quick, "configs": list(configs.values())}


class Driver(BudgetDriver):
    def __init__(self, a):
        super().__init__(a)
        self.report = None  # writes the report of what was measured so far (set by drive)

    def run(self, cmd, what, timeout, share=None):
        """Streams a program's output; returns its exit status (124 when it was killed, None when it
        was not started). `timeout` is the program's own limit (it hangs); `share` the part of the
        budget it may use: a program its share stops is skipped ("time budget spent"; the records it
        finished are kept), one that hits its own timeout failed."""
        print(f"[{what}] {' '.join(cmd)}", flush=True)
        t0 = time.time()
        state, p = self.run_program(cmd, what, timeout, share=share, kept=" (the records it finished are kept)")
        if state != "ran":
            return None if state == "not started" else 124
        print(f"[{what}] exit {p.returncode} after {time.time() - t0:.0f} s", flush=True)
        if p.returncode not in (0, NO_DEVICE):
            self.skip(what, f"exit {p.returncode} (records it finished are kept; see the log above)", failed=True)
        return p.returncode


# The programs' own timeouts: far above any share of a budget, so only a hang reaches them.
OWN_TIMEOUT = {"export": 120, "pytorch": 900, "bppsa": 900, "fused scan": 600}


def inner_budget(share):
    """A program's own budget for starting configurations: its share of the time, less room for the
    last configuration it starts (it is killed at the share)."""
    return max(5, int(share - min(30, 0.25 * share)))


read_jsonl = mach.read_jsonl


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="folder with bench_gpu_step / bench_fused_scan (when built)")
    p.add_argument("--out", required=True)
    p.add_argument("--quick", action="store_true", help="a handful of points (about a minute)")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions (≥ 5 for a full run)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget", type=float, default=180, help="seconds; what does not fit is skipped and listed")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: run both sides on the CPU (tests this driver where there is no GPU)")
    p.add_argument("--python", default=sys.executable, help="the Python with torch for torch_gpu.py")
    a = p.parse_args()
    if not a.quick and a.reps < 5:
        p.error("a full run reports medians of at least 5 repetitions: --reps ≥ 5 (or --quick)")
    os.makedirs(os.path.join(a.out, "records"), exist_ok=True)
    # A timeout's SIGTERM ends the run through the finally below (the report of what was measured
    # has been written after every phase; the temporary weights and batches are removed).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    drv = Driver(a)
    work = tempfile.mkdtemp(prefix="bppsa-gpu-bench-")
    try:
        return drive(a, drv, work)
    except SystemExit as e:
        if e.code == 124 and drv.report:  # the report of what was measured before the timeout
            drv.skip("the rest of the run", "stopped by a timeout (SIGTERM)", failed=True)
            drv.report()
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def drive(a, drv, work):
    t_start = time.time()
    pl = plan(a.quick)
    plan_path = os.path.join(a.out, "records", "plan.json")
    mach.write_json(plan_path, pl)
    # Every program appends its records here as they finish (a fresh run starts them empty).
    out = {k: os.path.join(a.out, "records", k + ".jsonl") for k in ("pytorch", "bppsa", "fused", "fused_fit")}
    for path in out.values():
        mach.write_text(path, "")

    info = mach.machine()

    def write_report():
        # Every record carries the commit, the dirty flag and the GPU (the C++ programs' too).
        records = [mach.stamp_jsonl(out[k], info) for k in ("pytorch", "bppsa", "fused", "fused_fit")]
        records = records[0] + records[1] + records[2]
        versions = next(({"torch": r["torch"], "torch_cuda": r.get("torch_cuda"), "cudnn": r.get("cudnn")}
                         for r in records if r["impl"] == "pytorch" and "torch" in r), {})
        doc = {"section": "gpu_bench", "machine": mach.machine(extra=versions), "quick": a.quick,
               "device": a.device, "reps": a.reps, "warmup": a.warmup, "plan": pl, "records": records,
               "comparison": report.compare(records, LOSS_TOLERANCE), "skipped": drv.skipped,
               "commands": drv.commands, "seconds": round(time.time() - t_start, 1)}
        mach.write_json(os.path.join(a.out, "gpu_bench.json"), doc)
        mach.write_text(os.path.join(a.out, "gpu_bench.md"), report.markdown(doc))
        return doc

    drv.report = write_report

    print(f"bench_gpu: {len(pl['configs'])} configurations, budget {a.budget:.0f} s", flush=True)
    torch_py = os.path.join(HERE, "torch_gpu.py")
    rc = drv.run([a.python, torch_py, "export", "--plan", plan_path, "--work", work], "export", OWN_TIMEOUT["export"])
    if rc != 0:
        print("bench_gpu: exporting the weights and batches failed: nothing to time", file=sys.stderr)
        return 1

    # PyTorch first: it also tells whether there is a GPU at all.
    common = ["--reps", str(a.reps), "--warmup", str(a.warmup)]
    share = 0.4 * drv.left()
    rc = drv.run([a.python, torch_py, "time", "--plan", plan_path, "--work", work, "--out", out["pytorch"], "--device",
                  a.device, "--budget", str(inner_budget(share)), *common], "pytorch", OWN_TIMEOUT["pytorch"], share)
    if rc == NO_DEVICE:
        print("bench_gpu: no CUDA device (PyTorch sees none): nothing was measured", file=sys.stderr)
        return NO_DEVICE
    write_report()

    step = os.path.join(a.build, "bench_gpu_step")
    if os.access(step, os.X_OK):
        share = 0.8 * drv.left()
        drv.run([step, "--plan", plan_path, "--work", work, "--out", out["bppsa"], "--device", a.device,
                 "--budget", str(inner_budget(share)), *common], "bppsa", OWN_TIMEOUT["bppsa"], share)
    else:
        drv.skip("bppsa's side", f"{step} was not built: the GPU training API of bench/gpu/API.md is not in this "
                 "tree's headers yet (bench/CMakeLists.txt checks for it)", failed=True)
    write_report()

    fused = os.path.join(a.build, "bench_fused_scan")
    if a.device != "cuda":
        drv.skip("the fused scan alone", "--device cpu (it is a GPU kernel)")
    elif os.access(fused, os.X_OK):
        share = max(10, drv.left() - 5)
        drv.run([fused, "--plan", plan_path, "--out", out["fused"], "--reps", str(max(a.reps, 10)), "--budget",
                 str(inner_budget(share))], "fused scan", OWN_TIMEOUT["fused scan"], share)
        if os.path.exists(FIT) and drv.left() > 15:
            share = max(10, drv.left() - 5)
            drv.run([fused, "--plan", plan_path, "--out", out["fused_fit"], "--reps", str(max(a.reps, 10)),
                     "--budget", str(inner_budget(share)), "--model", FIT], "fused scan, fitted model",
                    OWN_TIMEOUT["fused scan"], share)
            lines = report.fit_table(read_jsonl(out["fused"]), read_jsonl(out["fused_fit"]))
            if lines:
                mach.write_text(os.path.join(a.out, "fused_fit.md"), "\n".join(lines[1:]) + "\n")
    else:
        drv.skip("the fused scan alone", f"{fused} was not built: the fused scan's timing entry point "
                 "(bench/gpu/cuda/fused_bench.hpp) is not in this tree, or CUDA is off", failed=True)
    doc = write_report()
    print(f"bench_gpu: wrote {a.out}/gpu_bench.json and gpu_bench.md ({len(doc['records'])} records) in "
          f"{time.time() - t_start:.0f} s", flush=True)
    mismatched = [c for c in doc["comparison"] if c.get("loss_ok") is False]
    if mismatched:
        for c in mismatched:
            print(f"bench_gpu: FIRST LOSS MISMATCH {c['id']} {c['method']}: bppsa {c['loss0']} vs PyTorch "
                  f"{c['torch_loss0']} (relative {c['loss_rel_diff']:.2e} > {LOSS_TOLERANCE})", file=sys.stderr)
        return 3
    return 1 if any(s["failed"] for s in drv.skipped) else 0


if __name__ == "__main__":
    sys.exit(main())
