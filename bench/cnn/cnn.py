#!/usr/bin/env python3
"""CNN benchmark (issue: sparse Jacobians for CNNs): the paper's Table 1, its Fig. 10 (FLOPs of
every scan product against BP's, critical path marked), and retraining a pruned VGG-11-shaped
network on Fashion-MNIST (the first --limit-train training images, all 10,000 test images) with
BPPSA gradients, against BP and against PyTorch (same initial weights, masks, data and batch
order), at pruning levels 0, 90 and 99 %.

  scripts/python.sh bench/cnn/cnn.py --build build --out bench/results/cpu/cnn [--quick] [--threads 2]

Steps, every command recorded in OUT/prune.json:
  1. `bppsa jacobians --table1` → OUT/table1.json (ours vs PyTorch autograd basis-vector Jacobians).
  2. Dense training with BP (`bppsa train --model cnn --arch ARCH --data mnist --limit-train N`).
  3. Per level s: global magnitude pruning of the dense model; backward-pass timing of BP,
     BPPSA (blelloch, hybrid) and PyTorch on the same batch in fresh processes (medians);
     retraining for --epochs with BP, BPPSA (blelloch) and PyTorch; the scan report of the
     pruned chain → OUT/fig10_s{0,90,99}.json.
Then bench/cnn/plot_cnn.py draws OUT/fig_prune.png and OUT/fig10.png."""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable  # the project's environment (bench/cnn/run.sh runs it), with PyTorch


def run(cmd, log):
    log.append(" ".join(cmd))
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    print(f"  {time.time() - t0:6.1f} s  {' '.join(cmd)[:150]}", file=sys.stderr)
    return r.stdout


def last_json(text):
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def read_log(path):
    """The epoch records of a `bppsa train --log` file."""
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("event") == "epoch"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results", "cpu", "cnn"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--arch", default="vgg11/16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dense-epochs", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3, help="retraining epochs per pruning level")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--levels", default="0,0.9,0.99")
    ap.add_argument("--limit-train", type=int, default=8000,
                    help="training images (the first N of the 60,000; 0 = all): the pruning study's size")
    ap.add_argument("--quick", action="store_true", help="smoke test: tiny network, 1 epoch, few repetitions")
    a = ap.parse_args()
    if a.quick:
        a.arch, a.dense_epochs, a.epochs, a.reps, a.limit_train = "vgg11/64", 1, 1, 2, 1000
    bppsa, bench = os.path.join(a.build, "bppsa"), os.path.join(a.build, "bench_cnn")
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    cmds, T = [], str(a.threads)
    limit = ["--limit-train", str(a.limit_train)]
    common = ["--batch", str(a.batch), "--lr", str(a.lr), "--threads", T, "--no-progress"] + limit

    print("Table 1", file=sys.stderr)
    run([bppsa, "jacobians", "--table1", "--threads", T, "--json", os.path.join(a.out, "table1.json")]
        + (["--vectors", "32", "--repeats", "2"] if a.quick else ["--vectors", "512"]), cmds)
    machine = json.load(open(os.path.join(a.out, "table1.json")))["machine"]

    print("dense training (BP)", file=sys.stderr)
    dense, dense_log = os.path.join(work, "dense.safetensors"), os.path.join(work, "dense.jsonl")
    run([bppsa, "train", "--model", "cnn", "--arch", a.arch, "--data", "mnist", "--epochs", str(a.dense_epochs),
         "--backward", "bp", "--save", dense, "--log", dense_log] + common, cmds)
    dense_accuracy = read_log(dense_log)[-1]["test_accuracy"]

    levels = []
    for s in [float(v) for v in a.levels.split(",")]:
        pct = round(100 * s)
        print(f"sparsity {pct} %", file=sys.stderr)
        d = os.path.join(work, f"s{pct}")
        exported = last_json(run([bench, "export", "--init", dense, "--prune", str(s), "--epochs", str(a.epochs),
                                  "--batch", str(a.batch), "--out", d] + limit, cmds))
        pruned_eval = last_json(run([bppsa, "eval", "--checkpoint", os.path.join(d, "init.safetensors"), "--data",
                                     "mnist", "--json"] + limit, cmds))
        timing = {}
        for m in ("bp", "blelloch", "hybrid"):
            timing[m] = last_json(run([bench, "time", "--init", dense, "--prune", str(s), "--batch", str(a.batch),
                                       "--method", m, "--threads", T, "--reps", str(a.reps)] + limit, cmds))
        timing["pytorch"] = last_json(run([PY, os.path.join(HERE, "torch_cnn.py"), "time", "--dir", d, "--threads", T,
                                           "--reps", str(a.reps), "--warmup", "2", "--batch", str(a.batch)], cmds))
        ref = timing["pytorch"]["loss"]
        for m in ("bp", "blelloch", "hybrid"):
            if abs(timing[m]["loss"] - ref) > 1e-4 * max(1.0, abs(ref)):
                sys.exit(f"loss mismatch at {pct} %: {m} {timing[m]['loss']} vs PyTorch {ref}")
        accuracy, retrain = {}, {}
        for m in ("bp", "blelloch"):
            log = os.path.join(d, f"retrain_{m}.jsonl")
            run([bppsa, "train", "--model", "cnn", "--init", dense, "--prune", str(s), "--data", "mnist",
                 "--epochs", str(a.epochs), "--backward", m, "--log", log] + common, cmds)
            retrain[m] = read_log(log)
            accuracy[m] = [e["test_accuracy"] for e in retrain[m]]
        tt = last_json(run([PY, os.path.join(HERE, "torch_cnn.py"), "train", "--dir", d, "--threads", T,
                            "--epochs", str(a.epochs), "--batch", str(a.batch), "--lr", str(a.lr)], cmds))
        retrain["pytorch"] = tt["epochs"]
        accuracy["pytorch"] = [e["test_accuracy"] for e in tt["epochs"]]
        fig10 = os.path.join(a.out, f"fig10_s{pct}.json")
        run([bppsa, "jacobians", "--weights", dense, "--prune", str(s), "--batch", "1", "--backward", "blelloch",
             "--json", fig10], cmds)
        levels.append({"sparsity": s, "pruning": exported["pruning"], "time": timing, "accuracy": accuracy,
                       "retrain": retrain, "dense_accuracy": dense_accuracy,
                       "pruned_accuracy": pruned_eval["accuracy"],
                       "torch_zero_fraction": [tt.get("zero_fraction_start"), tt.get("zero_fraction_end")]})

    doc = {"machine": machine, "arch": a.arch, "threads": a.threads, "batch": a.batch, "lr": a.lr,
           "limit_train": a.limit_train, "dense_epochs": a.dense_epochs, "epochs": a.epochs, "reps": a.reps, "dense_accuracy": dense_accuracy,
           "levels": levels, "commands": cmds}
    with open(os.path.join(a.out, "prune.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(a.out, "prune.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["machine", "arch", "sparsity", "method", "backward_median_s", "forward_median_s",
                    "jacobians_median_s", "final_test_accuracy"])
        for lv in levels:
            for m, t in lv["time"].items():
                acc = lv["accuracy"].get(m)
                w.writerow([machine, a.arch, lv["sparsity"], m, t["backward"]["median"], t["forward"]["median"],
                            t.get("jacobians", {}).get("median", ""), acc[-1] if acc else ""])
    print(f"wrote {a.out}/prune.json, prune.csv, table1.json, fig10_s*.json", file=sys.stderr)


if __name__ == "__main__":
    main()
