#!/usr/bin/env python3
"""Thread counts on every path of the CLI: OMP_NUM_THREADS (what --threads 0 and every default
follow) past the bound is refused with exit 2 and a message naming it, never a crash; flags past
the bound exit 2; counts within it run. Also a run with one core kept busy by another process
finishes with the same gradients (a descheduled thread must cost time, never correctness).

Usage: check_threads.py BPPSA_BINARY WORK_DIR."""
import json
import os
import subprocess
import sys

BIN, WORK = sys.argv[1], sys.argv[2]
FAILURES = []
SCAN = ["scan-check", "--n", "40", "--dim", "6", "--batch", "3", "--kind", "dense", "--algo", "blelloch", "--json"]
TRAIN = ["train", "--model", "rnn", "--hidden", "6", "--data", "bitstream", "--steps", "12", "--samples", "64",
         "--batch", "8", "--epochs", "1", "--no-progress", "--backward", "blelloch"]


def run(args, env=None, expect_rc=0, expect_err=None, label=""):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([BIN] + args, capture_output=True, text=True, env=e, timeout=120)
    ok = r.returncode == expect_rc and (expect_err is None or all(s in r.stderr for s in expect_err))
    print(f"{'ok  ' if ok else 'FAIL'} {label} -> rc {r.returncode}")
    if not ok:
        FAILURES.append(label)
        print("  expected rc", expect_rc, "and stderr containing", expect_err)
        print("  stdout:", r.stdout[-1500:], "\n  stderr:", r.stderr[-1500:])
    return r


def main():
    os.makedirs(WORK, exist_ok=True)
    for value in ("100000", "4097", "2147483647"):
        for name, args in (("scan-check", SCAN), ("train", TRAIN), ("train --threads 2", TRAIN + ["--threads", "2"])):
            run(args, env={"OMP_NUM_THREADS": value}, expect_rc=2, expect_err=["OMP_NUM_THREADS=" + value, "4096"],
                label=f"OMP_NUM_THREADS={value} {name} is refused")
    for flag_args in (SCAN + ["--threads", "4097"], TRAIN + ["--threads", "100000"]):
        run(flag_args, expect_rc=2, expect_err=["--threads"], label=" ".join(flag_args[:1] + flag_args[-2:]))
    for value in ("1", "3", "64"):
        r = run(SCAN, env={"OMP_NUM_THREADS": value}, label=f"OMP_NUM_THREADS={value} scan-check runs")
        if r.returncode == 0:
            res = json.loads(r.stdout.strip().splitlines()[-1])
            if not res["ok"]:
                FAILURES.append(f"OMP_NUM_THREADS={value} scan-check result")
                print("FAIL scan-check against its oracle with OMP_NUM_THREADS", value, res)

    # One core busy: a spinning process pinned to the last core while the scan runs on every
    # core. The result must equal the idle run's exactly (the same units, the same arithmetic).
    cores = os.cpu_count() or 1
    if cores >= 2:
        grad_args = ["scan-check", "--n", "300", "--dim", "6", "--batch", "3", "--kind", "dense", "--algo", "blelloch",
                     "--threads", str(cores), "--json"]
        idle = run(grad_args, label="scan-check idle")
        hog = subprocess.Popen([sys.executable, "-c",
                                f"import os\nos.sched_setaffinity(0, {{{cores - 1}}})\nwhile True:\n    pass\n"])
        try:
            busy = run(grad_args, label="scan-check with one core busy")
        finally:
            hog.kill()
            hog.wait()
        if idle.returncode == 0 and busy.returncode == 0:
            a, b = (json.loads(x.stdout.strip().splitlines()[-1]) for x in (idle, busy))
            if a["max_rel_err"] != b["max_rel_err"] or not b["ok"]:
                FAILURES.append("busy core changes the result")
                print("FAIL the busy-core run differs:", a["max_rel_err"], b["max_rel_err"])
            else:
                print("ok   the busy-core run equals the idle one (max_rel_err %.3g)" % b["max_rel_err"])

    if FAILURES:
        print(f"{len(FAILURES)} FAILED: {FAILURES}")
        sys.exit(1)
    print("all thread-count checks passed")


if __name__ == "__main__":
    main()
