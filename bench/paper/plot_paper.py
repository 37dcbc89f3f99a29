#!/usr/bin/env python3
"""Figures (PNG) and tables (CSV) from bench/paper/paper.py's results.

Usage: plot_paper.py RESULTS_DIR   (reads RESULTS_DIR/<section>.json, writes the PNGs and
CSVs beside them; sections that were not run are skipped).

  fig8_rnn_sweeps.png   backward and iteration time, and speedup over PyTorch, against T
                        (batch 16) and against the batch (T 1000)
  fig7_curves.png       training loss against wall-clock time (T 1000, batch 16)
  fig9_gru.png          GRU time breakdown per s/m/l shape × batch
  memory.png            peak memory growth during the backward pass
  simulate.png          bppsa simulate: speedup over BP against n for p virtual workers
  <section>.csv         the numbers behind each figure, ours and PyTorch's side by side"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"bp": ("tab:blue", "o"), "blelloch": ("tab:red", "s"), "hybrid": ("tab:green", "^"),
         "auto": ("tab:purple", "x"), "pytorch": ("black", "D")}
LABEL = {"bp": "bppsa BP", "blelloch": "bppsa Blelloch", "hybrid": "bppsa hybrid", "auto": "bppsa auto",
         "pytorch": "PyTorch autograd"}


def key(r):
    return "pytorch" if r["impl"] == "pytorch" else r["method"]


def med(r, part):
    return r[part]["median"] if part in r else float("nan")


def load(d, name):
    p = os.path.join(d, name + ".json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def machine_line(res):
    m = res["machine"]
    return f"{m['cpu']}, {m['cores']} cores, {m['threads_used']} threads, PyTorch {m['torch']} (CPU)"


def series(records, xfield):
    """{impl: [(x, record)]} sorted by x."""
    out = {}
    for r in records:
        out.setdefault(key(r), []).append((r[xfield], r))
    return {k: sorted(v, key=lambda t: t[0]) for k, v in out.items()}


def write_csv(path, header, rows, res):
    """Rows plus the machine they were measured on (last column, the same on every row)."""
    m = machine_line(res)
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header + ["machine"])
        w.writerows(r + [m] for r in rows)
    os.replace(tmp, path)


def sweep_csv(d, res, xfield, name):
    rows = []
    torch = {r[xfield]: r for r in res["records"] if r["impl"] == "pytorch"}
    for r in res["records"]:
        t = torch[r[xfield]]
        rows.append([r[xfield], key(r), r.get("resolved", ""), med(r, "forward"), med(r, "backward"),
                     med(r, "jacobians"), med(r, "scan"), med(r, "param_grads"), med(r, "optimizer"), med(r, "total"),
                     r["backward"]["min"], r["backward"]["max"], t["backward"]["median"] / r["backward"]["median"],
                     t["total"]["median"] / r["total"]["median"], r["memory"]["backward_peak_bytes"]])
    write_csv(os.path.join(d, name + ".csv"),
              [xfield, "impl", "resolved", "forward_s", "backward_s", "jacobians_s", "scan_s", "param_grads_s",
               "optimizer_s", "total_s", "backward_min_s", "backward_max_s", "backward_speedup_vs_pytorch",
               "total_speedup_vs_pytorch", "backward_peak_bytes"], rows, res)


def plot_sweeps(d, rt, rb):
    rows = [(r, x, lab) for r, x, lab in ((rt, "steps", "sequence length T (batch 16)"),
                                         (rb, "batch", "batch size (T 1000)")) if r]
    fig, axes = plt.subplots(len(rows), 3, figsize=(16, 4.6 * len(rows)), squeeze=False)
    for row, (res, xf, xlabel) in enumerate(rows):
        s = series(res["records"], xf)
        torch = {x: r for x, r in s["pytorch"]}
        for k, pts in s.items():
            c, m = STYLE[k]
            xs = [x for x, _ in pts]
            ax = axes[row][0]
            ax.plot(xs, [med(r, "backward") for _, r in pts], marker=m, color=c, label=LABEL[k])
            if k in ("blelloch",):
                ax.plot(xs, [med(r, "jacobians") for _, r in pts], ls=":", color=c, label="  its Jacobian generation")
            axes[row][1].plot(xs, [med(r, "total") for _, r in pts], marker=m, color=c, label=LABEL[k])
            if k != "pytorch":
                axes[row][2].plot(xs, [torch[x]["backward"]["median"] / med(r, "backward") for x, r in pts],
                                  marker=m, color=c, label=LABEL[k] + " backward")
                axes[row][2].plot(xs, [torch[x]["total"]["median"] / med(r, "total") for x, r in pts], marker=m,
                                  color=c, ls="--", alpha=0.6, label=LABEL[k] + " iteration")
        titles = ["backward pass (median s)", "training iteration (median s)", "speedup over PyTorch (same run)"]
        for col in range(3):
            ax = axes[row][col]
            ax.set_xscale("log", base=2 if xf == "batch" else 10)
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_title(titles[col])
            ax.grid(True, which="both", alpha=0.3)
        axes[row][2].axhline(1, color="gray", lw=1)
        axes[row][0].legend(fontsize=8)
        axes[row][2].legend(fontsize=7, ncol=2)
    fig.suptitle("RNN H 20 on bitstream, bppsa vs PyTorch — " + machine_line(rows[0][0]))
    fig.tight_layout()
    fig.savefig(os.path.join(d, "fig8_rnn_sweeps.png"), dpi=110)
    plt.close(fig)


def plot_memory(d, rt, rb):
    rows = [(r, x, lab) for r, x, lab in ((rt, "steps", "sequence length T (batch 16)"),
                                         (rb, "batch", "batch size (T 1000)")) if r]
    fig, axes = plt.subplots(1, len(rows), figsize=(7 * len(rows), 4.6), squeeze=False)
    for col, (res, xf, xlabel) in enumerate(rows):
        ax = axes[0][col]
        for k, pts in series(res["records"], xf).items():
            c, m = STYLE[k]
            ax.plot([x for x, _ in pts], [max(r["memory"]["backward_peak_bytes"], 4096) / 2**20 for _, r in pts],
                    marker=m, color=c, label=LABEL[k])
        ax.set_xscale("log", base=2 if xf == "batch" else 10)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("peak RSS growth during backward (MiB)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Backward-pass peak memory — " + machine_line(rows[0][0]))
    fig.tight_layout()
    fig.savefig(os.path.join(d, "memory.png"), dpi=110)
    plt.close(fig)


def plot_curves(d, res):
    fig, ax = plt.subplots(figsize=(8, 5))
    rows = []
    for r in res["records"]:
        k = key(r)
        c, _ = STYLE[k]
        ax.plot(r["seconds"], r["loss"], color=c, label=f"{LABEL[k]} ({r['seconds'][-1]:.1f} s)")
        rows += [[k, i, s, lo] for i, s, lo in zip(r["iters"], r["seconds"], r["loss"])]
    ax.set_xscale("log")
    ax.set_xlabel("wall-clock training time (s)")
    ax.set_ylabel("training loss (mean over logging window)")
    ax.set_title(f"RNN on bitstream T 1000, batch 16, Adam 3e-5, {res['iters']} iterations\n" + machine_line(res),
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(d, "fig7_curves.png"), dpi=110)
    plt.close(fig)
    write_csv(os.path.join(d, "curves.csv"), ["impl", "iteration", "seconds", "loss"], rows, res)


def plot_gru(d, res):
    recs = res["records"]
    groups = []
    for r in recs:
        g = (r["shape"], r["batch"])
        if g not in groups:
            groups.append(g)
    impls = ["bp", "blelloch", "hybrid", "auto", "pytorch"]
    parts = [("forward", "forward", "tab:gray"), ("jacobians", "Jacobian generation", "tab:orange"),
             ("scan", "scan / BP recurrence", "tab:red"), ("param_grads", "parameter gradients", "tab:blue"),
             ("optimizer", "optimizer", "tab:green")]
    fig, ax = plt.subplots(figsize=(16, 5.5))
    width = 0.16
    rows = []
    seen = set()
    for gi, g in enumerate(groups):
        torch = next(r for r in recs if (r["shape"], r["batch"]) == g and r["impl"] == "pytorch")
        for ii, k in enumerate(impls):
            r = next(r for r in recs if (r["shape"], r["batch"]) == g and key(r) == k)
            x = gi + (ii - 2) * width
            bottom = 0.0
            if k == "pytorch":
                stack = [("forward", med(r, "forward"), "tab:gray"), ("backward (autograd)", med(r, "backward"), "black"),
                         ("optimizer", med(r, "optimizer"), "tab:green")]
            else:
                stack = [(lab, med(r, p), c) for p, lab, c in parts]
                other = med(r, "backward") - med(r, "jacobians") - med(r, "scan") - med(r, "param_grads")
                stack.insert(4, ("rest of backward", max(other, 0.0), "tab:brown"))
            for lab, v, c in stack:
                ax.bar(x, v * 1e3, width, bottom=bottom, color=c, edgecolor="white", lw=0.3,
                       label=lab if lab not in seen else None)
                seen.add(lab)
                bottom += v * 1e3
            ax.text(x, bottom, {"bp": "BP", "blelloch": "Bl", "hybrid": "Hy", "auto": "au", "pytorch": "PT"}[k],
                    ha="center", va="bottom", fontsize=6)
            rows.append([g[0], g[1], r["steps"], r["features"], k, med(r, "forward"), med(r, "backward"),
                         med(r, "jacobians"), med(r, "scan"), med(r, "param_grads"), med(r, "optimizer"),
                         med(r, "total"), torch["total"]["median"] / med(r, "total"),
                         r["memory"]["backward_peak_bytes"]])
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{s} (T {next(r['steps'] for r in recs if r['shape'] == s)}, "
                        f"F {next(r['features'] for r in recs if r['shape'] == s)})\nbatch {b}" for s, b in groups],
                       fontsize=8)
    ax.set_ylabel("median iteration time (ms)")
    ax.set_title(f"GRU H 20 — {res['data']}\nbars: BP, Blelloch, hybrid, auto (bppsa), PT = PyTorch; "
                 + machine_line(res), fontsize=9)
    ax.legend(fontsize=8, ncol=4)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "fig9_gru.png"), dpi=110)
    plt.close(fig)
    write_csv(os.path.join(d, "gru.csv"),
              ["shape", "batch", "steps", "features", "impl", "forward_s", "backward_s", "jacobians_s", "scan_s",
               "param_grads_s", "optimizer_s", "total_s", "total_speedup_vs_pytorch", "backward_peak_bytes"], rows, res)


def plot_simulate(d, res):
    runs = res["runs"]
    cols = 2
    nrows = (len(runs) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(13, 5 * nrows), squeeze=False)
    rows, vrows = [], []
    cmap = plt.get_cmap("viridis")
    for ax, run in zip(axes.flat, runs):
        chain = run["chain"]
        ps = sorted({r["p"] for r in run["rows"]})
        for i, p in enumerate(ps):
            pts = sorted((r["n"], r) for r in run["rows"] if r["p"] == p)
            c = cmap(i / max(1, len(ps) - 1))
            ax.plot([n for n, _ in pts], [r["speedup"] for _, r in pts], marker=".", color=c, label=f"p = {p}")
            ax.plot([n for n, _ in pts], [r["bp_scan_s"] / r["scan_s"] for _, r in pts], ls=":", color=c)
            for n, r in pts:
                if r.get("measured_s"):
                    ax.plot(n, r["measured_speedup"], "*", color=c, mec="black", ms=9)
        ax.axhline(1, color="gray", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("chain length n (batch 1)")
        ax.set_ylabel("speedup over BP on the same p")
        ax.set_title(f"{run['requested_algorithm']}, {chain['kind']} {chain['dim']}×{chain['dim']}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        for r in run["rows"]:
            rows.append([run["requested_algorithm"], chain["kind"], chain["dim"], r["n"], r["p"], r["predicted_s"],
                         r["bp_predicted_s"], r["speedup"], r["bp_scan_s"] / r["scan_s"]])
            if r.get("measured_s"):
                vrows.append([run["requested_algorithm"], chain["kind"], r["n"], r["p"], r["predicted_s"],
                              r["measured_s"], r["error"], r["bp_predicted_s"], r["bp_measured_s"], r["bp_error"]])
    fig.suptitle("bppsa simulate, batch 1: solid = predicted Scanner::run, dotted = the schedule alone, "
                 "★ = measured here;\nper-product costs calibrated on " + machine_line(res), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(d, "simulate.png"), dpi=110)
    plt.close(fig)
    write_csv(os.path.join(d, "simulate.csv"),
              ["algorithm", "kind", "dim", "n", "p", "predicted_s", "bp_predicted_s", "speedup", "schedule_speedup"],
              rows, res)
    write_csv(os.path.join(d, "simulate_validation.csv"),
              ["algorithm", "kind", "n", "p", "predicted_s", "measured_s", "relative_error", "bp_predicted_s",
               "bp_measured_s", "bp_relative_error"], vrows, res)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    rt, rb = load(d, "rnn_T"), load(d, "rnn_B")
    if rt:
        sweep_csv(d, rt, "steps", "rnn_T")
    if rb:
        sweep_csv(d, rb, "batch", "rnn_B")
    if rt or rb:
        plot_sweeps(d, rt, rb)
        plot_memory(d, rt, rb)
    for name, fn in (("curves", plot_curves), ("gru", plot_gru), ("simulate", plot_simulate)):
        res = load(d, name)
        if res:
            fn(d, res)
    print("figures in", d, ":", ", ".join(sorted(f for f in os.listdir(d) if f.endswith(".png"))))


if __name__ == "__main__":
    main()
