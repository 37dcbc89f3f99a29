#!/usr/bin/env python3
"""End-to-end checks of `bppsa train`, `eval` and `grad`: exact --resume, atomic checkpoints
that a failed run never clobbers, JSON-lines logs, and clear errors with the documented exit
codes (2 invalid flags, 1 errors) for bad flags and malformed files.

Usage: check_cli.py BPPSA_BINARY WORK_DIR."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import safetensors_np as st  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
FAILURES = []
SMALL = ["train", "--model", "gru", "--hidden", "5", "--data", "bitstream", "--steps", "15", "--samples", "120",
         "--batch", "8", "--lr", "1e-2", "--no-progress"]


def run(args, expect_rc=0, expect_err=None, label=""):
    r = subprocess.run([BIN] + args, capture_output=True, text=True)
    ok = r.returncode == expect_rc and (expect_err is None or expect_err in r.stderr)
    print(f"{'ok  ' if ok else 'FAIL'} {label or ' '.join(args)} -> rc {r.returncode}")
    if not ok:
        FAILURES.append(label)
        print("  expected rc", expect_rc, "and stderr containing", repr(expect_err))
        print("  stdout:", r.stdout[-2000:], "\n  stderr:", r.stderr[-2000:])
    return r


def path(name):
    return os.path.join(WORK, name)


def check(cond, label):
    print(f"{'ok  ' if cond else 'FAIL'} {label}")
    if not cond:
        FAILURES.append(label)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)

    # Invalid flags: exit 2 with CLI11's message.
    run(["train", "--model", "transformer"], 2, "--model", "unknown cell")
    run(["train", "--batch", "0"], 2, "--batch", "batch 0")
    run(["train", "--backward", "magic"], 2, "--backward", "unknown backward")
    run(["grad", "--model", "rnn"], 2, "required", "grad without files")

    # Training, checkpoint, log.
    ck1 = path("a.safetensors")
    run(SMALL + ["--epochs", "1", "--save", ck1, "--log", path("a.jsonl")], label="train 1 epoch with --save/--log")
    check(os.path.exists(ck1) and os.path.exists(path("a.optim.safetensors")), "checkpoint and optimizer state written")
    lines = [json.loads(line) for line in open(path("a.jsonl"))]
    check(lines[0]["event"] == "start" and lines[-1]["event"] == "epoch" and lines[-1]["epoch"] == 1,
          "log holds a start record and one epoch record")
    # Resume for a second epoch == two epochs straight (bit-identical weights).
    shutil.copy(ck1, path("b.safetensors"))
    shutil.copy(path("a.optim.safetensors"), path("b.optim.safetensors"))
    run(SMALL + ["--epochs", "2", "--resume", path("b.safetensors"), "--save", path("b.safetensors")],
        label="resume to epoch 2")
    run(SMALL + ["--epochs", "2", "--save", path("c.safetensors")], label="2 epochs straight")
    b, bm = st.load(path("b.safetensors"))
    c, cm = st.load(path("c.safetensors"))
    check(sorted(b) == sorted(c) and all(np.array_equal(b[k], c[k]) for k in b), "resumed run equals straight run")
    check(bm["bppsa.epoch"] == "2" and bm["bppsa.step"] == cm["bppsa.step"], "epoch/step metadata")
    # Resuming with a conflicting flag, or without the optimizer state, is an error.
    run(SMALL[:1] + SMALL[5:] + ["--model", "gru", "--hidden", "9", "--epochs", "3", "--resume", ck1], 1, "conflicts",
        "resume with a conflicting --hidden")
    shutil.copy(ck1, path("lonely.safetensors"))
    run(SMALL + ["--epochs", "2", "--resume", path("lonely.safetensors")], 1, "optimizer state",
        "resume without optimizer state")

    # A diverging run fails with a clear error and leaves the good checkpoint untouched.
    before = open(ck1, "rb").read()
    diverge = [a if a != "1e-2" else "1e39" for a in SMALL]
    run(diverge + ["--epochs", "1", "--optimizer", "sgd", "--save", ck1], 1, "not finite",
        "diverging run")
    check(open(ck1, "rb").read() == before, "failed run did not overwrite the checkpoint")

    # A --save folder that does not exist is refused before any training.
    run(SMALL + ["--epochs", "1", "--save", path("no/such/folder/x.safetensors")], 1, "does not exist",
        "--save into a missing folder")

    # Truncated / malformed checkpoints.
    open(path("trunc.safetensors"), "wb").write(before[: len(before) // 2])
    run(SMALL + ["--epochs", "2", "--resume", path("trunc.safetensors")], 1, "truncated", "truncated checkpoint")
    open(path("junk.safetensors"), "wb").write(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    run(["eval", "--checkpoint", path("junk.safetensors"), "--data", "bitstream", "--steps", "15"], 1, "junk",
        "malformed checkpoint")

    # eval: same accuracy as the training run's last test accuracy.
    r = run(["eval", "--checkpoint", path("c.safetensors"), "--data", "bitstream", "--steps", "15", "--samples", "120",
             "--json"], label="eval --json")
    if r.returncode == 0:
        ev = json.loads(r.stdout)
        check(ev["samples"] > 0 and 0 <= ev["accuracy"] <= 1, "eval reports accuracy")
    run(["eval", "--checkpoint", path("c.safetensors"), "--data", "mnist-rows", "--limit-test", "5"], 1,
        "input features", "eval on data of the wrong shape") if os.path.isdir(
        os.path.join(os.path.dirname(BIN), "..", "data", "mnist")) else None

    # grad: missing / misnamed tensors, shape mismatches, labels out of range, NaN.
    w, _ = st.load(path("c.safetensors"))
    x = (np.random.default_rng(1).random((3, 15, 1)) < 0.5).astype(np.float32)
    y = np.array([1, 2, 3], dtype=np.int64)
    st.save(path("x.safetensors"), {"x": x, "y": y})
    g = path("g.safetensors")
    run(["grad", "--model", "gru", "--weights", path("c.safetensors"), "--batch", path("x.safetensors"), "--out", g],
        label="grad on a checkpoint")
    missing = {k: v for k, v in w.items() if k != "head.bias"}
    st.save(path("w_missing.safetensors"), missing)
    run(["grad", "--model", "gru", "--weights", path("w_missing.safetensors"), "--batch", path("x.safetensors"),
         "--out", g], 1, "head.bias", "missing tensor")
    renamed = dict(w)
    renamed["rnn.weight_hh_0"] = renamed.pop("rnn.weight_hh_l0")
    st.save(path("w_renamed.safetensors"), renamed)
    run(["grad", "--model", "gru", "--weights", path("w_renamed.safetensors"), "--batch", path("x.safetensors"),
         "--out", g], 1, "rnn.weight_hh_0", "misnamed tensor")
    bad = dict(w)
    bad["rnn.bias_hh_l0"] = np.zeros(7, dtype=np.float32)
    st.save(path("w_shape.safetensors"), bad)
    run(["grad", "--model", "gru", "--weights", path("w_shape.safetensors"), "--batch", path("x.safetensors"),
         "--out", g], 1, "expected [15]", "misshaped tensor")
    run(["grad", "--model", "rnn", "--weights", path("c.safetensors"), "--batch", path("x.safetensors"), "--out", g],
        1, "--model", "GRU weights given as rnn")
    st.save(path("x_dims.safetensors"), {"x": x[:, :, 0], "y": y})
    run(["grad", "--model", "gru", "--weights", path("c.safetensors"), "--batch", path("x_dims.safetensors"),
         "--out", g], 1, "expected [batch, steps, 1]", "x of the wrong rank")
    st.save(path("x_label.safetensors"), {"x": x, "y": np.array([1, 2, 10], dtype=np.int64)})
    run(["grad", "--model", "gru", "--weights", path("c.safetensors"), "--batch", path("x_label.safetensors"),
         "--out", g], 1, "outside [0, 10)", "label out of range")
    xn = x.copy()
    xn[0, 3, 0] = np.nan
    st.save(path("x_nan.safetensors"), {"x": xn, "y": y})
    run(["grad", "--model", "gru", "--weights", path("c.safetensors"), "--batch", path("x_nan.safetensors"),
         "--out", g], 1, "NaN", "NaN in x")
    st.save(path("x_noy.safetensors"), {"x": x})
    run(["grad", "--model", "gru", "--weights", path("c.safetensors"), "--batch", path("x_noy.safetensors"),
         "--out", g], 1, "'y'", "missing y")

    # IRMAS-format audio end to end: a folder of short stereo WAVs in the training-set layout.
    import wave
    irmas = path("irmas")
    rng = np.random.default_rng(3)
    for k, code in enumerate(["cel", "flu", "gac", "pia", "voi"] * 2):
        os.makedirs(os.path.join(irmas, code), exist_ok=True)
        t = np.arange(int(0.3 * 22050)) / 22050
        tone = np.sin(2 * np.pi * (200 + 150 * (k % 5)) * t) * 0.5 + 0.05 * rng.standard_normal(t.size)
        pcm = (np.stack([tone, 0.8 * tone], axis=1) * 32767).astype("<i2")
        with wave.open(os.path.join(irmas, code, f"[{code}][cla]{k:04d}__1.wav"), "wb") as wf:
            wf.setnchannels(2)
            wf.setsampwidth(2)
            wf.setframerate(22050)
            wf.writeframes(pcm.tobytes())
    r = run(["train", "--model", "gru", "--hidden", "6", "--data", "irmas", "--data-dir", irmas, "--preset", "l",
             "--epochs", "2", "--batch", "4", "--lr", "1e-2", "--no-progress", "--check"], label="train on IRMAS WAVs")
    check("11 classes" in r.stderr and "12 features" in r.stderr, "IRMAS: 11 classes, 2 × (7 − 1) = 12 features")
    check(os.path.exists(os.path.join(irmas, ".bppsa-mfcc-l.safetensors")), "IRMAS feature cache written")
    open(os.path.join(irmas, ".bppsa-mfcc-l.safetensors"), "wb").write(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    run(["train", "--model", "gru", "--data", "irmas", "--data-dir", irmas, "--preset", "l", "--no-progress"], 1,
        "delete it", "malformed feature cache")
    open(os.path.join(irmas, "cel", "[cel]broken.wav"), "wb").write(b"RIFF\x10\x00\x00\x00WAVEfmt ")
    os.remove(os.path.join(irmas, ".bppsa-mfcc-l.safetensors"))
    run(["train", "--model", "gru", "--data", "irmas", "--data-dir", irmas, "--preset", "l", "--no-progress"], 1,
        "broken.wav", "truncated WAV in the data folder")

    print("ALL OK" if not FAILURES else f"{len(FAILURES)} FAILED: {FAILURES}")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
