"""The GPU benchmark's comparison (bppsa against PyTorch from the same run) and its Markdown report;
bench/gpu/gpu.py writes both, plot_gpu.py and keep_results.py read the JSON."""
import summarize_sweep  # the fused scan's plans described as the sweep's summary does

METHOD_LABEL = {"bp": "bppsa BP", "fused": "bppsa fused scan", "hybrid": "bppsa generic scan",
                "blelloch": "bppsa generic Blelloch", "linear": "bppsa generic linear", "auto": "bppsa auto", "pytorch": "PyTorch + cuDNN",
                "pytorch-tf32": "PyTorch + cuDNN, TF32 allowed"}
SWEEPS = [("rnn_T", "RNN H 20, batch 16, against the sequence length T", "T", "steps"),
          ("rnn_B", "RNN H 20, T 1000, against the batch", "batch", "batch"),
          ("gru", "GRU H 20, batch 16, IRMAS s/m/l shapes (F × T)", "shape", None),
          ("rnn_H", "RNN, T 1000, batch 16, against the hidden size", "H", "hidden"),
          ("lstm", "LSTM H 20, T 1000, batch 16", "cell", "cell")]
GOALS = [("backward ≥ 300× PyTorch's at T 30000 (RNN H 20, batch 16)", "rnn_H20_T30000_B16", "backward_speedup",
          300),
         ("backward ≥ 50× PyTorch's at T 1000 (RNN H 20, batch 16)", "rnn_H20_T1000_B16", "backward_speedup", 50),
         ("training iteration ≥ 5× PyTorch's at T 1000, batch 16", "rnn_H20_T1000_B16", "iteration_speedup", 5)]


def label(method, device):
    """The method's name in tables and legends; on --device cpu runs blelloch and hybrid are the CPU
    engine's scans, not the GPU's fused and generic scans."""
    if device == "cpu" and method in ("blelloch", "hybrid", "linear"):
        return f"bppsa {method} (CPU)"
    return METHOD_LABEL.get(method, method)


def med(r, part):
    return r[part]["median"] if isinstance(r.get(part), dict) else None


def peak_bytes(r):
    """Device memory a training step holds at its peak: PyTorch's max_memory_allocated over the
    first iteration (parameters, data and Adam's state included); bppsa's model.device_bytes()
    after the first iteration's phases (it allocates once and keeps)."""
    m = r.get("memory") or {}
    if r["impl"] == "pytorch":
        return m.get("peak_bytes")
    vals = [m.get(k) for k in ("model_bytes_after_forward", "model_bytes_after_backward", "model_bytes_after_step")]
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


def compare(records, tol):
    """One row per bppsa record: its times against PyTorch's (same configuration, same run), the
    first-loss check and the memory ratio; the fused-scan records with their roofline."""
    ref = {r["id"]: r for r in records if r["impl"] == "pytorch" and not r.get("tf32") and "backward" in r}
    tf32 = {r["id"]: r for r in records if r["impl"] == "pytorch" and r.get("tf32") and "backward" in r}
    rows = []
    for r in records:
        if r["impl"] == "fused":
            rows.append(roofline(r))
            continue
        if r["impl"] != "bppsa":
            continue
        row = {k: r.get(k) for k in ("id", "method", "cell", "hidden", "steps", "batch", "features", "sweeps")}
        if "error" in r:
            row["error"] = r["error"]
            rows.append(row)
            continue
        t = ref.get(r["id"])
        row.update({"backward_s": med(r, "backward"), "iteration_s": med(r, "total"), "forward_s": med(r, "forward"),
                    "loss0": r["loss0"], "peak_bytes": peak_bytes(r)})
        if t:
            rel = abs(r["loss0"] - t["loss0"]) / max(abs(t["loss0"]), 1e-30)
            row.update({"torch_loss0": t["loss0"], "loss_rel_diff": rel, "loss_ok": rel <= tol,
                        "torch_backward_s": med(t, "backward"), "torch_iteration_s": med(t, "total"),
                        "backward_speedup": med(t, "backward") / med(r, "backward"),
                        "iteration_speedup": med(t, "total") / med(r, "total"),
                        "forward_speedup": med(t, "forward") / med(r, "forward"),
                        "torch_peak_bytes": peak_bytes(t)})
            if row["peak_bytes"] and row["torch_peak_bytes"]:
                row["memory_ratio"] = row["peak_bytes"] / row["torch_peak_bytes"]
        if r["id"] in tf32:
            row["backward_speedup_vs_tf32"] = med(tf32[r["id"]], "backward") / med(r, "backward")
        rows.append(row)
    return rows


def roofline(r):
    """Achieved FP32 rate and bandwidth of the fused scan alone, and how far its median time is
    from the roofline time max(flops / peak FP32, bytes / peak bandwidth)."""
    d = r.get("device", {})
    row = {k: r.get(k) for k in ("id", "cell", "hidden", "steps", "batch")}
    row["method"] = "fused-alone"
    if "error" in r:
        row["error"] = r["error"]
        return row
    t = med(r, "time")
    row.update({"seconds": t, "flops": r["flops"], "bytes": r["bytes"], "achieved_tflops": r["flops"] / t / 1e12,
                "achieved_gbs": r["bytes"] / t / 1e9, "peak_tflops": d.get("peak_fp32_flops", 0) / 1e12,
                "peak_gbs": d.get("peak_bytes_per_s", 0) / 1e9})
    if d.get("peak_fp32_flops") and d.get("peak_bytes_per_s"):
        bound = max(r["flops"] / d["peak_fp32_flops"], r["bytes"] / d["peak_bytes_per_s"])
        row.update({"roofline_s": bound, "x_from_roofline": t / bound,
                    "bound": "compute" if r["flops"] / d["peak_fp32_flops"] >= r["bytes"] / d["peak_bytes_per_s"]
                    else "memory"})
    for k in ("launches", "chunk", "device_bytes"):
        if k in r:
            row[k] = r[k]
    return row


# ---- Markdown ---------------------------------------------------------------------------------

def ms(x):
    return "–" if x is None else (f"{1e3 * x:.3f}" if x < 0.1 else f"{1e3 * x:.1f}")


def ratio(x):
    return "–" if x is None else (f"{x:.0f}×" if x >= 100 else f"{x:.2f}×" if x < 10 else f"{x:.1f}×")


def mib(b):
    return "–" if not b else f"{b / 2**20:.1f}"


def machine_lines(doc):
    m = doc["machine"]
    g = m.get("gpus") or []
    gpu = "; ".join(f"{x['name']} (driver {x['driver']}, {x['memory']}, sm {x['compute_cap']}, max SM clock "
                    f"{x['max_sm_clock']})" for x in g) or "no GPU seen by nvidia-smi"
    where = next((r["where"] for r in doc["records"] if r["impl"] == "bppsa" and r.get("where")), None)
    return [f"- GPU: {gpu}"] + ([f"- bppsa ran on: {where}"] if where else []) + [
        f"- PyTorch {m.get('torch')} (CUDA {m.get('torch_cuda')}, cuDNN {m.get('cudnn')}); Python {m['python']}",
        f"- CPU: {m['cpu']}, {m['cores']} cores; {m['os']}",
        f"- bppsa commit {m.get('bppsa_commit')}; {m['date']}; "
        f"{'quick run (not for figures)' if doc['quick'] else 'full run'}; device {doc['device']}"]


def x_of(c, sweep):
    if sweep == "gru":
        return f"{c['features']} × {c['steps']}"
    return {"rnn_T": c["steps"], "rnn_B": c["batch"], "rnn_H": c["hidden"], "lstm": "lstm"}[sweep]


def sweep_table(doc, sweep, title, xname):
    configs = [c for c in doc["plan"]["configs"] if any(s == sweep or s.startswith(sweep + "_") for s in c["sweeps"])]
    if not configs:
        return []
    if sweep in ("rnn_T", "rnn_B", "rnn_H"):
        configs.sort(key=lambda c: x_of(c, sweep))
    recs = {(r["id"], r["method"]): r for r in doc["records"] if r["impl"] in ("pytorch", "bppsa")}
    cmp_rows = {(c["id"], c["method"]): c for c in doc["comparison"] if c.get("method") != "fused-alone"}
    methods = [m for m in ("bp", "fused", "blelloch", "hybrid", "linear") if any(k[1] == m for k in recs)]
    dev = doc["device"]
    head = [xname, "PyTorch bw", *[f"{label(m, dev)} bw" for m in methods], "PyTorch it",
            *[f"{label(m, dev)} it" for m in methods], "first loss"]
    out = ["", f"### {title}", "", "Median ms; (×) = PyTorch's time / bppsa's, same run. bw = backward, it = "
           "iteration (forward + backward + Adam).", "", "| " + " | ".join(head) + " |",
           "|" + "---:|" * len(head)]
    for c in configs:
        t = recs.get((c["id"], "pytorch"))
        cells = [str(x_of(c, sweep)), ms(med(t, "backward")) if t else "–"]
        its = [ms(med(t, "total")) if t else "–"]
        loss = []
        for m in methods:
            row = cmp_rows.get((c["id"], m))
            if row is None:
                cells.append("–")
                its.append("–")
            elif "error" in row:
                cells.append("error")
                its.append("error")
            else:
                cells.append(f"{ms(row['backward_s'])} ({ratio(row.get('backward_speedup'))})")
                its.append(f"{ms(row['iteration_s'])} ({ratio(row.get('iteration_speedup'))})")
                if "loss_ok" in row:
                    loss.append(row["loss_ok"])
        first = "–" if not loss else ("agrees" if all(loss) else "**MISMATCH**")
        out.append("| " + " | ".join(cells + its + [first]) + " |")
    return out


def markdown(doc):
    lines = ["# GPU benchmark: bppsa against PyTorch + cuDNN, same GPU, same run", ""] + machine_lines(doc) + [
        "", "Both sides train the same model (weights from torch's default init, written once and read by both) on "
        "the same batch: forward = up to the loss value on the host; backward = from the loss to every parameter "
        "gradient (Jacobians included); iteration = forward + backward + Adam. PyTorch: "
        + ("CUDA events, TF32 off" if doc["device"] == "cuda" else "the CPU clock (--device cpu: a test run, not a "
           "GPU measurement)") + "; bppsa: the host clock around synchronised regions. Medians of "
        f"{doc['reps']} timed iterations after {doc['warmup']} untimed ones (the first allocates and is the "
        "memory probe). The first losses of both sides must agree to 1e-4 (relative)."]
    for sweep, title, xname, _ in SWEEPS:
        lines += sweep_table(doc, sweep, title, xname)
    lines += memory_table(doc) + tf32_table(doc) + cudnn_table(doc) + roofline_table(doc) + goals(doc)
    errors = [c for c in doc["comparison"] if "error" in c]
    if errors:
        lines += ["", "### Errors", ""] + [f"- {c['id']} {c['method']}: {c['error']}" for c in errors]
    if doc["skipped"]:
        lines += ["", "### Skipped or failed", ""] + [f"- {'FAILED ' if s['failed'] else ''}{s['what']}: {s['why']}"
                                                      for s in doc["skipped"]]
    return "\n".join(lines) + "\n"


def memory_table(doc):
    by = {(c["id"], c["method"]): c for c in doc["comparison"] if c.get("peak_bytes")}
    torch = {r["id"]: r for r in doc["records"] if r["impl"] == "pytorch" and not r.get("tf32")}
    methods = [m for m in ("bp", "fused", "blelloch", "hybrid", "linear") if any(k[1] == m for k in by)]
    configs = [c for c in doc["plan"]["configs"] if any((c["id"], m) in by for m in methods)]
    if not configs:
        return []
    out = ["", "### Device memory at the peak of one training step (MiB)", "",
           "PyTorch: torch.cuda.max_memory_allocated over the first iteration (parameters, data, Adam's state "
           "included). bppsa: model.device_bytes() after the first iteration (allocated once, kept); (×) = bppsa / "
           "PyTorch.", "", "| configuration | PyTorch | " + " | ".join(label(m, doc["device"]) for m in methods) + " |",
           "|---|" + "---:|" * (1 + len(methods))]
    for c in configs:
        cells = [c["id"], mib(peak_bytes(torch[c["id"]])) if c["id"] in torch else "–"]
        for m in methods:
            row = by.get((c["id"], m))
            cells.append(f"{mib(row['peak_bytes'])} ({ratio(row.get('memory_ratio'))})" if row else "–")
        out.append("| " + " | ".join(cells) + " |")
    return out


def tf32_table(doc):
    rows = [c for c in doc["comparison"] if "backward_speedup_vs_tf32" in c]
    if not rows:
        return []
    out = ["", "### Against PyTorch with TF32 allowed (its default for cuDNN)", "",
           "| configuration | method | backward × PyTorch (FP32) | backward × PyTorch (TF32 allowed) |",
           "|---|---|---:|---:|"]
    for c in rows:
        out.append(f"| {c['id']} | {c['method']} | {ratio(c.get('backward_speedup'))} | "
                   f"{ratio(c['backward_speedup_vs_tf32'])} |")
    return out


def cudnn_table(doc):
    rows, seen = [], set()
    for r in doc["records"]:  # one row per (cell, hidden): the profiled configuration, else the first
        if r["impl"] != "pytorch" or r.get("tf32") or not r.get("cudnn_algo"):
            continue
        key = (r["cell"], r["hidden"])
        if key in seen and not r.get("profile"):
            continue
        rows = [x for x in rows if (x["cell"], x["hidden"]) != key] if r.get("profile") else rows
        seen.add(key)
        rows.append(r)
    if not rows:
        return []
    out = ["", "### cuDNN's RNN algorithm", "",
           "Heuristic: what PyTorch's get_algo (aten/src/ATen/native/cudnn/RNN.cpp) selects for the shape (it depends "
           "on the cell and H only). Kernels: the profiler's CUDA kernels of one iteration of that configuration "
           "(a persistent kernel has 'persist' in its name).", "",
           "| configuration | heuristic forward / backward | persistent kernel seen | top kernels (µs) |",
           "|---|---|---|---|"]
    for r in rows:
        h = r["cudnn_algo"]
        prof = r.get("profile")
        if not prof:
            seen_text, top = "not profiled", ""
        elif "error" in prof:
            seen_text, top = "profiler failed: " + prof["error"][:80], ""
        else:
            seen_text = "yes" if prof["persistent"] else "no"
            top = "; ".join(f"{k['name'][:60]} ({k['us']:.0f})" for k in prof["kernels"][:3])
        out.append(f"| {r['id']} | {h['forward']} / {h['backward']} | {seen_text} | {top} |")
    return out


def roofline_table(doc):
    rows = [c for c in doc["comparison"] if c.get("method") == "fused-alone"]
    if not rows:
        return []
    out = ["", "### The fused scan alone against the FP32 roofline", "",
           "Peak FP32 = SMs × SM clock × FP32 lanes per SM (128 on sm_90) × 2; peak bandwidth = 2 × memory clock "
           "× bus width (cudaDeviceGetAttribute). Roofline time = max(FLOPs / peak, bytes / bandwidth).", "",
           "| configuration | median ms | GFLOP | MB | TFLOP/s | GB/s | bound | × from roofline |",
           "|---|---:|---:|---:|---:|---:|---|---:|"]
    for c in rows:
        if "error" in c:
            out.append(f"| {c['id']} | error: {c['error'][:80]} | | | | | | |")
            continue
        out.append(f"| {c['id']} | {ms(c['seconds'])} | {c['flops'] / 1e9:.2f} | {c['bytes'] / 1e6:.1f} | "
                   f"{c['achieved_tflops']:.2f} of {c['peak_tflops']:.1f} | {c['achieved_gbs']:.0f} of "
                   f"{c['peak_gbs']:.0f} | {c.get('bound', '–')} | {ratio(c.get('x_from_roofline'))} |")
    return out


def goals(doc):
    by = {(c["id"], c["method"]): c for c in doc["comparison"]}
    out = ["", "### The issue's goals (measured, not asserted)", ""]
    if doc["device"] != "cuda":
        return out + [f"Not evaluated: a --device {doc['device']} run (a test of the scripts)."]
    out += ["| goal | measured | met |", "|---|---|---|"]
    for text, cid, field, target in GOALS:
        best = [by[(cid, m)].get(field) for m in ("fused", "bp", "blelloch", "hybrid") if (cid, m) in by]
        best = [b for b in best if b is not None]
        if not best:
            out.append(f"| {text} | not measured | – |")
            continue
        fused = by.get((cid, "fused"), {}).get(field)
        out.append(f"| {text} | fused scan {ratio(fused)}, best method {ratio(max(best))} | "
                   f"{'yes' if max(best) >= target else 'no'} |")
    rf = [c for c in doc["comparison"] if c.get("method") == "fused-alone" and c.get("x_from_roofline")]
    if rf:
        best = min(rf, key=lambda c: c["x_from_roofline"])
        worst = max(rf, key=lambda c: c["x_from_roofline"])
        out.append(f"| the fused scan within 3× of the roofline | {ratio(best['x_from_roofline'])} ({best['id']}) to "
                   f"{ratio(worst['x_from_roofline'])} ({worst['id']}) | "
                   f"{'yes' if best['x_from_roofline'] <= 3 else 'no'} (best case) |")
    else:
        out.append("| the fused scan within 3× of the roofline | not measured | – |")
    return out


def fit_table(defaults, fitted):
    """The fused scan alone with the cost model's default constants against a fit's
    (bench_fused_scan --model), per configuration of the same run: each side's plan, median time,
    and fitted / default (below 1: the fit's plan is faster). Markdown lines; [] without fitted records."""
    timed = {r["id"]: r for r in defaults if "time" in r}
    rows = [r for r in fitted if "time" in r and r["id"] in timed]
    if not rows:
        return []
    out = ["", "### The fused scan's cost model: default constants against the fit (same run)", "",
           "| configuration | default plan | ms | fitted plan | ms | fitted / default |", "|---|---|---:|---|---:|---:|"]
    for r in rows:
        d = timed[r["id"]]
        a, b = d["time"]["median"], r["time"]["median"]
        out.append(f"| {r['id']} | {summarize_sweep.plan_text(d)} | {ms(a)} | {summarize_sweep.plan_text(r)} | {ms(b)} | {b / a:.2f} |")
    return out

