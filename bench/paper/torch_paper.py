#!/usr/bin/env python3
"""PyTorch's half of the paper-reproduction benchmark: the same model, initial weights,
data and hyperparameters as bench_paper (read from the files its --export wrote), timed and
measured the same way. JSON on stdout.

  torch_paper.py time  --dir D --cell rnn --threads 2 --reps 5 --warmup 2 --lr 3e-5 [--device cpu|cuda]
  torch_paper.py curve --dir D --cell rnn --threads 2 --iters N --batch B --log-every K --lr 3e-5

Definitions as bench_paper's: forward = model(x) and the cross-entropy up to the loss value;
backward = loss.backward() (every parameter gradient); optimizer = Adam's step (and
zero_grad). Memory: growth of VmHWM during the first backward of a fresh process (the
counter reset through /proc/self/clear_refs after malloc_trim), as bench_paper measures it;
on CUDA, torch.cuda.max_memory_allocated growth instead. CUDA timings use CUDA events."""
import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "common"))
import safetensors_np as st  # noqa: E402
from torch_models import Model  # noqa: E402

_LIBC = ctypes.CDLL("libc.so.6")


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def reset_peak():
    _LIBC.malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_bytes("VmRSS")


def stats(v):
    s = sorted(v)
    n = len(s)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"median": med, "min": s[0], "max": s[-1], "samples": v}


class Timer:
    """Wall clock on the CPU; CUDA events (after a synchronize) on a GPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def elapsed(self, a, b):
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        return b - a


def time_iterations(model, opt, x, y, timer, warmup, reps):
    """Training iterations after the first (the caller's): warmup − 1 untimed, then reps timed, each
    part on its own: forward (to the loss value on the host, as in bppsa), backward and the optimizer's
    step (zero_grad included), and the total. {"forward", "backward", "optimizer", "total": stats}."""
    ce = torch.nn.functional.cross_entropy
    fw, bw, op, total = [], [], [], []
    for r in range(warmup - 1 + reps):
        t0 = timer.mark()
        opt.zero_grad(set_to_none=True)
        loss = ce(model(x), y)
        loss.item()  # the loss value: forward ends here, as in bppsa
        t1 = timer.mark()
        loss.backward()
        t2 = timer.mark()
        opt.step()
        t3 = timer.mark()
        if r < warmup - 1:
            if timer.cuda:
                t3.synchronize()
            continue
        fw.append(timer.elapsed(t0, t1))
        bw.append(timer.elapsed(t1, t2))
        op.append(timer.elapsed(t2, t3))
        total.append(timer.elapsed(t0, t3))
    return {"forward": stats(fw), "backward": stats(bw), "optimizer": stats(op), "total": stats(total)}


def load(args, device):
    for name in ("init.safetensors", "data.safetensors"):
        if not os.path.isfile(os.path.join(args.dir, name)):
            sys.exit(f"torch_step: {args.dir}/{name} is missing; run bench_paper with --export {args.dir} first")
    weights, _ = st.load(os.path.join(args.dir, "init.safetensors"))
    data, _ = st.load(os.path.join(args.dir, "data.safetensors"))
    x, y = data["x"], data["y"]
    i = x.shape[2]
    h = weights["rnn.weight_hh_l0"].shape[1]
    layers = sum(1 for k in weights if k.startswith("rnn.weight_hh_l"))
    c = weights["head.weight"].shape[0]
    model = Model(args.cell, i, h, layers, c)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=True)
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    return model, opt, torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def header(args, x, batch, device):
    return {"impl": "pytorch", "torch": torch.__version__, "device": device.type, "cell": args.cell,
            "steps": int(x.shape[1]), "features": int(x.shape[2]), "batch": int(batch), "threads": args.threads,
            "lr": args.lr}


def run_time(args, device):
    model, opt, x, y = load(args, device)
    ce = torch.nn.functional.cross_entropy
    timer = Timer(device)
    cuda = device.type == "cuda"

    # Memory probe: the first iteration of this fresh process.
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    else:
        start = reset_peak()
    opt.zero_grad(set_to_none=True)
    loss = ce(model(x), y)
    loss0 = loss.item()
    if cuda:
        torch.cuda.synchronize()
        after_fw = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        after_fw = reset_peak()
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = status_bytes("VmHWM")
    opt.step()

    times = time_iterations(model, opt, x, y, timer, args.warmup, args.reps)
    out = header(args, x, x.shape[0], device)
    out.update({"loss0": loss0, "reps": args.reps, "warmup": args.warmup, **times,
                "memory": {"backward_peak_bytes": peak - after_fw, "forward_bytes": after_fw - start,
                           "rss_before_bytes": start}})
    print(json.dumps(out))


def run_curve(args, device):
    model, opt, x, y = load(args, device)
    ce = torch.nn.functional.cross_entropy
    b = args.batch
    if x.shape[0] < args.iters * b:
        sys.exit(f"torch_step: {x.shape[0]} samples exported, {args.iters} iterations of {b} need more")
    clock, running, times, losses, iters = 0.0, 0.0, [], [], []
    for it in range(args.iters):
        xb, yb = x[it * b:(it + 1) * b], y[it * b:(it + 1) * b]
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = ce(model(xb), yb)
        lv = loss.item()
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        clock += time.perf_counter() - t0
        running += lv
        if (it + 1) % args.log_every == 0 or it + 1 == args.iters:
            times.append(clock)
            losses.append(running / ((it % args.log_every) + 1))
            iters.append(it + 1)
            running = 0.0
    out = header(args, x, b, device)
    out.update({"iters": iters, "seconds": times, "loss": losses})
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["time", "curve"])
    p.add_argument("--dir", required=True, help="folder bench_paper --export wrote")
    p.add_argument("--cell", choices=["rnn", "gru", "lstm"], default="rnn")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--lr", type=float, default=3e-5)
    args = p.parse_args()
    if args.reps < 1 or args.warmup < 1 or args.threads < 1:
        p.error("--reps, --warmup and --threads must be ≥ 1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_step: --device cuda but torch.cuda.is_available() is False")
    (run_time if args.mode == "time" else run_curve)(args, device)


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
