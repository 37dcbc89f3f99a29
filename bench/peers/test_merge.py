#!/usr/bin/env python3
"""bench/peers/merge.py on hand-written runs: records in the grid's order, a later run's record
replacing an earlier one's, every run listed, issue 45's goals computed from the records' medians,
and runs of other environments or quick runs refused with the file and field named.

    scripts/python.sh bench/peers/test_merge.py"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MERGE = os.path.join(HERE, "merge.py")


def rec(cell, h, t, b, peer, step_ms):
    return {"config": f"{cell} H{h} T{t} B{b}", "cell": cell, "hidden": h, "steps": t, "batch": b, "features": 1,
            "peer": peer, "first_loss": 2.3, "step": {"median": step_ms / 1e3}, "backward": {"median": step_ms / 2e3},
            "peak_memory": {"bytes": 2**20}, "compile_s": 0.0, "reps": 3}


def run_doc(records, steps, commit="a" * 40, torch="2.15.0", quick=False):
    return {"machine": {"cpu": "test cpu", "cores": 2, "threads": 2, "busy_core": 1, "platform": "linux",
                        "load_before": ["0.1", "0.2", "0.3"]},
            "versions": {"python": "3.11", "torch": torch, "jax": "0.10", "bppsa": "0.1.0"},
            "source": {"commit": commit, "dirty": False}, "quick": quick, "grid": "peers", "seed": 1,
            "settings": {"reps": 9, "warmup": 3, "budget_s": 4.0, "cap_s": 10.0}, "records": records,
            "steps": steps, "wall_s": 100.0, "stopped": None}


def write(root, name, doc):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "peers.json"), "w") as f:
        json.dump(doc, f)
    return d


def merge(out, *runs):
    return subprocess.run([sys.executable, MERGE, "--out", out, *runs], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # Slice T 1000 first, then T 28 (the grid puts T 28 first), then a re-run of one record.
        a = write(tmp, "t1000", run_doc([rec("LSTM", 512, 1000, 16, "torch.nn", 900.0),
                                         rec("LSTM", 512, 1000, 16, "jax scan", 720.0),
                                         rec("LSTM", 512, 1000, 16, "bppsa.nn auto", 800.0)], [1000], commit="b" * 40))
        b = write(tmp, "t28", run_doc([rec("RNN", 512, 28, 1, "torch.nn", 10.0),
                                       rec("RNN", 512, 28, 1, "jax scan", 4.0),
                                       rec("RNN", 512, 28, 1, "bppsa.nn auto", 5.0)], [28]))
        c = write(tmp, "again", run_doc([rec("RNN", 512, 28, 1, "bppsa.nn auto", 2.0)], [28]))
        out = os.path.join(tmp, "merged")
        r = merge(out, a, b, c)
        assert r.returncode == 0, r.stderr
        assert "RNN H512 T28 B1, bppsa.nn auto: the record of" in r.stdout and "again" in r.stdout, r.stdout
        doc = json.load(open(os.path.join(out, "peers.json")))
        names = [(x["config"], x["peer"]) for x in doc["records"]]
        assert names == [("RNN H512 T28 B1", "torch.nn"), ("RNN H512 T28 B1", "jax scan"),
                         ("RNN H512 T28 B1", "bppsa.nn auto"), ("LSTM H512 T1000 B16", "torch.nn"),
                         ("LSTM H512 T1000 B16", "jax scan"), ("LSTM H512 T1000 B16", "bppsa.nn auto")], names
        auto28 = next(x for x in doc["records"] if x["config"] == "RNN H512 T28 B1" and x["peer"] == "bppsa.nn auto")
        assert auto28["step"]["median"] == 2.0 / 1e3, auto28
        assert [x["steps"] for x in doc["runs"]] == [[1000], [28], [28]] and doc["wall_s"] == 300.0, doc["runs"]
        md = open(os.path.join(out, "README.md")).read()
        assert "| " + os.path.normpath(a) + " | 1000 | bbbbbbbbbbbb |" in md, md
        # auto against torch.nn: 10/2 = 5.00 at T 28, 900/800 = 1.12 at T 1000; against the best peer at
        # T ≥ 300: jax scan's 720 / 800 = 0.90 (missed).
        assert "- auto ≥ torch.nn (issue 45): met at 2 of 2 shapes; RNN H512 T28 B1 5.00, LSTM H512 T1000 B16 1.12" in md, md
        assert "- auto ≥ the best peer at T ≥ 300 (issue 45): met at 0 of 1 shapes; LSTM H512 T1000 B16 0.90" in md, md
        assert "- auto ≥ 2× the best peer at T ≥ 1000, H ≤ 64 (issue 45): met at 0 of 0 shapes" in md, md
        assert os.path.getsize(os.path.join(out, "fig_peers.png")) > 0

        # Refusals, each naming the file and what is wrong; nothing is written.
        other = write(tmp, "other", run_doc([rec("RNN", 512, 100, 1, "torch.nn", 20.0)], [100], torch="2.11.0"))
        r = merge(os.path.join(tmp, "x"), b, other)
        assert r.returncode == 1 and "other/peers.json: versions is" in r.stderr, r.stderr
        quick = write(tmp, "quick", run_doc([rec("RNN", 20, 20, 16, "torch.nn", 1.0)], None, quick=True))
        r = merge(os.path.join(tmp, "x"), b, quick)
        assert r.returncode == 1 and "quick/peers.json: a --quick run" in r.stderr, r.stderr
        r = merge(os.path.join(tmp, "x"), b, os.path.join(tmp, "missing"))
        assert r.returncode == 1 and "missing/peers.json: no such file" in r.stderr, r.stderr
        torn = os.path.join(tmp, "torn")
        os.makedirs(torn)
        with open(os.path.join(torn, "peers.json"), "w") as f:
            f.write('{"records": [')
        r = merge(os.path.join(tmp, "x"), b, torn)
        assert r.returncode == 1 and "torn/peers.json: not JSON" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(tmp, "x")), "a refused merge wrote its output folder"
    print("bench/peers/merge.py: OK")


if __name__ == "__main__":
    main()
