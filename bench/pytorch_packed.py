#!/usr/bin/env python3
"""Packed batches of sequences whose lengths spread 10× (uniform in [T/10, T]): a whole training
step (zero_grad, forward, cross-entropy on each sample's last real step, backward, Adam's step)
with torch.nn and bppsa.nn, eager and compiled, on the PackedSequence and on the same batch
padded to T, in one process, with the same weights and data on every side (the first loss must
agree). The padded bppsa.nn side is what the packed path saves: every sample run for all T
steps, where the packed path runs and scans each sample for its own length only.

Sides:
- torch.nn packed              eager torch.nn on the PackedSequence
- torch.nn padded              eager torch.nn on the padded batch (the last real step gathered)
- torch.nn compiled packed     torch.compile(step's loss) as users get it
- bppsa.nn packed              eager bppsa.nn (backward 'auto') on the PackedSequence
- bppsa.nn padded              eager bppsa.nn on the padded batch
- bppsa.nn packed / padded, blelloch   the same with the backward pass forced to the scan
- bppsa.nn compiled packed     torch.compile with allow_rnn=True (not fullgraph: the lengths
                               are read from the PackedSequence in Python)

Compile time is reported apart (the first call), never in the medians.

Then one bppsa.nn.GRU layer (F 12, H 20, T 1034, batch 16) alone, forward (no grad) and forward +
backward (bp and blelloch) on a PackedSequence against the same batch padded, for several length
distributions: the time against the share of real steps (what the packed path saves).

    scripts/python.sh bench/pytorch_packed.py --out DIR [--threads 2] [--reps 9] [--warmup 3] [--quick]

Writes DIR/packed.jsonl and DIR/packed.md (the tables) and prints them."""
import json
import os
import statistics
import time

import torch
from torch.nn.utils.rnn import pack_padded_sequence

import bppsa
from pytorch_compile import run_side, table_rows, timed_step
from pytorch_nn import machine_of, parse_args, write_table_text

SIDES = [  # name, family, packed, compiled, bppsa's backward
    ("torch.nn packed", torch.nn, True, False, None),
    ("torch.nn padded", torch.nn, False, False, None),
    ("torch.nn compiled packed", torch.nn, True, True, None),
    ("bppsa.nn packed", bppsa.nn, True, False, "auto"),
    ("bppsa.nn padded", bppsa.nn, False, False, "auto"),
    ("bppsa.nn packed, blelloch", bppsa.nn, True, False, "blelloch"),
    ("bppsa.nn padded, blelloch", bppsa.nn, False, False, "blelloch"),
    ("bppsa.nn compiled packed", bppsa.nn, True, True, "auto"),
]


class Model(torch.nn.Module):
    """A recurrent layer and a Linear head on each sample's last real step."""

    def __init__(self, family, cell, features, hidden, classes, **kw):
        super().__init__()
        self.rnn = getattr(family, cell)(features, hidden, batch_first=True, **kw)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x, lengths):
        if isinstance(x, torch.nn.utils.rnn.PackedSequence):
            _, h = self.rnn(x)
            return self.head(h[-1])  # h_n: each sample's state at its length
        out, _ = self.rnn(x)
        last = (lengths - 1).view(-1, 1, 1).expand(-1, 1, out.shape[2])
        return self.head(out.gather(1, last).squeeze(1))


def configs(quick):
    steps = 300 if quick else 1000
    return [dict(name=f"RNN T={steps}", cell="RNN", features=1, steps=steps, hidden=20, classes=10),
            dict(name="GRU l (F=12, T=1034)", cell="GRU", features=12, steps=1034, hidden=20, classes=11)]


def batch_of(c, batch):
    """Data, labels and lengths uniform in [T/10, T] (the longest is T), fixed seed."""
    gen = torch.Generator().manual_seed(4202)
    steps = c["steps"]
    x = torch.bernoulli(torch.full((batch, steps, c["features"]), 0.3), generator=gen) \
        if c["cell"] == "RNN" else torch.randn(batch, steps, c["features"], generator=gen)
    lengths = torch.randint(steps // 10, steps + 1, (batch,), generator=gen)
    lengths[0] = steps
    for b, n in enumerate(lengths.tolist()):
        x[b, n:] = 0
    return x, torch.randint(0, c["classes"], (batch,), generator=gen), lengths


def measure(model, x, lengths, y, packed, compiled, reps, warmup):
    loss_fn = torch.nn.CrossEntropyLoss()

    def loss(x, y):
        inp = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False) if packed else x
        return loss_fn(model(inp, lengths), y)

    allow_rnn = compiled and model.rnn.__module__.startswith("bppsa")
    return timed_step(model, loss, (x, y), compiled, allow_rnn, False, reps, warmup)


def main():
    args = parse_args(__doc__, warmup=3)
    if args.quick:
        args.reps, args.warmup = min(args.reps, 2), min(args.warmup, 1)
    machine = machine_of(args)
    records = []
    jsonl = os.path.join(args.out, "packed.jsonl")
    with open(jsonl + ".tmp", "w") as f:
        for c in configs(args.quick):
            x, y, lengths = batch_of(c, args.batch)
            real = int(lengths.sum())
            torch.manual_seed(4202)
            ref = Model(torch.nn, c["cell"], c["features"], c["hidden"], c["classes"])
            base = None
            for side, family, packed, compiled, backward in SIDES:
                kw = {} if family is torch.nn else {"backward": backward, "threads": args.threads}
                model = Model(family, c["cell"], c["features"], c["hidden"], c["classes"], **kw)
                model.load_state_dict(ref.state_dict())
                r, base = run_side(c["name"], side, base, lambda: measure(
                    model, x, lengths, y, packed, compiled, args.reps, args.warmup))
                rec = dict(config=c["name"], cell=c["cell"], steps=c["steps"], batch=args.batch,
                           real_steps=real, padded_steps=c["steps"] * args.batch, side=side, machine=machine, **r)
                records.append(rec)
                f.write(json.dumps(rec) + "\n")
                f.flush()
    os.replace(jsonl + ".tmp", jsonl)
    write_table(records, machine, os.path.join(args.out, "packed.md"), args)
    scaling = "\n" + "\n".join(layer_scaling(args)) + "\n"
    with open(os.path.join(args.out, "packed.md"), "a") as f:
        f.write(scaling)
    print(scaling)


def layer_scaling(args):
    """One GRU layer: packed against padded, medians (ms) per length distribution."""
    T, B, F, H = 1034, args.batch, 12, 20
    gen = torch.Generator().manual_seed(4203)
    x = torch.randn(B, T, F, generator=gen)
    rest = torch.randint(T // 10, T + 1, (B - 1,), generator=gen).tolist()
    dists = [("every sample T", [T] * B), ("uniform in [T/10, T]", [T] + rest),
             ("one at T, the rest at T/4", [T] + [T // 4] * (B - 1)), ("every sample T/4", [T // 4] * B)]

    def med(f):
        ts = []
        for i in range(args.warmup + args.reps):
            t0 = time.perf_counter()
            f()
            if i >= args.warmup:
                ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

    lines = ["## One layer: the packed path against the share of real steps", "",
             f"bppsa.nn.GRU(12, 20), T {T}, batch {B}, {args.threads} threads; medians of {args.reps} (ms); "
             "forward without grad; step = forward + backward of h_n's sum; in brackets packed / padded, to "
             "compare with the share of real steps.", "",
             "| lengths | real / padded steps | forward padded | forward packed | step padded, bp | step packed, bp | "
             "step padded, blelloch | step packed, blelloch |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, lengths in dists:
        lengths = sorted(lengths, reverse=True)
        xs = x.clone()
        for b, n in enumerate(lengths):
            xs[b, n:] = 0
        cells = []
        for backward in ("bp", "blelloch"):
            torch.manual_seed(4203)
            m = bppsa.nn.GRU(F, H, batch_first=True, backward=backward, threads=args.threads)

            def run(packed, grad):
                inp = pack_padded_sequence(xs, torch.tensor(lengths), batch_first=True) if packed else xs
                if not grad:
                    with torch.no_grad():
                        m(inp)
                    return
                _, h = m(inp)
                h.sum().backward()
            if backward == "bp":
                fw = [med(lambda: run(False, False)), med(lambda: run(True, False))]
                cells.append(f"{fw[0]:.2f} | {fw[1]:.2f} ({fw[1] / fw[0]:.2f})")
            st = [med(lambda: run(False, True)), med(lambda: run(True, True))]
            cells.append(f"{st[0]:.2f} | {st[1]:.2f} ({st[1] / st[0]:.2f})")
        real = sum(lengths)
        lines.append(f"| {name} | {real} / {T * B} ({real / (T * B):.2f}) | " + " | ".join(cells) + " |")
    return lines


def write_table(records, machine, path, args):
    names = [s[0] for s in SIDES]
    lines = [f"# Packed batches, lengths spread 10×: torch.nn and bppsa.nn, eager and compiled ({machine['cpu']}, "
             f"{machine['cores']} cores, {machine['threads']} threads; torch {machine['torch']}, "
             f"bppsa {machine['bppsa']})", "",
             f"A whole Adam step, medians of {args.reps} after {args.warmup} warm-up steps, batch {args.batch}, "
             "lengths uniform in [T/10, T]; in brackets the ratio torch.nn packed (eager) / the side (above 1: "
             "faster); first call (compile) time apart.", "",
             "| model | real / padded steps | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    def steps(sides):
        r = next(iter(sides.values()))
        return [f"{r['real_steps']} / {r['padded_steps']}"]

    write_table_text(path, lines + table_rows(records, names, "torch.nn packed", steps))


if __name__ == "__main__":
    main()
