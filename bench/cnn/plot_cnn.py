#!/usr/bin/env python3
"""Figures (PNG) of the CNN pruning benchmark.

Usage: plot_cnn.py OUT   (reads the JSON files below from OUT and writes the PNGs beside
them; a file that is missing or unreadable is skipped with a message; exits 0).

  fig_prune.png   from OUT/prune.json: (left) backward-pass median time per batch (log y)
                  by sparsity level for bppsa BP, Blelloch, hybrid and PyTorch; (right) test
                  accuracy after retraining (final epoch) by sparsity level for BP, Blelloch
                  and PyTorch, with the dense model's accuracy before pruning dashed
  fig10.png       from OUT/fig10_s0.json, fig10_s90.json, fig10_s99.json (the output of
                  `bppsa jacobians --json`, whichever exist), like the paper's Fig. 10: one
                  panel per file, FLOPs (log) against the step: the BPPSA critical path per
                  scan phase, every product of the scan as a grey dot at its phase, and BP's
                  FLOPs per step

prune.json: {"machine", "arch", "threads", "batch", "levels": [{"sparsity", "time": {impl:
{"backward": {"median", ...}, "forward": {...}}}, "accuracy": {impl: [test accuracy per
epoch]}, "dense_accuracy"}]} with impl among bp, blelloch, hybrid, pytorch."""
import json
import textwrap
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"bp": ("tab:blue", "o"), "blelloch": ("tab:red", "s"), "hybrid": ("tab:green", "^"),
         "pytorch": ("black", "D")}
LABEL = {"bp": "bppsa BP", "blelloch": "bppsa Blelloch", "hybrid": "bppsa hybrid", "pytorch": "PyTorch autograd"}
TIME_IMPLS = ("bp", "blelloch", "hybrid", "pytorch")
ACC_IMPLS = ("bp", "blelloch", "pytorch")
FIG10_LEVELS = (("fig10_s0.json", 0), ("fig10_s90.json", 90), ("fig10_s99.json", 99))


def note(msg):
    print(f"plot_cnn: {msg}", file=sys.stderr)


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        note(f"{p} is missing; skipped")
        return None
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        note(f"cannot read {p}: {e}; skipped")
        return None


def machine_text(m):
    """The "machine" field: a string, or a dict as bench/paper/paper.py writes it."""
    if isinstance(m, dict):
        parts = [str(m[k]) for k in ("cpu",) if k in m]
        if "cores" in m:
            parts.append(f"{m['cores']} cores")
        if "threads_used" in m:
            parts.append(f"{m['threads_used']} threads")
        if "torch" in m:
            parts.append(f"PyTorch {m['torch']}")
        return ", ".join(parts) or json.dumps(m)
    return str(m) if m else ""


def save(fig, path):
    tmp = path + ".tmp"
    fig.savefig(tmp, dpi=130, format="png", bbox_inches="tight")  # the legends below the axes included
    plt.close(fig)
    os.replace(tmp, path)
    print(f"plot_cnn: wrote {path}")


def level_label(s):
    return f"{100 * s:g}% pruned" if s else "dense"


def number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def grouped_bars(ax, groups, impls, value):
    """Bars per impl inside each group; value(group, impl) → float or None (skipped).
    Returns the impls drawn."""
    present = [m for m in impls if any(number(value(g, m)) for g in groups)]
    width = 0.8 / max(1, len(present))
    for j, m in enumerate(present):
        xs, ys = [], []
        for i, g in enumerate(groups):
            v = value(g, m)
            if number(v):
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(v)
        ax.bar(xs, ys, width, color=STYLE[m][0], label=LABEL[m], edgecolor="white", linewidth=0.5)
    ax.set_xticks(range(len(groups)))
    return present


def plot_prune(d):
    res = load(d, "prune.json")
    if res is None:
        return
    levels = sorted((lv for lv in res.get("levels", []) if isinstance(lv, dict) and "sparsity" in lv),
                    key=lambda lv: lv["sparsity"])
    if not levels:
        note(f"{d}/prune.json has no levels; fig_prune.png skipped")
        return
    fig, (ax_t, ax_a) = plt.subplots(1, 2, figsize=(12, 4.8))

    def t(lv, m):
        return lv.get("time", {}).get(m, {}).get("backward", {}).get("median")

    drawn = grouped_bars(ax_t, levels, TIME_IMPLS, t)
    ax_t.set_xticklabels([level_label(lv["sparsity"]) for lv in levels])
    ax_t.set_yscale("log")
    ax_t.set_ylabel("backward pass, median seconds per batch")
    ax_t.set_title("Backward-pass time")
    ax_t.grid(axis="y", which="both", alpha=0.3)
    if drawn:
        ax_t.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(drawn))
    else:
        ax_t.text(0.5, 0.5, "no timings", ha="center", va="center", transform=ax_t.transAxes)

    def a(lv, m):
        acc = lv.get("accuracy", {}).get(m)
        return acc[-1] if isinstance(acc, list) and acc else None

    drawn = grouped_bars(ax_a, levels, ACC_IMPLS, a)
    width = 0.8 / max(1, len(drawn))
    for i, lv in enumerate(levels):  # the values on the bars: close accuracies are hard to read
        for j, m in enumerate(drawn):
            v = a(lv, m)
            if number(v):
                ax_a.text(i - 0.4 + width * (j + 0.5), v, f"{v:.3f}", ha="center", va="bottom", fontsize=7)
    ax_a.set_xticklabels([level_label(lv["sparsity"]) for lv in levels])
    dense = next((lv["dense_accuracy"] for lv in levels if number(lv.get("dense_accuracy"))), None)
    if dense is not None:
        ax_a.axhline(dense, color="grey", linestyle="--", label=f"dense, before pruning ({dense:.3f})")
    top = max([dense or 0] + [a(lv, m) for lv in levels for m in drawn if number(a(lv, m))])
    ax_a.set_ylim(0, 1.08 if top <= 1 else 1.08 * top)  # fractions (0..1), or percentages
    ax_a.set_ylabel("test accuracy after retraining (final epoch)")
    ax_a.set_title("Accuracy")
    ax_a.grid(axis="y", alpha=0.3)
    if drawn or dense is not None:
        ax_a.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    else:
        ax_a.text(0.5, 0.5, "no accuracies", ha="center", va="center", transform=ax_a.transAxes)

    head = f"CNN pruning: {res.get('arch', '?')}, batch {res.get('batch', '?')}, {res.get('threads', '?')} threads"
    m = machine_text(res.get("machine"))
    fig.suptitle(head + (f"\n{m}" if m else ""), fontsize=10)
    fig.tight_layout()
    save(fig, os.path.join(d, "fig_prune.png"))


def positive(v):
    return v if number(v) and v > 0 else float("nan")  # zeros (empty phases) have no place on a log axis


def plot_fig10(d):
    runs = []
    for name, s in FIG10_LEVELS:
        r = load(d, name)
        if r is None:
            continue
        if not isinstance(r, dict) or not isinstance(r.get("phase_flops"), list) \
                or not isinstance(r.get("bp_step_flops"), list):
            note(f"{d}/{name} has no phase_flops / bp_step_flops; skipped")
            continue
        runs.append((name, s, r))
    if not runs:
        note("no fig10_s*.json; fig10.png skipped")
        return
    fig, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 4.6), squeeze=False)
    machine = ""
    for ax, (name, s, r) in zip(axes[0], runs):
        machine = machine or machine_text(r.get("machine"))
        # Steps count from 1 on both: BPPSA's scan phase p at p+1, BP's step i at i+1.
        px, py = [], []
        for p in r.get("products", []):
            if isinstance(p, dict) and number(p.get("phase")) and number(p.get("flops")) and p["flops"] > 0:
                px.append(p["phase"] + 1)
                py.append(p["flops"])
        if px:
            ax.scatter(px, py, s=4, color="grey", alpha=0.4, linewidths=0, label="BPPSA products (each)", zorder=1)
        phases = r["phase_flops"]
        ax.plot(range(1, len(phases) + 1), [positive(v) for v in phases], color="tab:red", marker="o", ms=3,
                label="BPPSA critical path (per level)", zorder=3)
        steps = r["bp_step_flops"]
        ax.plot(range(1, len(steps) + 1), [positive(v) for v in steps], color="tab:blue", lw=1.2,
                marker="." if len(steps) <= 200 else None, label="BP (per step)", zorder=2)
        ax.set_yscale("log")
        ax.set_xlabel("step (scan phase for BPPSA, layer step for BP)")
        ax.set_ylabel("FLOPs")
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=7)
        crit, bp = r.get("critical_flops"), r.get("bp_flops")
        # "pruned 90.00 % of N weights (per tensor…)" → "pruned 90.00 % of N weights"
        pruning = (r.get("pruning") or "").split(" (")[0] or (f"{s}% pruned" if s else "dense")
        title = pruning
        if number(crit) and number(bp):
            ratio = f", critical/BP = {crit / bp:.3g}" if bp > 0 else ""
            title += f"\nBPPSA critical path {crit:.3g} vs BP {bp:.3g} FLOPs{ratio}"
        ax.set_title(title, fontsize=9)
    if not machine:
        prune = None
        if os.path.exists(os.path.join(d, "prune.json")):
            try:
                with open(os.path.join(d, "prune.json")) as f:
                    prune = json.load(f)
            except (OSError, ValueError):
                prune = None
        machine = machine_text(prune.get("machine")) if isinstance(prune, dict) else ""
    network = "\n".join(textwrap.wrap(str(runs[0][2].get("network", "")), 160))
    fig.suptitle("FLOPs per step: BPPSA vs BP (cf. paper Fig. 10)" + (f", {machine}" if machine else "") +
                 (f"\n{network}" if network else ""),
                 fontsize=10)
    fig.tight_layout()
    save(fig, os.path.join(d, "fig10.png"))


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) == 2 else 2)
    d = sys.argv[1]
    if not os.path.isdir(d):
        note(f"{d} is not a folder; nothing to plot")
        return
    for f in (plot_prune, plot_fig10):
        try:
            f(d)
        except Exception as e:  # a malformed file must not stop the other figure
            note(f"{f.__name__} failed: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
