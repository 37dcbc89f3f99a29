#!/usr/bin/env python3
"""Figures of the GPU benchmark (bench/gpu/gpu.py's OUT/gpu_bench.json), written beside it.

Usage: plot_gpu.py OUT_DIR
       plot_gpu.py --compare DIR DIR [DIR …] --out FILE.png

  gpu_fig8_sweeps.png  the paper's Fig. 8 on this GPU: backward and iteration time against T (batch
                       16) and against the batch (T 1000), log-log, and the speedup over PyTorch
                       (backward solid, iteration dashed), every number from the same run
  gpu_shapes.png       backward and iteration time of the GRU s/m/l shapes, the RNN at H 20/64/256
                       and the LSTM, PyTorch against each bppsa method
  gpu_memory.png       device memory at the peak of a training step, against T and the batch
  gpu_roofline.png     the fused scan alone on the GPU's FP32 roofline (when it was measured)
--compare: hardware sensitivity (the paper's RTX 2070 vs 2080 Ti figure): the backward pass against
T of every method on each GPU's results (e.g. bench/results/gpu/*/), and bppsa's speedup over that
GPU's own PyTorch.
Exits 0 with a message when matplotlib is missing (the GPU machine may have none: copy the JSON
and plot it elsewhere)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_report import label, med, peak_bytes  # noqa: E402

STYLE = {"pytorch": ("black", "D"), "pytorch-tf32": ("gray", "d"), "bp": ("tab:blue", "o"),
         "fused": ("tab:red", "s"), "blelloch": ("tab:brown", "D"), "hybrid": ("tab:green", "^"), "linear": ("tab:olive", "v"),
         "auto": ("tab:purple", "x")}


def timed(doc):
    return [r for r in doc["records"] if r["impl"] in ("pytorch", "bppsa") and "backward" in r]


def series(doc, sweep, xfield):
    """{method: [(x, record)]} over the configurations of a sweep, sorted by x."""
    out = {}
    for r in timed(doc):
        if sweep in r.get("sweeps", []):
            out.setdefault(r["method"], []).append((r[xfield], r))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in out.items()}


def title_line(doc):
    m = doc["machine"]
    gpu = ", ".join(g["name"] for g in m.get("gpus") or []) or doc["device"]
    return (f"{gpu}; PyTorch {m.get('torch')} + cuDNN {m.get('cudnn')}; bppsa {str(m.get('bppsa_commit'))[:10]}"
            + (" (quick run)" if doc["quick"] else ""))


def save(plt, fig, path):
    """Lays the figure out, writes it to path (through a temporary file) and closes it."""
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    print(f"wrote {path}")
    plt.close(fig)


def plot_sweeps(plt, doc, d):
    rows = [(s, x, lab) for s, x, lab in (("rnn_T", "steps", "sequence length T (RNN H 20, batch 16)"),
                                          ("rnn_B", "batch", "batch size (RNN H 20, T 1000)")) if series(doc, s, x)]
    if not rows:
        return
    fig, axes = plt.subplots(len(rows), 3, figsize=(16, 4.8 * len(rows)), squeeze=False)
    for i, (sweep, xf, xlabel) in enumerate(rows):
        s = series(doc, sweep, xf)
        torch = {x: r for x, r in s.get("pytorch", [])}
        for method, pts in s.items():
            c, mk = STYLE.get(method, ("gray", "x"))
            xs = [x for x, _ in pts]
            axes[i][0].plot(xs, [med(r, "backward") * 1e3 for _, r in pts], marker=mk, color=c,
                            label=label(method, doc["device"]))
            axes[i][1].plot(xs, [med(r, "total") * 1e3 for _, r in pts], marker=mk, color=c,
                            label=label(method, doc["device"]))
            if method.startswith("pytorch"):
                continue
            sp = [(x, torch[x]["backward"]["median"] / med(r, "backward")) for x, r in pts if x in torch]
            it = [(x, torch[x]["total"]["median"] / med(r, "total")) for x, r in pts if x in torch]
            if sp:
                axes[i][2].plot(*zip(*sp), marker=mk, color=c, label=label(method, doc["device"]) + " backward")
                axes[i][2].plot(*zip(*it), marker=mk, color=c, ls="--", alpha=0.6,
                                label=label(method, doc["device"]) + " iteration")
        titles = ["backward pass (median ms)", "training iteration (median ms)", "speedup over PyTorch (same run)"]
        for col in range(3):
            ax = axes[i][col]
            ax.set_xscale("log", base=2 if xf == "batch" else 10)
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_title(titles[col])
            ax.grid(True, which="both", alpha=0.3)
        axes[i][2].axhline(1, color="gray", lw=1)
        axes[i][0].legend(fontsize=8)
        if axes[i][2].lines[1:]:
            axes[i][2].legend(fontsize=7, ncol=2)
    fig.suptitle("bppsa on the GPU vs PyTorch + cuDNN (Fig. 8 of the paper) — " + title_line(doc), fontsize=11)
    save(plt, fig, os.path.join(d, "gpu_fig8_sweeps.png"))


def plot_shapes(plt, doc, d):
    configs = [c for c in doc["plan"]["configs"]
               if any(s.startswith("gru_") or s in ("rnn_H", "lstm") for s in c["sweeps"])]
    recs = {(r["id"], r["method"]): r for r in timed(doc)}
    methods = [m for m in STYLE if any((c["id"], m) in recs for c in configs)]
    if not configs or not methods:
        return
    fig, axes = plt.subplots(1, 2, figsize=(16, 5))
    width = 0.8 / len(methods)
    labels = [f"{c['cell'].upper()} H{c['hidden']}\nT{c['steps']} F{c['features']}" for c in configs]
    for j, part in enumerate(("backward", "total")):
        ax = axes[j]
        for k, m in enumerate(methods):
            xs, ys = [], []
            for i, c in enumerate(configs):
                r = recs.get((c["id"], m))
                if r:
                    xs.append(i + (k - (len(methods) - 1) / 2) * width)
                    ys.append(med(r, part) * 1e3)
            ax.bar(xs, ys, width=width, color=STYLE[m][0], label=label(m, doc["device"]))
        ax.set_xticks(range(len(configs)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("median ms")
        ax.set_title(("backward pass" if part == "backward" else "training iteration") + " (batch 16)")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("GRU s/m/l shapes, hidden sizes, LSTM — " + title_line(doc), fontsize=11)
    save(plt, fig, os.path.join(d, "gpu_shapes.png"))


def plot_memory(plt, doc, d):
    rows = [(s, x, lab) for s, x, lab in (("rnn_T", "steps", "sequence length T (batch 16)"),
                                          ("rnn_B", "batch", "batch size (T 1000)")) if series(doc, s, x)]
    if not rows:
        return
    fig, axes = plt.subplots(1, len(rows), figsize=(7 * len(rows), 4.8), squeeze=False)
    for col, (sweep, xf, xlabel) in enumerate(rows):
        ax = axes[0][col]
        for method, pts in series(doc, sweep, xf).items():
            pts = [(x, peak_bytes(r)) for x, r in pts if peak_bytes(r)]
            if not pts:
                continue
            c, mk = STYLE.get(method, ("gray", "x"))
            ax.plot([x for x, _ in pts], [b / 2**20 for _, b in pts], marker=mk, color=c,
                    label=label(method, doc["device"]))
        ax.set_xscale("log", base=2 if xf == "batch" else 10)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("device memory at the step's peak (MiB)")
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle("Training-step peak device memory (RNN H 20) — " + title_line(doc), fontsize=11)
    save(plt, fig, os.path.join(d, "gpu_memory.png"))


def plot_roofline(plt, doc, d):
    rows = [c for c in doc["comparison"] if c.get("method") == "fused-alone" and c.get("roofline_s")]
    if not rows:
        return
    peak, bw = rows[0]["peak_tflops"], rows[0]["peak_gbs"] / 1e3  # TFLOP/s, TB/s
    ai = [c["flops"] / c["bytes"] for c in rows]
    lo, hi = min(ai + [peak / bw]) / 4, max(ai + [peak / bw]) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="black", label=f"roofline: {peak:.1f} TFLOP/s FP32, "
            f"{bw:.2f} TB/s")
    colors = plt.get_cmap("tab20")
    for i, (c, x) in enumerate(zip(rows, ai)):
        ax.plot([x], [c["achieved_tflops"]], marker={"rnn": "o", "gru": "s", "lstm": "^"}.get(c["cell"], "x"), ls="",
                color=colors(i % 20), label=f"{c['id']}: {c['x_from_roofline']:.1f}× from the roof")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("The fused scan alone — " + title_line(doc), fontsize=9)
    save(plt, fig, os.path.join(d, "gpu_roofline.png"))


def plot_compare(plt, dirs, out):
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    dashes = ["-", "--", ":", "-."]
    for i, d in enumerate(dirs):
        with open(os.path.join(d, "gpu_bench.json")) as f:
            doc = json.load(f)
        gpu = ", ".join(g["name"] for g in doc["machine"].get("gpus") or []) or os.path.basename(d.rstrip("/"))
        s = series(doc, "rnn_T", "steps")
        torch = {x: r for x, r in s.get("pytorch", [])}
        for method, pts in s.items():
            if method == "pytorch-tf32":
                continue
            c, mk = STYLE.get(method, ("gray", "x"))
            name = f"{label(method, doc['device'])} — {gpu}"
            axes[0].plot([x for x, _ in pts], [med(r, "backward") * 1e3 for _, r in pts], marker=mk, color=c,
                         ls=dashes[i % 4], label=name)
            sp = [(x, torch[x]["backward"]["median"] / med(r, "backward")) for x, r in pts if x in torch]
            if sp and not method.startswith("pytorch"):
                axes[1].plot(*zip(*sp), marker=mk, color=c, ls=dashes[i % 4], label=name)
    for ax, t in zip(axes, ("backward pass (median ms)", "backward speedup over that GPU's PyTorch")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T (RNN H 20, batch 16)")
        ax.set_title(t)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Hardware sensitivity: the same sweep on each GPU", fontsize=11)
    save(plt, fig, out)


def main():
    args = sys.argv[1:]
    compare = args[:1] == ["--compare"]
    if compare:
        if "--out" not in args or args.index("--out") + 2 != len(args) or args.index("--out") < 3:
            sys.exit("usage: plot_gpu.py --compare DIR DIR [DIR …] --out FILE.png")
        dirs, out = args[1:args.index("--out")], args[-1]
    elif len(args) != 1:
        sys.exit("usage: plot_gpu.py OUT_DIR  |  plot_gpu.py --compare DIR DIR [DIR …] --out FILE.png")
    try:
        import matplotlib
    except ImportError:
        print("plot_gpu: matplotlib is not installed here: no figures; run bench/gpu/plot_gpu.py where it is "
              "(the JSON has every number)")
        return 0
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if compare:
        plot_compare(plt, dirs, out)
        return 0
    d = args[0]
    with open(os.path.join(d, "gpu_bench.json")) as f:
        doc = json.load(f)
    for f in (plot_sweeps, plot_shapes, plot_memory, plot_roofline):
        f(plt, doc, d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
