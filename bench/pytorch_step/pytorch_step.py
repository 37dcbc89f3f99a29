#!/usr/bin/env python3
"""A whole training step on one CUDA GPU: bppsa.nn's recurrent layer (its CUDA half, on PyTorch's
tensors and stream) against what a user would pick instead: torch.nn's (cuDNN), eager and under
torch.compile, and JAX (jitted BPTT through lax.scan, and a BPPSA built on lax.associative_scan,
bench/peers/jax_peers.py). One process, same weights, same data, same Linear head on the last step,
mean cross-entropy and Adam.

  PYTHONPATH=<build>/python python3 bench/pytorch_step/pytorch_step.py --out DIR [--reps 10] [--warmup 3]
                  [--budget SECONDS] [--quick] [--max-steps T] [--no-jax] [--no-compile] [--device cuda|cpu]

Sides: torch.nn (cuDNN; TF32 off, so that every side computes in FP32 and the first losses must
agree to 1e-4), torch.nn under torch.compile (default mode; dynamo leaves the cuDNN call as it is
and compiles the rest), bppsa.nn with backward 'auto' (the fused chunked scan when its plan has
several chunks, else BP) and 'bp', and, when JAX is installed, "jax scan" and "jax assoc-scan
BPPSA" (float32 matmuls at 'highest' precision, no preallocation of the GPU's memory). Torch
sides, as bench/paper/torch_paper.py's time_iterations: forward = zero_grad + model(x) + loss up to its
value on the host, backward = loss.backward(), iteration = forward, backward and Adam's step; CUDA
events. JAX sides, as JAX users write them, wall clock after block_until_ready: forward = the
jitted forward (for the BPPSA side also the head's gradients), backward = the jitted pullback,
iteration = one jitted training step (value_and_grad and Adam). `--warmup` untimed iterations (the
first allocates, plans, compiles), then `--reps` timed: medians. Adam's learning rate is 1e-3 on
the torch sides and 1e-4 on the JAX ones (bench/peers'); the times do not depend on it. (×) = torch.nn's median over the
side's, same run. A side that fails is listed with its error; the run goes on. `--budget` counts
from the process's start and is checked before each configuration and each side. Configurations: the
paper's RNN (bitstream input, H 20, batch 16) at T 1000 … 30000 and a GRU of IRMAS's shape (12
features, H 20, batch 16) at T 100 … 10000. `--device cpu` runs the same on the CPU (wall clock):
a check of this script on a machine without a GPU, not a GPU figure.

Writes DIR/pytorch_step.jsonl (one record per configuration and side, appended as measured) and
DIR/pytorch_step.md (the table, rewritten after each configuration), and prints the table. Exit 1 when a side's first loss disagrees
with torch.nn's."""
import argparse
import json
import os
import sys
import time

STARTED = time.monotonic()  # the budget counts from here: torch's and JAX's imports are part of the run

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "..", "tests", "common"))  # torch_models; bppsa itself from PYTHONPATH (a build)
sys.path.insert(0, os.path.join(HERE, "..", "paper"))  # torch_paper
sys.path.insert(0, os.path.join(HERE, "..", "common"))  # machine, precision
sys.path.insert(0, HERE)
sys.path.append(os.path.join(HERE, "..", "peers"))  # jax_peers (after this folder: no name of its may shadow ours)
import bppsa  # noqa: E402
import bppsa.nn  # noqa: E402
from machine import machine, write_text  # noqa: E402
from precision import set_tf32  # noqa: E402
from torch_models import Model  # noqa: E402
from torch_paper import Timer, time_iterations  # noqa: E402

TORCH = "torch.nn (cuDNN)"
# (name, kind, argument): kind torch (argument: None = torch.nn, "compile", or a bppsa backward) or jax.
SIDES = [(TORCH, "torch", None), ("torch.nn compiled", "torch", "compile"), ("bppsa.nn auto", "torch", "auto"),
         ("bppsa.nn bp", "torch", "bp"), ("jax scan", "jax", "jax scan"),
         ("jax assoc-scan BPPSA", "jax", "jax assoc-scan BPPSA")]


def configs(quick):
    rnn = [1000, 30000] if quick else [1000, 3000, 10000, 30000]
    gru = [1000, 10000] if quick else [100, 1000, 3000, 10000]
    return ([dict(cell="rnn", features=1, hidden=20, batch=16, steps=t, classes=10) for t in rnn] +
            [dict(cell="gru", features=12, hidden=20, batch=16, steps=t, classes=20) for t in gru])


def data(c, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    if c["features"] == 1:  # the paper's bitstream: label p, bits ~ Bernoulli(0.05 + 0.1 p)
        y = torch.randint(0, c["classes"], (c["batch"],), generator=g)
        p = (0.05 + 0.1 * y.double()).view(-1, 1, 1).expand(-1, c["steps"], 1)
        x = torch.bernoulli(p, generator=g).float()
    else:  # standardised features
        x = torch.randn(c["batch"], c["steps"], c["features"], generator=g)
        y = torch.randint(0, c["classes"], (c["batch"],), generator=g)
    return x.to(device), y.to(device)


def model(c, backward, device):
    torch.manual_seed(1)
    m = Model(c["cell"], c["features"], c["hidden"], 1, c["classes"])
    if backward not in (None, "compile"):  # the same weights in bppsa.nn's layer
        layer = {"rnn": bppsa.nn.RNN, "gru": bppsa.nn.GRU, "lstm": bppsa.nn.LSTM}[c["cell"]](
            c["features"], c["hidden"], 1, batch_first=True, backward=backward)
        layer.load_state_dict(m.rnn.state_dict())
        m.rnn = layer
    return m.to(device)


def measure_torch(c, backward, args):
    m = model(c, backward, args.device)
    x, y = data(c, args.device)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    if backward == "compile":
        m = torch.compile(m)
    ce = torch.nn.functional.cross_entropy
    first = ce(m(x), y).item()  # before any step, by the module timed: the sides must agree
    # time_iterations counts on one whole iteration run by its caller (the first: allocation, plans,
    # compilation): then warmup − 1 more untimed, as the JAX sides' warmup.
    opt.zero_grad(set_to_none=True)
    ce(m(x), y).backward()
    opt.step()
    timer = Timer(torch.device(args.device))
    r = time_iterations(m, opt, x, y, timer, args.warmup, args.reps)
    return first, r


class Weights:
    """The torch model's weights and the data as bench/peers/jax_peers.py reads its .npz."""

    def __init__(self, c, device):
        m = model(c, None, "cpu")
        x, y = data(c, "cpu")
        self.arrays = {"x": x.numpy(), "y": y.numpy(),
                       **{"w." + k: v.detach().numpy() for k, v in m.state_dict().items()}}
        self.files = list(self.arrays)

    def __getitem__(self, k):
        return self.arrays[k]


def measure_jax(c, peer, args):
    import jax_peers
    from peers_common import timed  # bench/peers/peers_common.py: the peers' medians after warm-ups
    p = jax_peers.JaxPeer(peer, {"cell": c["cell"].upper(), "hidden": c["hidden"]}, Weights(c, args.device))
    first = p.first_loss()
    r = {"forward": timed(p.forward, args.reps, args.warmup),
         "backward": timed(p.backward, args.reps, args.warmup, before=p.forward),
         "total": timed(p.step, args.reps, args.warmup)}
    r["versions"] = p.info["versions"]
    return first, r


def import_jax(device):
    """JAX on the device asked for, float32 matmuls at full precision, the GPU's memory not taken up
    front (PyTorch shares it); None with the reason when JAX is not there."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("JAX_PLATFORMS", "cuda" if device == "cuda" else "cpu")
    try:
        import jax
        jax.config.update("jax_default_matmul_precision", "highest")
        jax.devices()
    except Exception as e:  # noqa: BLE001 - listed in the table, the torch sides still run
        return None, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
    return jax, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=300,
                    help="seconds from the start; configurations and sides past it are skipped")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--max-steps", type=int, default=0, help="leave out configurations longer than this")
    ap.add_argument("--no-jax", action="store_true", help="leave out the JAX sides")
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("pytorch_step: no CUDA device")
    if args.reps < 1 or args.warmup < 1:
        sys.exit("pytorch_step: --reps and --warmup must be ≥ 1")
    os.makedirs(args.out, exist_ok=True)
    set_tf32(False)
    sides = [s for s in SIDES if not (args.no_compile and s[2] == "compile")]
    jax_error = "left out (--no-jax)" if args.no_jax else None
    if not args.no_jax:
        jax, jax_error = import_jax(args.device)
    extra = {"tf32": False, "device": args.device}
    if args.device == "cuda":
        extra["bppsa_cuda"] = bppsa._native._C.cuda_summary()
    if jax_error is None:
        extra["jax"] = jax.__version__
        extra["jax_devices"] = [str(d) for d in jax.devices()]
    info = machine(extra=extra)
    over = lambda: time.monotonic() - STARTED > args.budget  # noqa: E731
    rows = []
    jsonl = os.path.join(args.out, "pytorch_step.jsonl")
    with open(jsonl, "a") as f:
        for c in configs(args.quick):
            if args.max_steps and c["steps"] > args.max_steps:
                continue
            if over():
                rows.append((c, None))
                continue
            results = {}
            for name, kind, arg in sides:
                if over():
                    results[name] = (None, {"error": f"not run: the budget ({args.budget:.0f} s) was spent"})
                    continue
                if kind == "jax" and jax_error is not None:
                    results[name] = (None, {"error": f"JAX: {jax_error}"})
                    continue
                try:
                    first, r = measure_torch(c, arg, args) if kind == "torch" else measure_jax(c, arg, args)
                except Exception as e:  # noqa: BLE001 - listed with its error; the other sides go on
                    first, r = None, {"error": f"{type(e).__name__}: "
                                               f"{(str(e).strip().splitlines() or [''])[0][:200]}"}
                results[name] = (first, r)
                f.write(json.dumps({"config": c, "side": name, "first_loss": first, **r, "machine": info}) + "\n")
                f.flush()
            rows.append((c, results))
            write_text(os.path.join(args.out, "pytorch_step.md"), table(rows, info, args))  # kept if killed later
    text = table(rows, info, args)
    write_text(os.path.join(args.out, "pytorch_step.md"), text)
    print(text)
    bad = [(c["cell"], c["steps"], side) for c, res in rows if res for side, v in res.items()
           if v[0] is not None and res[TORCH][0] is not None and
           abs(v[0] - res[TORCH][0]) > 1e-4 * max(1, abs(v[0]))]
    if bad:
        sys.exit(f"pytorch_step: first losses disagree with torch.nn's for {bad}")


def table(rows, info, args):
    gpu = info["gpus"][0] if info.get("gpus") else {}
    where = (f"- GPU: {gpu.get('name', '?')} (driver {gpu.get('driver', '?')}); bppsa: {info.get('bppsa_cuda')}"
             if args.device == "cuda" else "- on the CPU (--device cpu): a check of the script, not a GPU figure")
    jax = f"JAX {info['jax']} on {', '.join(info['jax_devices'])}, float32 matmuls at 'highest'" if info.get(
        "jax") else "JAX: not run"
    timing = "CUDA events (torch), wall clock after block_until_ready (JAX)" if args.device == "cuda" else \
        "wall clock"
    lines = ["# A whole training step: bppsa.nn against torch.nn (cuDNN), torch.compile and JAX", "", where,
             f"- PyTorch {info.get('torch')} (CUDA {info.get('torch_cuda')}, cuDNN {info.get('cudnn')}); TF32 off; "
             f"{jax}; {info['cpu']}, {info['cores']} cores",
             f"- bppsa commit {info['bppsa_commit']}; {info['date']}",
             f"- medians of {args.reps} timed iterations after {args.warmup} untimed ones, {timing}; "
             "(×) = torch.nn's time / the side's, same run", "",
             "| model | T | side | forward ms | backward ms | iteration ms | first loss |",
             "|---|---:|---|---:|---:|---:|---:|"]
    for c, res in rows:
        name = f"{c['cell'].upper()} I{c['features']} H{c['hidden']} B{c['batch']}"
        if res is None:
            lines.append(f"| {name} | {c['steps']} | skipped: budget spent | | | | |")
            continue
        base = res[TORCH][1]
        for side, (first, r) in res.items():
            if "error" in r:
                lines.append(f"| {name} | {c['steps']} | {side} | error: {r['error']} | | | |")
                continue
            cells = []
            for part in ("forward", "backward", "total"):
                if r.get(part) is None:
                    cells.append("—")
                    continue
                v = r[part]["median"] * 1e3
                ok = side != TORCH and "error" not in base and base.get(part)
                cells.append(f"{v:.3f} ({base[part]['median'] / r[part]['median']:.2f}×)" if ok else f"{v:.3f}")
            lines.append(f"| {name} | {c['steps']} | {side} | {' | '.join(cells)} | {first:.6f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
