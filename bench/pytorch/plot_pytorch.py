#!/usr/bin/env python3
"""The figure of bench/pytorch/pytorch.py: a training step's median time against T for the RNN (H 20,
batch 16), torch.nn against bppsa.nn's backward methods, and the speedups.

    scripts/python.sh bench/pytorch/plot_pytorch.py DIR      reads DIR/nn.jsonl, writes DIR/fig_nn.png"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    with open(os.path.join(out, "nn.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    rnn = [r for r in records if r["cell"] == "RNN"]
    if not rnn:
        sys.exit("no RNN records in nn.jsonl")
    sides = list(dict.fromkeys(r["side"] for r in rnn))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    base = {r["steps"]: r["step"]["median"] for r in rnn if r["side"] == "torch.nn"}
    for side in sides:
        pts = sorted((r["steps"], r["step"]["median"]) for r in rnn if r["side"] == side)
        ts, ms = [p[0] for p in pts], [p[1] * 1e3 for p in pts]
        torch_side = side.startswith("torch.nn")
        style = dict(marker="o", lw=2 if torch_side else 1.2, ls="--" if torch_side else "-")
        ax1.plot(ts, ms, label=side, **style)
        if not torch_side:
            ax2.plot(ts, [base[t] / (m / 1e3) for t, m in zip(ts, ms)], label=side, marker="o")
    m = rnn[0]["machine"]
    ax1.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="training step, median (ms)",
            title=f"RNN H 20, batch {rnn[0]['batch']}: one optimizer step")
    ax2.set(xscale="log", xlabel="sequence length T", ylabel="speedup over torch.nn (×)",
            title="torch.nn step time / bppsa.nn step time")
    ax2.axhline(1, color="gray", lw=0.8)
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{m['cpu']}, {m['threads']} threads, torch {m['torch']}", fontsize=9)
    fig.tight_layout()
    path = os.path.join(out, "fig_nn.png")
    fig.savefig(path + ".tmp.png", dpi=110)
    os.replace(path + ".tmp.png", path)
    print("wrote", path)


if __name__ == "__main__":
    main()
