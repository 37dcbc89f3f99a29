#!/usr/bin/env python3
"""One peer at one configuration, in a process of its own (fresh memory, one framework loaded):
set-up, first loss, [the JAX BPPSA's gradient check], compile, peak memory of one training step,
backward alone (not with --step-only), a training step, and a training step with one core busy (--busy). Prints its record as the
last line (@@RESULT {json}). Run by bench/peers/peers.py, not by hand."""
import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_common as common  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True)
    ap.add_argument("--config", required=True, help="JSON")
    ap.add_argument("--data", required=True, help="the runner's .npz (weights w.*, x, y)")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=20.0, help="seconds of timed calls per measurement")
    ap.add_argument("--cap", type=float, default=60.0, help="a step longer than this: skipped, over budget")
    ap.add_argument("--busy", action="store_true", help="also time the step with the last core busy")
    ap.add_argument("--step-only", action="store_true", help="time the training step only, not backward alone")
    ap.add_argument("--check", action="store_true", help="JAX BPPSA: check its gradients against jax.grad")
    ap.add_argument("--perturb", type=float, default=0.0, help="JAX BPPSA: scale its Jacobians (test the check)")
    a = ap.parse_args()
    cfg = json.loads(a.config)
    rec = {"peer": a.peer, "config": cfg["name"], **{k: cfg[k] for k in common.SHAPE_KEYS},
           "threads": a.threads}
    try:
        run(a, cfg, rec)
    except Exception as e:  # noqa: BLE001 - the runner records it and goes on
        rec["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:500] if str(e).strip() else ''}"
        rec["traceback"] = traceback.format_exc()[-4000:]
    common.emit(rec)


def run(a, cfg, rec):
    common.pin_threads(a.threads)
    if a.peer.startswith("jax"):
        os.environ.update(common.xla_env(a.threads))
    import numpy as np
    data = np.load(a.data)
    if a.peer.startswith("jax"):
        import jax_peers as mod
        if a.check:
            ok, err = mod.check_bppsa_grads(cfg, data, a.perturb)
            rec["grad_check"] = {"ok": ok, "rel_err": err, "tol": 1e-4, "against": "jax.grad of the lax.scan model"}
            if not ok:
                return
        peer = mod.build(a.peer, cfg, data, a.threads, a.perturb)
    else:
        import torch_peers as mod
        peer = mod.build(a.peer, cfg, data, a.threads)

    def first_calls(peer):
        """The first loss, then the first step (jit, torch.compile compile here): timed apart."""
        t0 = time.perf_counter()
        loss = peer.first_loss()
        loss_s = time.perf_counter() - t0
        base = common.rss()
        t0 = time.perf_counter()
        peer.step()
        return loss, loss_s, base, time.perf_counter() - t0

    if a.peer == "torch scan":
        try:
            calls = first_calls(peer)
        except Exception as e:  # noqa: BLE001 - torch.compile of the prototype scan failed: record it, run eager
            rec["compile_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
            peer = mod.build("torch scan eager", cfg, data, a.threads)
            peer.info["compiled"] = "no: torch.compile failed, eager scan"
            calls = first_calls(peer)
    else:
        calls = first_calls(peer)
    rec.update(peer.info)
    rec["first_loss"], first_loss_s, base, first_step = calls
    t0 = time.perf_counter()
    peer.forward()
    peer.backward()
    first_fb = time.perf_counter() - t0
    # Peak memory of one (warm) training step above the set-up's resident memory.
    t0 = time.perf_counter()
    rec["peak_memory"] = common.peak_of(peer.step, base)
    one = time.perf_counter() - t0
    rec["first_step_s"] = first_step
    if one > a.cap:
        rec["skipped"] = f"over budget: one step took {one:.1f} s (cap {a.cap:.0f} s)"
        rec["one_step_s"] = one
        return
    reps, warmup = common.adaptive_reps(one, a.reps, a.warmup, a.budget)
    rec["reps"], rec["warmup"] = reps, warmup
    if not a.step_only:
        rec["backward"] = common.timed(peer.backward, reps, warmup, before=peer.forward)
    rec["step"] = common.timed(peer.step, reps, warmup)
    # compile time: the first loss call, and the first step's and first forward+backward's excess
    # over warm ones (for eager peers: first-call overheads only).
    rec["compile_s"] = first_loss_s + max(0.0, first_step - rec["step"]["median"]) + \
        max(0.0, first_fb - rec["step"]["median"])
    if a.busy:
        with common.Hog(common.busy_core()):
            rec["step_busy"] = common.timed(peer.step, reps, warmup)
            rec["busy_core"] = common.busy_core()


if __name__ == "__main__":
    main()
