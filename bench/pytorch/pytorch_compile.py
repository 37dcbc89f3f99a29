#!/usr/bin/env python3
"""Eager and torch.compile'd, torch.nn against bppsa.nn: a whole training step (zero_grad,
forward, cross-entropy, backward, Adam's step) at the paper's shapes, in one process, with the
same weights and data on every side (the first loss must agree).

Sides:
- torch.nn             eager torch.nn.RNN / GRU
- torch.nn compiled    torch.compile(model) as users get it (dynamo runs torch's RNN modules
                       eagerly unless torch._dynamo.config.allow_rnn is set)
- torch.nn compiled allow_rnn   the same with allow_rnn=True (dynamo traces into the module and
                       unrolls the recurrence: compile time grows with T, 2 min at T = 100 on
                       the 2-core VM, so only up to T = 100; skipped beyond, and recorded so)
- bppsa.nn             eager bppsa.nn (backward 'auto')
- bppsa.nn compiled    torch.compile(model, fullgraph=True) with allow_rnn=True: the layer is the
                       custom operator bppsa::layer_forward / layer_backward (the backward
                       operator runs the layer's forward again)

Compile time is reported apart (the first call), never in the medians.

    scripts/python.sh bench/pytorch/pytorch_compile.py --out DIR [--threads 2] [--reps 9] [--warmup 3] [--quick]

Writes DIR/compile.jsonl and DIR/compile.md (the table) and prints the table."""
import json
import os
import time

import torch

import bppsa
from pytorch import Model, agreed_base, machine_of, paper_batch, parse_args, timed, write_table_text


SIDES = [  # name, family, compiled, allow_rnn, fullgraph, longest T
    ("torch.nn", torch.nn, False, False, False, None),
    ("torch.nn compiled", torch.nn, True, False, False, None),
    ("torch.nn compiled allow_rnn", torch.nn, True, True, False, 100),
    ("bppsa.nn", bppsa.nn, False, False, False, None),
    ("bppsa.nn compiled", bppsa.nn, True, True, True, None),
]


def configs(quick):
    steps = [10, 100, 1000] if quick else [10, 100, 1000, 10000]
    out = [dict(name=f"RNN T={t}", cell="RNN", features=1, steps=t, hidden=20, classes=10) for t in steps]
    presets = [("s", 38, 259)] if quick else [("s", 38, 259), ("l", 12, 1034)]
    out += [dict(name=f"GRU {p} (F={f}, T={t})", cell="GRU", features=f, steps=t, hidden=20, classes=11)
            for p, f, t in presets]
    return out


def timed_step(model, loss, inputs, compiled, allow_rnn, fullgraph, reps, warmup, sync=None):
    """A whole Adam step on loss(*inputs) (eager, or torch.compile'd with the given switches): the
    first call (compile) timed apart, then the medians; the model's weights restored after. `sync`
    (torch.cuda.synchronize for CUDA tensors) is called before each clock read, so that each time
    covers the device work it queued."""
    sync = sync or (lambda: None)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    fn = torch.compile(loss, fullgraph=fullgraph) if compiled else loss
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch._dynamo.config.patch(allow_rnn=allow_rnn):
        torch._dynamo.reset()
        sync()
        t0 = time.perf_counter()
        first = fn(*inputs)
        first.backward()
        sync()
        compile_s = time.perf_counter() - t0
        first = first.item()

        def step():  # ends synchronised: timed's next clock read follows a finished step
            opt.zero_grad(set_to_none=True)
            fn(*inputs).backward()
            opt.step()
            sync()

        r = {"first_loss": first, "first_call_s": compile_s, **timed(step, reps, warmup)}
    model.load_state_dict(state)
    return r


def measure(model, x, y, compiled, allow_rnn, fullgraph, reps, warmup):
    loss_fn = torch.nn.CrossEntropyLoss()
    return timed_step(model, lambda x, y: loss_fn(model(x), y), (x, y), compiled, allow_rnn, fullgraph, reps, warmup)


def main():
    args = parse_args(__doc__, warmup=3)
    if args.quick:
        args.reps, args.warmup = min(args.reps, 2), min(args.warmup, 1)
    machine = machine_of(args)
    records = []
    jsonl = os.path.join(args.out, "compile.jsonl")
    with open(jsonl + ".tmp", "w") as f:
        for c in configs(args.quick):
            x, y = paper_batch(c, args.batch)
            torch.manual_seed(4202)
            ref = Model(torch.nn, c["cell"], c["features"], c["hidden"], c["classes"])
            base = None
            for side, family, compiled, allow_rnn, fullgraph, longest in SIDES:
                if longest is not None and c["steps"] > longest:
                    r = {"skipped": f"T > {longest}: the compile time grows with T"}
                else:
                    kw = {} if family is torch.nn else {"backward": "auto", "threads": args.threads}
                    model = Model(family, c["cell"], c["features"], c["hidden"], c["classes"], **kw)
                    model.load_state_dict(ref.state_dict())
                    r, base = run_side(c["name"], side, base, lambda: measure(
                        model, x, y, compiled, allow_rnn, fullgraph, args.reps, args.warmup))
                rec = dict(config=c["name"], cell=c["cell"], steps=c["steps"], batch=args.batch, side=side,
                           machine=machine, **r)
                records.append(rec)
                f.write(json.dumps(rec) + "\n")
                f.flush()
    os.replace(jsonl + ".tmp", jsonl)
    write_table(records, machine, os.path.join(args.out, "compile.md"), args)


def run_side(config, side, base, measure_fn):
    """(result, base) of one side: measure_fn()'s, its first loss checked against the base
    (agreed_base); a run that fails (a compile error, say) is a result too, with its error."""
    try:
        r = measure_fn()
    except Exception as e:
        r = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
        print(f"{config:>22}  {side:<28} failed: {r['error']}", flush=True)
        return r, base
    print(f"{config:>22}  {side:<28} step {r['median'] * 1e3:9.2f} ms  (first call {r['first_call_s']:.1f} s)",
          flush=True)
    return r, agreed_base(config, side, r, base)


def side_cell(r, eager):
    """A table cell of one side's step: its median, the ratio to `eager` (the eager torch.nn
    median, or None) and the first call; or why there is none."""
    if "skipped" in r:
        return "skipped"
    if "error" in r:
        return "failed: " + r["error"][:60]
    ratio = f" ({eager / r['median']:.2f}×)" if eager else ""
    return f"{r['median'] * 1e3:.2f} ms{ratio}, first {r['first_call_s']:.1f} s"


def table_rows(records, names, eager_side, extra_cells=lambda sides: []):
    """The table's rows, one per configuration: its name, extra_cells(its sides), then each of
    `names`' side_cell against the median of `eager_side`."""
    by = {}
    for r in records:
        by.setdefault(r["config"], {})[r["side"]] = r
    rows = []
    for config, sides in by.items():
        eager = sides[eager_side].get("median")
        cells = [config] + extra_cells(sides) + [side_cell(sides[n], eager) for n in names]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def write_table(records, machine, path, args):
    names = [s[0] for s in SIDES]
    lines = [f"# Eager and compiled, torch.nn and bppsa.nn ({machine['cpu']}, {machine['cores']} cores, "
             f"{machine['threads']} threads; torch {machine['torch']}, bppsa {machine['bppsa']})", "",
             f"A whole Adam step, medians of {args.reps} after {args.warmup} warm-up steps, batch {args.batch}; "
             "in brackets the ratio torch.nn (eager) / the side (above 1: faster than eager torch.nn); "
             "first call (compile) time apart.", "",
             "| model | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    write_table_text(path, lines + table_rows(records, names, "torch.nn"))


if __name__ == "__main__":
    main()
