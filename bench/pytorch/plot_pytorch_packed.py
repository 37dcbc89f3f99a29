#!/usr/bin/env python3
"""The figure of bench/pytorch/pytorch_packed.py: (left) a whole Adam step's median time per model, every
side on the PackedSequence (solid) and on the same batch padded (hatched), torch.nn in greys and
bppsa.nn in colour, with bppsa.nn's speedup over eager torch.nn on the PackedSequence; (right) one
bppsa.nn.GRU layer's packed / padded time against the share of real steps, with y = x (the cost
following the real steps).

    scripts/python.sh bench/pytorch/plot_pytorch_packed.py DIR [STEM]

reads DIR/STEM.jsonl (the training steps) and the one-layer table of DIR/STEM.md (the layer's
medians are written only there), writes DIR/fig_STEM.png; STEM is packed (the default) or
packed_cuda. The ratios and shares are computed from the medians and step counts, not read from the
brackets. The caption's commit and date are those of the last commit of DIR/STEM.jsonl (git log),
when the file is in a git checkout: the records themselves carry neither."""
import json
import os
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# (colour, label) per side without "packed" / "padded": torch.nn in greys, bppsa.nn in colour
# (blue BP as `auto` resolves on the CPU at batch 16, red the Blelloch scan, as in plot_cnn.py)
VARIANTS = {"torch.nn": ("#444444", "torch.nn"),
            "torch.nn compiled": ("#aaaaaa", "torch.nn compiled"),
            "bppsa.nn": ("tab:blue", "bppsa.nn (auto)"),
            "bppsa.nn, blelloch": ("tab:red", "bppsa.nn, blelloch"),
            "bppsa.nn compiled": ("tab:green", "bppsa.nn compiled")}
LAYER_STYLE = {"forward": ("tab:purple", "^"), "bp": ("tab:blue", "o"), "blelloch": ("tab:red", "s"),
               "auto": ("tab:green", "D")}
BASE = "torch.nn packed"


def variant(side):
    """'bppsa.nn packed, blelloch' -> ('bppsa.nn, blelloch', True)."""
    packed = " packed" in side
    return side.replace(" packed", "").replace(" padded", ""), packed


def layer_table(path):
    """The one-layer table of STEM.md: (what was timed, as its first line says up to the first ';',
    [(lengths, real, padded, {series: (padded ms, packed ms)})])."""
    with open(path) as f:
        lines = f.read().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("## One layer"))
    except StopIteration:
        return "", []
    rows, header, what = [], None, ""
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if not what and line.strip() and not line.startswith("|"):
            what = line.split(";")[0]
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if len(cells) != len(header):  # a row skipped under --budget
            continue
        steps = re.match(r"(\d+)\s*/\s*(\d+)", cells[1])
        vals = {h: float(c.split()[0]) for h, c in zip(header[2:], cells[2:])}
        series = {}
        for h, v in vals.items():
            m = re.fullmatch(r"(forward|step) (padded|packed)(?:, (\w+))?", h)
            if m:
                name = m.group(3) or m.group(1)
                series.setdefault(name, {})[m.group(2)] = v
        rows.append((cells[0], int(steps.group(1)), int(steps.group(2)),
                     {k: (v["padded"], v["packed"]) for k, v in series.items() if len(v) == 2}))
    return what, rows


def committed(path):
    """(short commit, date) of the last commit that changed path, or None."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h %ad", "--date=short", "--", os.path.basename(path)],
                             cwd=os.path.dirname(os.path.abspath(path)), capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    parts = out.stdout.split()
    return tuple(parts) if len(parts) == 2 else None


def steps_panel(ax, records):
    models = list(dict.fromkeys(r["config"] for r in records))
    width, gap = 0.8, 1.2
    x, ticks = 0.0, []
    for model in models:
        recs = {r["side"]: r for r in records if r["config"] == model}
        base = recs[BASE]["median"] if BASE in recs else None
        first = x
        groups = list(dict.fromkeys(variant(s)[0] for s in recs))
        for g in groups:
            for packed in (True, False):
                side = next((s for s in recs if variant(s) == (g, packed)), None)
                if side is None:
                    continue
                ms = recs[side]["median"] * 1e3
                colour = VARIANTS.get(g, ("black", g))[0]
                ax.bar(x, ms, width, color=colour if packed else "white", edgecolor=colour,
                       hatch=None if packed else "///", lw=1.0)
                digits = 0 if ms >= 100 else 1 if ms >= 10 else 2
                ax.text(x, ms * 1.06, f"{ms:.{digits}f}", ha="center", va="bottom", fontsize=6.5, rotation=90)
                if packed and g.startswith("bppsa") and base:
                    ax.text(x, ms * 2.15, f"{base / recs[side]['median']:.1f}×", ha="center", va="bottom",
                            fontsize=7.5, fontweight="bold", color=colour)
                x += width
            x += 0.5
        r = recs[next(iter(recs))]
        ticks.append(((first + x - 0.5 - width) / 2,
                      f"{model}\nreal / padded steps {r['real_steps']:,} / {r['padded_steps']:,}"))
        x += gap
    ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=8)
    ax.set_yscale("log")
    top = max(r["median"] for r in records) * 1e3
    ax.set_ylim(min(r["median"] for r in records) * 1e3 / 2, top * 5)
    ax.set_ylabel("training step, median (ms)")
    r0 = records[0]
    ax.set_title(f"Adam step, batch {r0['batch']}, lengths uniform in [T/10, T]\n"
                 "bold: bppsa.nn's speedup over eager torch.nn on the same PackedSequence", fontsize=9)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    present = list(dict.fromkeys(variant(r["side"])[0] for r in records))
    handles = [Patch(color=VARIANTS.get(g, ("black", g))[0], label=VARIANTS.get(g, ("black", g))[1]) for g in present]
    handles += [Patch(facecolor="#777777", edgecolor="#777777", label="packed (PackedSequence)"),
                Patch(facecolor="white", edgecolor="#777777", hatch="///", label="padded to T")]
    ax.legend(handles=handles, fontsize=7, ncol=4, loc="upper center", framealpha=0.9)


def layer_panel(ax, what, rows, text):
    if not rows:
        ax.text(0.5, 0.5, "no one-layer table in " + text, ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    share = [real / padded for _, real, padded, _ in rows]
    order = sorted(range(len(rows)), key=lambda i: share[i])
    names = list(dict.fromkeys(k for _, _, _, s in rows for k in s))
    top = 1.0
    for name in names:
        pts = [(share[i], rows[i][3][name][1] / rows[i][3][name][0]) for i in order if name in rows[i][3]]
        colour, marker = LAYER_STYLE.get(name, ("black", "x"))
        label = "forward (no grad)" if name == "forward" else f"step (forward + backward), {name}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=colour, label=label, ms=5)
        top = max(top, *(p[1] for p in pts))
    ax.plot([0, 1.05], [0, 1.05], color="gray", ls="--", lw=1, label="y = x: cost follows the real steps")
    ax.axhline(1, color="gray", lw=0.6)
    for i in order:
        ax.axvline(share[i], color="#cccccc", lw=0.6, zorder=0)
    ax.text(0.98, 0.03, "lengths (real / padded steps):\n" + "\n".join(f"{share[i]:.2f}  {rows[i][0]}" for i in order),
            transform=ax.transAxes, ha="right", va="bottom", multialignment="left", fontsize=7, color="#333333",
            bbox=dict(facecolor="white", edgecolor="#cccccc", alpha=0.9))
    ax.set(xlim=(0, 1.08), ylim=(0, max(1.3, top * 1.08)), xlabel="real / padded steps",
           ylabel="packed / padded time")
    ax.set_title(f"one layer alone, {what}:\npacked / padded time for {len(rows)} length distributions",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def main():
    if not 2 <= len(sys.argv) <= 3 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    out = sys.argv[1]
    stem = sys.argv[2] if len(sys.argv) == 3 else "packed"
    jsonl = os.path.join(out, stem + ".jsonl")
    with open(jsonl) as f:
        records = [json.loads(line) for line in f if line.strip()]
    records = [r for r in records if "median" in r]  # sides skipped under --no-compile / --budget
    if not records:
        sys.exit(f"no measured records in {jsonl}")
    md = os.path.join(out, stem + ".md")
    what, rows = layer_table(md) if os.path.exists(md) else ("", [])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.2), gridspec_kw={"width_ratios": [1.55, 1]})
    steps_panel(ax1, records)
    layer_panel(ax2, what, rows, md)
    m = records[0]["machine"]
    where = (f"{m['cpu']}, {m['cores']} cores, {m['threads']} threads" if "cpu" in m
             else f"{m.get('gpu', '?')}, CUDA {m.get('torch_cuda', '?')}")
    when = committed(jsonl)
    when = f"; records committed in {when[0]}, {when[1]}" if when else ""
    fig.suptitle(f"Packed batches: {where}; PyTorch {m['torch']}, bppsa {m['bppsa']}{when}", fontsize=9)
    fig.tight_layout()
    path = os.path.join(out, f"fig_{stem}.png")
    fig.savefig(path + ".tmp.png", dpi=100, pil_kwargs={"optimize": True})
    os.replace(path + ".tmp.png", path)
    print("wrote", path)


if __name__ == "__main__":
    main()
