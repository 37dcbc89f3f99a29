#!/usr/bin/env python3
"""Checks of the GPU benchmark's arithmetic (bench/gpu/gpu_report.py) on hand-made records: the first-loss
check, the ratios to PyTorch, the roofline, the plan's sweeps. Standard library only; exit 0 or an
AssertionError.   scripts/python.sh bench/gpu/test_gpu.py"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu as bench_gpu  # noqa: E402
import gpu_report as report  # noqa: E402
import summarize_sweep  # noqa: E402


def st(x):
    return {"median": x, "min": x, "max": x, "samples": [x]}


def torch_rec(cid, loss, bw, it, tf32=False, peak=4 << 20):
    return {"impl": "pytorch", "id": cid, "method": "pytorch-tf32" if tf32 else "pytorch", "tf32": tf32, "loss0": loss,
            "forward": st(it - bw), "backward": st(bw), "total": st(it), "memory": {"peak_bytes": peak}}


def bppsa_rec(cid, method, loss, bw, it, peak=(1 << 20, 2 << 20, 2 << 20)):
    return {"impl": "bppsa", "id": cid, "method": method, "loss0": loss, "forward": st(it - bw), "backward": st(bw),
            "total": st(it), "memory": {"model_bytes_after_forward": peak[0], "model_bytes_after_backward": peak[1],
                                        "model_bytes_after_step": peak[2]}}


def test_compare():
    recs = [torch_rec("a", 2.0, 10e-3, 20e-3), torch_rec("a", 2.0001, 9e-3, 18e-3, tf32=True),
            bppsa_rec("a", "fused", 2.0 * (1 + 5e-5), 1e-3, 4e-3),  # within 1e-4
            bppsa_rec("a", "bp", 2.0 * (1 + 2e-4), 5e-3, 10e-3),  # outside
            {"impl": "bppsa", "id": "a", "method": "hybrid", "error": "[x] boom"},
            bppsa_rec("b", "bp", 1.0, 1e-3, 2e-3)]  # no PyTorch record for b
    rows = {(r["id"], r["method"]): r for r in report.compare(recs, 1e-4)}
    f = rows[("a", "fused")]
    assert f["loss_ok"] and abs(f["backward_speedup"] - 10) < 1e-9 and abs(f["iteration_speedup"] - 5) < 1e-9
    assert abs(f["backward_speedup_vs_tf32"] - 9) < 1e-9
    assert abs(f["memory_ratio"] - 0.5) < 1e-12, f["memory_ratio"]  # 2 MiB against PyTorch's 4 MiB
    assert rows[("a", "bp")]["loss_ok"] is False and rows[("a", "bp")]["loss_rel_diff"] > 1e-4
    assert rows[("a", "hybrid")]["error"] == "[x] boom"
    assert "loss_ok" not in rows[("b", "bp")] and "backward_speedup" not in rows[("b", "bp")]


def test_roofline():
    r = {"impl": "fused", "id": "f", "cell": "rnn", "hidden": 20, "steps": 100, "batch": 16, "time": st(1e-4),
         "flops": 1e9, "bytes": 1e6, "device": {"peak_fp32_flops": 1e13, "peak_bytes_per_s": 1e12}}
    row = report.compare([r], 1e-4)[0]
    assert row["method"] == "fused-alone" and row["bound"] == "compute"
    assert abs(row["x_from_roofline"] - 1.0) < 1e-12 and abs(row["achieved_tflops"] - 10) < 1e-9
    r["bytes"] = 1e9  # now 1 ms of traffic at 1 TB/s: memory-bound, 10× from the roof at 0.1 ms… measured 0.1 ms
    row = report.compare([r], 1e-4)[0]
    assert row["bound"] == "memory" and abs(row["x_from_roofline"] - 0.1) < 1e-12


def test_markdown_and_plan():
    full, quick = bench_gpu.plan(False), bench_gpu.plan(True)
    ids = {c["id"] for c in full["configs"]}
    assert {"rnn_H20_T30000_B16", "rnn_H20_T1000_B256", "gru_H20_T1034_B16_F12", "rnn_H256_T1000_B16",
            "lstm_H20_T1000_B16"} <= ids
    t1000 = next(c for c in full["configs"] if c["id"] == "rnn_H20_T1000_B16")
    assert set(t1000["sweeps"]) == {"rnn_T", "rnn_B", "rnn_H"} and t1000["tf32_also"] and t1000["profile"]
    assert len(quick["configs"]) < len(full["configs"]) and len(set(c["id"] for c in full["configs"])) == len(ids)
    recs = [torch_rec("rnn_H20_T1000_B16", 2.0, 10e-3, 20e-3), bppsa_rec("rnn_H20_T1000_B16", "bp", 2.1, 5e-3, 9e-3)]
    doc = {"machine": {"cpu": "c", "cores": 1, "os": "o", "python": "3", "date": "d", "gpus": []}, "quick": False,
           "device": "cuda", "reps": 5, "warmup": 2, "plan": full, "records": recs,
           "comparison": report.compare(recs, 1e-4), "skipped": []}
    md = report.markdown(doc)
    assert "**MISMATCH**" in md and "2.00×" in md, md


def test_sweep_summary():
    def rec(forced, ms, chunk, chunks, est, tile=8, error=None):
        r = {"id": "x", "forced": forced, "chunk": chunk, "chunks": chunks, "reduce_tile": tile, "reduce_columns": 1,
             "push_tile": 4, "w_shared": True, "estimate_us": est}
        if error:
            r["error"] = error
        else:
            r["time"] = {"median": ms * 1e-3}
        return r
    recs = [rec({}, 2.0, 10, 5, 30, tile=20), rec({"chunk_length": 20}, 1.0, 20, 3, 40),
            rec({"reduce_tile": 64}, 0, 10, 5, 0, error="not compiled")]
    row = summarize_sweep.summarize(recs).splitlines()[2]
    # The model's plan (no forced options) at 2 ms, the fastest timed one (L 20) at 1 ms: 2×; the error is not timed.
    assert "| x | 2 | L 10 (C 5), reduce 20×1, push 4 | 2.000 | 30 | L 20 (C 3), reduce 8×1, push 4 | 1.000 | 40 | 2.00× |" \
        == row, row


def test_fit_table():
    def rec(cid, ms, chunk, chunks, tile, constants):
        return {"id": cid, "chunk": chunk, "chunks": chunks, "reduce_tile": tile, "reduce_columns": 4, "push_tile": 4,
                "w_shared": True, "model_constants": constants, "time": {"median": ms * 1e-3}}
    defaults = [rec("a", 2.0, 72, 417, 20, "defaults"), rec("b", 1.0, 15, 67, 20, "defaults")]
    fitted = [rec("a", 1.5, 112, 268, 20, {"launch": 1}), {"id": "b", "error": "refused"}]
    lines = report.fit_table(defaults, fitted)
    # Only configurations both sides timed; the ratio is fitted over default (1.5 / 2.0).
    assert lines[-1] == "| a | L 72 (C 417), reduce 20×4, push 4 | 2.000 | L 112 (C 268), reduce 20×4, push 4 | 1.500 | 0.75 |", \
        lines[-1]
    assert len([x for x in lines if x.startswith("| a") or x.startswith("| b")]) == 1, lines
    assert report.fit_table(defaults, []) == []


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print(f"ok {name}")
