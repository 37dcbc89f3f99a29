#!/usr/bin/env python3
"""torch.nn.X against bppsa.nn.X (every backward method) in one process, at the paper's shapes:
the RNN (input 1, H 20, Linear 20 → 10 on h_T, batch 16) over T, and the GRU (H 20, Linear
20 → 11, batch 16) at the IRMAS presets s/m/l (F 38/24/12, T 259/517/1034). Same weights and
data on both sides; the first loss must agree.

Two measurements per configuration, each the median of --reps runs after --warmup:
- fwd+bwd: model(x), the cross-entropy and loss.backward() (every parameter gradient);
- step:    a whole optimizer step: zero_grad, forward, loss, backward, Adam's step.
Python overhead included on both sides (this is what a training loop pays).

bppsa's CPU engine computes with subnormal floats flushed to zero (its threads only; see the
README), and a tanh RNN's gradient decays into that range after about a hundred steps, where
x86 arithmetic slows down many times over. torch does not flush by default, so torch.nn is
measured twice: as it comes ("torch.nn") and with torch.set_flush_denormal(True)
("torch.nn FTZ"), the fair baseline for the arithmetic alone.

    scripts/python.sh bench/pytorch/pytorch.py --out DIR [--threads 2] [--reps 9] [--warmup 5] [--quick]

Writes DIR/nn.jsonl (one record per configuration and side), DIR/nn.md (the table with
ratios) and prints the table."""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

import bppsa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # bench/common
from cpuinfo import cpu_model  # noqa: E402

METHODS = ["auto", "blelloch", "hybrid", "bp"]


class Model(torch.nn.Module):
    def __init__(self, family, cell, features, hidden, classes, **kw):
        super().__init__()
        self.rnn = getattr(family, cell)(features, hidden, batch_first=True, **kw)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def paper_batch(c, batch):
    """The data of a configuration: bitstream-like bits for the RNN, Gaussian features for the GRU."""
    gen = torch.Generator().manual_seed(4202)
    x = torch.bernoulli(torch.full((batch, c["steps"], c["features"]), 0.3), generator=gen) \
        if c["cell"] == "RNN" else torch.randn(batch, c["steps"], c["features"], generator=gen)
    return x, torch.randint(0, c["classes"], (batch,), generator=gen)


def parse_args(doc, warmup):
    """The options every torch-side benchmark takes, checked."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--quick", action="store_true", help="a short smoke run (not for figures)")
    args = p.parse_args()
    if args.reps < 1 or args.warmup < 0 or args.threads < 1 or args.batch < 1:
        p.error("--reps, --threads and --batch must be ≥ 1, --warmup ≥ 0")
    torch.set_num_threads(args.threads)  # every side gets the same cores
    os.makedirs(args.out, exist_ok=True)
    return args


def machine_of(args):
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": args.threads, "torch": torch.__version__,
            "bppsa": bppsa.__version__, "python": platform.python_version()}


def write_table_text(path, lines):
    """Writes a results table (its lines) to `path` atomically and prints it."""
    text = "\n".join(lines) + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print(text)


def timed(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "samples": samples}


def agreed_base(config, side, r, base):
    """The first side's result is the base; every later side's first loss must equal its loss (the
    same weights and data), else the run stops."""
    if base is None:
        return r
    if abs(r["first_loss"] - base["first_loss"]) > 1e-5 * max(1.0, abs(base["first_loss"])):
        raise SystemExit(f"{config}: first loss {r['first_loss']} of {side} differs from torch's "
                         f"{base['first_loss']}")
    return base


def measure(model, x, y, reps, warmup):
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    first = loss_fn(model(x), y).item()

    def fwd_bwd():
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()

    state = {k: v.clone() for k, v in model.state_dict().items()}

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    r = {"first_loss": first, "fwd_bwd": timed(fwd_bwd, reps, warmup)}
    r["step"] = timed(step, reps, warmup)
    model.load_state_dict(state)
    return r


def configs(quick):
    rnn_steps = [10, 100, 1000] if quick else [10, 30, 100, 300, 1000, 3000, 10000]
    out = [dict(name=f"RNN T={t}", cell="RNN", features=1, steps=t, hidden=20, classes=10) for t in rnn_steps]
    presets = [("s", 38, 259)] if quick else [("s", 38, 259), ("m", 24, 517), ("l", 12, 1034)]
    out += [dict(name=f"GRU {p} (F={f}, T={t})", cell="GRU", features=f, steps=t, hidden=20, classes=11)
            for p, f, t in presets]
    return out


def main():
    args = parse_args(__doc__, warmup=5)
    if args.quick:
        args.reps, args.warmup = min(args.reps, 3), min(args.warmup, 1)
    machine = machine_of(args)
    records = []
    jsonl = os.path.join(args.out, "nn.jsonl")
    with open(jsonl + ".tmp", "w") as f:
        for c in configs(args.quick):
            x, y = paper_batch(c, args.batch)
            torch.manual_seed(4202)
            ref = Model(torch.nn, c["cell"], c["features"], c["hidden"], c["classes"])
            sides = [("torch.nn", ref), ("torch.nn FTZ", ref)]
            for m in METHODS:
                ours = Model(bppsa.nn, c["cell"], c["features"], c["hidden"], c["classes"], backward=m,
                             threads=args.threads)
                ours.load_state_dict(ref.state_dict())
                sides.append((f"bppsa.nn {m}", ours))
            base = None
            for side, model in sides:
                if not torch.set_flush_denormal(side == "torch.nn FTZ") and side == "torch.nn FTZ":
                    continue  # a CPU without the flush-to-zero mode: no such baseline
                try:
                    r = measure(model, x, y, args.reps, args.warmup)
                finally:
                    torch.set_flush_denormal(False)
                base = agreed_base(c["name"], side, r, base)
                rec = dict(config=c["name"], cell=c["cell"], steps=c["steps"], batch=args.batch, side=side,
                           machine=machine, **r)
                records.append(rec)
                f.write(json.dumps(rec) + "\n")
                f.flush()
                print(f"{c['name']:>24}  {side:<20} fwd+bwd {r['fwd_bwd']['median'] * 1e3:9.2f} ms   "
                      f"step {r['step']['median'] * 1e3:9.2f} ms", flush=True)
    os.replace(jsonl + ".tmp", jsonl)
    write_table(records, machine, os.path.join(args.out, "nn.md"), args)


def write_table(records, machine, path, args):
    lines = [f"# torch.nn vs bppsa.nn on the CPU ({machine['cpu']}, {machine['cores']} cores, "
             f"{machine['threads']} threads on both sides; torch {machine['torch']})", "",
             f"Medians of {args.reps} after {args.warmup} warm-up runs, batch {args.batch}, Python overhead included.",
             "Ratio = torch.nn's time / bppsa.nn's (above 1: bppsa is faster); for auto also against torch.nn FTZ "
             "(torch with subnormals flushed, as bppsa computes).", "",
             "| model | torch.nn step | torch.nn FTZ step | " +
             " | ".join(f"{m} step (ratio)" for m in METHODS) + " | auto vs torch FTZ |",
             "|---|---|---|" + "---|" * len(METHODS) + "---|"]
    by = {}
    for r in records:
        by.setdefault(r["config"], {})[r["side"]] = r
    for config, sides in by.items():
        t = sides["torch.nn"]
        z = sides.get("torch.nn FTZ")
        row = [config, f"{t['step']['median'] * 1e3:.2f} ms", f"{z['step']['median'] * 1e3:.2f} ms" if z else "n/a"]
        for m in METHODS:
            o = sides[f"bppsa.nn {m}"]
            row.append(f"{o['step']['median'] * 1e3:.2f} ms ({t['step']['median'] / o['step']['median']:.1f}×)")
        a = sides["bppsa.nn auto"]["step"]["median"]
        row.append(f"{z['step']['median'] / a:.1f}×" if z else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "fwd+bwd only (ratio against torch.nn):", "",
              "| model | torch.nn | torch.nn FTZ | " + " | ".join(METHODS) + " |", "|---|---|---|" + "---|" * len(METHODS)]
    for config, sides in by.items():
        t = sides["torch.nn"]
        z = sides.get("torch.nn FTZ")
        row = [config, f"{t['fwd_bwd']['median'] * 1e3:.2f} ms",
               f"{z['fwd_bwd']['median'] * 1e3:.2f} ms" if z else "n/a"] + [f"{sides[f'bppsa.nn {m}']['fwd_bwd']['median'] * 1e3:.2f} ms "
                          f"({t['fwd_bwd']['median'] / sides[f'bppsa.nn {m}']['fwd_bwd']['median']:.1f}×)"
                          for m in METHODS]
        lines.append("| " + " | ".join(row) + " |")
    write_table_text(path, lines)


if __name__ == "__main__":
    main()
