#!/usr/bin/env python3
"""Sweep of every numeric flag of every `bppsa` subcommand: from a cheap baseline command, one
flag at a time is set to 0, −1, 1, 10^9, the largest value its range accepts and one past it,
and absurd values (10^30, 1e400, nan, ±inf, 2^64, "abc", ""). Every run must end by itself with
exit 0, 1 or 2 (3 only where a gradient or error check is part of the command), without
"internal error", bad_alloc, a sanitizer report or a signal, within a time limit, and (outside
sanitizer builds) without growing past the memory it was allowed.

Flags are discovered from each subcommand's --help (their type and range), so a new flag is
swept without editing this file. Runs get BPPSA_MEMORY_LIMIT=2G: the memory guards then refuse
what would not fit a 2 GiB machine, deterministically on any host, and the peak resident set
shows that nothing unguarded allocated more (simulate gets 4G: its calibration streams 6× the
last-level cache whatever the flags, 2.9 GB on a VM reporting a 480 MB L3).

Explicit exceptions, each printed when it applies: LONG_WORK below (legitimate long work that
passes if it is still making progress when stopped); simulate's time limit, scaled from its
baseline's time measured alone first (its calibration's cost depends on the machine's cache);
values that CLI11 rejects while parsing are run on each subcommand's first baseline only
(parsing comes before anything baseline-specific);
under sanitizers, simulate's accepted values (each a full calibration, minutes there) are left to
the Release sweep; a run whose output shows Open MPI's own start-up failure (MPI_START_FAILURES) is
run again, up to MPI_START_ATTEMPTS times in all, and fails as an environment failure if it persists.

Usage: check_flag_sweep.py BPPSA_BINARY WORK_DIR [--jobs N] [--only SUBSTRING]"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import safetensors_np as st  # noqa: E402
from fake_idx import fake_mnist  # noqa: E402  (tests/cli/, this script's folder)

MEMORY_LIMIT = "2G"
SIMULATE_MEMORY_LIMIT = "4G"
# Absurd values every numeric flag gets, whatever its type.
ABSURD = ["1e30", "1e400", "nan", "inf", "-inf", "18446744073709551616", "abc", ""]
BASIC = ["0", "-1", "1", "1000000000"]

# Values that are legitimate long work rather than a hang: the run passes when it is still
# running at the time limit AND its output shows progress (the regular expression). Keep this
# list explicit and short: everything else must finish on its own.
LONG_WORK = {
    ("--epochs", "1000000"): (r"epoch 2/1000000", "10^6 epochs of a tiny data set (the largest --epochs accepts)"),
}
LONG_WORK_SECONDS = 8

# Runs whose exit code 3 is a check doing its job (scan-check's error against BP above
# --tolerance; Table 1's nnz against docs/method.md §4.10).
EXIT_3_OK = {"scan-check", "jacobians-table1"}

# Open MPI's own start-up failing, not bppsa: a singleton's MPI_Init (--model-parallel without
# mpirun) forks a daemon (ORTE's orted), which under load can die before reporting back.
# ORTE_ERR_HNP_COULD_NOT_START's text, the same in ORTE and PRRTE (their util/error_strings.c).
MPI_START_FAILURES = ["Unable to start a daemon on the local node"]
MPI_START_ATTEMPTS = 3

FORBIDDEN = ["internal error", "bad_alloc", "std::length_error", "AddressSanitizer", "LeakSanitizer",
             "UndefinedBehaviorSanitizer", "runtime error:", "terminate called", "Segmentation fault",
             "libgomp:", "core dumped", "Assertion"]


def discover(binary, command):
    """Numeric options of a subcommand from its --help: name → (type, lo, hi) (lo/hi None if open)."""
    out = subprocess.run([binary] + command + ["--help"], capture_output=True, text=True, check=True).stdout
    flags = {}
    for line in out.splitlines():
        m = re.match(r"\s+(--[a-z0-9-]+)\s+(INT|UINT|FLOAT)\b(?::(?:INT|UINT|FLOAT) in \[([^\s\]]+) - ([^\s\]]+)\])?", line)
        if m:
            flags[m.group(1)] = (m.group(2), m.group(3), m.group(4))
    return flags


def values_for(kind, lo, hi):
    vals = list(BASIC)
    if hi is not None:
        vals.append(hi)
        vals.append(str(int(hi) + 1) if kind != "FLOAT" else repr(float(hi) * 1.000001 + 1e-6))
    if lo is not None and lo not in vals:
        vals.append(lo)
    if kind == "UINT":
        vals.append("18446744073709551615")
    return vals + ABSURD


def with_flag(base, flag, value):
    """base with `flag value`: replaces the baseline's own value of the flag (options take one)."""
    if flag in base:
        i = base.index(flag)
        return base[:i + 1] + [value] + base[i + 2:]
    return base + [flag, value]


def accepted(kind, lo, hi, value):
    """Whether a value passes parsing and range checks (bppsa's require_numbers and CLI11's
    Range): a whole number (INT, UINT) or a finite float, within [lo, hi] when given."""
    if kind is None or value is None:
        return False
    try:
        v = int(value, 10) if kind in ("INT", "UINT") and re.fullmatch(r"-?[0-9]+", value) else float(value)
    except ValueError:
        return False
    if kind in ("INT", "UINT") and not isinstance(v, int):
        return False
    if kind == "FLOAT" and v != v or v in (float("inf"), float("-inf")):
        return False
    if kind == "UINT" and not 0 <= v < 2**64 or kind == "INT" and not -2**63 <= v < 2**63:
        return False
    return (lo is None or float(lo) <= v) and (hi is None or v <= float(hi))


def is_sanitized(binary):
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


class Result:
    def __init__(self, label, args, rc, out, err, seconds, rss, timed_out):
        self.label, self.args, self.rc, self.out, self.err = label, args, rc, out, err
        self.seconds, self.rss, self.timed_out = seconds, rss, timed_out


def run_one(binary, label, args, env, timeout, cwd):
    """Runs bppsa with args; returns a Result with the child's own peak RSS (wait4)."""
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        t0 = time.monotonic()
        p = subprocess.Popen([binary] + args, stdout=fo, stderr=fe, env=env, cwd=cwd, start_new_session=True)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        _, status, usage = os.wait4(p.pid, 0)
        timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
        seconds = time.monotonic() - t0
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode(errors="replace")
        err = fe.read().decode(errors="replace")
    return Result(label, args, p.returncode, out, err, seconds, usage.ru_maxrss * 1024, timed_out.is_set())


def mpi_start_failure(r):
    """The MPI_START_FAILURES message in the run's output, if any, else ''."""
    return next((m for m in MPI_START_FAILURES if m in r.out + r.err), "")


def run_retrying_mpi_start(binary, label, args, env, timeout, cwd):
    """run_one, run again (MPI_START_ATTEMPTS in all, 2 s apart, each retry printed) while the output
    shows Open MPI's own start-up failure; returns the last Result."""
    for attempt in range(1, MPI_START_ATTEMPTS + 1):
        r = run_one(binary, label, args, env, timeout, cwd)
        failure = mpi_start_failure(r)
        if not failure or attempt == MPI_START_ATTEMPTS:
            return r
        print(f"retry {label} (attempt {attempt + 1} of {MPI_START_ATTEMPTS}): Open MPI could not start "
              f"(environment): '{failure}'", flush=True)
        time.sleep(2)


def judge(r, allow3, sanitized, long_work):
    """'' if the run is fine, else why not. long_work: its LONG_WORK entry, if any."""
    text = r.out + r.err
    for word in FORBIDDEN:
        if word in text:
            return f"output contains '{word}'"
    if r.timed_out:
        if long_work and re.search(long_work[0], text):
            return ""
        return f"did not finish within the time limit ({r.seconds:.0f} s)"
    if r.rc < 0:
        return f"killed by signal {-r.rc}"
    if r.rc not in (0, 1, 2) and not (r.rc == 3 and allow3):
        return f"exit code {r.rc}"
    if r.rc == 1 and "bppsa: error" not in r.err and "error (rank" not in r.err:
        return "exit 1 without a 'bppsa: error' message"
    limit = SIMULATE_MEMORY_LIMIT if r.args[0] == "simulate" else MEMORY_LIMIT
    if not sanitized and r.rss > (int(limit[:-1]) << 30) + (300 << 20):
        return f"peak resident set {r.rss / 2**30:.2f} GiB beyond BPPSA_MEMORY_LIMIT={limit}"
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("work")
    ap.add_argument("--jobs", type=int, default=(os.cpu_count() or 2) + 1)
    ap.add_argument("--only", default="", help="sweep only the baselines whose label contains this")
    a = ap.parse_args()
    binary = os.path.abspath(a.binary)
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sanitized = is_sanitized(binary)
    timeout = 240 if sanitized else 90

    env = dict(os.environ)
    env.update({"BPPSA_MEMORY_LIMIT": MEMORY_LIMIT, "OMP_WAIT_POLICY": "PASSIVE"})
    env.setdefault("ASAN_OPTIONS", "")
    # Open MPI's singleton start (--model-parallel without mpirun) needs a writable session folder.
    env["TMPDIR"] = work

    # Inputs for eval and grad: small checkpoints and batches made by bppsa itself.
    mnist = os.path.join(work, "mnist")
    fake_mnist(mnist)
    rnn_data = ["--data", "bitstream", "--steps", "8", "--samples", "64"]
    cnn_arch = "conv:2:3:1:1,relu,maxpool:2:2,flatten,linear:10"
    cnn_data = ["--data", "mnist", "--data-dir", mnist]
    setup = [
        ["train", "--model", "gru", "--hidden", "3"] + rnn_data +
        ["--batch", "8", "--no-progress", "--save", os.path.join(work, "gru.safetensors")],
        ["train", "--model", "cnn", "--arch", cnn_arch] + cnn_data +
        ["--batch", "8", "--no-progress", "--save", os.path.join(work, "cnn.safetensors")],
    ]
    for cmd in setup:
        r = subprocess.run([binary] + cmd, capture_output=True, text=True, env=env, cwd=work)
        if r.returncode != 0:
            print("FAIL setting up:", " ".join(cmd), "\n", r.stdout, r.stderr)
            return 1
    rng = np.random.default_rng(1)
    st.save(os.path.join(work, "gru_batch.safetensors"),
            {"x": rng.standard_normal((4, 8, 1)).astype(np.float32), "y": np.array([1, 2, 3, 4], np.int64)})
    st.save(os.path.join(work, "cnn_batch.safetensors"),
            {"x": rng.standard_normal((4, 1, 32, 32)).astype(np.float32), "y": np.array([1, 2, 3, 4], np.int64)})
    out = os.path.join(work, "g.safetensors")

    # Baselines: (label, command, extra numeric-text flags with their own values, the flags to
    # sweep (None: every numeric one)). Each runs in well under a second except simulate, whose
    # calibration takes a few seconds whatever the flags, and the PyTorch baseline of Table 1.
    tiny = ["--batch", "8", "--no-progress"]
    baselines = [
        ("scan-check", ["scan-check", "--n", "20", "--dim", "4", "--batch", "2"], {}),
        # Calibration streams buffers of 6× the last-level cache whatever the flags (2.9 GB on a
        # VM that reports a 480 MB L3): this baseline gets more room (SIMULATE_MEMORY_LIMIT).
        ("simulate", ["simulate", "--n", "50", "--p", "1,2", "--dim", "2", "--kind", "diag", "--algo", "linear",
                      "--calibration-n", "16", "--repeats", "1"], {}),
        ("jacobians", ["jacobians", "--arch", cnn_arch, "--input", "1x8x8"],
         {"--input": ["0x8x8", "-1x8x8", "1x1x1", "1x100000x100000", "100000x100000x100000",
                      "99999999999999999999x8x8", "1x8", "1x8x8x8", "abc", ""]}),
        ("jacobians-table1", ["jacobians", "--table1", "--repeats", "1", "--no-baseline"], {}),
        # The PyTorch baseline runs only for --vectors (the one flag it reads).
        ("jacobians-table1-torch", ["jacobians", "--table1", "--repeats", "1", "--vectors", "16"], {}, {"--vectors"}),
        ("train-rnn", ["train", "--model", "rnn", "--hidden", "3"] + rnn_data + tiny, {}),
        ("train-gru", ["train", "--model", "gru", "--hidden", "3"] + rnn_data + tiny, {}),
        ("train-lstm", ["train", "--model", "lstm", "--hidden", "3", "--backward", "hybrid"] + rnn_data + tiny, {}),
        ("train-cnn", ["train", "--model", "cnn", "--arch", cnn_arch] + cnn_data + tiny, {}),
        ("eval-rnn", ["eval", "--checkpoint", os.path.join(work, "gru.safetensors")] + rnn_data, {}),
        ("eval-cnn", ["eval", "--checkpoint", os.path.join(work, "cnn.safetensors")] + cnn_data, {}),
        ("grad-rnn", ["grad", "--model", "gru", "--weights", os.path.join(work, "gru.safetensors"), "--batch",
                      os.path.join(work, "gru_batch.safetensors"), "--out", out], {}),
        ("grad-cnn", ["grad", "--model", "cnn", "--weights", os.path.join(work, "cnn.safetensors"), "--batch",
                      os.path.join(work, "cnn_batch.safetensors"), "--out", out], {}),
    ]
    mp_flags = {"--stages", "--replicas", "--micro-batches", "--mp-timeout"}
    mp_baselines = [
        ("train-model-parallel", ["train", "--model-parallel", "--model", "gru", "--hidden", "3"] + rnn_data + tiny),
        ("grad-model-parallel", ["grad", "--model-parallel", "--model", "gru", "--weights",
                                 os.path.join(work, "gru.safetensors"), "--batch",
                                 os.path.join(work, "gru_batch.safetensors"), "--out", out]),
    ]

    baselines += [(label, base, {}, mp_flags) for label, base in mp_baselines]

    # Regressions of issue 16: each must end with exit 1 and the guard's message (memory limit:
    # the machine's own when None; those requests need terabytes).
    regressions = [
        (None, ["scan-check", "--n", "10", "--dim", "100000", "--kind", "dense"],
         "[scan-check] a dense chain of N = 10 Jacobians, d = 100000"),
        ("24G", ["jacobians", "--arch", "vgg11", "--batch", "65536"], "[cnn] the BPPSA scan of batch 65536"),
        ("24G", ["train", "--model", "lstm", "--hidden", "512", "--steps", "1000", "--samples", "100", "--batch", "64",
                "--no-progress"], "[Recurrent::backward] the blelloch scan backward of 1000 steps × batch 64"),
        (None, ["train", "--hidden", "1048576"] + rnn_data + tiny, "[Recurrent] a rnn with input 1, hidden 1048576"),
        (None, ["simulate", "--kind", "sdd", "--dim", "1000000", "--n", "10"], "the element layout"),
        # Scanner::run's own guard (the chain fits, its Blelloch workspace does not): typed error, exit 1.
        ("300M", ["train", "--model", "cnn", "--arch", "vgg11/16"] + cnn_data + ["--batch", "64", "--no-progress"],
         "[scan] the blelloch scan of 21 Jacobians × batch 64 needs about"),
    ]

    # Jobs. The first baseline of each subcommand is its primary; a value that CLI11 rejects
    # while parsing (exit 2, "Run with --help") never reaches baseline-specific code, so the
    # other baselines of that subcommand skip the values their primary saw rejected that way.
    jobs, primary = [], {}
    for label, base, text_flags, *only in baselines:
        if a.only not in label:
            continue
        sub = base[0]
        primary.setdefault(sub, label)
        allow3 = label.split("-torch")[0] in EXIT_3_OK
        flags = discover(binary, [sub])
        if not flags:
            print(f"FAIL {label}: no numeric flags found in `{sub} --help` (did its format change?)")
            return 1
        seen = set()

        def add(name, args, flag=None, value=None, kind=None, lo=None, hi=None):
            if tuple(args) in seen:  # e.g. the baseline's own value of a flag
                return
            seen.add(tuple(args))
            jobs.append({"label": name, "args": args, "allow3": allow3, "sub": sub, "flag": flag, "value": value,
                         "primary": primary[sub] == label, "accepted": accepted(kind, lo, hi, value)})

        add(label, base)
        for flag, (kind, lo, hi) in sorted(flags.items()):
            if only and flag not in only[0]:
                continue
            if not only and flag in mp_flags:  # without --model-parallel a usage error; swept where it applies
                continue
            for v in values_for(kind, lo, hi):
                add(f"{label} {flag}={v!r}", with_flag(base, flag, v), flag, v, kind, lo, hi)
        for flag, vals in text_flags.items():
            for v in vals:
                add(f"{label} {flag}={v!r}", with_flag(base, flag, v), flag, v)

    # Slow runs (simulate's calibration: seconds and gigabytes each; PyTorch) go through their own
    # two workers, beside the many quick ones. Under sanitizers a calibration takes minutes on a
    # machine with a large last-level cache (it streams 6× the cache): there simulate's accepted
    # values run in the Release sweep only, and are listed below.
    heavy = [j for j in jobs if j["sub"] == "simulate" or "-torch" in j["label"]]
    not_rerun = []
    if sanitized:
        not_rerun = [j for j in heavy if j["sub"] == "simulate" and j["flag"] and j["accepted"]]
        heavy = [j for j in heavy if j not in not_rerun]
    light = [j for j in jobs if j not in heavy and j not in not_rerun]
    print(f"{len(jobs)} runs, {a.jobs} at a time, BPPSA_MEMORY_LIMIT={MEMORY_LIMIT}"
          f"{', sanitizer build' if sanitized else ''}", flush=True)
    if not_rerun:
        print(f"not re-run under the sanitizer ({len(not_rerun)} accepted simulate values, each a full "
              "calibration; the Release sweep runs them): " + ", ".join(j["label"] for j in not_rerun), flush=True)

    t0 = time.monotonic()
    failures, counts, slowest, rejected = [], {}, [], set()
    for limit, args, expected in regressions:
        run_env = dict(env)
        run_env.pop("BPPSA_MEMORY_LIMIT")
        if limit:
            run_env["BPPSA_MEMORY_LIMIT"] = limit
        r = run_one(binary, "regression", args, run_env, timeout, work)
        why = judge(r, False, sanitized, None) or ("" if r.rc == 1 and expected in r.err else
                                                   f"expected exit 1 with '{expected}'")
        print(f"{'FAIL' if why else 'ok  '} regression: bppsa {' '.join(args)} -> rc {r.rc}", flush=True)
        if why:
            failures.append("regression " + " ".join(args))
            print(f"  {why}\n  stderr: {r.err[-1500:]}", flush=True)
    log = open(os.path.join(work, "sweep.jsonl"), "w")

    limits = {}  # subcommand → its time limit where it differs from `timeout`

    def task(job):
        args = job["args"]
        long_work = LONG_WORK.get((job["flag"], job["value"]))
        run_env = dict(env)
        if args[0] == "simulate":
            run_env["BPPSA_MEMORY_LIMIT"] = SIMULATE_MEMORY_LIMIT
        if "--model-parallel" in args and sanitized:  # as tests/mpi: Open MPI's allocations outlive MPI_Finalize
            run_env["ASAN_OPTIONS"] += ":detect_leaks=0"
        limit = LONG_WORK_SECONDS if long_work else limits.get(job["sub"], timeout)
        r = run_retrying_mpi_start(binary, job["label"], args, run_env, limit, work)
        failure = mpi_start_failure(r)
        if failure:
            return job, r, (f"Open MPI could not start (environment): '{failure}' on all {MPI_START_ATTEMPTS} "
                            "attempts")
        return job, r, judge(r, job["allow3"], sanitized, long_work)

    def record(job, r, why):
        counts[r.rc] = counts.get(r.rc, 0) + 1
        slowest.append((r.seconds, job["label"]))
        if job["primary"] and job["flag"] and r.rc == 2 and "Run with --help" in r.err:
            rejected.add((job["sub"], job["flag"], job["value"]))
        last = (r.err.strip().splitlines() or [""])[-1]
        log.write(json.dumps({"label": job["label"], "args": job["args"], "rc": r.rc, "seconds": round(r.seconds, 2),
                              "rss_mib": r.rss >> 20, "stderr": last[:400], "failed": why}) + "\n")
        if why:
            failures.append(job["label"])
            print(f"FAIL {job['label']}: {why}\n  command: bppsa {' '.join(map(repr, job['args']))}\n"
                  f"  stdout: {r.out[-1500:]}\n  stderr: {r.err[-1500:]}", flush=True)

    ran = 0
    # simulate's calibration costs the same whatever the flags, and what it costs depends on the
    # machine (it streams buffers sized by the last-level cache the system reports: 0.9 s on a
    # host reporting 32 MB, about a minute beside the other runs on one reporting 480 MB). Its
    # baseline runs first, alone, under the common limit; every other simulate run then gets
    # 4× that time plus 30 s (for sharing the cores), at least the common limit.
    for j in [j for j in heavy if j["sub"] == "simulate" and j["flag"] is None]:
        heavy.remove(j)
        job, r, why = task(j)
        record(job, r, why)
        ran += 1
        limits["simulate"] = max(timeout, 4 * r.seconds + 30)
        print(f"simulate baseline alone: {r.seconds:.1f} s; simulate runs get {limits['simulate']:.0f} s", flush=True)
    with concurrent.futures.ThreadPoolExecutor(2) as heavy_pool, \
            concurrent.futures.ThreadPoolExecutor(max(1, a.jobs - 1)) as light_pool:
        heavy_futures = [heavy_pool.submit(task, j) for j in heavy]
        for phase in (True, False):
            batch = [j for j in light if j["primary"] == phase and
                     (phase or (j["sub"], j["flag"], j["value"]) not in rejected)]
            ran += len(batch)
            for job, r, why in light_pool.map(task, batch):
                record(job, r, why)
        for future in heavy_futures:
            record(*future.result())
        ran += len(heavy)
    slowest.sort(reverse=True)
    print(f"exit codes: {dict(sorted(counts.items()))}; {time.monotonic() - t0:.0f} s; slowest: " +
          ", ".join(f"{label} {s:.1f} s" for s, label in slowest[:5]))
    print(f"{ran} runs; {len(jobs) - ran - len(not_rerun)} values rejected while parsing by a subcommand's "
          f"primary baseline were not repeated on its other baselines")
    if failures:
        print(f"{len(failures)} of {ran} runs FAILED")
        return 1
    print(f"all {ran} runs ended cleanly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
