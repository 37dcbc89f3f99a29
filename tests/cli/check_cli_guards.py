#!/usr/bin/env python3
"""End-to-end checks of what `bppsa` refuses and how it says so (issue 22): the --save lock
against a second concurrent run, --log write failures (/dev/full, a full file system) and a
--log that is a checkpoint file, input files that are huge, sparse, devices or lie about their
size, paths that are not UTF-8, the IRMAS feature cache outside the data folder, the PyTorch
baseline run without a shell, and messages that name the file or flag at fault.

Usage: check_cli_guards.py BPPSA_BINARY WORK_DIR."""
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import safetensors_np as st  # noqa: E402
from fake_idx import fake_mnist  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
FAILURES = []
SMALL = ["train", "--model", "gru", "--hidden", "5", "--data", "bitstream", "--steps", "15", "--samples", "120",
         "--batch", "8", "--lr", "1e-2", "--no-progress"]


def run(args, expect_rc=0, expect_err=(), label="", env=None, timeout=120):
    t0 = time.monotonic()
    r = subprocess.run([BIN] + args, capture_output=True, env=env, timeout=timeout)
    r.seconds = time.monotonic() - t0
    out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    r.out, r.err = out, err
    expect_err = [expect_err] if isinstance(expect_err, (str, bytes)) else expect_err
    missing = [e for e in expect_err if e not in err]
    ok = r.returncode == expect_rc and not missing and "internal error" not in err
    print(f"{'ok  ' if ok else 'FAIL'} {label} -> rc {r.returncode} ({r.seconds:.1f} s)")
    if not ok:
        FAILURES.append(label)
        print("  expected rc", expect_rc, "and stderr containing", missing)
        print("  stdout:", out[-1500:], "\n  stderr:", err[-1500:])
    return r


def check(cond, label):
    print(f"{'ok  ' if cond else 'FAIL'} {label}")
    if not cond:
        FAILURES.append(label)
    return cond


def path(*names):
    return os.path.join(WORK, *names)


def read(p):
    with open(p, "rb") as f:
        return f.read()


def write_wavs(folder, rate=22050, float_nan=False, seconds=0.3):
    """An IRMAS-layout folder of short stereo WAVs (class folders of "[cel]…wav" files)."""
    rng = np.random.default_rng(3)
    for k, code in enumerate(["cel", "flu", "gac", "pia", "voi"] * 2):
        os.makedirs(os.path.join(folder, code), exist_ok=True)
        t = np.arange(int(seconds * rate)) / rate
        tone = np.sin(2 * np.pi * (200 + 150 * (k % 5)) * t) * 0.5 + 0.05 * rng.standard_normal(t.size)
        pcm = (np.stack([tone, 0.8 * tone], axis=1) * 32767).astype("<i2")
        with wave.open(os.path.join(folder, code, f"[{code}][cla]{k:04d}__1.wav"), "wb") as wf:
            wf.setnchannels(2)
            wf.setsampwidth(2)
            wf.setframerate(rate)
            wf.writeframes(pcm.tobytes())


def float_wav(p, samples, rate=22050):
    """A mono IEEE-float WAV (format 3) holding `samples` as they are (NaN included)."""
    data = np.asarray(samples, dtype="<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    with open(p, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(body)) + body)


def check_lock():
    """Two concurrent runs on one --save: the second is refused, naming the first."""
    ck = path("locked.safetensors")
    long_run = [a if a != "120" else "4000" for a in SMALL] + ["--epochs", "1000", "--save", ck]
    a = subprocess.Popen([BIN] + long_run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and f"pid {a.pid}" not in (
                read(ck + ".lock").decode(errors="replace") if os.path.exists(ck + ".lock") else ""):
            time.sleep(0.05)
        check(a.poll() is None, "the first run is still running")
        run(SMALL + ["--epochs", "1", "--save", ck], 1, ["in use", f"pid {a.pid}", "locked.safetensors.lock"],
            "a second run on the same --save is refused, naming the first")
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait()
    run(SMALL + ["--epochs", "1", "--save", ck], 0, label="the lock of a killed run does not block the next")


def check_stale_temporaries():
    """A save removes the temporaries of killed saves (dead pid), never those of a live process."""
    ck = path("tmp.safetensors")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [path(f".tmp.safetensors.tmp.{dead.pid}.0"), path(f".tmp.optim.8-0123456789abcdef.safetensors.tmp.{dead.pid}.3")]
    live = path(f".tmp.safetensors.tmp.{os.getpid()}.0")
    other = path(f".other.safetensors.tmp.{dead.pid}.0")
    for f in stale + [live, other]:
        open(f, "wb").write(b"partial")
    run(SMALL + ["--epochs", "1", "--save", ck], label="a save beside stale temporaries")
    check(not any(os.path.exists(f) for f in stale), "the temporaries of the dead process are removed")
    check(os.path.exists(live) and os.path.exists(other), "a live process's temporary and another file's are kept")


def check_log():
    """--log failures are errors; --log may not be a checkpoint file."""
    run(SMALL + ["--epochs", "1", "--log", "/dev/full"], 1, ["/dev/full", "No space left"], "--log /dev/full")
    ck = path("ck.safetensors")
    run(SMALL + ["--epochs", "1", "--save", ck], label="a checkpoint to protect")
    opt = glob.glob(path("ck.optim.*.safetensors"))
    check(len(opt) == 1, f"one optimizer state beside the checkpoint: {opt}")
    before = {p: read(p) for p in [ck] + opt}
    cases = [(ck, "--log = --save"), (ck + ".lock", "--log = the lock"), (opt[0], "--log = the optimizer state"),
             (path("ck.optim.x.safetensors"), "--log named like an optimizer generation")]
    for log, label in cases:
        run(SMALL + ["--epochs", "2", "--save", ck, "--resume", ck, "--log", log], 1, ["--log"], label)
    other = path("other.safetensors")
    shutil.copy(ck, other)
    run(SMALL + ["--epochs", "1", "--init", other, "--log", other], 1, ["--log", "other.safetensors"],
        "--log = --init")
    link = path("link.jsonl")
    os.symlink(ck, link)
    run(SMALL + ["--epochs", "2", "--resume", ck, "--log", link], 1, ["--log"], "--log = a symlink to --resume")
    check(all(read(p) == b for p, b in before.items()), "the checkpoint files are untouched")


def small_tmpfs(name, size, what):
    """A tmpfs of `size` mounted at path(name), or None (and `what` skipped) where mount is refused."""
    mnt = path(name)
    os.makedirs(mnt)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt], capture_output=True)
    if r.returncode != 0:
        print(f"skip {what}: cannot mount a tmpfs here:", r.stderr.decode().strip())
        return None
    return mnt


def check_full_disk():
    """A really full file system (a 256 kB tmpfs): --log and --save fail; the last save survives."""
    mnt = small_tmpfs("tmpfs", "256k", "the full-disk checks")
    if mnt is None:
        return
    try:
        ck = os.path.join(mnt, "full.safetensors")
        run(SMALL + ["--epochs", "1", "--save", ck], label="save on the small tmpfs")
        files = [p for p in glob.glob(os.path.join(mnt, "full*")) if not p.endswith(".lock")]
        before = {p: read(p) for p in files}
        try:
            with open(os.path.join(mnt, "filler"), "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass
        run(SMALL + ["--epochs", "2", "--resume", ck, "--save", ck], 1, ["No space left", "full"],
            "--save on a full file system fails")
        after = {p: read(p) for p in glob.glob(os.path.join(mnt, "full*")) if not p.endswith(".lock")}
        check(after == before, "the previous checkpoint and its optimizer state survive intact")
        check(not glob.glob(os.path.join(mnt, ".full*")), "no temporary file is left on the full file system")
        run(SMALL + ["--epochs", "2", "--resume", ck, "--log", os.path.join(mnt, "log.jsonl")], 1,
            ["log.jsonl", "No space left"], "--log on a full file system fails")
    finally:
        subprocess.run(["umount", mnt])


def check_inputs():
    """Huge sparse files, devices and lying headers: exit 1 at once, naming the file."""
    huge = path("huge.safetensors")
    with open(huge, "wb") as f:
        f.truncate(1 << 40)  # 1 TB of zeros, sparse
    lying = path("lying.safetensors")
    open(lying, "wb").write(struct.pack("<Q", 1 << 60) + b"{}      ")
    # A valid header whose one tensor spans the whole 1 TB: only the memory guard stops it.
    big = path("big.safetensors")
    for pad in range(64):
        n = ((1 << 40) - 8 - 200) // 4
        head = json.dumps({"x": {"dtype": "F32", "shape": [n], "data_offsets": [0, n * 4]}}).encode()
        head += b" " * (200 - len(head))
        if (1 << 40) - 8 - len(head) == n * 4:
            break
    with open(big, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        f.truncate(1 << 40)
    batch = path("batch.safetensors")
    st.save(batch, {"x": np.zeros((2, 15, 1), np.float32), "y": np.zeros(2, np.int64)})
    for bad, want in ((huge, "huge.safetensors"), (lying, "lying.safetensors"), (big, "big.safetensors"),
                      ("/dev/zero", "/dev/zero")):
        name = os.path.basename(bad)
        for args, label in (
                (["eval", "--checkpoint", bad, "--data", "bitstream", "--steps", "15"], "eval --checkpoint"),
                (SMALL + ["--epochs", "1", "--init", bad], "train --init"),
                (SMALL + ["--epochs", "1", "--resume", bad], "train --resume"),
                (["grad", "--model", "gru", "--weights", bad, "--batch", batch, "--out", path("g.safetensors")],
                 "grad --weights")):
            r = run(args, 1, [want], f"{label} {name}", timeout=60)
            check(r.seconds < 30, f"{label} {name} fails at once ({r.seconds:.1f} s)")
    r = run(["eval", "--checkpoint", "/dev/zero", "--data", "bitstream"], 1, ["not a regular file"],
            "/dev/zero is refused as not a regular file")
    r = run(["eval", "--checkpoint", big, "--data", "bitstream"], 1, ["needs about"],
            "a tensor of 1 TB meets the memory guard before allocating")


def check_non_utf8():
    """Paths holding byte 0xE9 (not UTF-8): training, saving, logging, resuming, IRMAS."""
    w = os.fsencode(WORK)
    folder = os.path.join(w, b"caf\xe9")
    os.makedirs(folder)
    init = os.path.join(folder, b"init\xe9.safetensors")
    run(SMALL + ["--epochs", "1", "--save", os.fsdecode(init)], label="save to a non-UTF-8 path")
    out = os.path.join(folder, b"out\xe9.safetensors")
    log = os.path.join(folder, b"log\xe9.jsonl")
    r = subprocess.run([os.fsencode(BIN)] + [a.encode() for a in SMALL] +
                       [b"--epochs", b"1", b"--init", init, b"--save", out, b"--log", log], capture_output=True)
    if not check(r.returncode == 0, f"--init/--save/--log with byte 0xE9 in the paths: rc {r.returncode}"):
        print("  stderr:", r.stderr.decode(errors="replace")[-500:])
    if r.returncode == 0:
        meta = st.load(os.fsdecode(out))[1]
        check(meta.get("bppsa.init") == init.decode("utf-8", "backslashreplace"),
              f"bppsa.init holds the path, its byte 0xE9 escaped as \\xe9: {meta.get('bppsa.init')!r}")
        lines = [json.loads(line) for line in open(log, "rb").read().decode("utf-8").splitlines()]
        check(lines and lines[-1]["event"] == "epoch", "the log is valid UTF-8 JSON lines")
        run(SMALL + ["--epochs", "2", "--resume", os.fsdecode(out), "--save", os.fsdecode(out)],
            label="resume from the non-UTF-8 path")
        r = run(["eval", "--checkpoint", os.fsdecode(out), "--data", "bitstream", "--steps", "15", "--samples", "120",
                 "--json"], label="eval --json of a non-UTF-8 path")
        check(r.returncode == 0 and json.loads(r.out)["checkpoint"] == out.decode("utf-8", "backslashreplace"),
              "eval --json names the checkpoint, its byte 0xE9 escaped")
    check(not [f for f in os.listdir(folder) if b".tmp." in f], "no stray temporary file")
    irmas = os.path.join(folder, b"irmas\xe9")
    write_wavs(os.fsdecode(irmas))
    run(["train", "--model", "gru", "--hidden", "4", "--data", "irmas", "--data-dir", os.fsdecode(irmas), "--preset",
         "l", "--epochs", "1", "--batch", "4", "--no-progress", "--cache-dir", path("cache8"),
         "--save", path("irmas8.safetensors")], label="IRMAS from a folder named with byte 0xE9")


def check_irmas_cache():
    """The feature cache goes to --cache-dir or the user's cache folder, never the data folder."""
    data = path("irmas-ro")
    write_wavs(data)
    listing = sorted(os.walk(data))
    env = dict(os.environ, XDG_CACHE_HOME=path("xdg"))
    ro = subprocess.run(["mount", "--bind", data, data], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "remount,bind,ro", data, data], capture_output=True).returncode == 0
    try:
        args = ["train", "--model", "gru", "--hidden", "4", "--data", "irmas", "--data-dir", data, "--preset", "l",
                "--epochs", "1", "--batch", "4", "--no-progress"]
        run(args, label=f"IRMAS from a {'read-only (bind mount)' if ro else 'plain'} folder, default cache", env=env)
        caches = glob.glob(path("xdg", "bppsa", "irmas-features", "*"))
        check(len(caches) == 1, f"one cache under $XDG_CACHE_HOME/bppsa/irmas-features: {caches}")
        check(sorted(os.walk(data)) == listing, "nothing was written into the data folder")
        r = run(args, label="second run reads the cache", env=env)
        write_wavs(path("irmas-other"))
        run([path("irmas-other") if a == data else a for a in args], label="another data folder", env=env)
        check(len(glob.glob(path("xdg", "bppsa", "irmas-features", "*"))) == 2,
              "two data folders get two cache files")
        run(args + ["--cache-dir", path("mycache")], label="--cache-dir", env=env)
        check(len(glob.glob(path("mycache", "*-l.safetensors"))) == 1, "--cache-dir holds the cache")
        run(args + ["--test-fraction", "0"], 1, ["--test-fraction", "test data is empty"],
            "--test-fraction 0 names the flag", env=env)
    finally:
        if ro:
            subprocess.run(["umount", data])
    nan = path("irmas-nan")
    write_wavs(nan)
    float_wav(os.path.join(nan, "cel", "[cel][cla]9999__1.wav"), [0.1] * 100 + [float("nan")] + [0.1] * 6000)
    run(["train", "--model", "gru", "--data", "irmas", "--data-dir", nan, "--preset", "l", "--no-progress",
         "--cache-dir", path("cache-nan")], 1, ["9999__1.wav"], "a WAV holding NaN is named")


def check_jacobians():
    """The PyTorch baseline runs without a shell; its failure is the command's failure."""
    d = path("dir with space", "it's")
    os.makedirs(d)
    fake = os.path.join(d, "python")
    marker = path("baseline-ran")
    with open(fake, "w") as f:
        f.write(f"#!/bin/sh\necho \"$@\" > '{marker}'\necho '{{\"error\": \"fake baseline\"}}'\nexit 5\n")
    os.chmod(fake, 0o755)
    run(["jacobians", "--table1", "--repeats", "1", "--vectors", "16", "--python", fake], 1, ["baseline"],
        "jacobians --table1 with a failing --python in a folder with a space and a quote", timeout=300)
    check(os.path.exists(marker), "the --python in a folder with a space and a quote ran")
    run(["jacobians", "--table1", "--arch", "vgg11", "--no-baseline"], 1, ["--arch", "--table1"],
        "jacobians --arch with --table1 is refused")


def check_messages():
    """Weak messages of issue 22: each names the file or flag at fault."""
    ck = path("m.safetensors")
    run(SMALL + ["--epochs", "1", "--save", ck], label="a checkpoint")
    os.makedirs(path("afolder"))
    r = run(SMALL + ["--epochs", "1", "--save", path("afolder")], 1, ["--save", "is a folder"],
            "--save naming a folder is refused at start")
    check("epoch 1/" not in r.out and os.listdir(path("afolder")) == [], "no epoch trained, nothing left in it")
    batch = path("mb.safetensors")
    st.save(batch, {"x": np.zeros((2, 15, 1), np.float32), "y": np.array([0, -1], np.int64)})
    before = read(ck)
    run(["grad", "--model", "gru", "--weights", ck, "--batch", batch, "--out", ck], 1, ["--out", "--weights"],
        "grad --out = --weights is refused")
    check(read(ck) == before, "the weights are untouched")
    run(["grad", "--model", "gru", "--weights", ck, "--batch", batch, "--out", path("g.safetensors")], 1,
        ["label -1", "mb.safetensors"], "grad with label -1 names the batch file")
    old = path("old.safetensors")  # a checkpoint from before the flags were recorded: the data's name is checked
    t, meta = st.load(ck)
    st.save(old, t, {k: v for k, v in meta.items() if not k.startswith("bppsa.flag.")})
    gen = meta["bppsa.optimizer"]
    shutil.copy(path(f"m.optim.{gen}.safetensors"), path(f"old.optim.{gen}.safetensors"))
    run(SMALL[:8] + ["16"] + SMALL[9:] + ["--epochs", "2", "--resume", old], 1, ["bitstream T=15", "--data"],
        "--resume with other data is refused")
    t, meta = st.load(ck)
    bad = path("badstep.safetensors")
    st.save(bad, t, dict(meta, **{"bppsa.step": "12x"}))
    run(SMALL + ["--epochs", "2", "--resume", bad], 1, ["bppsa.step", "12x", "not a whole number"],
        "malformed bppsa.step is named")
    st.save(bad, t, dict(meta, **{"bppsa.epoch": "-1"}))
    run(SMALL + ["--epochs", "2", "--resume", bad], 1, ["bppsa.epoch", "not a whole number"],
        "malformed bppsa.epoch is named")
    idx = fake_mnist(path("idx"))
    cnn = path("cnn.safetensors")
    run(["train", "--model", "cnn", "--arch", "flatten,linear:10", "--data", "mnist", "--data-dir", idx, "--epochs",
         "1", "--no-progress", "--save", cnn], label="a cnn checkpoint")
    run(SMALL + ["--epochs", "2", "--resume", cnn], 1, ["holds a CNN", "--model cnn"], "cnn checkpoint, --model gru")
    run(["grad", "--model", "gru", "--weights", cnn, "--batch", batch, "--out", path("g.safetensors")], 1,
        ["holds a CNN", "--model cnn"], "grad --model gru on a cnn checkpoint")
    run(["jacobians", "--weights", cnn, "--arch", "vgg11"], 1, ["--arch", "--weights"],
        "jacobians --arch with --weights is refused")
    # Divergence to finite but absurd losses: stopped, the last good checkpoint kept (a new run
    # from its weights: a resumed one must keep its --lr).
    before = read(ck)
    run([a if a != "1e-2" else "1e15" for a in SMALL] + ["--epochs", "3", "--init", ck, "--save", ck], 1,
        ["lower --lr (now 1e+15)"], "an exploding (finite) loss stops the run")
    check(read(ck) == before, "the exploded epoch was not saved over the checkpoint")
    run(SMALL + ["--epochs", "2", "--weight-decay", "1e38", "--optimizer", "sgd"], 1, ["--weight-decay"],
        "divergence under --weight-decay 1e38 names weight decay")
    r = run(["scan-check", "--tolerance", "-1"], 2, ["--tolerance", "must be ≥ 0, got -1"], "--tolerance -1 is refused")
    check("179769" not in r.err, "the message does not print DBL_MAX")
    run(SMALL + ["--lr", "0"], 2, ["--lr", "must be > 0, got 0"], "--lr 0 is refused with a short message")
    # CIFAR-10 with a missing batch between present ones.
    cifar = path("cifar-gap")
    os.makedirs(cifar)
    rng = np.random.default_rng(1)
    for name in ("data_batch_1.bin", "data_batch_2.bin", "data_batch_4.bin", "test_batch.bin"):
        rec = rng.integers(0, 256, size=(3, 3073)).astype(np.uint8)
        rec[:, 0] %= 10
        rec.tofile(os.path.join(cifar, name))
    run(["train", "--model", "cnn", "--arch", "flatten,linear:10", "--data", "cifar10", "--data-dir", cifar,
         "--epochs", "1", "--no-progress"], 1, ["data_batch_3.bin", "data_batch_4.bin"], "CIFAR-10 gap is named")


def run_measured(args, env):
    """Runs bppsa as `run` does, returning (returncode, stderr, peak RSS in bytes) of that one process."""
    with open(path("measured.err"), "wb") as err:
        p = subprocess.Popen([BIN] + args, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, read(path("measured.err")).decode(errors="replace"), usage.ru_maxrss * 1024


_BASELINE = []


def baseline_rss():
    """The peak memory of a run that allocates next to nothing (its code and libraries: a build with
    CUDA maps the CUDA runtime's), which the guard does not count; measured once."""
    if not _BASELINE:
        rc, err, rss = run_measured(["scan-check", "--n", "2", "--dim", "2", "--batch", "1"], dict(os.environ))
        check(rc == 0, "a trivial scan-check runs (the baseline of peak memory)")
        _BASELINE.append(rss if rc == 0 else 0)
    return _BASELINE[0]


def check_guarded(label, args, limit, expect_err):
    """`args` under BPPSA_MEMORY_LIMIT=`limit` MiB: exit 1 with the guard's message, peak memory above
    a trivial run's under it."""
    rc, err, rss = run_measured(args, dict(os.environ, BPPSA_MEMORY_LIMIT=f"{limit}M"))
    missing = [e for e in expect_err if e not in err]
    if not check(rc == 1 and not missing, f"{label}: exit 1 with the guard's message"):
        print(f"  rc {rc}, stderr lacks {missing}:", err[-1500:])
    if "ASAN_OPTIONS" in os.environ:  # ASan's allocator quarantines freed memory: its peak is not the program's
        print(f"note {label}: peak memory not checked under AddressSanitizer ({rss / 2**20:.0f} MiB)")
        return
    base = baseline_rss()
    check(rss - base < limit << 20, f"{label}: peak memory {rss / 2**20:.0f} MiB, {(rss - base) / 2**20:.0f} MiB above a "
          f"trivial run's, is under the {limit} MiB limit")


def irmas_args(folder, cache):
    return ["train", "--model", "gru", "--hidden", "4", "--data", "irmas", "--data-dir", folder, "--preset", "l",
            "--epochs", "1", "--batch", "4", "--no-progress", "--cache-dir", cache]


def check_file_sizes_under_guard():
    """Issue 44: sizes that WAV headers and CIFAR-10 files drive stay under BPPSA_MEMORY_LIMIT."""
    # Four 200-byte WAVs claiming 2^26 Hz: a 3-s clip of 1.6 million steps, 0.9 GB with the cache's
    # copies at a 256 MiB limit (the audit's 2^28 Hz reached 3.0 GB). Refused from the header, naming the file.
    hostile = path("irmas-2e26")
    for code in ("cel", "flu", "gac", "pia"):
        os.makedirs(os.path.join(hostile, code))
        float_wav(os.path.join(hostile, code, f"[{code}]0001__1.wav"), [0.1] * 36, rate=1 << 26)
    check(os.path.getsize(os.path.join(hostile, "cel", "[cel]0001__1.wav")) < 256, "the hostile WAVs are tiny")
    check_guarded("WAVs claiming 2^26 Hz", irmas_args(hostile, path("cache-2e26")), 256,
                  ["[cel]0001__1.wav", "67108864 Hz", "1000–768000 Hz"])
    check(not glob.glob(path("cache-2e26", "*.safetensors")), "no feature cache was written for them")
    # Real 384 kHz clips whose features (3 copies: 9001 steps × 12 features × 4 B each) do not fit
    # 80 % of 8 MiB: the features' guard, not the rate's.
    fast = path("irmas-384k")
    write_wavs(fast, rate=384000, seconds=0.02)
    run(irmas_args(fast, path("cache-384k")), 1,
        ["the MFCC features of 10 WAV files", "9001 steps of 12 features", "their copy for the cache", "--preset s"],
        "384 kHz clips beyond the memory limit meet the guard before the features are allocated",
        env=dict(os.environ, BPPSA_MEMORY_LIMIT="8M"))
    # A 61 MB CIFAR-10 batch (20,000 records of zeros, sparse): 246 MB as floats at a 256 MiB limit.
    cifar = path("cifar-big")
    os.makedirs(cifar)
    with open(os.path.join(cifar, "data_batch_1.bin"), "wb") as f:
        f.truncate(20000 * 3073)
    open(os.path.join(cifar, "test_batch.bin"), "wb").write(bytes(3073))
    check_guarded("a 61 MB CIFAR-10 batch as floats",
                  ["train", "--model", "cnn", "--arch", "flatten,linear:10", "--data", "cifar10", "--data-dir", cifar,
                   "--epochs", "1", "--no-progress"], 256,
                  ["[load_cifar10]", "20000 training and 1 test images", "the images as floats 246 MB",
                   "data_batch_1.bin"])


def check_not_regular_inputs():
    """Issue 44: an IDX file that is a FIFO or a link to /dev/zero is named as what it is, not as missing."""
    for kind in ("fifo", "zero"):
        idx = fake_mnist(path(f"idx-{kind}"))
        target = os.path.join(idx, "train-labels-idx1-ubyte")
        os.remove(target)
        if kind == "fifo":
            os.mkfifo(target)
        else:
            os.symlink("/dev/zero", target)
        what = "a FIFO (named pipe)" if kind == "fifo" else "a link to '/dev/zero', a character device"
        run(["train", "--model", "cnn", "--arch", "flatten,linear:10", "--data", "mnist", "--data-dir", idx,
             "--epochs", "1", "--no-progress"], 1, [f"{target}' is {what}, not a regular file"],
            f"an IDX file that is {what}", timeout=30)


def check_full_cache_dir():
    """Issue 44: a full --cache-dir (a 64 kB tmpfs) costs the cache, not the run: a warning naming it."""
    mnt = small_tmpfs("cache-tmpfs", "64k", "the full --cache-dir check")
    if mnt is None:
        return
    try:
        data = path("irmas-fullcache")
        write_wavs(data)  # 10 clips: a 250 kB cache
        r = run(irmas_args(data, mnt) + ["--save", path("fullcache.safetensors")], 0,
                ["warning: cannot write the feature cache", mnt, "No space left", "going on without it"],
                "IRMAS with a full --cache-dir warns and trains")
        check("epoch 1/1" in r.out + r.err and os.path.exists(path("fullcache.safetensors")),
              "the run trained and saved without the cache")
        check(not [f for f in os.listdir(mnt) if f.endswith(".safetensors") or ".tmp." in f],
              f"nothing is left in the full cache folder: {os.listdir(mnt)}")
    finally:
        subprocess.run(["umount", mnt])


def with_flags(base, *pairs):
    """`base` with each (flag, value) of `pairs`: replaced where `base` has the flag, else added;
    a value of None drops the flag."""
    out = list(base)
    for flag, value in pairs:
        if flag in out:
            i = out.index(flag)
            del out[i:i + 2]
        if value is not None:
            out += [flag, value]
    return out


def check_resume_flags():
    """Issue 44: a checkpoint records every flag that defines the data and the arithmetic; --resume
    refuses another value, given or by default, before reading any data, naming the flag, both
    values and the fix; an omitted --seed takes the recorded one and says so."""
    ck = path("rf.safetensors")
    base = SMALL + ["--seed", "7"]
    run(base + ["--epochs", "1", "--save", ck], label="a checkpoint of a run with --seed 7")
    meta = st.load(ck)[1]
    check(meta.get("bppsa.flag.samples") == "120" and meta.get("bppsa.flag.seed") == "7" and
          meta.get("bppsa.flag.lr") == "0.01" and meta.get("bppsa.flag.test-fraction") == "0.2",
          "the checkpoint records the run's flags")
    # --test-fraction and --preset split and shape IRMAS data; the record holds them for every data set.
    for flag, value, saved in [("--data-seed", "5", "4202"), ("--samples", "130", "120"), ("--steps", "16", "15"),
                               ("--min-steps", "3", "0"), ("--limit-train", "50", "0"), ("--limit-test", "10", "0"),
                               ("--test-fraction", "0.5", "0.2"), ("--preset", "m", "s"), ("--batch", "4", "8"),
                               ("--lr", "0.02", "0.01"), ("--lr-schedule", "cosine", "constant"),
                               ("--optimizer", "sgd", "adam"), ("--weight-decay", "0.1", "0"),
                               ("--clip-grad-norm", "1", "0"), ("--seed", "8", "7")]:
        r = run(with_flags(base, (flag, value)) + ["--epochs", "2", "--resume", ck], 1,
                [f"{flag} {value} but", f"trained with {flag} {saved}", f"resume with {flag} {saved}", "--init"],
                f"--resume with {flag} {value} is refused")
        check("data:" not in r.err, f"  ... before the data is loaded ({flag})")
    run(with_flags(base, ("--samples", None)) + ["--epochs", "2", "--resume", ck], 1,
        ["--samples is 50000 (its default", "--samples 120"], "--resume without the run's --samples is refused")
    # The same value spelled otherwise is the same; an omitted --seed continues the recorded one.
    run(with_flags(base, ("--lr", "0.010")) + ["--epochs", "1", "--resume", ck], label="--lr 0.010 is the run's 0.01")
    straight = path("rf-straight.safetensors")
    run(base + ["--epochs", "2", "--save", straight], label="the same run straight to epoch 2")
    r = run(with_flags(base, ("--seed", None)) + ["--epochs", "2", "--resume", ck, "--save", ck],
            0, ["--seed 7"], "--resume without --seed takes the recorded one and says so")
    a, b = st.load(ck)[0], st.load(straight)[0]
    check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a),
          "  ... and ends with the straight run's weights")
    # The loss a CNN trains with is the checkpoint's (it fell back to --loss ce); another is refused.
    cnn = path("rf-cnn.safetensors")
    base = ["train", "--model", "cnn", "--arch", "flatten,linear:10", "--data", "mnist", "--data-dir",
            fake_mnist(path("rf-idx")), "--no-progress"]
    run(base + ["--loss", "mse", "--epochs", "1", "--save", cnn], label="a cnn checkpoint trained with --loss mse")
    run(base + ["--epochs", "2", "--resume", cnn, "--save", cnn], label="resumed without --loss")
    check(st.load(cnn)[1].get("bppsa.loss") == "mse", "  ... it goes on with the checkpoint's loss, mse")
    run(base + ["--loss", "ce", "--epochs", "3", "--resume", cnn], 1, ["--loss ce", "conflicts"],
        "resumed with --loss ce, it is refused")


def check_divergence():
    """Issue 44: a training loss that rises to several times the first epoch's ends the run before
    the epoch is saved, also after a resume (the reference travels in the checkpoint)."""
    sgd = with_flags(SMALL, ("--optimizer", "sgd"), ("--momentum", "0.99"), ("--lr", "3"))  # 4.75, 14.5, 26.6, …
    ck = path("div.safetensors")
    run(sgd + ["--epochs", "4", "--save", ck], 1,
        ["epoch 3", "more than 5× the first epoch's", "keeps the last good epoch", "lower --lr (now 3)"],
        "a training loss rising from 4.75 to 26.6 stops the run")
    check(st.load(ck)[1].get("bppsa.epoch") == "2", "  ... and the checkpoint keeps epoch 2, the last good one")
    ck2 = path("div2.safetensors")
    run(sgd + ["--epochs", "2", "--save", ck2], label="the same run to epoch 2")
    run(sgd + ["--epochs", "4", "--resume", ck2, "--save", ck2], 1, ["epoch 3", "first epoch's (4.75)"],
        "resumed from epoch 2, it stops at epoch 3 too")
    check(st.load(ck2)[1].get("bppsa.epoch") == "2", "  ... and keeps epoch 2")


def check_usage_errors():
    """Issue 44: a flag the run would ignore is a usage error (exit 2) naming it; --proj is checked
    before the data is loaded, naming --proj; --mp-timeout has a floor; `grad` names its --batch
    file in every error the batch causes."""
    run(with_flags(SMALL, ("--momentum", "0.9")), 2, ["--momentum", "--optimizer sgd"],
        "--momentum with Adam is a usage error")
    run(SMALL + ["--replicas", "2"], 2, ["--replicas", "--model-parallel"],
        "--replicas without --model-parallel is a usage error")
    run(SMALL + ["--model-parallel", "--mp-timeout", "1e-9"], 2, ["--mp-timeout", "≥ 0.1", "1e-9"],
        "--mp-timeout 1e-9 is refused")
    for args, expect in [(SMALL + ["--proj", "3"], ["--proj 3", "--model lstm"]),
                         (with_flags(SMALL, ("--model", "lstm")) + ["--proj", "5"], ["--proj 5", "--hidden (5)"])]:
        r = run(args, 1, expect, f"{' '.join(args[1:3])} --proj {args[-1]} is refused naming --proj")
        check("data:" not in r.err, "  ... before the data is loaded")
    w = path("gw.safetensors")
    run(SMALL + ["--epochs", "1", "--save", w], label="weights for grad")
    idx = fake_mnist(path("gidx"))
    cnn = path("gcnn.safetensors")
    run(["train", "--model", "cnn", "--arch", "conv:2:3:1:1,relu,flatten,linear:10", "--data", "mnist", "--data-dir",
         idx, "--epochs", "1", "--no-progress", "--save", cnn], label="cnn weights for grad")
    for name, model, weights, tensors, expect in [
            ("yf32", "gru", w, {"x": np.zeros((2, 15, 1), np.float32), "y": np.zeros(2, np.float32)}, "y is F32"),
            ("nosample", "gru", w, {"x": np.zeros((0, 15, 1), np.float32), "y": np.zeros(0, np.int64)},
             "need at least one sample"),
            ("nostep", "gru", w, {"x": np.zeros((2, 0, 1), np.float32), "y": np.zeros(2, np.int64)},
             "need at least one sample and one step"),
            ("emptyconv", "cnn", cnn, {"x": np.zeros((1, 1, 0, 0), np.float32), "y": np.zeros(1, np.int64)},
             "is empty")]:
        batch = path(name + ".safetensors")
        st.save(batch, tensors)
        run(["grad", "--model", model, "--weights", weights, "--batch", batch, "--out", path("gout.safetensors")], 1,
            [expect, "--batch " + batch], f"grad: '{expect}' names the --batch file")


def check_simulate_under_guard():
    """Issue 44: simulate's fill-in patterns and calibration stay under BPPSA_MEMORY_LIMIT (a CSR chain
    planned from layouts reached 21 GB at 512M); its calibration shows progress on stderr."""
    base = ["simulate", "--p", "2", "--repeats", "1", "--no-progress"]
    check_guarded("simulate: the fill-in of 10^4 CSR products planned from layouts",
                  base + ["--kind", "csr", "--dim", "1000", "--n", "10000", "--calibration-n", "64", "--algo",
                          "blelloch"], 512, ["[plan] the SpGEMM fill-in patterns", "--algo linear or hybrid"])
    check_guarded("simulate: calibrating on CSR Jacobians of d = 5000, batch 16",
                  base + ["--kind", "csr", "--dim", "5000", "--batch", "16", "--n", "1000"], 512,
                  ["[calibrate] calibrating on a csr chain", "the calibration chain", "the cache flusher"])
    small = ["simulate", "--n", "100", "--p", "1", "--repeats", "1"]
    run(small, 0, ["calibrating 6/6 step (100%)", "simulating 1/1 row"], "simulate shows its progress on stderr")
    r = run(small + ["--no-progress"], 0, label="simulate --no-progress")
    check("calibrating" not in r.err and "simulating" not in r.err, "--no-progress silences it")


def run_checks(checks):
    """Runs `checks` in a fresh WORK, or those of them named after WORK; exit 1 if any failed."""
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    only = set(sys.argv[3:])
    for f in checks:
        if not only or f.__name__ in only:
            f()
    print("ALL OK" if not FAILURES else f"{len(FAILURES)} FAILED: {FAILURES}")
    sys.exit(1 if FAILURES else 0)


def main():
    run_checks((check_lock, check_stale_temporaries, check_log, check_full_disk, check_inputs, check_non_utf8, check_irmas_cache,
                check_jacobians, check_messages, check_file_sizes_under_guard, check_not_regular_inputs,
                check_full_cache_dir, check_simulate_under_guard, check_resume_flags, check_divergence, check_usage_errors))


if __name__ == "__main__":
    main()
