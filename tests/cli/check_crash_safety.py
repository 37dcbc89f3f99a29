#!/usr/bin/env python3
"""Kills real `bppsa train --save` runs with SIGKILL at random moments, many times over, and
checks after every kill that `--resume` works and continues from the last complete epoch, and
that the run resumed after all the kills ends with exactly the weights of an uninterrupted run.
Stale temporaries and optimizer generations of killed saves are gone after the next save.

Usage: check_crash_safety.py BPPSA_BINARY WORK_DIR [KILLS]."""
import glob
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import safetensors_np as st  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
KILLS = int(sys.argv[3]) if len(sys.argv) > 3 else 30
EPOCHS = 30
RUN = ["train", "--model", "gru", "--hidden", "4", "--data", "bitstream", "--steps", "8", "--samples", "40",
       "--batch", "8", "--lr", "1e-2", "--no-progress", "--threads", "1", "--epochs", str(EPOCHS)]
FAILURES = []


def check(cond, label):
    if not cond:
        print(f"FAIL {label}")
        FAILURES.append(label)
    return cond


def weights(path):
    t, meta = st.load(path)
    return {k: v.tobytes() for k, v in t.items()}, meta


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    ck = os.path.join(WORK, "run.safetensors")

    # The claim the comparison rests on: two uninterrupted runs give identical weights.
    ref = []
    for i in range(2):
        t0 = time.monotonic()
        p = subprocess.run([BIN] + RUN + ["--save", os.path.join(WORK, f"ref{i}.safetensors")], capture_output=True,
                           text=True)
        full = time.monotonic() - t0
        check(p.returncode == 0, f"uninterrupted run {i}: rc {p.returncode}: {p.stderr[-500:]}")
        ref.append(weights(os.path.join(WORK, f"ref{i}.safetensors"))[0])
    check(ref[0] == ref[1], "two uninterrupted runs give identical weights (training is deterministic)")
    print(f"ok   an uninterrupted run takes {full:.2f} s")

    rng = random.Random(int(os.environ.get("BPPSA_KILL_SEED", "22")))
    kills = finished = 0
    while kills < KILLS:
        before = weights(ck)[1] if os.path.exists(ck) else None
        e0 = int(before["bppsa.epoch"]) if before else 0
        args = RUN + ["--save", ck] + (["--resume", ck] if before else [])
        out, err = os.path.join(WORK, "out.txt"), os.path.join(WORK, "err.txt")
        with open(out, "w") as fo, open(err, "w") as fe:
            p = subprocess.Popen([BIN] + args, stdout=fo, stderr=fe)
            # Over the time this run needs: it trains the epochs left after e0.
            time.sleep(rng.uniform(0, 0.1 + full * (EPOCHS - e0) / EPOCHS))
            p.send_signal(signal.SIGKILL)
            rc = p.wait()
        stdout, stderr = open(out).read(), open(err).read()
        label = f"kill {kills + 1} (from epoch {e0})"
        if rc == 0:  # finished before the kill: compare, then start afresh
            finished += 1
            check(weights(ck)[0] == ref[0], f"{label}: a run that finished equals the uninterrupted run")
            for f in glob.glob(os.path.join(WORK, "run.*")) + glob.glob(os.path.join(WORK, ".run.*")):
                os.remove(f)
            continue
        kills += 1
        check(rc == -signal.SIGKILL, f"{label}: killed by SIGKILL (rc {rc}); stderr: {stderr[-500:]}")
        printed = [int(m) for m in re.findall(r"^epoch (\d+)/", stdout, re.M)]
        if printed:
            check(printed[0] == e0 + 1, f"{label}: the resumed run began at epoch {printed[0]}, not {e0 + 1}")
        saved = [int(m) for m in re.findall(r"^saved .* \(epoch (\d+)\)$", stderr, re.M)]
        last = saved[-1] if saved else e0
        if not os.path.exists(ck):
            check(last == 0, f"{label}: no checkpoint although epoch {last} was reported saved")
            continue
        e1 = int(weights(ck)[1]["bppsa.epoch"])
        # The checkpoint is the last save reported, or the one whose report the kill cut off.
        check(e1 in (last, last + 1), f"{label}: the checkpoint holds epoch {e1}; the last save reported was {last}")
        # --resume reads the pair (weights + optimizer state) without training: exit 0.
        r = subprocess.run([BIN] + RUN[:-2] + ["--epochs", str(e1), "--resume", ck], capture_output=True, text=True)
        check(r.returncode == 0 and "nothing to train" in r.stderr,
              f"{label}: --resume of epoch {e1} fails: rc {r.returncode}: {r.stderr[-500:]}")
    print(f"ok   {KILLS} kills checked ({finished} runs finished before their kill)")

    r = subprocess.run([BIN] + RUN + ["--save", ck] + (["--resume", ck] if os.path.exists(ck) else []),
                       capture_output=True, text=True)
    check(r.returncode == 0, f"final resume: rc {r.returncode}: {r.stderr[-500:]}")
    w, meta = weights(ck)
    check(meta["bppsa.epoch"] == str(EPOCHS), f"final checkpoint at epoch {meta['bppsa.epoch']}")
    check(w == ref[0], "the run resumed after the kills ends with the uninterrupted run's weights")
    stale = glob.glob(os.path.join(WORK, ".run.*"))
    check(not stale, f"temporaries of killed saves are removed by the next save: {stale}")
    optim = glob.glob(os.path.join(WORK, "run.optim*"))
    named = os.path.join(WORK, f"run.optim.{meta['bppsa.optimizer']}.safetensors")
    check(named in optim, f"the optimizer state the weights name exists: {named} in {optim}")
    # Kills between a save's rename and its clean-up leave older generations (and kills before the
    # rename, unnamed ones) until the next save, one per such kill. One more epoch makes a save
    # whose generation before is known: it keeps that one (a --resume that read the weights before
    # the rename still finds it, issue 44) and the new one, and removes every other.
    previous = named
    r = subprocess.run([BIN] + RUN[:-2] + ["--epochs", str(EPOCHS + 1), "--save", ck, "--resume", ck],
                       capture_output=True, text=True)
    check(r.returncode == 0 and "saved " in r.stderr, f"one more epoch saved: rc {r.returncode}: {r.stderr[-500:]}")
    optim = glob.glob(os.path.join(WORK, "run.optim*"))
    named = os.path.join(WORK, f"run.optim.{weights(ck)[1]['bppsa.optimizer']}.safetensors")
    check(sorted(optim) == sorted([named, previous]),
          f"after a save, only the optimizer states the weights and the weights before name: {optim}")
    print("FAILED:" if FAILURES else "all crash-safety checks passed", *FAILURES, sep="\n  ")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
