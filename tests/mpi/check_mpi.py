"""Model parallelism across MPI ranks (mpirun --oversubscribe on loopback), against
independent references:

1. gradients: `mpirun -np K bppsa grad --model-parallel` (bp pipeline, bppsa with doubling
   and Blelloch, micro-batches, replicas) equals single-process `bppsa grad --backward bp`
   for K in {1, 2, 3, 4, 8}, on a stacked GRU, an LSTM, a stacked LSTM with a projection and
   a CNN with every operator kind (relative 1e-4, float32); and on a batch whose samples have
   different lengths (a `lengths` tensor), for the recurrent models, where samples end on
   every rank, at a stage boundary, and a whole micro-batch ends before the later ranks;
2. training: a model-parallel epoch leaves the same weights as a single-process epoch from the
   same seed (same batches, same optimizer), also on samples of different lengths (--min-steps)
   with the head on the last step and on every step, its checkpoint loads into a 1-rank run,
   and a 1-rank checkpoint continues in a K-rank run with --check; the K-rank run reports its
   epoch as a single process does (one loop for every mode: the same epoch line, with the
   training accuracy, and the same log record);
3. failures end the job instead of hanging: a rank killed mid-run, a rank that stops
   answering (SIGSTOP; the others time out), and ranks started with different flags.

usage: check_mpi.py BPPSA_BINARY WORKDIR
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "common"))
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

# --- 1b. samples of different lengths ---------------------------------------------------
# T = 16, 7 samples, lengths in no order (each micro-batch sorts its own). Every K ≥ 2 gives
# each rank at least 2 of the 16 steps, so the samples of length 1 and 2 (samples 2 and 3: the
# whole second micro-batch of 3) end on rank 0 and pass through every later rank with no step
# there; length 8 ends exactly at the K = 2 boundary; 5, 9 and 12 end inside later ranks.
LENGTHS = np.array([5, 16, 2, 1, 8, 16, 12], np.int64)
LEN_X, LEN_Y = rng.standard_normal((7, 16, 3)).astype(np.float32), rng.integers(0, 4, (7,)).astype(np.int64)
st.save(path("seq_len.safetensors"), {"x": LEN_X, "y": LEN_Y, "lengths": LENGTHS})
st.save(path("seq_len_padded.safetensors"), {"x": LEN_X, "y": LEN_Y})  # the same batch, every sample 16 steps
LEN_VARIANTS = [  # (ranks, backward, scan, replicas, micro-batches)
    (2, "bp", "doubling", 1, 1), (2, "bppsa", "doubling", 1, 1), (2, "bppsa", "blelloch", 1, 3),
    (3, "bp", "doubling", 1, 3), (3, "bppsa", "doubling", 1, 2), (3, "bppsa", "blelloch", 1, 3),
    (4, "bppsa", "doubling", 1, 3), (4, "bppsa", "blelloch", 2, 1), (8, "bp", "doubling", 1, 3),
    (8, "bppsa", "doubling", 1, 3), (8, "bppsa", "blelloch", 1, 1)]
for model, w, _, label in MODELS:
    if model == "cnn":
        continue
    tag = w.split(".")[0]
    ref = path(f"ref_len_{tag}.safetensors")
    run([BIN, "grad", "--model", model, "--weights", path(w), "--batch", path("seq_len.safetensors"), "--out", ref,
         "--backward", "bp"])
    # The lengths must matter: the same batch without them (steps past a length hold random
    # inputs) gives other gradients, so a run that ignored them would fail the checks below.
    padded = path(f"ref_padded_{tag}.safetensors")
    run([BIN, "grad", "--model", model, "--weights", path(w), "--batch", path("seq_len_padded.safetensors"), "--out",
         padded, "--backward", "bp"])
    differ, _ = worst(padded, ref)
    print("%-62s %s  largest relative difference %.2e" % (f"{label}: lengths change the gradients",
                                                          "ok  " if differ > 1e-2 else "FAIL", differ))
    if not differ > 1e-2:
        failures.append(label + " lengths ignored")
    for k, backward, scan, replicas, micro in LEN_VARIANTS:
        out = path(f"g_len_{tag}_{k}_{backward}_{scan}_{replicas}_{micro}.safetensors")
        mpi(k, ["grad", "--model", model, "--weights", path(w), "--batch", path("seq_len.safetensors"), "--out", out,
                "--mp-backward", backward, "--mp-scan", scan, "--replicas", str(replicas),
                "--micro-batches", str(micro)])
        check(f"{label}, lengths 1..16: K={k} {backward}" + (f" {scan}" if backward == "bppsa" else "") +
              f", {k // replicas} stages × {replicas}, {micro} micro", worst(out, ref))
# Invalid lengths are refused, naming the file and the fix; a CNN takes none.
st.save(path("bad_len.safetensors"), {"x": np.zeros((2, 16, 3), np.float32), "y": np.zeros(2, np.int64),
                                      "lengths": np.array([16, 17], np.int64)})
r = mpi(2, ["grad", "--model", "gru", "--weights", path("gru2.safetensors"), "--batch", path("bad_len.safetensors"),
            "--out", path("bad.safetensors")], expect=1)
ok = "outside 1..16" in r.stderr and "bad_len.safetensors" in r.stderr
print("%-62s %s" % ("a length past the batch's steps is refused (2 ranks)", "ok" if ok else "FAIL"))
if not ok:
    print(r.stderr[-2000:])
    failures.append("bad lengths")
st.save(path("img_len.safetensors"), {"x": np.zeros((2, 2, 8, 8), np.float32), "y": np.zeros(2, np.int64),
                                      "lengths": np.array([1, 1], np.int64)})
r = run([BIN, "grad", "--model", "cnn", "--weights", path("cnn.safetensors"), "--batch", path("img_len.safetensors"),
         "--out", path("bad.safetensors"), "--model-parallel"], expect=1)
ok = "does not take" in r.stderr
print("%-62s %s" % ("a CNN batch with lengths is refused", "ok" if ok else "FAIL"))
if not ok:
    print(r.stderr[-2000:])
    failures.append("cnn lengths")

# --- 2. training, checkpoints across rank counts ----------------------------------------
MNIST = fake_mnist(path("idx"))  # a small MNIST-format set of IDX files
SEQ = ["--model", "gru", "--hidden", "6", "--layers", "2", "--data", "bitstream", "--steps", "12", "--samples", "96",
       "--epochs", "1", "--batch", "8", "--lr", "0.01", "--no-progress", "--seed", "5"]
CNN = ["--model", "cnn", "--arch", "conv:4:3:1:1,relu,maxpool:4:4,conv:4:3:1:1,relu,maxpool:2:2,flatten,linear:10",
       "--data", "mnist", "--data-dir", MNIST, "--limit-train", "64", "--limit-test", "32", "--epochs", "1",
       "--batch", "16", "--lr", "0.003", "--no-progress", "--seed", "5"]
EPOCH_LINE = re.compile(r"^epoch 1/1  train loss (\S+) acc +(\S+)%  test loss (\S+) acc +(\S+)%  \S+ s \(", re.M)


def same_epoch_report(label, single_run, mp_run, mp_log, samples):
    """One loop for every mode: the K-rank run's epoch line and log record are the
    single-process run's (train loss and accuracy, test loss and accuracy), from the same
    batches; the log adds the rank's gradient all-reduce."""
    got, want = EPOCH_LINE.search(mp_run.stdout), EPOCH_LINE.search(single_run.stdout)
    ok = bool(got and want)
    if ok:
        g, w = [float(v) for v in got.groups()], [float(v) for v in want.groups()]
        # losses to the printed digits; an accuracy to one sample (a prediction on a tie may differ)
        ok = abs(g[0] - w[0]) <= 2e-4 and abs(g[2] - w[2]) <= 2e-4 and abs(g[1] - w[1]) <= 100 / samples[0] + 1e-6 \
            and abs(g[3] - w[3]) <= 100 / samples[1] + 1e-6
    records = [json.loads(line) for line in open(mp_log)] if os.path.exists(mp_log) else []
    epochs = [e for e in records if e.get("event") == "epoch"]
    ok = ok and len(epochs) == 1 and all(key in epochs[0] for key in ["train_accuracy", "reduce_seconds", "samples"])
    if ok and got:
        ok = abs(epochs[0]["train_accuracy"] * 100 - float(got.group(2))) <= 0.006
    print("%-62s %s" % (label, "ok" if ok else "FAIL"))
    if not ok:
        print("  single:", want.group(0) if want else single_run.stdout[-500:])
        print("  model-parallel:", got.group(0) if got else mp_run.stdout[-500:])
        print("  log:", epochs)
        failures.append(label)


for name, args, k in [("gru", SEQ, 3), ("cnn", CNN, 4)]:
    single, multi = path(f"single_{name}.safetensors"), path(f"mp_{name}.safetensors")
    mp_log = path(f"mp_{name}.jsonl")
    rs = run([BIN, "train"] + args + ["--backward", "bp", "--save", single])
    r = mpi(k, ["train"] + args + ["--save", multi, "--micro-batches", "2", "--log", mp_log])
    same_epoch_report(f"{name}: {k}-rank epoch line and log as a single process's", rs, r, mp_log,
                      (61, 35) if name == "gru" else (64, 24))
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

# Samples of different lengths (--min-steps 2: lengths 2..12 over 3 ranks of 4 steps), the head
# on the last step and on every step: a 3-rank epoch (each mode) ends with the single-process
# epoch's weights, and --check compares one batch's gradients with single-process BP.
for head in ["last", "every"]:
    args = SEQ + ["--min-steps", "2", "--head", head]
    single = path(f"single_len_{head}.safetensors")
    r = run([BIN, "train"] + args + ["--backward", "bp", "--save", single])
    lengths_named = "data: bitstream" in r.stderr and "(lengths " in r.stderr
    for backward, scan in [("bp", "doubling"), ("bppsa", "doubling"), ("bppsa", "blelloch")]:
        multi = path(f"mp_len_{head}_{backward}_{scan}.safetensors")
        r = mpi(3, ["train"] + args + ["--save", multi, "--micro-batches", "2", "--mp-backward", backward,
                    "--mp-scan", scan, "--check"])
        # Adam divides by √v: a gradient entry near zero turns float rounding into ~1e-6 of the
        # weights (single-process blelloch against bp differs as much); the bound stays 1e-4.
        check(f"gru, lengths, head {head}: 3-rank {backward} {scan} epoch vs single-process (weights)",
              worst(multi, single))
        m = re.search(r"gradient check .* largest relative error (\S+) \((\S+)\)", r.stdout)
        check(f"gru, lengths, head {head}: 3-rank {backward} --check (one batch's gradients vs bp)",
              (float(m.group(1)), m.group(2)) if m and lengths_named else (float("inf"), "no check, or no lengths"))


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

# A flag that no pipeline option names but that changes the arithmetic (issue 44: ranks on cosine
# and constant schedules trained together): the handshake compares every flag of the command.
common = ["train", "--model", "gru", "--hidden", "4", "--data", "bitstream", "--steps", "8", "--samples", "40",
          "--batch", "8", "--no-progress", "--model-parallel", "--mp-timeout", "30"]
r = run(MPIRUN + ["-np", "1", BIN] + common + ["--lr-schedule", "constant", ":", "-np", "1", BIN] + common +
        ["--lr-schedule", "cosine"], expect=1)
ok = "different configurations" in r.stderr and "--lr-schedule=cosine" in r.stderr
print("%-62s %s" % ("ranks started with different --lr-schedule", "ok" if ok else "FAIL"))
if not ok:
    print(r.stderr[-2000:])
    failures.append("lr-schedule mismatch")

if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("all model-parallel checks passed")
