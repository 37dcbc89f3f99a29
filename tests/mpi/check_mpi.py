"""Model parallelism across MPI ranks (mpirun --oversubscribe on loopback), against
independent references:

1. gradients: `mpirun -np K bppsa grad --model-parallel` (bp pipeline, bppsa with doubling
   and Blelloch, micro-batches, replicas) equals single-process `bppsa grad --backward bp`
   for K in {1, 2, 3, 4, 8}, on a stacked GRU, an LSTM with per-step losses and a CNN with
   every operator kind (relative 1e-4, float32);
2. training: a model-parallel epoch leaves the same weights as a single-process epoch from the
   same seed (same batches, same optimizer), its checkpoint loads into a 1-rank run, and a
   1-rank checkpoint continues in a K-rank run with --check;
3. failures end the job instead of hanging: a rank killed mid-run, a rank that stops
   answering (SIGSTOP; the others time out), and ranks started with different flags.

usage: check_mpi.py BPPSA_BINARY WORKDIR
"""
import os
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pytorch"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
import safetensors_np as st  # noqa: E402
from common import rel_err  # noqa: E402
from fake_idx import fake_mnist  # noqa: E402

BIN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
os.makedirs(WORK, exist_ok=True)
MPIRUN = ["mpirun", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
if os.geteuid() == 0:
    MPIRUN.insert(1, "--allow-run-as-root")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
if "ASAN_OPTIONS" in ENV:  # the sanitizer build: Open MPI's own allocations outlive MPI_Finalize
    ENV["ASAN_OPTIONS"] += ":detect_leaks=0"
failures = []


def path(name):
    return os.path.join(WORK, name)


def run(cmd, expect=0, timeout=300):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV)
    if (expect == 0) != (r.returncode == 0):
        print("FAILED (exit %d):" % r.returncode, " ".join(cmd), "\n", r.stdout[-3000:], r.stderr[-3000:])
        sys.exit(1)
    return r


def mpi(k, args, **kw):
    return run(MPIRUN + ["-np", str(k), BIN] + args + ["--model-parallel", "--mp-timeout", "60"], **kw)


def worst(got, ref):
    g, _ = st.load(got)
    r, _ = st.load(ref)
    if set(g) != set(r):
        return float("inf"), "names differ: %s vs %s" % (sorted(g), sorted(r))
    return max((rel_err(g[k].astype(np.float64), r[k].astype(np.float64)), k) for k in r)


def check(label, err_name, bound=1e-4):
    err, name = err_name
    ok = err <= bound
    print("%-62s %s  largest relative error %.2e (%s)" % (label, "ok  " if ok else "FAIL", err, name))
    if not ok:
        failures.append(label)


# --- fixtures: weights and batches ------------------------------------------------------
rng = np.random.default_rng(7)


def rnn_weights(name, cell, layers, I=3, H=5, C=4, P=0):
    G = {"rnn": 1, "gru": 3, "lstm": 4}[cell]
    O = P or H  # rows of h: the LSTM's projection (proj_size P), if any
    t = {}
    for l in range(layers):
        t[f"rnn.weight_ih_l{l}"] = rng.uniform(-0.5, 0.5, (G * H, I if l == 0 else O))
        t[f"rnn.weight_hh_l{l}"] = rng.uniform(-0.5, 0.5, (G * H, O))
        t[f"rnn.bias_ih_l{l}"] = rng.uniform(-0.5, 0.5, (G * H,))
        t[f"rnn.bias_hh_l{l}"] = rng.uniform(-0.5, 0.5, (G * H,))
        if P:
            t[f"rnn.weight_hr_l{l}"] = rng.uniform(-0.5, 0.5, (P, H))
    t["head.weight"] = rng.uniform(-0.5, 0.5, (C, O))
    t["head.bias"] = rng.uniform(-0.5, 0.5, (C,))
    st.save(path(name), {k: v.astype(np.float32) for k, v in t.items()}, {"bppsa.cell": cell})


def batch(name, shape, classes):
    st.save(path(name), {"x": rng.standard_normal(shape).astype(np.float32),
                         "y": rng.integers(0, classes, (shape[0],)).astype(np.int64)})


CNN_ARCH = "conv:4:3:1:1,relu,maxpool:2:2,conv:6:3:1:1,tanh,avgpool:2:2,flatten,linear:12,relu,linear:10"


def cnn_weights(name):
    shapes = {"0": ((4, 2, 3, 3), 4), "3": ((6, 4, 3, 3), 6), "7": ((12, 24), 12), "9": ((10, 12), 10)}
    t = {}
    for k, (w, b) in shapes.items():
        t[k + ".weight"] = rng.uniform(-0.4, 0.4, w).astype(np.float32)
        t[k + ".bias"] = rng.uniform(-0.4, 0.4, (b,)).astype(np.float32)
    st.save(path(name), t, {"bppsa.arch": CNN_ARCH, "bppsa.input": "2x8x8", "bppsa.model": "cnn"})


rnn_weights("gru2.safetensors", "gru", 2)
rnn_weights("lstm1.safetensors", "lstm", 1)
batch("seq.safetensors", (6, 16, 3), 4)
cnn_weights("cnn.safetensors")
batch("img.safetensors", (6, 2, 8, 8), 10)
rnn_weights("lstm2p.safetensors", "lstm", 2, P=2)

# --- 1. gradients against single-process BP --------------------------------------------
MODELS = [("gru", "gru2.safetensors", "seq.safetensors", "stacked GRU (2 layers, T=16)"),
          ("lstm", "lstm1.safetensors", "seq.safetensors", "LSTM (T=16)"),
          ("cnn", "cnn.safetensors", "img.safetensors", "CNN (10 layers)"),
          ("lstm", "lstm2p.safetensors", "seq.safetensors", "stacked LSTM with proj 2 (2 layers, T=16)")]
VARIANTS = [  # (ranks, backward, scan, replicas, micro-batches)
    (1, "bppsa", "doubling", 1, 1), (2, "bp", "doubling", 1, 1), (2, "bppsa", "doubling", 1, 1),
    (3, "bppsa", "blelloch", 1, 1), (3, "bp", "doubling", 1, 2), (4, "bppsa", "doubling", 1, 1),
    (4, "bppsa", "blelloch", 1, 3), (4, "bppsa", "doubling", 2, 1), (8, "bp", "doubling", 1, 1),
    (8, "bppsa", "doubling", 1, 1), (8, "bppsa", "blelloch", 1, 2), (8, "bppsa", "doubling", 2, 1)]
for model, w, b, label in MODELS:
    tag = w.split(".")[0]
    ref = path(f"ref_{tag}.safetensors")
    run([BIN, "grad", "--model", model, "--weights", path(w), "--batch", path(b), "--out", ref, "--backward", "bp"])
    for k, backward, scan, replicas, micro in VARIANTS:
        out = path(f"g_{tag}_{k}_{backward}_{scan}_{replicas}_{micro}.safetensors")
        mpi(k, ["grad", "--model", model, "--weights", path(w), "--batch", path(b), "--out", out,
                "--mp-backward", backward, "--mp-scan", scan, "--replicas", str(replicas),
                "--micro-batches", str(micro)])
        check(f"{label}: K={k} {backward}" + (f" {scan}" if backward == "bppsa" else "") +
              f", {k // replicas} stages × {replicas}, {micro} micro", worst(out, ref))

# --- 2. training, checkpoints across rank counts ----------------------------------------
MNIST = fake_mnist(path("idx"))  # a small MNIST-format set of IDX files
SEQ = ["--model", "gru", "--hidden", "6", "--layers", "2", "--data", "bitstream", "--steps", "12", "--samples", "96",
       "--epochs", "1", "--batch", "8", "--lr", "0.01", "--no-progress", "--seed", "5"]
CNN = ["--model", "cnn", "--arch", "conv:4:3:1:1,relu,maxpool:4:4,conv:4:3:1:1,relu,maxpool:2:2,flatten,linear:10",
       "--data", "mnist", "--data-dir", MNIST, "--limit-train", "64", "--limit-test", "32", "--epochs", "1",
       "--batch", "16", "--lr", "0.003", "--no-progress", "--seed", "5"]
for name, args, k in [("gru", SEQ, 3), ("cnn", CNN, 4)]:
    single, multi = path(f"single_{name}.safetensors"), path(f"mp_{name}.safetensors")
    run([BIN, "train"] + args + ["--backward", "bp", "--save", single])
    r = mpi(k, ["train"] + args + ["--save", multi, "--micro-batches", "2"])
    if name == "cnn":  # the first line says which data set was read, and how much of it
        first = (r.stderr.splitlines() or [""])[0]
        want = f"data: IDX data in {MNIST}: 64 train + 24 test images (the first of 96 + 24), 1×32×32"
        print("%-62s %s" % (f"{name}: the first line names the data set", "ok" if first.startswith(want) else "FAIL"))
        if not first.startswith(want):
            print("  got:", first)
            failures.append(name + " first line")
    check(f"{name}: {k}-rank bppsa epoch vs single-process epoch (weights)", worst(multi, single))
    # The K-rank checkpoint in a 1-rank run, and a 1-rank checkpoint back in a K-rank run.
    back = path(f"back_{name}.safetensors")
    run([BIN, "train"] + args + ["--init", multi, "--save", back, "--backward", "bp"])
    r = mpi(2, ["train"] + args + ["--init", back, "--check", "--mp-backward", "bppsa", "--mp-scan", "blelloch"])
    ok = "gradient check" in r.stdout
    print("%-62s %s" % (f"{name}: 1-rank checkpoint continues in a 2-rank run with --check", "ok" if ok else "FAIL"))
    if not ok:
        failures.append(name + " --check")


# --- 3. failures end the job --------------------------------------------------------------
def ranks_of(proc):
    """PIDs of the bppsa ranks under an mpirun process."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,comm"], capture_output=True, text=True).stdout.split("\n")[1:]
    children = {}
    for line in out:
        parts = line.split()
        if len(parts) >= 3:
            children.setdefault(int(parts[1]), []).append((int(parts[0]), parts[2]))
    found, todo = [], [proc.pid]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            todo.append(pid)
            if comm == "bppsa":
                found.append(pid)
    return found


LONG = ["train", "--model", "gru", "--hidden", "6", "--data", "bitstream", "--steps", "40", "--samples", "4000",
        "--epochs", "100000", "--batch", "8", "--no-progress", "--model-parallel"]
for label, sig, timeout_flag in [("a rank killed (SIGKILL) mid-run", signal.SIGKILL, "60"),
                                 ("a rank that stops answering (SIGSTOP)", signal.SIGSTOP, "5")]:
    p = subprocess.Popen(MPIRUN + ["-np", "4", BIN] + LONG + ["--mp-timeout", timeout_flag], env=ENV,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = []
    for _ in range(100):
        time.sleep(0.2)
        pids = ranks_of(p)
        if len(pids) == 4:
            break
    time.sleep(3)  # training under way (100000 epochs: minutes; the job is ended below)
    t0 = time.time()
    os.kill(sorted(pids)[2], sig)
    try:
        out, err = p.communicate(timeout=90)
        ended = time.time() - t0
        ok = p.returncode != 0
        if sig == signal.SIGSTOP:
            ok = ok and "timed out" in err
        print("%-62s %s  (exit %d after %.1f s)" % (label, "ok  " if ok else "FAIL", p.returncode, ended))
        if not ok:
            print(err[-2000:])
            failures.append(label)
    except subprocess.TimeoutExpired:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.kill()
        print("%-62s FAIL  (the job hung)" % label)
        failures.append(label)

# Ranks started with different flags (MPMD): the handshake names the difference.
common = ["grad", "--model", "gru", "--weights", path("gru2.safetensors"), "--batch", path("seq.safetensors"),
          "--out", path("mismatch.safetensors"), "--model-parallel", "--mp-timeout", "30"]
r = run(MPIRUN + ["-np", "1", BIN] + common + ["--mp-backward", "bp", ":", "-np", "1", BIN] + common +
        ["--mp-backward", "bppsa"], expect=1)
ok = "different configurations" in r.stderr
print("%-62s %s" % ("ranks started with different flags", "ok" if ok else "FAIL"))
if not ok:
    print(r.stderr[-2000:])
    failures.append("mismatch")

if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("all model-parallel checks passed")
