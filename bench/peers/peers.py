#!/usr/bin/env python3
"""bppsa against today's peers, in one run on one machine (issue 25): torch.nn eager,
torch.compile, PyTorch's prototype scan, JAX BPTT through lax.scan, a JAX BPPSA built on
lax.associative_scan, and bppsa.nn with every backward method. Same model, weights, data and loss;
the first loss of every peer must agree with torch.nn's to 1e-5 (relative) or the run stops, and
the JAX BPPSA's gradients must agree with jax.grad's to 1e-4 or the run stops.

    bench/peers/run.sh [--quick] [--out DIR] [--threads N] [--only PEER,…]

Each (configuration, peer) runs in a fresh worker process (bench/peers/peers_worker.py): backward alone,
a training step (forward, cross-entropy, backward, Adam), peak memory of a step, and the step with
the last core kept busy by a spinning process (--grid cost-model: the step and its memory only). Writes DIR/peers.json (every record, the machine,
every library's version), DIR/peers.csv, DIR/fig_peers.png and DIR/README.md (the tables)."""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))  # bench/common: cpuinfo
import peers_common as common  # noqa: E402
import peers_report as report  # noqa: E402
from cpuinfo import cpu_model  # noqa: E402

METHODS = ["auto", "blelloch", "hybrid", "bp"]
PEERS = ["torch.nn", "torch.compile", "torch scan", "jax scan", "jax assoc-scan BPPSA"] + \
    [f"bppsa.nn {m}" for m in METHODS]
SEED = 4202


def make_data(cfg, path):
    """The seeded torch.nn model's weights and the bitstream data, for every peer."""
    import numpy as np
    import torch
    import torch_peers
    gen = torch.Generator().manual_seed(SEED)
    x = torch.bernoulli(torch.full((cfg["batch"], cfg["steps"], cfg["features"]), 0.3), generator=gen)
    y = torch.randint(0, cfg["classes"], (cfg["batch"],), generator=gen)
    ref = torch_peers.reference_model(cfg, SEED)
    np.savez(path, x=x.numpy(), y=y.numpy(), **{"w." + k: v.detach().numpy() for k, v in ref.state_dict().items()})


def versions():
    out = {"python": platform.python_version()}
    for pkg in ("torch", "jax", "jaxlib", "numpy", "bppsa"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def source():
    """The checkout's commit, and whether its tracked files differ from it (None outside a git checkout)."""
    root = os.path.join(HERE, "..", "..")
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip() != ""
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit, "dirty": dirty}


def over_budget(peer, cfg, done, cap):
    """A shape this peer would spend minutes on: estimated from its time at a third of the steps
    (linear in T), or the JAX BPPSA's dense Jacobians against the memory there is."""
    if peer == "jax assoc-scan BPPSA":
        need = 3 * cfg["steps"] * cfg["batch"] * common.state_size(cfg) ** 2 * 4  # Jacobians + the scan's copies
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        if need > 0.6 * avail:
            return f"skipped: over budget (memory: about {need / 2**30:.1f} GiB of dense Jacobians and scan " \
                   f"copies, {avail / 2**30:.1f} GiB available)"
    prev = [r for r in done if r["peer"] == peer and r["cell"] == cfg["cell"] and r["hidden"] == cfg["hidden"]
            and r["batch"] == cfg["batch"] and r["steps"] < cfg["steps"]]
    if prev:
        p = max(prev, key=lambda r: r["steps"])
        if p.get("skipped", "").startswith("skipped: over budget") or p.get("skipped", "").startswith("over budget"):
            return f"skipped: over budget (already at T {p['steps']})"
        t = (p.get("step") or {}).get("median")
        if t is not None and t * cfg["steps"] / p["steps"] > cap:
            return f"skipped: over budget (a step estimated at {t * cfg['steps'] / p['steps']:.0f} s from " \
                   f"T {p['steps']}, cap {cap:.0f} s)"
    return None


def run_worker(peer, cfg, data, a, check):
    cmd = [sys.executable, os.path.join(HERE, "peers_worker.py"), "--peer", peer, "--config", json.dumps(cfg),
           "--data", data, "--threads", str(a.threads), "--reps", str(a.reps), "--warmup", str(a.warmup),
           "--budget", str(a.budget), "--cap", str(a.cap)]
    # The cost model's grid needs the training step alone (bench/auto/fit_auto.py).
    cmd += ["--step-only"] if a.grid == "cost-model" else ["--busy"]
    if check:
        cmd += ["--check", "--perturb", str(a.perturb_jax_bppsa)]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return {"peer": peer, "config": cfg["name"], **{k: cfg[k] for k in common.SHAPE_KEYS},
                "error": f"timeout: the worker ran over {a.timeout:.0f} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("@@RESULT ")]
    if not lines:
        return {"peer": peer, "config": cfg["name"], **{k: cfg[k] for k in common.SHAPE_KEYS},
                "error": f"worker exited {r.returncode} without a result: {r.stderr.strip()[-600:]}"}
    rec = json.loads(lines[-1][len("@@RESULT "):])
    rec["worker_s"] = time.perf_counter() - t0
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="two tiny shapes, few reps (CI)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=4.0, help="seconds of timed calls per measurement (adaptive reps)")
    ap.add_argument("--cap", type=float, default=10.0, help="a step longer than this is skipped as over budget")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per worker")
    ap.add_argument("--only", help="comma-separated peers (default: all)")
    ap.add_argument("--grid", choices=("peers", "cost-model"), default="peers",
                    help="the shapes: the peers table's (default) or those auto's cost model is fitted to")
    ap.add_argument("--steps", help="comma-separated step counts: only the grid's shapes of these T (a partial sweep)")
    ap.add_argument("--cells", help="comma-separated cells (RNN, GRU, LSTM): only the grid's shapes of these cells")
    ap.add_argument("--hidden", help="comma-separated hidden sizes: only the grid's shapes of these sizes")
    ap.add_argument("--batch", help="comma-separated batch sizes: only the grid's shapes of these batches")
    ap.add_argument("--perturb-jax-bppsa", type=float, default=0.0,
                    help="scale the JAX BPPSA's Jacobians by 1+x: its gradient check must then stop the run")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.warmup, a.budget, a.cap, a.timeout = min(a.reps, 3), 1, 1.0, 10.0, 120.0
    peers = PEERS if not a.only else [p.strip() for p in a.only.split(",")]
    if peers[0] != "torch.nn":
        peers = ["torch.nn"] + [p for p in peers if p != "torch.nn"]  # the reference loss
    os.makedirs(a.out, exist_ok=True)
    doc = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": a.threads,
                       "busy_core": common.busy_core(), "platform": platform.platform(),
                       "load_before": open("/proc/loadavg").read().split()[:3]},
           "versions": versions(), "source": source(), "quick": a.quick, "grid": a.grid, "seed": SEED,
           "settings": {"reps": a.reps, "warmup": a.warmup, "budget_s": a.budget, "cap_s": a.cap,
                        "threads": {"torch": f"torch.set_num_threads({a.threads})",
                                    "bppsa": f"threads={a.threads}",
                                    "xla": common.xla_env(a.threads)["XLA_FLAGS"],
                                    "affinity": f"every worker pinned to cores 0..{a.threads - 1}"}},
           "records": []}
    configs = common.configs(a.quick, a.grid)
    for flag, key, raw, parse in (("--steps", "steps", a.steps, int), ("--cells", "cell", a.cells, str.upper),
                                  ("--hidden", "hidden", a.hidden, int), ("--batch", "batch", a.batch, int)):
        if raw:  # a slice of the grid: only its shapes of these values
            try:
                wanted = {parse(v.strip()) for v in raw.split(",")}
            except ValueError:
                sys.exit(f"bench_peers: {flag} {raw!r}: expected comma-separated numbers such as 20,512")
            if key == "cell" and not wanted <= {"RNN", "GRU", "LSTM"}:
                sys.exit(f"bench_peers: --cells {raw!r}: expected cells among RNN, GRU, LSTM")
            configs = [c for c in configs if c[key] in wanted]
            if not configs:
                sys.exit(f"bench_peers: {flag} {raw}: no shape of the {a.grid} grid left")
            doc[flag[2:]] = sorted(wanted)
    t_start = time.perf_counter()
    stop = None
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in configs:
            data = os.path.join(tmp, "data.npz")
            make_data(cfg, data)
            ref = None
            for peer in peers:
                skip = over_budget(peer, cfg, doc["records"], a.cap)
                if skip:
                    rec = {"peer": peer, "config": cfg["name"],
                           **{k: cfg[k] for k in common.SHAPE_KEYS}, "skipped": skip}
                else:
                    rec = run_worker(peer, cfg, data, a, check=peer == "jax assoc-scan BPPSA")
                doc["records"].append(rec)
                print(report.line(rec), flush=True)
                if peer == "torch.nn":
                    if "first_loss" not in rec:
                        stop = f"{cfg['name']}: torch.nn, the reference, failed: {rec.get('error')}"
                    ref = rec.get("first_loss")
                elif "first_loss" in rec and abs(rec["first_loss"] - ref) > 1e-5 * max(1.0, abs(ref)):
                    stop = (f"{cfg['name']}: first loss {rec['first_loss']!r} of {peer} differs from torch.nn's "
                            f"{ref!r} by more than 1e-5 (relative)")
                gc = rec.get("grad_check")
                if gc and not gc["ok"]:
                    stop = f"{cfg['name']}: the JAX BPPSA's gradients differ from jax.grad's: {gc['rel_err']}"
                elif peer == "jax assoc-scan BPPSA" and not gc and not rec.get("skipped"):
                    stop = f"{cfg['name']}: the JAX BPPSA's gradient check did not run: {rec.get('error')}"
                if stop:
                    break
            if stop:
                break
    doc["wall_s"] = time.perf_counter() - t_start
    doc["stopped"] = stop
    report.write(doc, a.out)
    if stop:
        sys.exit(f"bench_peers: STOPPED: {stop}")


if __name__ == "__main__":
    main()
