#!/usr/bin/env python3
"""The headline of a GPU lease: a whole training step at the paper's shapes with bppsa.nn against
torch.nn + cuDNN, eager and with the whole step captured in one CUDA graph, in one process, written
as one file per run (docs/gpu.md, "The headline file").

  PYTHONPATH=<build>/python python3 bench/headline/headline.py [--out DIR] [--reps 10] [--warmup 3]
      [--budget SECONDS] [--max-steps T] [--device cuda|cpu]

Rows: one per (model, H, B, T, side), for the RNN (bitstream input, H 20, B 16) at T 1000 and 30000,
the GRU of IRMAS's shape (12 features, H 20, B 16) at T 1000 and 10000, an LSTM at H 64 and an RNN
at H 256 (bitstream input, B 16, T 1000). Sides: "torch.nn" (cuDNN, eager), "torch.nn graphed" (the
whole step, forward, loss, backward and Adam, captured once with torch.cuda.graph and replayed),
"bppsa.nn" (backward 'auto', eager) and "bppsa.nn graphed" (the same capture; a row with the error
where bppsa's operator cannot be captured). Every side: the same weights, data, Linear head on the
last step, mean cross-entropy and the same optimizer (torch.optim.Adam, lr 1e-3, capturable=True on
CUDA), FP32 (TF32 off).

Per row: forward_ms (zero_grad, forward, loss to its value on the host), backward_ms and
iteration_ms (forward, backward and Adam's step): medians of `--reps` timed iterations after
`--warmup` untimed ones, CUDA events (graphed sides: the replay, iteration only); gpu_ms: the device
time of one iteration (the union of its kernels', copies' and fills' intervals in PyTorch's
profiler); forward_us_per_step: the recurrent layer's forward alone, the kernel with the most
device time (by name) over T (forward_kernel names it; on the CPU the layer's forward wall time
over T); max_rel_err: over every parameter, max |g − g_torch| / max |g_torch| against eager
torch.nn's gradients on the same weights and batch; first_loss. A side that fails is a row with
"error"; the run goes on. `--budget` counts from the start; sides past it are rows with an error
saying so.

Writes DIR/headline.json ({"commit", "dirty", "gpu", "driver", "cuda", "torch", "cudnn", "rows",
…}) and DIR/headline.md; DIR defaults to bench/results/gpu/<gpu-name>/. `--device cpu` runs the
same on the CPU (wall clock; no graphs, no gpu_ms): a test of this script and of its file, not a
GPU figure, with subnormals flushed to zero on every side so that it stays short. Exit 1 when a
side's first loss differs from torch.nn's by more than 1e-4 (relative)."""
import argparse
import json
import os
import re
import sys
import tempfile
import time

STARTED = time.monotonic()

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "paper"))  # torch_paper
sys.path.insert(0, os.path.join(HERE, "..", "pytorch_step"))
sys.path.insert(0, os.path.join(HERE, "..", "common"))  # machine, precision
from machine import ROOT, machine, write_json, write_text  # noqa: E402
from precision import set_tf32  # noqa: E402
from pytorch_step import data, model  # noqa: E402  (the same data and weights as the training-step bench)
from torch_paper import Timer, stats, time_iterations  # noqa: E402

import bppsa  # noqa: E402,F401  (from PYTHONPATH: a build of this tree)

CONFIGS = [dict(cell="rnn", features=1, hidden=20, batch=16, steps=1000, classes=10),
           dict(cell="rnn", features=1, hidden=20, batch=16, steps=30000, classes=10),
           dict(cell="gru", features=12, hidden=20, batch=16, steps=1000, classes=20),
           dict(cell="gru", features=12, hidden=20, batch=16, steps=10000, classes=20),
           dict(cell="lstm", features=1, hidden=64, batch=16, steps=1000, classes=10),
           dict(cell="rnn", features=1, hidden=256, batch=16, steps=1000, classes=10)]
# (side, backward given to pytorch_step.model: None = torch.nn, else bppsa.nn's; graphed)
SIDES = [("torch.nn", None, False), ("torch.nn graphed", None, True), ("bppsa.nn", "auto", False),
         ("bppsa.nn graphed", "auto", True)]
LR = 1e-3
LOSS_TOLERANCE = 1e-4
GPU_EVENTS = ("kernel", "gpu_memcpy", "gpu_memset")


def optimizer(m, device):
    """Adam as every side runs it: capturable on CUDA (what graph capture needs; eager sides the same)."""
    return torch.optim.Adam(m.parameters(), lr=LR, capturable=device == "cuda")


def step(m, opt, x, y):
    loss = torch.nn.functional.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    return loss


def gradients(m, x, y):
    """Every parameter's gradient of the loss at the model's current weights, by name."""
    m.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(m(x), y).backward()
    return {k: p.grad.detach().clone() for k, p in m.named_parameters()}


def max_rel_err(grads, ref):
    return max(float((grads[k] - g).abs().max() / g.abs().max().clamp_min(1e-30)) for k, g in ref.items())


def device_intervals(prof):
    """[(start, end, name)] in µs of every kernel, copy and fill the profiler saw (from its trace)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    return [(e["ts"], e["ts"] + e["dur"], e.get("name", "?")) for e in events
            if str(e.get("cat", "")).lower() in GPU_EVENTS and "dur" in e and "ts" in e]


def busy_ms(intervals):
    """The union of the intervals' lengths, in ms (overlapping work counted once); an error when the
    profiler saw no device work (never a silent 0)."""
    if not intervals:
        raise RuntimeError("the profiler saw no kernel, copy or fill of the iteration")
    total, end = 0.0, None
    for a, b, _ in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1e3


def profiled(fn):
    """Runs fn() once under PyTorch's profiler (CUDA activity); the device's intervals."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return device_intervals(prof)


def forward_per_step(m, x, c, cuda):
    """(µs a step of the recurrent layer's forward, what was timed): on CUDA its heaviest kernel (by
    name, summed over its launches) over T; on the CPU its forward's median wall time over T."""
    layer = m.rnn
    if not cuda:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            layer(x)
            times.append(time.perf_counter() - t0)
        return stats(times)["median"] * 1e6 / c["steps"], "the layer's forward (CPU wall time)"
    layer(x)  # warm: its allocations and plans are not the forward's
    by_name = {}
    for a, b, name in profiled(lambda: layer(x)):
        by_name[name] = by_name.get(name, 0.0) + (b - a)
    if not by_name:
        raise RuntimeError("the profiler saw no kernel of the layer's forward")
    name = max(by_name, key=by_name.get)
    return by_name[name] / c["steps"], name[:160]


def capture(m, opt, x, y):
    """The whole step captured in one CUDA graph (PyTorch's documented whole-network capture: warm-up
    iterations on a side stream, then zero_grad(set_to_none) and one captured step); (graph, loss)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            step(m, opt, x, y)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = step(m, opt, x, y)
    return g, loss


def time_replays(g, warmup, reps):
    times = []
    for r in range(warmup + reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        if r >= warmup:
            times.append(a.elapsed_time(b) / 1e3)
    return stats(times)


def device_time(row, fn):
    """row["gpu_ms"] of one call of fn; None with row["gpu_ms_error"] when the profiler cannot tell
    (the wall times measured stay in the row)."""
    try:
        row["gpu_ms"] = busy_ms(profiled(fn))
    except Exception as e:  # noqa: BLE001 - the profiler is one measurement of several
        row["gpu_ms"], row["gpu_ms_error"] = None, error_text(e)


def measure(c, backward, graphed, ref, args):
    """One side of one configuration: the row's measured fields."""
    cuda = args.device == "cuda"
    if graphed and not cuda:
        raise RuntimeError("CUDA graphs need a CUDA device (--device cpu)")
    m = model(c, backward, args.device)
    init = {k: v.detach().clone() for k, v in m.state_dict().items()}
    x, y = data(c, args.device)
    opt = optimizer(m, args.device)
    row = {}
    if graphed:
        g, loss = capture(m, opt, x, y)
        m.load_state_dict(init)  # in place: the graph's next replay steps from the initial weights
        g.replay()
        row["first_loss"] = loss.item()
        row["max_rel_err"] = max_rel_err({k: p.grad for k, p in m.named_parameters()}, ref)
        t = time_replays(g, args.warmup, args.reps)
        row.update(forward_ms=None, backward_ms=None, iteration_ms=t["median"] * 1e3, forward_us_per_step=None,
                   forward_kernel=None)
        device_time(row, g.replay)
        return row
    row["max_rel_err"] = max_rel_err(gradients(m, x, y), ref) if backward is not None else None
    m.load_state_dict(init)
    row["first_loss"] = torch.nn.functional.cross_entropy(m(x), y).item()
    opt.zero_grad(set_to_none=True)
    step(m, opt, x, y)  # the first iteration (allocations, plans), which time_iterations counts on
    t = time_iterations(m, opt, x, y, Timer(torch.device(args.device)), args.warmup, args.reps)
    row.update({k + "_ms": t[part]["median"] * 1e3 for k, part in
                (("forward", "forward"), ("backward", "backward"), ("iteration", "total"))})
    if cuda:
        def one():
            opt.zero_grad(set_to_none=True)
            step(m, opt, x, y).item()
        device_time(row, one)
    else:
        row["gpu_ms"] = None
    row["forward_us_per_step"], row["forward_kernel"] = forward_per_step(m, x, c, cuda)
    return row


def key(c):
    return {"model": c["cell"], "H": c["hidden"], "B": c["batch"], "T": c["steps"], "I": c["features"]}


def error_text(e):
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


# The order rows are measured in: each configuration's eager sides first (the headline's ratios
# even when the budget runs out), then torch.nn graphed, then bppsa.nn graphed (a capture that
# fails must not cost the other rows).
PASSES = [("torch.nn", "bppsa.nn"), ("torch.nn graphed",), ("bppsa.nn graphed",)]


def run(args, save):
    """Every row; save(rows) after each, so that a run stopped later keeps what it measured."""
    configs = [c for c in CONFIGS if not args.max_steps or c["steps"] <= args.max_steps]
    sides = {s[0]: s for s in SIDES}
    over = lambda: time.monotonic() - STARTED > args.budget  # noqa: E731
    refs, done = {}, {}

    def ordered():
        return [done[(id(c), s[0])] for c in configs for s in SIDES if (id(c), s[0]) in done]

    for names in PASSES:
        for c in configs:
            for side in names:
                _, backward, graphed = sides[side]
                row = {**key(c), "side": side}
                if over():
                    row["error"] = f"not run: the budget ({args.budget:.0f} s) was spent"
                else:
                    try:
                        if id(c) not in refs:  # eager torch.nn's gradients at the initial weights: the reference
                            refs[id(c)] = gradients(model(c, None, args.device), *data(c, args.device))
                        row.update(measure(c, backward, graphed, refs[id(c)], args))
                    except Exception as e:  # noqa: BLE001 - a row with its error; the other sides go on
                        row["error"] = error_text(e)
                t = f"{row['iteration_ms']:.3f} ms" if row.get("iteration_ms") is not None else row.get("error", "")
                print(f"headline: {c['cell']} H{c['hidden']} T{c['steps']} {side}: {t}", flush=True)
                done[(id(c), side)] = row
                save(ordered())
    return ordered()


def document(rows, args, info):
    gpu = info["gpus"][0] if info.get("gpus") else {}
    cuda = args.device == "cuda"
    return {"commit": info["commit"], "dirty": info["dirty"], "commit_detail": info["bppsa_commit"],
            "gpu": (gpu.get("name") or (torch.cuda.get_device_name() if cuda else None)) if cuda else None,
            "driver": gpu.get("driver") if cuda else None, "cuda": torch.version.cuda, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "bppsa_cuda": bppsa._native._C.cuda_summary() if cuda else None,
            "device": args.device, "cpu": info["cpu"], "cores": info["cores"], "date": info["date"],
            "timing": ("CUDA events; gpu_ms from PyTorch's profiler" if cuda else
                       "wall clock on the CPU: a check of the script, not a GPU figure"),
            "optimizer": f"torch.optim.Adam(lr={LR}, capturable={cuda}) on every side", "tf32": False,
            "reps": args.reps, "warmup": args.warmup, "budget_s": args.budget,
            "seconds": round(time.monotonic() - STARTED, 1), "rows": rows}


def fmt(v, digits=3):
    return "—" if v is None else f"{v:.{digits}f}"


def markdown(doc):
    where = (f"{doc['gpu']} (driver {doc['driver']}), CUDA {doc['cuda']}, cuDNN {doc['cudnn']}"
             if doc["device"] == "cuda" else f"the CPU ({doc['cpu']}): a check of the script, not a GPU figure")
    lines = ["# Headline: a training step, bppsa.nn against torch.nn + cuDNN", "",
             f"- {where}; PyTorch {doc['torch']}; TF32 off; {doc['optimizer']}",
             f"- bppsa commit {doc['commit']}{' (dirty: ' + doc['commit_detail'] + ')' if doc['dirty'] else ''}; "
             f"{doc['date']}",
             f"- medians of {doc['reps']} timed iterations after {doc['warmup']} untimed ones ({doc['timing']}); "
             "(×) = torch.nn's iteration over the side's, same run; graphed sides time the whole replayed step "
             "only", "",
             "| model | H | B | T | side | forward ms | backward ms | iteration ms | GPU ms | forward µs/step "
             "| max rel err |", "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    base = {(r["model"], r["H"], r["T"]): r for r in doc["rows"] if r["side"] == "torch.nn" and "error" not in r}
    for r in doc["rows"]:
        head = f"| {r['model'].upper()} | {r['H']} | {r['B']} | {r['T']} | {r['side']} |"
        if "error" in r:
            lines.append(f"{head} error: {r['error']} | | | | | |")
            continue
        it = fmt(r["iteration_ms"])
        b = base.get((r["model"], r["H"], r["T"]))
        if b and r["side"] != "torch.nn":
            it += f" ({b['iteration_ms'] / r['iteration_ms']:.2f}×)"
        err = "ref." if r["side"] == "torch.nn" else f"{r['max_rel_err']:.1e}"
        lines.append(f"{head} {fmt(r['forward_ms'])} | {fmt(r['backward_ms'])} | {it} | {fmt(r['gpu_ms'])} | "
                     f"{fmt(r['forward_us_per_step'])} | {err} |")
    kernels = sorted({(r["side"], r["forward_kernel"]) for r in doc["rows"] if r.get("forward_kernel")})
    if kernels:
        lines += ["", "Forward kernels timed: " + "; ".join(f"{s}: `{k}`" for s, k in kernels)]
    return "\n".join(lines) + "\n"


def default_out(doc):
    name = doc["gpu"] or "cpu"
    return os.path.join(ROOT, "bench", "results", "gpu", re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder for headline.{json,md} (default bench/results/gpu/<gpu-name>/)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=300, help="seconds from the start; sides past it are not run")
    ap.add_argument("--max-steps", type=int, default=0, help="leave out configurations longer than this")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = ap.parse_args()
    if args.reps < 1 or args.warmup < 1:
        ap.error("--reps and --warmup must be ≥ 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("headline: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 77
    if args.device == "cpu" and not args.out:
        ap.error("--device cpu needs --out (bench/results/gpu/ holds GPU figures only)")
    set_tf32(False)
    if args.device == "cpu":  # a check of the script: without subnormals, torch's CPU kernels are not 10–100× slower
        torch.set_flush_denormal(True)
    info = machine(extra={"tf32": False, "device": args.device})
    out = args.out or default_out(document([], args, info))
    os.makedirs(out, exist_ok=True)

    def save(rows):
        doc = document(rows, args, info)
        write_json(os.path.join(out, "headline.json"), doc)
        write_text(os.path.join(out, "headline.md"), markdown(doc))
        return doc

    rows = run(args, save)
    doc = save(rows)
    text = markdown(doc)
    print(text)
    print(f"headline: wrote {out}/headline.json and headline.md in {doc['seconds']:.0f} s")
    ref = {(r["model"], r["H"], r["T"]): r.get("first_loss") for r in rows if r["side"] == "torch.nn"}
    bad = [(r["model"], r["H"], r["T"], r["side"]) for r in rows if r.get("first_loss") is not None and
           ref.get((r["model"], r["H"], r["T"])) is not None and
           abs(r["first_loss"] - ref[(r["model"], r["H"], r["T"])]) > LOSS_TOLERANCE * max(1.0, abs(r["first_loss"]))]
    if bad:
        print(f"headline: first losses differ from torch.nn's for {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
