#!/usr/bin/env python3
"""Figure of bench/cpu_scaling/cpu_scaling.py's results: OUT/cpu_scaling.png beside OUT/cpu_scaling.json.

Usage: plot_cpu_scaling.py OUT_DIR

One column per configuration (the two chains, the RNN at each batch). Top: speedup against threads
of each algorithm over its own 1-thread time, measured (solid) and predicted by `bppsa simulate`
(dashed); the dotted diagonal is perfect scaling (log-log). Bottom: the times themselves (ms, log-log). Exits 0
with a message when matplotlib is missing (the GPU machine may have none: plot here afterwards)."""
import json
import os
import sys

STYLE = {"linear": ("tab:blue", "o"), "bp": ("tab:blue", "o"), "blelloch": ("tab:red", "s"),
         "hybrid": ("tab:green", "^")}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plot_cpu_scaling.py OUT_DIR")
    d = sys.argv[1]
    with open(os.path.join(d, "cpu_scaling.json")) as f:
        doc = json.load(f)
    try:
        import matplotlib
    except ImportError:
        print("plot_cpu_scaling: matplotlib is not installed here: no figure; run "
              f"`scripts/python.sh bench/cpu_scaling/plot_cpu_scaling.py {d}` where it is")
        return 0
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = []
    for r in doc["comparison"]:
        if r["config"] not in configs:
            configs.append(r["config"])
    if not configs:
        sys.exit("plot_cpu_scaling: no measurements in cpu_scaling.json")
    fig, axes = plt.subplots(2, len(configs), figsize=(4.6 * len(configs), 8.4), squeeze=False)
    for col, cfg in enumerate(configs):
        rows = [r for r in doc["comparison"] if r["config"] == cfg]
        top, bottom = axes[0][col], axes[1][col]
        threads = sorted({r["threads"] for r in rows})
        for algo in dict.fromkeys(r["algorithm"] for r in rows):
            pts = sorted((r for r in rows if r["algorithm"] == algo), key=lambda r: r["threads"])
            c, m = STYLE.get(algo, ("gray", "x"))
            meas = [r for r in pts if r["measured_s"]]
            base = next((r for r in pts if r["threads"] == 1), None)
            if base and base["measured_s"]:
                top.plot([r["threads"] for r in meas], [base["measured_s"] / r["measured_s"] for r in meas], marker=m,
                         color=c, label=algo)
            if base and base["predicted_s"]:
                pp = [(r["threads"], base["predicted_s"] / r["predicted_s"]) for r in pts if r["predicted_s"]]
                top.plot(*zip(*pp), ls="--", color=c, alpha=0.8, label=f"{algo} (simulate)")
            bottom.plot([r["threads"] for r in meas], [1e3 * r["measured_s"] for r in meas], marker=m, color=c,
                        label=algo)
            pp = [(r["threads"], 1e3 * r["predicted_s"]) for r in pts if r["predicted_s"]]
            if pp:
                bottom.plot(*zip(*pp), ls="--", color=c, alpha=0.8, label=f"{algo} (simulate)")
        top.plot(threads, threads, color="gray", lw=0.8, ls=":", label="perfect scaling")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.set_xticks(threads)
            ax.set_xticklabels(map(str, threads))
            ax.grid(True, which="both", alpha=0.3)
            ax.set_xlabel("threads")
        top.set_yscale("log", base=2)
        bottom.set_yscale("log")
        top.set_title(cfg, fontsize=10)
        top.set_ylabel("speedup over 1 thread (same algorithm)")
        bottom.set_ylabel("median ms" + (" (scan part of the backward)" if rows[0]["section"] == "rnn" else ""))
        top.legend(fontsize=7)
    m = doc["machine"]
    fig.suptitle(f"CPU scan scaling, measured (solid) vs bppsa simulate (dashed)\n{m['cpu']}, {m['cores']} cores"
                 + (" (quick run)" if doc["quick"] else ""), fontsize=11)
    fig.tight_layout()
    tmp = os.path.join(d, "cpu_scaling.tmp.png")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, os.path.join(d, "cpu_scaling.png"))
    print(f"wrote {d}/cpu_scaling.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
