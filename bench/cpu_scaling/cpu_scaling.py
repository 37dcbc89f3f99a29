#!/usr/bin/env python3
"""The CPU scan engine at 1, 2, 4, 8 and 16 threads (issue 14, item 9), against `bppsa simulate`'s
predictions calibrated on the same machine. Run by bench/cpu_scaling/run.sh.

Measured (medians of --reps timed runs after warm-up, fresh process per configuration):
  chains  single long chains, batch 1: diagonal 256 and dense 20, N = 10^5, with linear (BP),
          blelloch and hybrid (one chunk per thread): bench_cpu_scaling (Scanner::run, plan reused)
  rnn     the paper's RNN (H 20, T 1000, bitstream) at batch 1 and 16 with --backward bp, blelloch
          and hybrid: bench_paper time (the whole backward, and its scan or BP recurrence apart)
Predicted: `bppsa simulate`'s model for the same chain (the RNN's: sdd, d 20, n = T, its batch),
calibrated on this machine with the command's defaults (quick: one calibration pass), through
bench_cpu_scaling --predict (one calibration per chain for all three algorithms; predictions at every
requested thread count, also above the cores). The scan part of the RNN backward is compared with
the scan's prediction; bp's BP recurrence with the BP (linear scan) prediction.
Thread counts above this machine's cores are skipped and recorded. What the time budget leaves
out is listed as skipped ("time budget spent": a prediction is not started with less than its
typical duration left, and a program the budget stops is not a failure); a program that fails or
hits its own timeout is listed as FAILED (exit 1, the results that were measured are still
written).

Writes OUT/cpu_scaling.json (machine, every record, every prediction document, the comparison),
OUT/cpu_scaling.md (the table of measured vs predicted, relative error) and, when matplotlib is
there, OUT/cpu_scaling.png (bench/cpu_scaling/plot_cpu_scaling.py; it can be run later on the JSON).

Usage: cpu_scaling.py --build DIR --out DIR [--quick] [--threads 1,2,4,8,16] [--budget SECONDS]"""
import argparse
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))  # bench/common: machine, budget
import machine as mach  # noqa: E402
from budget import BudgetDriver  # noqa: E402

ALGOS = ["linear", "blelloch", "hybrid"]
RNN_METHODS = {"bp": "linear", "blelloch": "blelloch", "hybrid": "hybrid"}  # method → simulate's algorithm
PREDICTION_S, PREDICTION_QUICK_S = 45, 20  # the typical duration of one prediction (its calibration)


class Driver(BudgetDriver):
    skip_line = "  {status} {what}: {why}"

    def __init__(self, a):
        super().__init__(a)
        for name in ("bench_cpu_scaling", "bench_paper"):
            path = os.path.join(a.build, name)
            if not os.access(path, os.X_OK):
                sys.exit(f"cpu_scaling.py: {path} is missing; build it first (bench/cpu_scaling/run.sh does)")

    def run(self, cmd, what, timeout, threads=None, needs=5):
        """Runs one program; its stdout (JSON on the last line), or None (recorded in skipped) when
        fewer than `needs` seconds are left, the budget runs out while it runs (skipped), or it hits
        its own timeout or fails (FAILED)."""
        env = dict(os.environ)
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        t0 = time.time()
        _, p = self.run_program(cmd, what, timeout, needs=needs, kept=f": {' '.join(cmd)}", capture_output=True,
                                text=True, env=env)
        if p is None:
            return None
        if p.returncode != 0:
            self.skip(what, f"exit {p.returncode}: {' '.join(cmd)}: {p.stderr.strip()[-400:]}", failed=True)
            return None
        print(f"  {time.time() - t0:6.1f} s  {what}", flush=True)
        return p.stdout

    def predict(self, kind, dim, n, batch, algos, wanted):
        """bench_cpu_scaling --predict: {(algorithm, threads): prediction row} and the document."""
        cmd = [os.path.join(self.a.build, "bench_cpu_scaling"), "--no-measure", "--predict", "--kind", kind, "--dim",
               str(dim), "--n", str(n), "--batch", str(batch), "--algos", ",".join(algos), "--threads",
               ",".join(map(str, wanted)), "--calibration-repeats", "1" if self.a.quick else "5"]
        # Not started with less than its typical duration left (a calibration: about 45 s on 16
        # cores, 20 s in quick mode): the budget would only kill it.
        text = self.run(cmd, f"prediction {kind} d{dim} n{n} b{batch} (calibration on this machine)", 240,
                        needs=PREDICTION_QUICK_S if self.a.quick else PREDICTION_S)
        if text is None:
            return {}, None
        doc = json.loads(text.strip().splitlines()[-1])
        return {(r["algorithm"], r["threads"]): r for r in doc["predictions"]}, doc


def measure_chains(drv, threads):
    """The chains measured at every thread count: [{label, kind, dim, n, batch, algos, records}]."""
    a = drv.a
    n = 10000 if a.quick else 100000
    out = []
    for kind, dim in ((("dense", 20),) if a.quick else (("diag", 256), ("dense", 20))):
        cmd = [os.path.join(a.build, "bench_cpu_scaling"), "--kind", kind, "--dim", str(dim), "--n", str(n), "--batch",
               "1", "--algos", ",".join(ALGOS), "--threads", ",".join(map(str, threads)), "--reps", str(a.reps),
               "--warmup", str(a.warmup)]
        text = drv.run(cmd, f"chain {kind} d{dim} n{n}: {', '.join(ALGOS)} at threads {threads}", 240)
        if text is not None:
            rec = json.loads(text.strip().splitlines()[-1])
            out.append({"label": f"{kind} {dim}, N {n}, batch 1", "section": "chain", "kind": kind, "dim": dim,
                        "n": n, "batch": 1, "algos": {x: x for x in ALGOS}, "measured": rec})
    return out


def measure_rnn(drv, threads):
    """The RNN's backward by bench_paper at every thread count: [{label, …, records}] (sdd chain)."""
    a = drv.a
    steps = 300 if a.quick else 1000
    out = []
    for batch in ((16,) if a.quick else (1, 16)):
        recs = []
        for method in RNN_METHODS:
            for t in threads:
                cmd = [os.path.join(a.build, "bench_paper"), "time", "--cell", "rnn", "--hidden", "20", "--data",
                       "bitstream", "--steps", str(steps), "--batch", str(batch), "--method", method, "--threads",
                       str(t), "--reps", str(a.reps), "--warmup", str(a.warmup)]
                text = drv.run(cmd, f"rnn T{steps} b{batch} {method} threads {t}", 120, threads=t)
                if text is not None:
                    recs.append(json.loads(text.strip().splitlines()[-1]))
        if recs:
            out.append({"label": f"RNN H 20, T {steps}, batch {batch}", "section": "rnn", "kind": "sdd", "dim": 20,
                        "n": steps, "batch": batch, "algos": RNN_METHODS, "measured": recs})
    return out


def measured_rows(item):
    """(algorithm or method, threads, measured seconds, whole backward or None) of one item."""
    if item["section"] == "chain":
        return [(r["algorithm"], r["threads"], r["time"]["median"], None) for r in item["measured"]["records"]]
    return [(r["method"], r["threads"], r["scan"]["median"], r["backward"]["median"]) for r in item["measured"]]


def compare(item, pred, threads, wanted):
    """The comparison rows of one item: measured against predicted (None where not predicted),
    then the thread counts above the cores, predicted only. `algos` maps the item's names to
    simulate's algorithms (the RNN's bp is the linear scan)."""
    rows = [row(item["label"], item["section"], name, t, m, pred.get((item["algos"][name], t)), backward=bw)
            for name, t, m, bw in measured_rows(item)]
    return rows + predicted_only(item["label"], item["section"], list(item["algos"]), threads, wanted,
                                 {(name, t): pred.get((algo, t)) for name, algo in item["algos"].items()
                                  for t in wanted})


def predicted_only(label, section, algos, threads, wanted, pred):
    """Rows for the thread counts above this machine's cores: predicted, not measured."""
    return [row(label, section, algo, t, None, pred.get((algo, t))) for algo in algos for t in wanted
            if t not in threads and pred.get((algo, t))]


def row(config, section, algo, threads, measured, pred, backward=None):
    """One line of the comparison; `pred` is bench_cpu_scaling's prediction row (or None)."""
    predicted = pred["predicted_s"] if pred else None
    r = {"config": config, "section": section, "algorithm": algo, "threads": threads, "measured_s": measured,
         "predicted_s": predicted, "error": (predicted - measured) / measured if predicted and measured else None}
    if pred:
        r["predicted_bp_s"] = pred["bp_predicted_s"]
    if backward is not None:
        r["backward_s"] = backward
    return r


def markdown(doc):
    m = doc["machine"]
    lines = [f"# CPU scan scaling, measured vs `bppsa simulate` ({'quick' if doc['quick'] else 'full'} run)", "",
             f"Machine: {m['cpu']}, {m['cores']} cores; threads {', '.join(map(str, doc['threads']))}"
             + (f" (skipped above the cores: {', '.join(map(str, doc['threads_above_cores']))})"
                if doc["threads_above_cores"] else "") + f"; commit {m['bppsa_commit']}; {m['date']}.", "",
             f"Medians of {doc['reps']} timed runs after {doc['warmup']} warm-up runs. Chains: Scanner::run with the "
             "plan reused (bench_cpu_scaling). RNN: the scan (bp: the BP recurrence) inside a whole backward "
             "(bench_paper time), whose median is in the last column. Predicted: `bppsa simulate` calibrated on this "
             "machine (bp is predicted as the linear scan over the same Jacobians). Error = (predicted − measured) / "
             "measured. Speedup = the same algorithm's 1-thread time / this time. The RNN's bp is not the linear scan "
             "the model costs (it multiplies W_hh^T by the batch's vectors without forming Jacobians), and its scan "
             "times include the engine's input checks and the copy of every g_t into the layer's record, which the "
             "model leaves out: expect the model to under-predict them.", "",
             "| configuration | algorithm | threads | measured ms | predicted ms | error | speedup measured | "
             "speedup predicted | backward ms |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    base = {}
    for r in doc["comparison"]:
        if r["threads"] == 1:
            base[(r["config"], r["algorithm"])] = r
    for r in sorted(doc["comparison"], key=lambda r: (r["config"], r["algorithm"], r["threads"])):
        b = base.get((r["config"], r["algorithm"]))
        sm = f"{b['measured_s'] / r['measured_s']:.2f}" if b and r["measured_s"] else "–"
        sp = f"{b['predicted_s'] / r['predicted_s']:.2f}" if b and b["predicted_s"] and r["predicted_s"] else "–"
        pred = f"{1e3 * r['predicted_s']:.3f}" if r["predicted_s"] else "–"
        err = f"{100 * r['error']:+.0f} %" if r["error"] is not None else "–"
        bw = f"{1e3 * r['backward_s']:.2f}" if "backward_s" in r else ""
        meas = f"{1e3 * r['measured_s']:.3f}" if r["measured_s"] else "– (above the cores)"
        lines.append(f"| {r['config']} | {r['algorithm']} | {r['threads']} | {meas} | {pred} | "
                     f"{err} | {sm} | {sp} | {bw} |")
    errs = [abs(r["error"]) for r in doc["comparison"] if r["error"] is not None]
    if errs:
        errs.sort()
        lines += ["", f"Prediction error over {len(errs)} rows: median |error| {100 * errs[len(errs) // 2]:.0f} %, "
                  f"max {100 * errs[-1]:.0f} %."]
    if doc["skipped"]:
        lines += ["", "Skipped or failed:"] + [f"- {'FAILED ' if s['failed'] else ''}{s['what']}: {s['why']}"
                                               for s in doc["skipped"]]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="folder with bench_cpu_scaling and bench_paper")
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: the dense chain at N 10^4, the RNN at T 300 and batch 16, 3 repetitions")
    p.add_argument("--threads", default="1,2,4,8,16", help="thread counts (those above the cores are skipped)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 5, quick 3)")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 2, quick 1)")
    p.add_argument("--budget", type=float, default=150, help="seconds for everything; the rest is skipped")
    a = p.parse_args()
    a.reps = a.reps or (3 if a.quick else 5)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.quick else 2)
    if not a.quick and a.reps < 5:
        p.error("a full run reports medians of at least 5 repetitions: --reps ≥ 5 (or --quick)")
    wanted = sorted({int(t) for t in a.threads.split(",")})
    cores = len(os.sched_getaffinity(0))
    threads = [t for t in wanted if t <= cores]
    above = [t for t in wanted if t > cores]
    if above:
        print(f"cpu_scaling: {cores} cores here: skipping threads {above}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    # A timeout's SIGTERM unwinds through subprocess.run, which then kills the program it waits for.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    drv = Driver(a)
    t0 = time.time()
    doc = {"section": "cpu_scaling", "machine": mach.machine(threads), "quick": a.quick, "threads": threads,
           "threads_above_cores": above, "reps": a.reps, "warmup": a.warmup, "seconds": 0, "chains": [], "rnn": [],
           "predictions": [], "comparison": [], "skipped": drv.skipped, "commands": drv.commands}

    def save():  # after every section: a run killed later keeps what it measured
        doc["seconds"] = round(time.time() - t0, 1)
        mach.write_json(os.path.join(a.out, "cpu_scaling.json"), doc)
        mach.write_text(os.path.join(a.out, "cpu_scaling.md"), markdown(doc))

    # Every measurement first (cheap), then the predictions (a calibration each), so a short budget
    # loses predictions, not measurements.
    print(f"[chains] {cores} cores, threads {threads}", flush=True)
    items = measure_chains(drv, threads)
    doc["chains"] = [i["measured"] for i in items]
    print("[rnn]", flush=True)
    rnn_items = measure_rnn(drv, threads)
    doc["rnn"] = [r for i in rnn_items for r in i["measured"]]
    items += rnn_items
    doc["comparison"] = [r for i in items for r in compare(i, {}, threads, wanted)]
    save()
    print("[predictions]", flush=True)
    rows = []
    for k, item in enumerate(items):
        pred, pdoc = drv.predict(item["kind"], item["dim"], item["n"], item["batch"],
                                 sorted(set(item["algos"].values())), wanted)
        if pdoc:
            pdoc["for"] = item["label"]
            doc["predictions"].append(pdoc)
        rows += compare(item, pred, threads, wanted)
        doc["comparison"] = rows + [r for i in items[k + 1:] for r in compare(i, {}, threads, wanted)]
        save()
    print(f"wrote {a.out}/cpu_scaling.json and cpu_scaling.md in {time.time() - t0:.0f} s", flush=True)
    failed = [s for s in drv.skipped if s["failed"]]
    if drv.skipped:
        print(f"cpu_scaling: {len(drv.skipped)} item(s) skipped, {len(failed)} of them failed "
              "(listed in cpu_scaling.md)", flush=True)
    return 1 if failed or not doc["comparison"] else 0


if __name__ == "__main__":
    sys.exit(main())
