#!/usr/bin/env python3
"""End-to-end checks of `bppsa train`, `eval` and `grad`: exact --resume, atomic checkpoints
that a failed run never clobbers, JSON-lines logs, and clear errors with the documented exit
codes (2 invalid flags, 1 errors) for bad flags and malformed files.

Usage: check_cli.py BPPSA_BINARY WORK_DIR."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import safetensors_np as st  # noqa: E402
from fake_idx import fake_mnist  # noqa: E402  (tests/cli/, this script's folder)

BIN, WORK = sys.argv[1], sys.argv[2]
FAILURES = []
SMALL = ["train", "--model", "gru", "--hidden", "5", "--data", "bitstream", "--steps", "15", "--samples", "120",
         "--batch", "8", "--lr", "1e-2", "--no-progress"]


def run(args, expect_rc=0, expect_err=None, label="", env=None):
    r = subprocess.run([BIN] + args, capture_output=True, text=True, env=None if env is None else {**os.environ, **env})
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


def optimizer_file(ck):
    """The optimizer state a checkpoint names (its metadata bppsa.optimizer: the generation)."""
    gen = st.load(ck)[1]["bppsa.optimizer"]
    return ck[: -len(".safetensors")] + f".optim.{gen}.safetensors"


def copy_checkpoint(src, dst):
    """Copies a checkpoint and the optimizer state it names, as a pair."""
    shutil.copy(src, dst)
    opt = optimizer_file(src)
    shutil.copy(opt, dst[: -len(".safetensors")] + opt[len(src) - len(".safetensors"):])


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)

    # Invalid flags: exit 2 with CLI11's message.
    run(["train", "--model", "transformer"], 2, "--model", "unknown cell")
    run(["train", "--batch", "0"], 2, "--batch", "batch 0")
    run(["train", "--backward", "magic"], 2, "--backward", "unknown backward")
    # fused is the GPU's scan: refused on the CPU, never swapped for another method.
    run(SMALL + ["--epochs", "1", "--backward", "fused"], 1, "add --device cuda", "--backward fused on the CPU")
    run(["grad", "--model", "rnn"], 2, "required", "grad without files")
    run(["train", "--device", "tpu"], 2, "--device", "unknown device")

    # Training, checkpoint, log.
    ck1 = path("a.safetensors")
    run(SMALL + ["--epochs", "1", "--save", ck1, "--log", path("a.jsonl")], label="train 1 epoch with --save/--log")
    check(os.path.exists(ck1) and os.path.exists(optimizer_file(ck1)), "checkpoint and optimizer state written")
    lines = [json.loads(line) for line in open(path("a.jsonl"))]
    check(lines[0]["event"] == "start" and lines[-1]["event"] == "epoch" and lines[-1]["epoch"] == 1,
          "log holds a start record and one epoch record")
    # Resume for a second epoch == two epochs straight (bit-identical weights).
    copy_checkpoint(ck1, path("b.safetensors"))
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
    # --forward newton: the same epoch lines as the sequential forward (the certificate holds it to
    # the trajectory; the losses print to 4 decimals), with lengths and a projection too; refused
    # where it does not run.
    lstm = [a if a != "gru" else "lstm" for a in SMALL]
    for base, extra in ((SMALL, []), (lstm, ["--proj", "2", "--min-steps", "3"])):
        line = {}
        for fwd in ("sequential", "newton"):
            r = run(base + extra + ["--epochs", "2", "--forward", fwd], label=f"train --forward {fwd} {' '.join(extra)}")
            line[fwd] = [ln for ln in r.stdout.splitlines() if ln.startswith("epoch")]
        if not extra:
            small_sequential = line["sequential"]
        strip = [re.sub(r"\d+\.\d+ s.*", "", ln) for ln in line["newton"]]
        check(len(strip) == 2 and strip == [re.sub(r"\d+\.\d+ s.*", "", ln) for ln in line["sequential"]],
              f"--forward newton trains as the sequential forward does {' '.join(extra)}")
    # --forward auto (the default): with a cost model that predicts Newton faster (a sequential forward
    # of 1 ms a step, an iteration of 0.1 ms, 4 expected) it runs Newton, says so on the model line,
    # and trains as the sequential forward does; with a model that predicts no forward, sequentially.
    features = ["1", "T", "T*B*S", "T*B*S^2", "T*B*S^3", "T*B*S*I", "T*S^2"]
    fast = {"format": "bppsa-cost-model/1", "fitted_on": "check_cli", "features": features, "groups": [
        {"cell": "gru", "candidate": "sequential forward", "threads": 1, "coef": [0, 1, 0, 0, 0, 0, 0]},
        {"cell": "gru", "candidate": "newton iteration", "threads": 1, "iterations": 4,
         "coef": [0.1, 0, 0, 0, 0, 0, 0]}]}
    with open(path("newton_model.json"), "w") as f:
        json.dump(fast, f)
    with open(path("no_model.json"), "w") as f:
        json.dump({**fast, "groups": []}, f)
    for model, says in (("newton_model.json", True), ("no_model.json", False)):
        r = run(SMALL + ["--epochs", "2", "--forward", "auto"], label=f"train --forward auto with {model}",
                env={"BPPSA_COST_MODEL": path(model)})
        check(("forward=newton (auto)" in r.stderr) == says, f"the model line says whether auto runs Newton ({model})")
        got = [re.sub(r"\d+\.\d+ s.*", "", ln) for ln in r.stdout.splitlines() if ln.startswith("epoch")]
        check(len(got) == 2 and got == [re.sub(r"\d+\.\d+ s.*", "", ln) for ln in small_sequential],
              f"--forward auto trains as the sequential forward does ({model})")
    run(SMALL + ["--forward", "newton", "--device", "cuda"], 1, "--forward newton runs on the CPU only",
        "--forward newton --device cuda refused")
    run(["train", "--model", "cnn", "--data", "bitstream", "--forward", "newton", "--no-progress"], 1,
        "--forward newton is for recurrent models", "--forward newton --model cnn refused")
    run(SMALL + ["--forward", "deer"], 2, "--forward", "--forward deer is a usage error")
    # Samples of different lengths (--min-steps): trained, checked against BP, saved, evaluated;
    # refused where they do not run, with the flag named (--model-parallel runs them: tests/mpi).
    var = ["train", "--model", "lstm", "--proj", "2", "--hidden", "4", "--data", "bitstream", "--steps", "15",
           "--min-steps", "3", "--samples", "120", "--epochs", "1", "--batch", "8", "--no-progress"]
    r = run(var + ["--check", "--save", path("var.safetensors")], label="train --min-steps --proj --check")
    check("lengths 3..15" in r.stderr and "gradient check" in r.stdout, "a run with lengths names them and checks")
    run(["eval", "--checkpoint", path("var.safetensors"), "--data", "bitstream", "--steps", "15", "--min-steps", "3",
         "--samples", "120"], label="eval --min-steps")
    run([a if a != "3" else "16" for a in var], 1, "--min-steps 16", "--min-steps above --steps")
    st.save(path("lx.safetensors"), {"x": np.zeros((2, 15, 1), np.float32), "y": np.zeros(2, np.int64),
                                     "lengths": np.array([15, 16], np.int64)})
    run(["grad", "--model", "lstm", "--weights", path("var.safetensors"), "--batch", path("lx.safetensors"),
         "--out", path("lg.safetensors")], 1, "outside 1..15", "grad with a length past the batch's steps")
    run(["train", "--model", "gru", "--data", "mnist-rows", "--data-dir", path("nowhere"), "--min-steps", "5",
         "--epochs", "1"], 1, "bitstream only", "--min-steps on other data")
    idx = fake_mnist(path("idx"))  # an MNIST-format set of IDX files: 96 train + 24 test images
    run(["eval", "--checkpoint", path("c.safetensors"), "--data", "mnist-rows", "--data-dir", idx, "--limit-test", "5"],
        1, "input features", "eval on data of the wrong shape")

    # The first line of a run on MNIST-format data names the set, its folder and the images read.
    fashion = "/usr/share/datasets/fashion-mnist"
    rows = ", rows: T = 28, 28 features, 10 classes"
    padded = ", 1×32×32 (zero-padded, standardised by the training set's mean "
    gru = ["train", "--model", "gru", "--hidden", "4", "--epochs", "1", "--no-progress"]
    cnn = ["train", "--model", "cnn", "--arch", "flatten,linear:10", "--epochs", "1", "--no-progress"]
    cases = [
        (gru + ["--data", "mnist-rows", "--data-dir", idx, "--limit-train", "32", "--save", path("idx.safetensors")],
         f"data: IDX data in {idx}: 32 train + 24 test images (the first of 96 + 24){rows}"),
        (cnn + ["--data", "mnist", "--data-dir", idx, "--limit-test", "8"],
         f"data: IDX data in {idx}: 96 train + 8 test images (the first of 96 + 24){padded}"),
        (["eval", "--checkpoint", path("idx.safetensors"), "--data", "mnist-rows", "--data-dir", idx],
         f"data: IDX data in {idx}: 96 train + 24 test images{rows}"),
        (gru + ["--data", "mnist-pixels", "--data-dir", idx, "--limit-train", "16", "--limit-test", "8"],
         f"data: IDX data in {idx}: 16 train + 8 test images (the first of 96 + 24), pixels: T = 784, 1 features"),
    ]
    if os.path.isdir(fashion):
        cases.append((gru + ["--data", "mnist-rows", "--data-dir", fashion, "--limit-train", "200", "--limit-test",
                             "100"],
                      f"data: Fashion-MNIST ({fashion}): 200 train + 100 test images (the first of 60000 + 10000)"
                      f"{rows}"))
    else:
        print(f"skip the first line on Fashion-MNIST: {fashion} is absent (apt-get install dataset-fashion-mnist)")
    for args, want in cases:
        r = subprocess.run([BIN] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = (r.stdout.splitlines() or [""])[0]
        check(first.startswith(want), f"first line of `{' '.join(args[:2])} … {args[args.index('--data') + 1]}`: "
                                      f"{first if first.startswith(want) else repr(first) + ', expected ' + repr(want)}")

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

    # --device cuda where it cannot run (a build without CUDA, a machine without a GPU): exit 1 with
    # the reason; where a GPU is usable (the GPU machine) the same commands succeed.
    for args, label in (
            (SMALL + ["--epochs", "1", "--device", "cuda"], "train --device cuda"),
            (["grad", "--model", "gru", "--weights", path("c.safetensors"), "--batch", path("x.safetensors"),
              "--out", path("g_cuda.safetensors"), "--device", "cuda"], "grad --device cuda"),
            (["eval", "--checkpoint", path("c.safetensors"), "--data", "bitstream", "--steps", "15", "--samples", "120",
              "--device", "cuda"], "eval --device cuda")):
        r = subprocess.run([BIN] + args, capture_output=True, text=True)
        why = [m for m in ("built without CUDA: ", "no CUDA device") if m in r.stderr]
        check((r.returncode == 1 and len(why) == 1 and "--device cpu" in r.stderr) or r.returncode == 0,
              f"{label}: rc {r.returncode} ({why[0].strip() if why else 'ran on a GPU' if r.returncode == 0 else r.stderr.strip()[-300:]})")
    r = subprocess.run([BIN] + SMALL[:1] + ["--model", "cnn", "--arch", "flatten,linear:10", "--data", "mnist", "--device",
                                            "cuda"], capture_output=True, text=True)
    check(r.returncode == 1 and ("built without CUDA" in r.stderr or "no CUDA device" in r.stderr or
                                 "recurrent models" in r.stderr), f"train --device cuda --model cnn: rc {r.returncode}")

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
    cache = ["--cache-dir", path("cache")]
    r = run(["train", "--model", "gru", "--hidden", "6", "--data", "irmas", "--data-dir", irmas, "--preset", "l",
             "--epochs", "2", "--batch", "4", "--lr", "1e-2", "--no-progress", "--check"] + cache,
            label="train on IRMAS WAVs")
    check("11 classes" in r.stderr and "12 features" in r.stderr, "IRMAS: 11 classes, 2 × (7 − 1) = 12 features")
    caches = [os.path.join(path("cache"), f) for f in os.listdir(path("cache"))] if os.path.isdir(path("cache")) else []
    check(len(caches) == 1 and caches[0].endswith("-l.safetensors"), f"IRMAS feature cache written: {caches}")
    for c in caches:
        open(c, "wb").write(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    run(["train", "--model", "gru", "--data", "irmas", "--data-dir", irmas, "--preset", "l", "--no-progress"] + cache,
        1, "delete it", "malformed feature cache")
    open(os.path.join(irmas, "cel", "[cel]broken.wav"), "wb").write(b"RIFF\x10\x00\x00\x00WAVEfmt ")
    for c in caches:
        os.remove(c)
    run(["train", "--model", "gru", "--data", "irmas", "--data-dir", irmas, "--preset", "l", "--no-progress"] + cache,
        1, "broken.wav", "truncated WAV in the data folder")

    check_cnn()

    print("ALL OK" if not FAILURES else f"{len(FAILURES)} FAILED: {FAILURES}")
    sys.exit(1 if FAILURES else 0)


def write_cifar(folder, counts, rng):
    """CIFAR-10 binary batches (1 label byte + 3072 pixel bytes per record)."""
    os.makedirs(folder, exist_ok=True)
    names = [f"data_batch_{k + 1}.bin" for k in range(len(counts) - 1)] + ["test_batch.bin"]
    for name, n in zip(names, counts):
        rec = np.zeros((n, 3073), dtype=np.uint8)
        rec[:, 0] = rng.integers(0, 10, size=n)
        rec[:, 1:] = rng.integers(0, 256, size=(n, 3072))
        rec[:, 1:1025] //= 2
        rec[:, 1:1025] += (rec[:, :1] * 12).astype(np.uint8)  # red plane carries the label: learnable
        rec.tofile(os.path.join(folder, name))


def check_cnn():
    """CNNs: bad SPECs and shapes, CIFAR-10-format training, pruning, resume, malformed data."""
    rng = np.random.default_rng(7)
    cifar = path("cifar-10-batches-bin")
    write_cifar(cifar, [60, 40, 30], rng)
    arch = "conv:4:3:1:1,relu,maxpool:2:2,conv:8:3:2:1,relu,avgpool:2:2,flatten,linear:10"
    base = ["train", "--model", "cnn", "--data", "cifar10", "--data-dir", path("."), "--batch", "16", "--lr", "1e-3",
            "--no-progress"]
    ck = path("cnn.safetensors")
    r = run(base + ["--arch", arch, "--epochs", "1", "--save", ck, "--backward", "blelloch", "--check"],
            label="cnn on CIFAR-10 binary batches (parent folder) with --check")
    check("100 train / 30 test images of 3×32×32" in r.stderr, "CIFAR-10: 2 train batches concatenated, test batch")
    run(base + ["--arch", "conv:4:3:1", "--epochs", "1"], 1, "conv needs conv:OUT:K:S:P", "bad SPEC: missing field")
    run(base + ["--arch", "conv:4:3:1:1,pool:2:2,flatten,linear:10"], 1, "unknown layer 'pool'", "bad SPEC: unknown")
    run(base + ["--arch", "conv:4:3:1:1,relu,,flatten,linear:10"], 1, "layer 2", "bad SPEC: empty layer")
    run(base + ["--arch", "conv:4:3:1:1,linear:10"], 1, "add 'flatten' before it", "linear without flatten")
    run(base + ["--arch", "conv:4:40:1:0,flatten,linear:10"], 1, "does not fit", "window larger than the image")
    run(base + ["--arch", "conv:4:3:1:1,relu"], 1, "not a vector of class scores", "output not flat")
    run(base + ["--arch", "flatten,linear:5"], 1, "5 outputs", "fewer outputs than classes")
    run(["train", "--model", "cnn", "--data", "bitstream", "--arch", arch], 1, "a cnn needs images",
        "cnn on sequence data")
    run(["train", "--model", "rnn", "--data", "cifar10", "--data-dir", cifar], 1, "holds images",
        "rnn on image data")
    # Pruned retraining from a checkpoint, and its exact resume (masks restored from the zeros).
    pr = path("pruned.safetensors")
    run(base + ["--init", ck, "--prune", "0.8", "--epochs", "1", "--save", pr], label="prune 80 % and retrain")
    copy_checkpoint(pr, path("pruned2.safetensors"))
    run(base + ["--resume", path("pruned2.safetensors"), "--epochs", "2", "--save", path("pruned2.safetensors")],
        label="resume the pruned run")
    run(base + ["--init", ck, "--prune", "0.8", "--epochs", "2", "--save", path("pruned3.safetensors")],
        label="pruned run, 2 epochs straight")
    p2, m2 = st.load(path("pruned2.safetensors"))
    p3, _ = st.load(path("pruned3.safetensors"))
    check(all(np.array_equal(p2[k], p3[k]) for k in p3), "resumed pruned run equals straight run")
    ws = [v for k, v in p2.items() if k.endswith("weight")]
    zero = sum(int((w == 0).sum()) for w in ws) / sum(w.size for w in ws)
    check(abs(zero - 0.8) < 2e-3 and m2.get("bppsa.init") == ck, f"80 % of weights stay zero ({zero:.4f}), init kept")
    run(base + ["--resume", pr, "--prune", "0.5", "--epochs", "3"], 1, "--init and --prune start a new one",
        "--resume with --prune")
    r = run(["eval", "--checkpoint", pr, "--data", "cifar10", "--data-dir", cifar, "--json"], label="eval a cnn")
    if r.returncode == 0:
        check(json.loads(r.stdout)["samples"] == 30, "eval on the 30 CIFAR-10 test images")
    # grad --model cnn: input of the wrong rank, weights for another architecture.
    x = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    st.save(path("xc.safetensors"), {"x": x, "y": np.array([1, 2], dtype=np.int64)})
    st.save(path("xc3.safetensors"), {"x": x[:, 0], "y": np.array([1, 2], dtype=np.int64)})
    g = path("gc.safetensors")
    run(["grad", "--model", "cnn", "--weights", ck, "--batch", path("xc.safetensors"), "--out", g],
        label="grad --model cnn (architecture from the checkpoint)")
    run(["grad", "--model", "cnn", "--weights", ck, "--batch", path("xc3.safetensors"), "--out", g], 1,
        "[batch, channels, height, width]", "cnn x of the wrong rank")
    run(["grad", "--model", "cnn", "--arch", "conv:5:3:1:1,relu,flatten,linear:10", "--weights", ck, "--batch",
         path("xc.safetensors"), "--out", g], 1, "0.weight", "weights of another architecture")
    # Malformed CIFAR-10 data: a truncated batch and a bad label.
    bad = path("bad-cifar")
    write_cifar(bad, [3, 2], rng)
    with open(os.path.join(bad, "data_batch_1.bin"), "r+b") as f:
        f.truncate(3073 * 3 - 100)
    run(base[:5] + ["--data-dir", bad, "--arch", arch, "--no-progress"], 1, "data_batch_1.bin", "truncated CIFAR batch")
    write_cifar(bad, [3, 2], rng)
    raw = bytearray(open(os.path.join(bad, "test_batch.bin"), "rb").read())
    raw[3073] = 10
    open(os.path.join(bad, "test_batch.bin"), "wb").write(bytes(raw))
    run(base[:5] + ["--data-dir", bad, "--arch", arch, "--no-progress"], 1, "label", "CIFAR label out of range")
    run(base[:5] + ["--data-dir", path("nowhere"), "--arch", arch], 1, "cifar", "missing CIFAR folder")


if __name__ == "__main__":
    main()
