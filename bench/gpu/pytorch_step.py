#!/usr/bin/env python3
"""A whole PyTorch training step on one CUDA GPU: bppsa.nn's recurrent layer (its CUDA half,
on PyTorch's tensors and stream) against torch.nn's (cuDNN), in one process, same weights, same
data, same Linear head on the last step, mean cross-entropy and Adam.

  PYTHONPATH=<build>/python python3 bench/gpu/pytorch_step.py --out DIR [--reps 10] [--warmup 3]
                                                             [--budget SECONDS] [--quick]

Sides: torch.nn (cuDNN; TF32 off, so that both sides compute in FP32 and the first losses must
agree to 1e-4), bppsa.nn with backward 'auto' (the fused chunked scan when its plan has several
chunks, else BP) and bppsa.nn with backward 'bp'. Definitions as bench/torch_step.py's
time_iterations: forward = zero_grad + model(x) + loss up to its value on the host, backward =
loss.backward(), optimizer = Adam's step, iteration = the three; CUDA events; `--warmup` untimed
iterations (the first allocates and plans), then `--reps` timed: medians. (×) = torch.nn's median
over the side's, same run. Configurations: the paper's RNN (bitstream input, H 20, batch 16) at
T 1000 … 30000 and a GRU of IRMAS's shape (12 features, H 20, batch 16) at T 100 … 10000.

Writes DIR/pytorch_step.jsonl (one record per configuration and side, appended as measured) and
DIR/pytorch_step.md (the table), and prints the table."""
import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "python"))  # torch_models; bppsa itself from PYTHONPATH (a build)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import bppsa  # noqa: E402
import bppsa.nn  # noqa: E402
from machine import machine, write_text  # noqa: E402
from precision import set_tf32  # noqa: E402
from torch_models import Model  # noqa: E402
from torch_step import Timer, time_iterations  # noqa: E402

SIDES = [("torch.nn (cuDNN)", None), ("bppsa.nn auto", "auto"), ("bppsa.nn bp", "bp")]


def configs(quick):
    rnn = [1000, 30000] if quick else [1000, 3000, 10000, 30000]
    gru = [1000, 10000] if quick else [100, 1000, 3000, 10000]
    return ([dict(cell="rnn", features=1, hidden=20, batch=16, steps=t, classes=10) for t in rnn] +
            [dict(cell="gru", features=12, hidden=20, batch=16, steps=t, classes=20) for t in gru])


def data(c, seed=0):
    g = torch.Generator().manual_seed(seed)
    if c["cell"] == "rnn":  # the paper's bitstream: label p, bits ~ Bernoulli(0.05 + 0.1 p)
        y = torch.randint(0, c["classes"], (c["batch"],), generator=g)
        p = (0.05 + 0.1 * y.double()).view(-1, 1, 1).expand(-1, c["steps"], 1)
        x = torch.bernoulli(p, generator=g).float()
    else:  # standardised features
        x = torch.randn(c["batch"], c["steps"], c["features"], generator=g)
        y = torch.randint(0, c["classes"], (c["batch"],), generator=g)
    return x.cuda(), y.cuda()


def model(c, backward):
    torch.manual_seed(1)
    m = Model(c["cell"], c["features"], c["hidden"], 1, c["classes"])
    if backward is not None:  # the same weights in bppsa.nn's layer
        layer = {"rnn": bppsa.nn.RNN, "gru": bppsa.nn.GRU}[c["cell"]](
            c["features"], c["hidden"], 1, batch_first=True, backward=backward)
        layer.load_state_dict(m.rnn.state_dict())
        m.rnn = layer
    return m.cuda()


def measure(c, backward, args):
    m = model(c, backward)
    x, y = data(c)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    first = torch.nn.functional.cross_entropy(m(x), y).item()  # before any step: the sides must agree
    timer = Timer(torch.device("cuda"))
    r = time_iterations(m, opt, x, y, timer, args.warmup, args.reps)
    return first, r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=300, help="seconds; configurations past it are skipped")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pytorch_step: no CUDA device")
    if args.reps < 1 or args.warmup < 1:
        sys.exit("pytorch_step: --reps and --warmup must be ≥ 1")
    os.makedirs(args.out, exist_ok=True)
    set_tf32(False)
    info = machine(extra={"bppsa_cuda": bppsa._native._C.cuda_summary(), "tf32": False})
    start = time.monotonic()
    rows = []
    jsonl = os.path.join(args.out, "pytorch_step.jsonl")
    with open(jsonl, "a") as f:
        for c in configs(args.quick):
            if time.monotonic() - start > args.budget:
                rows.append((c, None))
                continue
            results = {}
            for name, backward in SIDES:
                first, r = measure(c, backward, args)
                results[name] = (first, r)
                f.write(json.dumps({"config": c, "side": name, "first_loss": first, **r, "machine": info}) + "\n")
                f.flush()
            rows.append((c, results))
    text = table(rows, info, args)
    write_text(os.path.join(args.out, "pytorch_step.md"), text)
    print(text)
    bad = [c for c, res in rows if res and any(abs(v[0] - res[SIDES[0][0]][0]) > 1e-4 * max(1, abs(v[0]))
                                               for v in res.values())]
    if bad:
        sys.exit(f"pytorch_step: first losses disagree for {bad}")


def table(rows, info, args):
    gpu = info["gpus"][0] if info.get("gpus") else {}
    lines = ["# A whole PyTorch training step on the GPU: bppsa.nn against torch.nn (cuDNN)", "",
             f"- GPU: {gpu.get('name', '?')} (driver {gpu.get('driver', '?')}); bppsa: {info['bppsa_cuda']}",
             f"- PyTorch {info.get('torch')} (CUDA {info.get('torch_cuda')}, cuDNN {info.get('cudnn')}); TF32 off; "
             f"{info['cpu']}, {info['cores']} cores",
             f"- bppsa commit {info['bppsa_commit']}; {info['date']}",
             f"- medians of {args.reps} timed iterations after {args.warmup} untimed ones, CUDA events; "
             "(×) = torch.nn's time / the side's, same run", "",
             "| model | T | side | forward ms | backward ms | iteration ms | first loss |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for c, res in rows:
        name = f"{c['cell'].upper()} I{c['features']} H{c['hidden']} B{c['batch']}"
        if res is None:
            lines.append(f"| {name} | {c['steps']} | skipped: budget spent | | | | |")
            continue
        base = res[SIDES[0][0]][1]
        for side, (first, r) in res.items():
            cells = []
            for part in ("forward", "backward", "total"):
                v = r[part]["median"] * 1e3
                ratio = base[part]["median"] / r[part]["median"]
                cells.append(f"{v:.3f}" if side == SIDES[0][0] else f"{v:.3f} ({ratio:.2f}×)")
            lines.append(f"| {name} | {c['steps']} | {side} | {' | '.join(cells)} | {first:.6f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
