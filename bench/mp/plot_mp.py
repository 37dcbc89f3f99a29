"""Plots bench_mp's results (bench/mp/run.sh): backward latency against the number of
ranks K for the bp pipeline and bppsa's scan across ranks (doubling, Blelloch), one panel per
network, with the hop counts on the critical path; writes a Markdown table beside it.

usage: plot_mp.py mp.jsonl fig_mp.png mp.md
"""
import json
import platform
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
links = []
for r in rows:
    if r["link"] not in links:
        links.append(r["link"])
modes = [("bp", "bp pipeline (K−1 hops)", "tab:red", "o"),
         ("doubling", "bppsa, doubling (⌈log2 K⌉ rounds)", "tab:blue", "s"),
         ("blelloch", "bppsa, Blelloch (2⌈log2 K⌉−1 rounds)", "tab:green", "^")]
fig, axes = plt.subplots(1, len(links), figsize=(4.2 * len(links), 4.0), squeeze=False)
for ax, link in zip(axes[0], links):
    for mode, label, color, marker in modes:
        pts = sorted((r["ranks"], r) for r in rows if r["link"] == link and r["mode"] == mode)
        if not pts:
            continue
        ks = [k for k, _ in pts]
        med = [r["median_ms"] for _, r in pts]
        lo = [r["median_ms"] - r["p10_ms"] for _, r in pts]
        hi = [r["p90_ms"] - r["median_ms"] for _, r in pts]
        ax.errorbar(ks, med, yerr=[lo, hi], label=label, color=color, marker=marker, capsize=3)
        for k, r in pts:
            ax.annotate(str(r["rounds_theory"]), (k, r["median_ms"]), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=color)
    ax.set_title("loopback (one host)" if link == "loopback" else f"hosts joined by {link} links")
    ax.set_xlabel("ranks K (pipeline stages)")
    ax.set_ylabel("backward latency, ms (median, p10–p90)")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
axes[0][0].legend(fontsize=7, loc="upper left")
r0 = rows[0]
fig.suptitle(f"Model-parallel backward: {r0['cell']} H={r0['hidden']}, T={r0['steps']} steps split over K ranks, "
             f"batch {r0['batch']} — numbers on points: message hops on the critical path "
             f"({platform.machine()}, {platform.node()})", fontsize=9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)

with open(sys.argv[3], "w") as md:
    md.write("| network | K | bp ms (hops) | doubling ms (rounds) | Blelloch ms (rounds) | best bppsa speedup |\n")
    md.write("|---|---|---|---|---|---|\n")
    for link in links:
        for k in sorted({r["ranks"] for r in rows if r["link"] == link}):
            by = {r["mode"]: r for r in rows if r["link"] == link and r["ranks"] == k}
            if len(by) < 3:
                continue
            best = max(by["doubling"]["speedup_vs_bp"], by["blelloch"]["speedup_vs_bp"])
            md.write(f"| {link} | {k} | {by['bp']['median_ms']:.2f} ({by['bp']['rounds_theory']}) | "
                     f"{by['doubling']['median_ms']:.2f} ({by['doubling']['rounds_theory']}) | "
                     f"{by['blelloch']['median_ms']:.2f} ({by['blelloch']['rounds_theory']}) | {best:.2f}× |\n")
print(open(sys.argv[3]).read())
