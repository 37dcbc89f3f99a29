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
- torch.nn compiled packed     torch.compile(step's loss) as users get it (without allow_rnn:
                               dynamo runs the RNN module eagerly; with it, dynamo unrolls the
                               recurrence and compiles for minutes at T 100, bench/pytorch/pytorch_compile.py)
- bppsa.nn packed              eager bppsa.nn (backward 'auto') on the PackedSequence
- bppsa.nn padded              eager bppsa.nn on the padded batch
- bppsa.nn packed / padded, blelloch   the same with the backward pass forced to the scan
- bppsa.nn compiled packed     torch.compile with allow_rnn=True (not fullgraph: the lengths
                               are read from the PackedSequence in Python)

Compile time is reported apart (the first call), never in the medians.

Then one bppsa.nn.GRU layer (F 12, H 20, T 1034, batch 16) alone, forward (no grad) and forward +
backward (bp and blelloch; on CUDA also auto, the fused scan) on a PackedSequence against the same
batch padded, for several length distributions: the time against the share of real steps (what
the packed path saves).

    scripts/python.sh bench/pytorch/pytorch_packed.py --out DIR [--threads 2] [--reps 9] [--warmup 3] [--quick]
                     [--device cpu|cuda] [--no-compile] [--budget SECONDS]

Writes DIR/packed.jsonl and DIR/packed.md (the tables) and prints them.

--device cuda (on a GPU machine: PYTHONPATH=<build with CUDA>/python python3 bench/pytorch/pytorch_packed.py
--device cuda --out DIR) runs every side on CUDA tensors: torch.nn on cuDNN, bppsa.nn on its CUDA
backend ('auto' is the fused scan there; blelloch the generic GPU scan); TF32 off (bench/gpu/
precision.py); the device synchronised before each clock read; the machine as bench/common/machine.py
records it. It writes DIR/packed_cuda.jsonl and DIR/packed_cuda.md instead, and exits 1 at once when
torch sees no CUDA device or the bppsa imported was built without its CUDA backend, and at the end
when a first loss disagrees. --no-compile leaves out the two compiled sides (their first calls are
most of a short run's time); --budget stops starting sides and layer rows that many seconds after the
process started (they are listed as skipped)."""
import time

STARTED = time.monotonic()  # --budget counts from here: torch's import is part of the run

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence  # noqa: E402

import bppsa  # noqa: E402
from pytorch_compile import run_side, table_rows, timed_step  # noqa: E402
from pytorch import machine_of, parse_args, timed, write_table_text  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# fp32 cuDNN against bppsa's CUDA engine, TF32 off on both: the first losses (a forward over up to
# ~1000 steps, other summation orders) must agree to 1e-4 relative, as bench/pytorch_step/pytorch_step.py's.
CUDA_LOSS_RTOL = 1e-4

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
    """The side's step timed on x's device; `lengths` on the CPU (pack_padded_sequence takes them
    there), a copy on x's device for the padded side's gather."""
    loss_fn = torch.nn.CrossEntropyLoss()
    last = lengths.to(x.device)

    def loss(x, y):
        inp = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False) if packed else x
        return loss_fn(model(inp, last), y)

    allow_rnn = compiled and model.rnn.__module__.startswith("bppsa")
    sync = torch.cuda.synchronize if x.device.type == "cuda" else None
    return timed_step(model, loss, (x, y), compiled, allow_rnn, False, reps, warmup, sync)


def own_args():
    """--device, --no-compile and --budget, taken out of sys.argv before pytorch_nn.parse_args reads
    the options every torch-side benchmark takes."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where every side runs (default cpu)")
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile'd sides")
    p.add_argument("--budget", type=float, default=0,
                   help="seconds from the start after which no side or layer row is started (0: no limit)")
    if {"-h", "--help"} & set(sys.argv[1:]):
        p.print_help()
    own, rest = p.parse_known_args()
    if own.budget < 0:
        p.error("--budget must be ≥ 0")
    sys.argv[1:] = rest
    return own


def require_cuda():
    """Exits 1, naming --device cuda and why, unless torch sees a CUDA device and the bppsa imported
    has its CUDA backend (bppsa._native._C.cuda_built())."""
    why = []
    if not torch.cuda.is_available():
        why.append(f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)")
    if not bppsa._native._C.cuda_built():
        why.append(f"the bppsa imported ({os.path.dirname(bppsa.__file__)}) was built without its CUDA backend "
                   "(bppsa._native._C.cuda_built() is False): build it with -DBPPSA_WITH_CUDA=ON and put "
                   "<build>/python on PYTHONPATH")
    elif bppsa._native._C.cuda_device_count() == 0:
        why.append(f"bppsa's CUDA backend sees no device ({bppsa._native._C.cuda_summary()})")
    if why:
        sys.exit("pytorch_packed.py --device cuda: " + "; ".join(why))


def cuda_machine(args):
    """bench/common/machine.py's record (GPU, driver, CUDA, cuDNN, torch, commit) with the GPU's name as
    torch gives it, bppsa's version and CUDA build; TF32 turned off for every side first."""
    sys.path.append(os.path.join(HERE, "..", "common"))
    from machine import machine
    from precision import set_tf32
    set_tf32(False)
    return machine(threads=args.threads, extra={
        "device": "cuda", "gpu": torch.cuda.get_device_name(), "bppsa": bppsa.__version__,
        "bppsa_cuda": bppsa._native._C.cuda_summary(), "tf32": False})


def spent(args):
    return args.budget > 0 and time.monotonic() - STARTED > args.budget


def agreed_on_cuda(config, side, r, base, disagree):
    """The first side measured is the base; a later side whose first loss is off by more than
    CUDA_LOSS_RTOL is marked and listed in `disagree` (the run goes on, and exits 1 at its end)."""
    if "first_loss" not in r:
        return base
    if base is None:
        return r
    if abs(r["first_loss"] - base["first_loss"]) > CUDA_LOSS_RTOL * max(1.0, abs(base["first_loss"])):
        r["loss_disagrees_with"] = base["first_loss"]
        disagree.append(f"{config}, {side}: {r['first_loss']} against {base['first_loss']}")
        print(f"{config:>22}  {side:<28} first loss {r['first_loss']} differs from {base['first_loss']}", flush=True)
    return base


def main():
    own = own_args()
    if own.device == "cuda":
        require_cuda()
    args = parse_args(__doc__, warmup=3)
    args.device, args.no_compile, args.budget = own.device, own.no_compile, own.budget
    cuda = args.device == "cuda"
    if args.quick:
        args.reps, args.warmup = min(args.reps, 2), min(args.warmup, 1)
    machine = cuda_machine(args) if cuda else machine_of(args)
    stem = "packed_cuda" if cuda else "packed"
    records, disagree = [], []
    jsonl = os.path.join(args.out, stem + ".jsonl")
    with open(jsonl + ".tmp", "w") as f:
        for c in configs(args.quick):
            x, y, lengths = batch_of(c, args.batch)
            real = int(lengths.sum())
            x, y = x.to(args.device), y.to(args.device)
            torch.manual_seed(4202)
            ref = Model(torch.nn, c["cell"], c["features"], c["hidden"], c["classes"])
            base = None
            for side, family, packed, compiled, backward in SIDES:
                if compiled and args.no_compile:
                    r = {"skipped": "--no-compile"}
                elif spent(args):
                    r = {"skipped": f"--budget {args.budget:g} s spent"}
                else:
                    kw = {} if family is torch.nn else {"backward": backward, "threads": args.threads}
                    model = Model(family, c["cell"], c["features"], c["hidden"], c["classes"], **kw)
                    model.load_state_dict(ref.state_dict())
                    model.to(args.device)
                    run = lambda: measure(  # noqa: E731
                        model, x, lengths, y, packed, compiled, args.reps, args.warmup)
                    if cuda:  # each side its own base in run_side; the check with the CUDA tolerance here
                        r, _ = run_side(c["name"], side, None, run)
                        base = agreed_on_cuda(c["name"], side, r, base, disagree)
                    else:
                        r, base = run_side(c["name"], side, base, run)
                rec = dict(config=c["name"], cell=c["cell"], steps=c["steps"], batch=args.batch,
                           real_steps=real, padded_steps=c["steps"] * args.batch, side=side, machine=machine, **r)
                records.append(rec)
                f.write(json.dumps(rec) + "\n")
                f.flush()
    os.replace(jsonl + ".tmp", jsonl)
    md = os.path.join(args.out, stem + ".md")
    write_table(records, machine, md, args)
    scaling = "\n" + "\n".join(layer_scaling(args, machine)) + "\n"
    with open(md, "a") as f:
        f.write(scaling)
    print(scaling)
    if disagree:
        sys.exit(f"pytorch_packed.py --device cuda: first losses disagree beyond {CUDA_LOSS_RTOL:g} relative: "
                 + "; ".join(disagree))


def layer_scaling(args, machine):
    """One GRU layer: packed against padded, medians (ms) per length distribution."""
    T, B, F, H = 1034, args.batch, 12, 20
    cuda = args.device == "cuda"
    gen = torch.Generator().manual_seed(4203)
    x = torch.randn(B, T, F, generator=gen)
    rest = torch.randint(T // 10, T + 1, (B - 1,), generator=gen).tolist()
    dists = [("every sample T", [T] * B), ("uniform in [T/10, T]", [T] + rest),
             ("one at T, the rest at T/4", [T] + [T // 4] * (B - 1)), ("every sample T/4", [T // 4] * B)]
    backwards = ("bp", "blelloch", "auto") if cuda else ("bp", "blelloch")

    def med(f):
        def call():  # on CUDA each call ends synchronised: the next clock read follows its GPU work
            f()
            if cuda:
                torch.cuda.synchronize()
        return timed(call, args.reps, args.warmup)["median"] * 1e3

    where = (f"on {machine['gpu']} (the device synchronised before each clock read, TF32 off)" if cuda
             else f"{args.threads} threads")
    lines = ["## One layer: the packed path against the share of real steps", "",
             f"bppsa.nn.GRU(12, 20), T {T}, batch {B}, {where}; medians of {args.reps} (ms); "
             "forward without grad; step = forward + backward of h_n's sum; in brackets packed / padded, to "
             "compare with the share of real steps.", "",
             "| lengths | real / padded steps | forward padded | forward packed | "
             + " | ".join(f"step padded, {b} | step packed, {b}" for b in backwards) + " |",
             "|---|---|" + "---:|" * (2 + 2 * len(backwards))]
    for name, lengths in dists:
        if spent(args):
            lines.append(f"| {name} | skipped: --budget {args.budget:g} s spent |")
            continue
        lengths = sorted(lengths, reverse=True)
        xs = x.clone()
        for b, n in enumerate(lengths):
            xs[b, n:] = 0
        xs = xs.to(args.device)
        cells = []
        for backward in backwards:
            torch.manual_seed(4203)
            m = bppsa.nn.GRU(F, H, batch_first=True, backward=backward, threads=args.threads).to(args.device)

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
    if args.device == "cuda":
        where = (f"on CUDA: {machine['gpu']}, CUDA {machine['torch_cuda']}, cuDNN {machine['cudnn']}; "
                 f"torch {machine['torch']}, bppsa {machine['bppsa']}")
        timing = ("; every side on CUDA tensors (torch.nn on cuDNN), TF32 off, the device synchronised "
                  "before each clock read")
    else:
        where = (f"{machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads; torch {machine['torch']}, "
                 f"bppsa {machine['bppsa']}")
        timing = ""
    lines = [f"# Packed batches, lengths spread 10×: torch.nn and bppsa.nn, eager and compiled ({where})", "",
             f"A whole Adam step, medians of {args.reps} after {args.warmup} warm-up steps, batch {args.batch}, "
             f"lengths uniform in [T/10, T]{timing}; in brackets the ratio torch.nn packed (eager) / the side "
             "(above 1: faster); first call (compile) time apart.", "",
             "| model | real / padded steps | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    def steps(sides):
        r = next(iter(sides.values()))
        return [f"{r['real_steps']} / {r['padded_steps']}"]

    write_table_text(path, lines + table_rows(records, names, "torch.nn packed", steps))


if __name__ == "__main__":
    main()
