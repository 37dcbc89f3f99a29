#!/usr/bin/env python3
"""The paper's measurements (docs/method.md §5), ours and PyTorch's in the same run, on this machine.

For every configuration, bench_paper (bppsa) writes the initial weights and the batch once
(--export); then each backward method of bppsa and PyTorch autograd (bench/paper/torch_paper.py)
run the identical iteration in fresh processes: memory probe, warm-up, timed repetitions
(median, min, max and every sample are kept). The first loss of every run must agree with
PyTorch's to 1e-4 (relative), or the run stops: that is the proof that both sides computed
the same model on the same data with the same weights.

Sections (each writes bench/results/<machine>/<section>.json with the machine, the exact
commands and every record, ours and PyTorch's):
  rnn_T      RNN H 20 on bitstream, batch 16, T ∈ {10 … 30000}                    (Fig. 8 a–c)
  rnn_B      RNN H 20 on bitstream, T 1000, batch ∈ {2, 4, …, 256}                (Fig. 8 d–f)
  curves     loss against wall-clock time, T 1000, batch 16, Adam 3e-5            (Fig. 7)
  gru        GRU H 20, s/m/l feature shapes × batch 16/32/64: IRMAS MFCC features if
             --irmas-dir is given, else Fashion-MNIST images resampled to T × F    (Fig. 9)
  simulate   bppsa simulate: speedup over BP against n for p virtual workers, and the
             prediction checked against measured scans at every p this machine has
Memory (peak growth during the backward pass) is part of every rnn_T / rnn_B / gru record.

Usage: paper.py [--quick] [--out DIR] [--build DIR] [--threads N] [--only SECTION …]
--quick is a smoke test (small sweeps, a few minutes); its results are not for the figures."""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # bench/common
from cpuinfo import cpu_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable  # the project's environment (bench/paper/run.sh runs it), with PyTorch
METHODS = ["bp", "blelloch", "hybrid", "auto"]
GRU_SHAPES = {"s": (259, 38), "m": (517, 24), "l": (1034, 12)}  # (T, F) of the IRMAS presets


def machine(threads):
    model = cpu_model()
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    try:
        import torch  # noqa: F401 (only its version)
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"cpu": model, "cores": os.cpu_count(), "memory_gb": round(mem_kb / 2**20, 1), "gpu": None,
            "os": platform.platform(), "threads_used": threads, "torch": torch_version, "bppsa_commit": commit,
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


class Runner:
    def __init__(self, args):
        self.args = args
        self.work = tempfile.mkdtemp(prefix="bppsa-paper-")
        self.bench = os.path.join(args.build, "bench_paper")
        self.cli = os.path.join(args.build, "bppsa")
        for b in (self.bench, self.cli):
            if not os.access(b, os.X_OK):
                sys.exit(f"paper.py: {b} is missing; build first (bench/paper/run.sh does)")

    def call(self, cmd, log):
        """Runs a bench_paper / torch_step command; returns the JSON of its last output line."""
        return json.loads(self.call_text(cmd, log).strip().splitlines()[-1])

    def config(self, cell, steps, features, batch, data, classes, log, methods=METHODS, mode="time", extra=(),
               lr=3e-5):
        """Every bppsa method and PyTorch on one configuration (Adam with `lr` on both sides);
        returns the records."""
        a = self.args
        d = os.path.join(self.work, f"{cell}-{data}-T{steps}-B{batch}")
        shutil.rmtree(d, ignore_errors=True)
        common = [mode, "--cell", cell, "--data", data, "--steps", str(steps), "--features", str(features),
                  "--batch", str(batch), "--classes", str(classes), "--threads", str(a.threads), "--lr", str(lr), *extra]
        if data == "irmas":
            common += ["--data-dir", a.irmas_dir]
        if mode == "time":
            common += ["--reps", str(a.reps), "--warmup", str(a.warmup)]
        records = []
        for i, m in enumerate(methods):
            cmd = [self.bench, *common, "--method", m] + (["--export", d] if i == 0 else [])
            records.append(self.call(cmd, log))
        tcmd = [PYTHON, os.path.join(HERE, "torch_paper.py"), mode, "--dir", d, "--cell", cell, "--threads",
                str(a.threads), "--lr", str(lr)]
        if mode == "time":
            tcmd += ["--reps", str(a.reps), "--warmup", str(a.warmup)]
        else:
            tcmd += ["--batch", str(batch), *extra]
        records.append(self.call(tcmd, log))
        shutil.rmtree(d, ignore_errors=True)
        if mode == "time":
            ref = records[-1]["loss0"]
            for r in records[:-1]:
                if abs(r["loss0"] - ref) > 1e-4 * abs(ref):
                    sys.exit(f"paper.py: first loss {r['loss0']} ({r['method']}) != PyTorch's {ref}: the two sides "
                             "did not compute the same thing")
        else:
            ref = records[-1]["loss"][0]
            for r in records[:-1]:
                if abs(r["loss"][0] - ref) > 1e-3 * abs(ref):
                    sys.exit(f"paper.py: first logged loss {r['loss'][0]} ({r['method']}) != PyTorch's {ref}")
        return records

    # ---- sections --------------------------------------------------------------------------

    def rnn_T(self, log):
        ts = [10, 100, 1000] if self.args.quick else [10, 30, 100, 300, 1000, 3000, 10000, 30000]
        out = []
        for t in ts:
            out += self.config("rnn", t, 1, 16, "bitstream", 10, log)
        return {"sweep": "steps", "batch": 16, "hidden": 20, "records": out}

    def rnn_B(self, log):
        bs = [2, 16, 64] if self.args.quick else [2, 4, 8, 16, 32, 64, 128, 256]
        out = []
        for b in bs:
            out += self.config("rnn", 1000, 1, b, "bitstream", 10, log)
        return {"sweep": "batch", "steps": 1000, "hidden": 20, "records": out}

    def curves(self, log):
        iters = 40 if self.args.quick else self.args.curve_iters
        extra = ["--iters", str(iters), "--log-every", str(max(1, iters // 100))]
        out = self.config("rnn", 1000, 1, 16, "bitstream", 10, log, mode="curve", extra=extra)
        return {"steps": 1000, "batch": 16, "hidden": 20, "lr": 3e-5, "iters": iters, "records": out}

    def gru(self, log):
        a = self.args
        data = "irmas" if a.irmas_dir else "mnist"
        shapes = ["s"] if a.quick else ["s", "m", "l"]
        batches = [16] if a.quick else [16, 32, 64]
        out = []
        for name in shapes:
            t, f = GRU_SHAPES[name]
            extra = ["--preset", name] if data == "irmas" else []
            for b in batches:
                recs = self.config("gru", t, f, b, data, 11 if data == "irmas" else 10, log, extra=extra, lr=3e-4)
                for r in recs:
                    r["shape"] = name
                out += recs
        what = ("IRMAS MFCC features from " + a.irmas_dir if data == "irmas" else
                "Fashion-MNIST training images (Debian's IDX files) bilinearly resampled from 28×28 to T×F: IRMAS is not present here")
        return {"data": what, "hidden": 20, "lr": 3e-4, "records": out}

    def simulate(self, log):
        """Predicted speedup over BP for p virtual workers (sdd 20×20 = the RNN's Jacobians, and
        diagonal 20), validated against measured scans at every p ≤ this machine's threads."""
        quick = self.args.quick
        ns = [100, 1000, 10000] if quick else [10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000, 300000, 1000000]
        ps = sorted({1, 2, 16, 256} if quick else {1, 2, 4, 16, 64, 256, 1024, 4096})
        out = []
        for kind in ["sdd", "diag"]:
            for algo in ["blelloch", "hybrid"]:
                js = os.path.join(self.work, f"sim-{kind}-{algo}.json")
                cmd = [self.cli, "simulate", "--algo", algo, "--kind", kind, "--dim", "20", "--n",
                       ",".join(map(str, ns)), "--p", ",".join(map(str, ps)), "--validate", "--json", js]
                if quick:
                    cmd += ["--repeats", "3"]
                self.call_text(cmd, log)
                with open(js) as f:
                    out.append(json.load(f))
        return {"runs": out}

    def call_text(self, cmd, log):
        """Runs a command with the section's thread count; stops the driver if it fails."""
        env = dict(os.environ, OMP_NUM_THREADS=str(self.args.threads))
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            sys.exit(f"paper.py: command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
        log.append(" ".join(cmd))
        print(f"  {time.time() - t0:6.1f} s  {os.path.basename(cmd[0])} {' '.join(cmd[1:])}", flush=True)
        return p.stdout


SECTIONS = ["rnn_T", "rnn_B", "curves", "gru", "simulate"]


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke test: small sweeps (not for the figures)")
    p.add_argument("--out", default=None, help="results folder (default bench/results/cpu, quick: build/bench-quick)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="folder with bench_paper and bppsa")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for bppsa and PyTorch alike")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per configuration (≥ 5 for figures)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first (the memory probe is one)")
    p.add_argument("--curve-iters", type=int, default=2000, help="training-curve iterations (2000 = one epoch)")
    p.add_argument("--irmas-dir", default=os.environ.get("BPPSA_IRMAS"), help="IRMAS folder for the GRU section")
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=SECTIONS)
    a = p.parse_args()
    if a.reps < 1 or a.warmup < 1 or a.threads < 1:
        p.error("--reps, --warmup and --threads must be ≥ 1")
    if not a.quick and a.reps < 5:
        p.error("figures need medians of at least 5 repetitions: --reps ≥ 5 (or --quick)")
    if a.irmas_dir and not os.path.isdir(a.irmas_dir):
        p.error(f"--irmas-dir {a.irmas_dir} is not a folder")
    if a.out is None:
        a.out = os.path.join(ROOT, "build", "bench-quick") if a.quick else os.path.join(ROOT, "bench", "results", "cpu")
    os.makedirs(a.out, exist_ok=True)
    r = Runner(a)
    info = machine(a.threads)
    print(f"machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']}; results in {a.out}")
    t_all = time.time()
    try:
        for name in a.only:
            print(f"[{name}]", flush=True)
            log = []
            t0 = time.time()
            body = getattr(r, name)(log)
            body.update({"section": name, "machine": info, "quick": a.quick, "reps": a.reps, "warmup": a.warmup,
                         "seconds": round(time.time() - t0, 1), "commands": log})
            write_json(os.path.join(a.out, name + ".json"), body)
    finally:
        shutil.rmtree(r.work, ignore_errors=True)
    print(f"done in {time.time() - t_all:.0f} s")


if __name__ == "__main__":
    main()
