"""How many Newton iterations the certified forward takes (docs/method.md §9), against the sequence
length T and against the spectral norm of W_hh, on three models at initialisation and after training:

- the paper's bitstream RNN (tanh, 1 input bit a step, H 20; label p in 0..9, bits Bernoulli(0.05 + 0.1 p),
  as src/data/bitstream.cpp draws them);
- a GRU of IRMAS's shape (12 standardised features a step, H 20, 11 classes). IRMAS's audio is not on
  this machine: its features are synthetic, N(μ_c, 1) with a per-class mean μ_c of norm 1, so that
  training has something to learn;
- Fashion-MNIST's GRU over rows (28 rows of 28 pixels in [0, 1], H 128; Debian's dataset-fashion-mnist),
  at its T 28 only.

Each model is a bppsa.nn module plus a Linear head on the last step, trained with Adam (lr 2e-3,
--train-steps steps of batch 64, sequential forward, BP backward) on its task at T 100 (Fashion-MNIST:
28). Then, without gradients, batch --batch: forward='newton' at each T of --steps (the bitstream
and IRMAS models), and at T 1000 (Fashion-MNIST: 28) with W_hh scaled to each spectral norm of
--norms (1.0 after scaling is not the trained matrix: the trained one is the row "trained"). Each row:
the iterations of the certified forward (the largest over the layer's report), its residual, whether
it fell back, the Newton and the sequential forward's times (median of --reps), and the largest
difference from the sequential forward's output.

Writes OUT/convergence.jsonl, OUT/convergence.md and OUT/convergence.png."""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import time

import numpy as np
import torch

import bppsa

FASHION = "/usr/share/datasets/fashion-mnist"


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", nargs="+", default=["bitstream-rnn", "irmas-gru", "fashion-gru"],
                    choices=["bitstream-rnn", "irmas-gru", "fashion-gru"])
    ap.add_argument("--steps", nargs="+", type=int, default=[10, 100, 1000, 10000])
    ap.add_argument("--norms", nargs="+", type=float, default=[0.5, 1.0, 1.5, 2.0, 3.0, 4.0])
    ap.add_argument("--norm-steps", type=int, default=1000, help="T of the spectral-norm rows (Fashion-MNIST: 28)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--train-steps", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args(argv)
    for name in ("batch", "reps", "threads", "norm_steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be ≥ 1")
    if a.train_steps < 0 or any(t < 1 for t in a.steps) or any(n <= 0 for n in a.norms):
        ap.error("--train-steps ≥ 0, --steps ≥ 1 and --norms > 0")
    if "fashion-gru" in a.models and not os.path.isdir(FASHION):
        ap.error(f"--models fashion-gru: {FASHION} is missing; install Debian's dataset-fashion-mnist or leave it out")
    return a


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


class Task:
    """A model's data: sample(n, T) → (x (n, T, I) float32, y (n,) int64)."""

    def __init__(self, name, rng):
        self.name, self.rng = name, rng
        if name == "bitstream-rnn":
            self.cell, self.input, self.hidden, self.classes, self.train_T = "RNN", 1, 20, 10, 100
        elif name == "irmas-gru":
            self.cell, self.input, self.hidden, self.classes, self.train_T = "GRU", 12, 20, 11, 100
            mu = rng.standard_normal((11, 12))
            self.mu = mu / np.linalg.norm(mu, axis=1, keepdims=True)
        else:
            self.cell, self.input, self.hidden, self.classes, self.train_T = "GRU", 28, 128, 10, 28
            self.images = read_idx(f"{FASHION}/train-images-idx3-ubyte.gz").astype(np.float32) / 255
            self.labels = read_idx(f"{FASHION}/train-labels-idx1-ubyte.gz").astype(np.int64)

    def sample(self, n, T):
        r = self.rng
        if self.name == "bitstream-rnn":
            y = r.integers(0, 10, n)
            x = (r.random((n, T, 1)) < (0.05 + 0.1 * y)[:, None, None]).astype(np.float32)
        elif self.name == "irmas-gru":
            y = r.integers(0, 11, n)
            x = (r.standard_normal((n, T, 12)) + self.mu[y][:, None, :]).astype(np.float32)
        else:
            idx = r.integers(0, len(self.labels), n)
            x, y = self.images[idx], self.labels[idx]
        return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.asarray(y, np.int64))


def timed(fn, reps):
    out, times = None, []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return out, statistics.median(times)


def measure(rnn, x, reps):
    """Newton against sequential on x, no gradients: the report and both times."""
    with torch.no_grad():
        rnn.set_forward("sequential")
        want, seq_ms = timed(lambda: rnn(x)[0], reps)
        rnn.set_forward("newton")
        got, newton_ms = timed(lambda: rnn(x)[0], reps)
    reports = [r for r in rnn.last_forward if r is not None]
    return {"iterations": max(r["iterations"] for r in reports),
            "residual": max(r["residual"] for r in reports),
            "fell_back": any(r["fell_back"] for r in reports),
            "fallback_step": max(r["fallback_step"] for r in reports),
            "newton_ms": newton_ms, "sequential_ms": seq_ms,
            "max_abs_diff": float((got - want).abs().max())}


def spectral_norm(w):
    return float(torch.linalg.matrix_norm(w.detach().double(), ord=2))


def main(argv=None):
    a = parse(argv)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    rows, accuracies = [], {}
    for name in a.models:
        task = Task(name, rng)
        rnn = getattr(bppsa.nn, task.cell)(task.input, task.hidden, batch_first=True, backward="bp",
                                           threads=a.threads)
        head = torch.nn.Linear(task.hidden, task.classes)
        opt = torch.optim.Adam(list(rnn.parameters()) + list(head.parameters()), lr=2e-3)
        for state in ("initialisation", "trained"):
            if state == "trained":
                rnn.set_forward("sequential")
                for _ in range(a.train_steps):
                    x, y = task.sample(64, task.train_T)
                    loss = torch.nn.functional.cross_entropy(head(rnn(x)[0][:, -1]), y)
                    opt.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(list(rnn.parameters()) + list(head.parameters()), 1.0)
                    opt.step()
                with torch.no_grad():
                    x, y = task.sample(512, task.train_T)
                    accuracy = float((head(rnn(x)[0][:, -1]).argmax(1) == y).float().mean())
                print(f"{name}: {a.train_steps} Adam steps, last loss {loss.item():.3f}, accuracy on 512 fresh "
                      f"samples {accuracy:.3f}", flush=True)
                accuracies[name] = accuracy
            lengths = [28] if name == "fashion-gru" else a.steps
            for T in lengths:
                x, _ = task.sample(a.batch, T)
                row = {"model": name, "state": state, "steps": T, "batch": a.batch, "hidden": task.hidden,
                       "threads": a.threads, "w_hh_norm": spectral_norm(rnn.weight_hh_l0), "scaled": False}
                row.update(measure(rnn, x, a.reps))
                rows.append(row)
                print(json.dumps(row), flush=True)
            T = 28 if name == "fashion-gru" else a.norm_steps
            x, _ = task.sample(a.batch, T)
            original = rnn.weight_hh_l0.detach().clone()
            for norm in a.norms:
                with torch.no_grad():
                    rnn.weight_hh_l0.copy_(original * (norm / spectral_norm(original)))
                row = {"model": name, "state": state, "steps": T, "batch": a.batch, "hidden": task.hidden,
                       "threads": a.threads, "w_hh_norm": norm, "scaled": True}
                row.update(measure(rnn, x, a.reps))
                rows.append(row)
                print(json.dumps(row), flush=True)
            with torch.no_grad():
                rnn.weight_hh_l0.copy_(original)
    with open(os.path.join(a.out, "convergence.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    write_md(a, rows, accuracies)
    plot(a, rows)


def write_md(a, rows, accuracies):
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    lines = ["# Newton's convergence against T and the spectral norm of W_hh (bench/newton/convergence.py)", "",
             f"bppsa {bppsa.__version__} at {commit}, {os.cpu_count()} cores, torch {torch.__version__}, {a.threads} thread(s), batch {a.batch}, "
             f"{a.train_steps} Adam steps of training (accuracy then, on 512 fresh samples: "
             + ", ".join(f"{m} {v:.3f}" for m, v in accuracies.items())
             + f"); forward only, float32, median of {a.reps}", "",
             "| model | state | T | ‖W_hh‖₂ | scaled | iterations | residual | fell back | newton ms | sequential ms "
             "| newton / sequential | max |newton − sequential| |",
             "|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['state']} | {r['steps']} | {r['w_hh_norm']:.2f} | "
                     f"{'yes' if r['scaled'] else 'no'} | {r['iterations']} | {r['residual']:.2g} | "
                     f"{'yes (step ' + str(r['fallback_step']) + ')' if r['fell_back'] else 'no'} | "
                     f"{r['newton_ms']:.2f} | {r['sequential_ms']:.2f} | {r['newton_ms'] / r['sequential_ms']:.1f}× | "
                     f"{r['max_abs_diff']:.2g} |")
    with open(os.path.join(a.out, "convergence.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(a, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name in a.models:
        for state, style in (("initialisation", "--"), ("trained", "-")):
            pts = [r for r in rows if r["model"] == name and r["state"] == state and not r["scaled"]]
            if len(pts) > 1:
                left.plot([r["steps"] for r in pts], [r["iterations"] for r in pts], style, marker="o",
                          label=f"{name}, {state}")
            pts = [r for r in rows if r["model"] == name and r["state"] == state and r["scaled"]]
            right.plot([r["w_hh_norm"] for r in pts], [r["iterations"] for r in pts], style, marker="o",
                       label=f"{name}, {state}")
    for ax, scaled, key in ((left, False, "steps"), (right, True, "w_hh_norm")):
        bad = [r for r in rows if r["fell_back"] and r["scaled"] == scaled]
        if bad:
            ax.scatter([r[key] for r in bad], [r["iterations"] for r in bad], marker="x", s=90, c="black", zorder=3,
                       label="fell back: the iteration stopped (NaN or 30 iterations), sequential forward")
    left.set_xscale("log")
    left.set_xlabel("sequence length T")
    left.set_ylabel("Newton iterations to the certificate")
    left.set_title("against T")
    right.set_xlabel("spectral norm of W_hh (scaled)")
    right.set_title(f"against ‖W_hh‖₂ (T {a.norm_steps}; Fashion-MNIST T 28)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "convergence.png"), dpi=120)


if __name__ == "__main__":
    main()
