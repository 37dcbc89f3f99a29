#!/usr/bin/env python3
"""PyTorch's half of the CNN pruning benchmark: the same (pruned) network, initial weights,
data, sample order and hyperparameters as bench_cnn (read from the folder `bench_cnn export`
wrote), timed and trained the same way. One JSON object on stdout.

  torch_cnn.py time  --dir D --threads 2 --reps 5 --warmup 2 --batch 16
  torch_cnn.py train --dir D --threads 2 --epochs 3 --batch 16 --lr 1e-3

The folder D:
  init.safetensors   initial weights under nn.Sequential names ("0.weight", "0.bias", ...);
                     metadata "bppsa.arch" (architecture string, tests/common/torch_models.py's
                     `sequential`) and "bppsa.input" ("CxHxW", e.g. "1x32x32")
  data.safetensors   x_train F32 [N,C,H,W], y_train I64 [N], x_test F32 [M,C,H,W],
                     y_test I64 [M] (already normalised)
  order.safetensors  epoch_1 ... epoch_E: I64 [N], the training sample order of each epoch
                     (batches are consecutive slices of it, the last one partial)

Pruning masks: (initial weight != 0) for the ".weight" tensor of every Conv2d and Linear
layer; biases are never pruned.

Definitions as bench_cnn's: forward = model(x) and the cross-entropy up to the loss value
(loss.item()); backward = loss.backward() (every parameter gradient). zero_grad runs before
the forward clock starts and is part of neither phase.

time:  x, y = the first B samples of epoch_1's order; W warm-up then R timed iterations of
       forward + backward (no optimizer step: the weights do not change). Reports forward and
       backward {median, min, max, samples} in seconds and the first iteration's loss.
train: Adam(lr) (PyTorch's defaults otherwise); per step zero_grad, forward, backward, the
       gradients of pruned weights multiplied by their mask (so Adam's moments stay 0 there),
       step, the weights multiplied by their mask. After each epoch: test loss and accuracy
       (batches of 256). Per epoch: train_loss (mean over samples), train_accuracy (of the
       predictions made during the training forward passes), test_loss, test_accuracy,
       seconds (wall time of the epoch's training steps, evaluation excluded; eval_seconds is
       that), forward_seconds and backward_seconds (sums over the steps). At the end the
       fraction of prunable weights that are exactly zero, which must equal the initial one."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "common"))
import safetensors_np as st  # noqa: E402
from torch_models import sequential  # noqa: E402

PROG = "torch_cnn"
EVAL_BATCH = 256


def fail(msg):
    sys.exit(f"{PROG}: {msg}")


def stats(v):
    s = sorted(v)
    n = len(s)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"median": med, "min": s[0], "max": s[-1], "samples": v}


def read(d, name):
    path = os.path.join(d, name)
    if not os.path.isfile(path):
        fail(f"{path} is missing; run `bench_cnn export` into {d} first")
    try:
        return st.load(path)
    except Exception as e:  # truncated file, bad header, unsupported dtype
        fail(f"cannot read {path}: {e}")


def need(tensors, name, path, dtype, ndim):
    if name not in tensors:
        fail(f"{path} has no tensor {name!r} (has: {', '.join(sorted(tensors)) or 'none'})")
    a = tensors[name]
    if a.dtype != dtype or a.ndim != ndim:
        fail(f"{path}: {name} is {a.dtype} with {a.ndim} dimensions, expected {np.dtype(dtype)} with {ndim}")
    return a


def parse_input(s):
    try:
        c, h, w = (int(v) for v in s.lower().split("x"))
    except ValueError:
        fail(f"init.safetensors: metadata bppsa.input is {s!r}, expected CxHxW (e.g. 1x32x32)")
    return c, h, w


class Bench:
    """Model, masks, data and sample orders of one exported folder."""

    def __init__(self, d):
        weights, meta = read(d, "init.safetensors")
        for k in ("bppsa.arch", "bppsa.input"):
            if k not in meta:
                fail(f"{d}/init.safetensors has no metadata {k!r}")
        self.arch, self.input = meta["bppsa.arch"], meta["bppsa.input"]
        in_shape = parse_input(self.input)
        try:
            self.model = sequential(self.arch, in_shape)
        except (ValueError, IndexError, RuntimeError) as e:
            fail(f"architecture {self.arch!r} on input {self.input}: {e}")
        try:
            self.model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=True)
        except RuntimeError as e:
            fail(f"{d}/init.safetensors does not match {self.arch!r}: {e}")
        # Masks of every conv / linear weight, keyed by parameter.
        self.masks = []
        for m in self.model:
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                self.masks.append((m.weight, (m.weight.detach() != 0).to(m.weight.dtype)))

        data, _ = read(d, "data.safetensors")
        p = f"{d}/data.safetensors"
        self.x_train = torch.from_numpy(need(data, "x_train", p, np.float32, 4))
        self.y_train = torch.from_numpy(need(data, "y_train", p, np.int64, 1))
        self.x_test = torch.from_numpy(need(data, "x_test", p, np.float32, 4))
        self.y_test = torch.from_numpy(need(data, "y_test", p, np.int64, 1))
        for x, y, what in ((self.x_train, self.y_train, "train"), (self.x_test, self.y_test, "test")):
            if x.shape[0] != y.shape[0]:
                fail(f"{p}: x_{what} has {x.shape[0]} samples, y_{what} {y.shape[0]}")
            if tuple(x.shape[1:]) != in_shape:
                fail(f"{p}: x_{what} samples are {list(x.shape[1:])}, bppsa.input says {self.input}")
        self.n = int(self.x_train.shape[0])
        if self.n == 0:
            fail(f"{p}: x_train is empty")

        self.orders, _ = read(d, "order.safetensors")
        self.order_path = f"{d}/order.safetensors"

    def order(self, epoch):
        o = need(self.orders, f"epoch_{epoch}", self.order_path, np.int64, 1)
        if o.shape[0] != self.n:
            fail(f"{self.order_path}: epoch_{epoch} has {o.shape[0]} entries, x_train {self.n} samples")
        if o.min() < 0 or o.max() >= self.n:
            fail(f"{self.order_path}: epoch_{epoch} indexes outside [0, {self.n})")
        return torch.from_numpy(o)

    def zero_fraction(self):
        zeros = sum(int((w.detach() == 0).sum()) for w, _ in self.masks)
        total = sum(w.numel() for w, _ in self.masks)
        return zeros / total if total else 0.0

    def header(self, args):
        return {"impl": "pytorch", "torch": torch.__version__, "threads": args.threads, "batch": args.batch,
                "arch": self.arch, "input": self.input, "train_samples": self.n,
                "test_samples": int(self.x_test.shape[0])}


def run_time(args, b):
    if args.batch > b.n:
        fail(f"--batch {args.batch} but only {b.n} training samples")
    idx = b.order(1)[:args.batch]
    x, y = b.x_train[idx], b.y_train[idx]
    model = b.model
    fw, bw, loss0 = [], [], None
    for r in range(args.warmup + args.reps):
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        lv = loss.item()  # the loss value: forward ends here, as in bppsa
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        if loss0 is None:
            loss0 = lv
        if r >= args.warmup:
            fw.append(t1 - t0)
            bw.append(t2 - t1)
    out = b.header(args)
    out.update({"reps": args.reps, "warmup": args.warmup, "loss": loss0, "forward": stats(fw),
                "backward": stats(bw)})
    print(json.dumps(out))


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    loss, correct = 0.0, 0
    for s in range(0, x.shape[0], EVAL_BATCH):
        logits = model(x[s:s + EVAL_BATCH])
        yb = y[s:s + EVAL_BATCH]
        loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += int((logits.argmax(1) == yb).sum())
    model.train()
    m = max(1, x.shape[0])
    return loss / m, correct / m


def run_train(args, b):
    orders = [b.order(e) for e in range(1, args.epochs + 1)]  # every epoch's order checked up front
    model = b.model
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    z0 = b.zero_fraction()
    epochs = []
    for e, order in enumerate(orders, start=1):
        fw = bw = 0.0
        loss_sum, correct, steps = 0.0, 0, 0
        start = time.perf_counter()
        for s in range(0, b.n, args.batch):
            idx = order[s:s + args.batch]
            xb, yb = b.x_train[idx], b.y_train[idx]
            opt.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            lv = loss.item()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            fw += t1 - t0
            bw += t2 - t1
            with torch.no_grad():
                for w, mask in b.masks:
                    if w.grad is not None:
                        w.grad.mul_(mask)
                opt.step()
                for w, mask in b.masks:
                    w.mul_(mask)
                correct += int((logits.argmax(1) == yb).sum())
            loss_sum += lv * len(idx)
            steps += 1
        seconds = time.perf_counter() - start
        t = time.perf_counter()
        test_loss, test_acc = evaluate(model, b.x_test, b.y_test)
        epochs.append({"epoch": e, "steps": steps, "train_loss": loss_sum / b.n, "train_accuracy": correct / b.n,
                       "test_loss": test_loss, "test_accuracy": test_acc, "seconds": seconds,
                       "forward_seconds": fw, "backward_seconds": bw, "eval_seconds": time.perf_counter() - t})
    z1 = b.zero_fraction()
    if z1 != z0:
        print(f"{PROG}: warning: zero fraction {z0} before training, {z1} after", file=sys.stderr)
    out = b.header(args)
    out.update({"lr": args.lr, "epochs": epochs, "zero_fraction_start": z0, "zero_fraction_end": z1})
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["time", "train"])
    p.add_argument("--dir", required=True, help="folder `bench_cnn export` wrote")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    if args.reps < 1 or args.warmup < 0 or args.threads < 1 or args.batch < 1 or args.epochs < 1:
        p.error("--reps, --threads, --batch and --epochs must be ≥ 1, --warmup ≥ 0")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if not os.path.isdir(args.dir):
        fail(f"{args.dir} is not a folder; run `bench_cnn export` into it first")
    b = Bench(args.dir)
    (run_time if args.mode == "time" else run_train)(args, b)


if __name__ == "__main__":
    main()
