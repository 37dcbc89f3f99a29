"""The peers run's outputs: peers.json, peers.csv, fig_peers.png and README.md (the tables, what
wins where, the goals of issue 25 as measured, a cost-model line for each loss of bppsa)."""
import csv
import json
import os

BPPSA = ["bppsa.nn auto", "bppsa.nn blelloch", "bppsa.nn hybrid", "bppsa.nn bp"]


def ms(r, key):
    v = (r.get(key) or {}).get("median")
    return None if v is None else v * 1e3


def line(r):
    head = f"{r['config']:>20}  {r['peer']:<22}"
    if r.get("error"):
        return f"{head} ERROR {r['error'][:160]}"
    if r.get("grad_check") and not r["grad_check"]["ok"]:
        return f"{head} GRADIENT CHECK FAILED {r['grad_check']['rel_err']}"
    if r.get("skipped"):
        return f"{head} {r['skipped']}"
    gc = " grad-check ok" if r.get("grad_check") else ""
    busy = f" busy {ms(r, 'step_busy'):9.2f} ms" if r.get("step_busy") else ""
    bwd = f"  bwd {ms(r, 'backward'):9.2f} ms" if r.get("backward") else ""
    return (f"{head} loss {r['first_loss']:.6f}{bwd}  step {ms(r, 'step'):9.2f} ms"
            f"{busy}  peak {r['peak_memory']['bytes'] / 2**20:7.1f} MiB  compile {r.get('compile_s', 0):5.1f} s{gc}")


def cell(r, key):
    if r is None:
        return "—"
    if r.get("error"):
        return "error"
    if r.get("skipped"):
        return "skipped"
    v = ms(r, key)
    return "—" if v is None else f"{v:.2f}"


def why_loses(method, peer, cfg):
    """One line from the cost model for a loss of bppsa's method to a peer (what the shape implies,
    not a measurement of the cause)."""
    S = 2 * cfg["hidden"] if cfg["cell"] == "LSTM" else cfg["hidden"]
    T, B = cfg["steps"], cfg["batch"]
    if method in ("blelloch", "hybrid"):
        return (f"work ratio: the scan multiplies {S}×{S} Jacobians (about {S}× BP's matrix-vector work, "
                f"{T * B * S * S * 4 / 2**20:.0f} MiB of Jacobians to stream) and has only 2 threads to spread it over")
    if T * B <= 2000:
        return f"dispatch: {T}×{B} is little arithmetic, per-call overheads (Python, module, engine set-up) dominate"
    if S >= 64:
        return f"memory traffic/BLAS: at state {S} the sequential GEMVs run near peak in {peer}'s kernels, no scan advantage"
    return "work ratio: with 2 threads and batch ≥ threads, BP already keeps every thread busy; the peer's kernels are as fast"


def write(doc, out):
    recs = doc["records"]
    with open(os.path.join(out, "peers.json.tmp"), "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(os.path.join(out, "peers.json.tmp"), os.path.join(out, "peers.json"))
    cols = ["config", "cell", "hidden", "steps", "batch", "peer", "first_loss", "backward_ms", "step_ms",
            "step_busy_ms", "busy_slowdown", "peak_mib", "compile_s", "reps", "grad_check_max_rel_err", "status"]
    with open(os.path.join(out, "peers.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in recs:
            b, s, sb = ms(r, "backward"), ms(r, "step"), ms(r, "step_busy")
            gc = r.get("grad_check")
            w.writerow([r["config"], r["cell"], r["hidden"], r["steps"], r["batch"], r["peer"], r.get("first_loss"),
                        b, s, sb, sb / s if s and sb else None,
                        r["peak_memory"]["bytes"] / 2**20 if r.get("peak_memory") else None, r.get("compile_s"),
                        r.get("reps"), max(gc["rel_err"].values()) if gc else None,
                        r.get("error") or r.get("skipped") or "ok"])
    write_md(doc, out)
    try:
        plot(doc, out)
    except Exception as e:  # noqa: BLE001 - a figure is not worth losing the tables for
        print(f"figure failed: {type(e).__name__}: {e}")


def by_config(recs):
    out = {}
    for r in recs:
        out.setdefault(r["config"], {})[r["peer"]] = r
    return out


def write_md(doc, out):
    m, v = doc["machine"], doc["versions"]
    recs = doc["records"]
    peers = list(dict.fromkeys(r["peer"] for r in recs))
    cfgs = by_config(recs)
    lines = [f"# bppsa and its peers ({m['cpu']}, {m['cores']} cores, {m['threads']} threads for every framework)",
             "", "Versions: " + ", ".join(f"{k} {x}" for k, x in v.items()) + ".",
             ("Merged runs: the load average before each, below. " if doc.get("runs") else
              f"Load average before the run: {' '.join(m['load_before'])}. ")
             + ("QUICK smoke run: tiny shapes, few reps; not for comparisons." if doc["quick"] else ""),
             f"Medians (ms) after warm-ups; reps adaptive (≤ {doc['settings']['reps']}). Busy: a spinning process "
             f"pinned to core {m['busy_core']}. Peak: resident memory above the set-up's during one warm step. "
             + (f"Runs took {doc['wall_s']:.0f} s in all." if doc.get("runs") else f"Run took {doc['wall_s']:.0f} s.")
             + (f" STOPPED: {doc['stopped']}" if doc.get("stopped") else ""), ""]
    src = doc.get("source")
    if src:
        lines += [f"Commit {src['commit']}" + (" with tracked files modified." if src["dirty"] else "."), ""]
    if doc.get("runs"):  # merged slices (bench/peers/merge.py)
        lines += ["Merged from runs of slices of the sweep (bench/peers/merge.py):", "",
                  "| run | step counts (cells, hidden sizes, batches) | commit | load before | reps / budget / cap | wall |",
                  "|---|---|---|---|---|---|"]
        for r in doc["runs"]:
            st, c = r.get("settings") or {}, r.get("source") or {}
            part = ", ".join(", ".join(map(str, r[k])) for k in ("cells", "hidden") if r.get(k))
            if r.get("batch"):
                part += (", " if part else "") + "B " + ", ".join(map(str, r["batch"]))
            lines.append(f"| {r['dir']} | {', '.join(map(str, r['steps'])) if r.get('steps') else 'all'}"
                         f"{f' ({part})' if part else ''} | "
                         f"{c.get('commit', 'not recorded')[:12]}{' (modified)' if c.get('dirty') else ''} | "
                         f"{' '.join(r.get('load_before') or [])} | {st.get('reps')} / {st.get('budget_s')} s / "
                         f"{st.get('cap_s')} s | {(r.get('wall_s') or 0):.0f} s |")
        lines.append("")
    for title, key in (("Training step (forward, loss, backward, Adam), ms", "step"),
                       ("Backward alone, ms", "backward"), ("Training step with one core busy, ms", "step_busy")):
        lines += [f"## {title}", "", "| config | " + " | ".join(peers) + " |", "|---" * (len(peers) + 1) + "|"]
        for c, sides in cfgs.items():
            lines.append(f"| {c} | " + " | ".join(cell(sides.get(p), key) for p in peers) + " |")
        lines.append("")
    lines += ["## Peak memory of a step (MiB) and compile time (s)", "",
              "| config | " + " | ".join(peers) + " |", "|---" * (len(peers) + 1) + "|"]
    for c, sides in cfgs.items():
        row = []
        for p in peers:
            r = sides.get(p)
            row.append(f"{r['peak_memory']['bytes'] / 2**20:.1f} / {r.get('compile_s', 0):.1f}"
                       if r and r.get("peak_memory") and r.get("step") else cell(r, "step"))
        lines.append(f"| {c} | " + " | ".join(row) + " |")
    lines += ["", "## Errors and skips", ""]
    for r in recs:
        if r.get("error") or r.get("skipped") or r.get("compile_error"):
            lines.append(f"- {r['config']}, {r['peer']}: {r.get('error') or r.get('skipped') or ''}"
                         + (f" (torch.compile failed, ran eager: {r['compile_error']})" if r.get("compile_error") else ""))
    lines += ["", "## What wins where (training step)", ""]
    goals = {"auto ahead of every peer": [], "auto ≥ 5× the best peer (RNN H20 T1000 B16)": [],
             "blelloch ahead of the JAX assoc-scan BPPSA": [], "busy slowdown of auto ≤ every peer's": [],
             "auto ≥ torch.nn (issue 45)": [], "auto ≥ the best peer at T ≥ 300 (issue 45)": [],
             "auto ≥ 2× the best peer at T ≥ 1000, H ≤ 64 (issue 45)": []}
    for c, sides in cfgs.items():
        ok = {p: r for p, r in sides.items() if r.get("step")}
        if not ok:
            continue
        best = min(ok, key=lambda p: ok[p]["step"]["median"])
        others = {p: r for p, r in ok.items() if p not in BPPSA}
        bestpeer = min(others, key=lambda p: others[p]["step"]["median"]) if others else None
        cfg = next(iter(sides.values()))
        lines.append(f"- {c}: fastest {best} ({ok[best]['step']['median'] * 1e3:.2f} ms); best peer "
                     f"{bestpeer} ({others[bestpeer]['step']['median'] * 1e3:.2f} ms)" if bestpeer else f"- {c}: {best}")
        for meth in BPPSA:
            if meth not in ok or not bestpeer:
                continue
            beat = sorted((r["step"]["median"], p) for p, r in others.items()
                          if r["step"]["median"] < ok[meth]["step"]["median"])
            if beat:
                lines.append(f"  - {meth} ({ok[meth]['step']['median'] * 1e3:.2f} ms) loses to "
                             + ", ".join(f"{p} ({t * 1e3:.2f} ms)" for t, p in beat)
                             + f": {why_loses(meth.split()[-1], beat[0][1], cfg)}")
        a, t = ok.get("bppsa.nn auto"), ok.get("torch.nn")
        if a and t:
            goals["auto ≥ torch.nn (issue 45)"].append((c, t["step"]["median"] / a["step"]["median"]))
        if a and bestpeer and cfg["steps"] >= 300:
            best = others[bestpeer]["step"]["median"] / a["step"]["median"]
            goals["auto ≥ the best peer at T ≥ 300 (issue 45)"].append((c, best))
            if cfg["steps"] >= 1000 and cfg["hidden"] <= 64:
                goals["auto ≥ 2× the best peer at T ≥ 1000, H ≤ 64 (issue 45)"].append((c, best))
        if a and bestpeer:
            goals["auto ahead of every peer"].append(
                (c, others[bestpeer]["step"]["median"] / a["step"]["median"]))
            if cfg["cell"] == "RNN" and cfg["hidden"] == 20 and cfg["steps"] == 1000 and cfg["batch"] == 16:
                goals["auto ≥ 5× the best peer (RNN H20 T1000 B16)"].append(
                    (c, others[bestpeer]["step"]["median"] / a["step"]["median"]))
            if a.get("step_busy"):
                sl = a["step_busy"]["median"] / a["step"]["median"]
                least = min((r["step_busy"]["median"] / r["step"]["median"] for r in others.values()
                             if r.get("step_busy")), default=None)
                if least:
                    goals["busy slowdown of auto ≤ every peer's"].append((c, least / sl))
        b, j = ok.get("bppsa.nn blelloch"), ok.get("jax assoc-scan BPPSA")
        if b and j:
            goals["blelloch ahead of the JAX assoc-scan BPPSA"].append((c, j["step"]["median"] / b["step"]["median"]))
    lines += ["", "## Goals of issues 25 and 45, as measured (ratio ≥ the goal's factor: met at that shape)", ""]
    for g, vals in goals.items():
        need = 5.0 if "5×" in g else 2.0 if "2×" in g else 1.0
        met = [c for c, x in vals if x >= need]
        lines.append(f"- {g}: met at {len(met)} of {len(vals)} shapes"
                     + ("; " + ", ".join(f"{c} {x:.2f}" for c, x in vals) if vals else ""))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)
    print(text)


def plot(doc, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    recs = [r for r in doc["records"] if r.get("step")]
    large = [r for r in recs if r["hidden"] >= 512] if not doc["quick"] else []
    groups = [("RNN H20 B16, over T", lambda r: r["cell"] == "RNN" and r["hidden"] == 20 and r["batch"] == 16,
               "steps", "T"),
              ("RNN H20 T1000, over batch", lambda r: r["cell"] == "RNN" and r["hidden"] == 20 and r["steps"] == 1000,
               "batch", "batch")]
    if doc["quick"]:
        groups = [("quick: every shape", lambda r: True, "steps", "T")]
    big = [r for r in recs if r["cell"] in ("GRU", "LSTM") and r["hidden"] <= 256 and r["steps"] == 1000
           and r["batch"] == 16 and not doc["quick"]]
    # The first row only where it has curves to draw (a sweep of the large states alone has none).
    top = (doc["quick"] or bool(big) or not large
           or any(len({r[x] for r in recs if sel(r)}) >= 2 for _, sel, x, _ in groups))
    rows = int(top) + int(bool(large))
    fig, grid = plt.subplots(rows, 3, figsize=(16, 4.8 * rows), squeeze=False)
    if top:
        plot_top(list(grid[0]), recs, groups, big)
    for ax, cell_name in zip(grid[-1] if large else [], ("RNN", "GRU", "LSTM")):
        plot_large(ax, [r for r in large if r["cell"] == cell_name], cell_name)
    fig.suptitle(f"bppsa vs peers — {doc['machine']['cpu']}, {doc['machine']['threads']} threads"
                 + (" (QUICK smoke run)" if doc["quick"] else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fig_peers.png"), dpi=110)
    plt.close(fig)


def plot_top(axes, recs, groups, big):
    """The H 20 RNN over T and over batch, and GRU/LSTM at H ≤ 256, T 1000, batch 16."""
    for ax, (title, sel, xkey, xlabel) in zip(axes, groups):
        for p in dict.fromkeys(r["peer"] for r in recs):
            pts = sorted((r[xkey], r["step"]["median"] * 1e3) for r in recs if r["peer"] == p and sel(r))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=p, linestyle="--" if p.startswith("bppsa") else "-")
        ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="training step, ms (median)", title=title)
    for ax in axes[len(groups):-1]:
        ax.axis("off")
    axes[0].legend(fontsize=7)
    ax = axes[-1]
    if big:
        names = list(dict.fromkeys(r["config"] for r in big))
        ps = list(dict.fromkeys(r["peer"] for r in big))
        w = 0.8 / len(ps)
        for i, p in enumerate(ps):
            vals = [next((r["step"]["median"] * 1e3 for r in big if r["peer"] == p and r["config"] == n), 0)
                    for n in names]
            ax.bar([k + i * w for k in range(len(names))], vals, w, label=p)
        ax.set_xticks([k + 0.4 for k in range(len(names))], names, fontsize=7)
        ax.set(yscale="log", ylabel="training step, ms", title="GRU/LSTM, T 1000, batch 16")
    else:
        ax.axis("off")


def plot_large(ax, recs, cell_name):
    """The large states (H 512, 1024): every peer's training step over torch.nn's, shape by shape
    (below 1: faster than torch.nn)."""
    shapes = sorted({(r["hidden"], r["steps"], r["batch"]) for r in recs})
    ref = {(r["hidden"], r["steps"], r["batch"]): r["step"]["median"] for r in recs if r["peer"] == "torch.nn"}
    if not shapes or not ref:
        ax.axis("off")
        return
    for p in dict.fromkeys(r["peer"] for r in recs):
        if p == "torch.nn":
            continue
        pts = [(shapes.index(k), r["step"]["median"] / ref[k]) for r in recs if r["peer"] == p
               for k in [(r["hidden"], r["steps"], r["batch"])] if k in ref]
        if pts:
            ax.plot(*zip(*pts), marker="o", markersize=4, label=p, linestyle="none" if len(pts) < 2 else ":",
                    linewidth=0.8, color="black" if p == "bppsa.nn auto" else None)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(shapes)), [f"H{h} T{t} B{b}" for h, t, b in shapes], rotation=90, fontsize=6)
    ax.set(yscale="log", ylabel="training step / torch.nn's", title=f"{cell_name}, large states")
    ax.legend(fontsize=6)
