#!/usr/bin/env python3
"""Fashion-MNIST under its published protocol (the official split: trained on the 60,000 training
images, accuracy on the 10,000 test images), trained with BPPSA by `bppsa train`, beside the
benchmark table of Fashion-MNIST's own README (Debian: /usr/share/doc/dataset-fashion-mnist/README.md.gz,
whose rows are quoted from that file).

  scripts/python.sh bench/fashion_mnist/fashion_mnist.py --build build --out bench/results/cpu/fashion [--quick] [--threads 2] [--only gru,vgg]
  (bench/fashion_mnist/run.sh runs it)

Runs, every command recorded in OUT/fashion.json:
  gru  a GRU over rows (T = 28 steps of 28 pixels), its backward pass through time a BPPSA scan
       (--gru-backward, hybrid: the chunked scan; blelloch does about H× BP's arithmetic, hours at
       H 128 on two cores), and the same run (same seed, weights, batches) with sequential BP beside it;
  vgg  VGG-11 (channel widths / --vgg-div) trained with BPPSA (--vgg-backward, hybrid: the chunked
       scan over the layers' CSR Jacobians) for --vgg-epochs at --vgg-lr, then --vgg-decay-epochs
       more at a tenth of it (a step schedule: a second run from the first one's weights, fresh
       Adam state); then pruned to 90 % by global magnitude and retrained with BPPSA for
       --prune-epochs at the lower rate, masks fixed.
Writes OUT/fashion.json, OUT/fashion.md (the README's table) and, where matplotlib is,
OUT/fig_fashion.png (test accuracy per epoch against the published figures)."""
import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # bench/common
from cpuinfo import cpu_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
import safetensors_np  # noqa: E402

PUBLISHED_README = "/usr/share/doc/dataset-fashion-mnist/README.md.gz"
# The rows of the published table we compare with: (classifier, preprocessing) as the file spells them.
PUBLISHED_ROWS = [("GRU+SVM", "None"), ("GRU+SVM with dropout", "None"), ("MLP 256-128-100", "None"),
                  ("2 Conv+pooling", "None"), ("3 Conv+pooling+2 FC+dropout", "None"),
                  ("VGG16 26M parameters", "None")]


def published_table():
    """[(classifier, preprocessing, test accuracy)] of PUBLISHED_ROWS, read from the README's table."""
    try:
        with gzip.open(PUBLISHED_README, "rt", encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        sys.exit(f"fashion_mnist: cannot read {PUBLISHED_README} ({e}): install Debian's dataset-fashion-mnist")
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and (cells[0], cells[1]) in PUBLISHED_ROWS:
            try:
                rows.append((cells[0], cells[1], float(cells[2])))
            except ValueError:
                continue
    missing = {r for r in PUBLISHED_ROWS} - {(a, b) for a, b, _ in rows}
    if missing:
        sys.exit(f"fashion_mnist: {PUBLISHED_README} has no row {sorted(missing)}")
    return rows


def run(cmd, log):
    log.append(" ".join(cmd))
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    print(f"  {time.time() - t0:7.1f} s  {' '.join(cmd)[:160]}", file=sys.stderr)
    return r


def epochs_of(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if r.get("event") == "epoch"]


def data_line(stderr):
    """The first line `bppsa train` prints: which data set, and how many images."""
    return next((line for line in stderr.splitlines() if line.startswith("data: ")), "")


def parameters(checkpoint):
    """(parameters, non-zero parameters) of a checkpoint's weights."""
    tensors, _ = safetensors_np.load(checkpoint)
    total = sum(int(v.size) for v in tensors.values())
    nonzero = sum(int((v != 0).sum()) for v in tensors.values())
    return total, nonzero


def requested_epochs(args):
    return int(args[args.index("--epochs") + 1])


def settings(args):
    """A run's flags but its epoch count: what must match for an earlier run to be continued."""
    i = args.index("--epochs")
    return args[:i] + args[i + 2:]


def train(bppsa, name, args, out, cmds, common):
    """One `bppsa train` run with a log and a checkpoint: its record. A run interrupted earlier
    with the same settings (NAME.args.json beside its log and checkpoint) continues with
    --resume, exactly, where it has no --init; a complete one is taken as it is."""
    log, ckpt, meta = (os.path.join(out, f"{name}.{ext}") for ext in ("jsonl", "safetensors", "args.json"))
    want = requested_epochs(args)
    done, same = [], False
    if all(os.path.exists(p) for p in (log, ckpt, meta)):
        with open(meta) as f:
            same = json.load(f) == settings(args + common)
        done = epochs_of(log) if same else []
    t0 = time.time()
    base = [bppsa, "train"] + args + common + ["--log", log, "--save", ckpt]
    if same and len(done) == want:
        print(f"  {name}: complete in {out} ({want} epochs), taken as it is", file=sys.stderr)
        cmds.append(" ".join(base))
        r = None
    elif same and 0 < len(done) < want and "--init" not in args:
        print(f"  {name}: continuing after epoch {len(done)} (--resume)", file=sys.stderr)
        r = run(base + ["--resume", ckpt], cmds)
    else:
        for p in (log, ckpt, meta):
            if os.path.exists(p):
                os.remove(p)
        write_atomically(meta, json.dumps(settings(args + common)))
        r = run(base, cmds)
    epochs = epochs_of(log)
    total, nonzero = parameters(ckpt)
    return {"name": name, "command": cmds[-1], "data": data_line(r.stderr) if r else "",
            "wall_seconds": time.time() - t0, "epochs": epochs, "test_accuracy": epochs[-1]["test_accuracy"],
            "best_test_accuracy": max(e["test_accuracy"] for e in epochs), "parameters": total,
            "nonzero_parameters": nonzero, "checkpoint": ckpt}


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def versions(build):
    """The commit of this driver, and of the bppsa binary: BUILD/COMMIT where a copied build
    records it, else the same checkout's."""
    out = {"python": platform.python_version()}
    try:
        out["driver_commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                              text=True).stdout.strip()
    except OSError:
        pass
    out["bppsa_commit"] = out.get("driver_commit", "?")
    try:
        with open(os.path.join(build, "COMMIT")) as f:
            out["bppsa_commit"] = f.read().strip()
    except OSError:
        pass
    return out


def pct(x):
    return f"{100 * x:.2f} %"


def markdown(doc):
    lines = ["| model | trained with | parameters | epochs | test accuracy (last epoch) | best epoch |",
             "|---|---|---:|---:|---:|---:|"]
    for r in doc["runs"]:
        lines.append(f"| {r['label']} | {r['method']} | {r['nonzero_parameters']:,} | {len(r['epochs'])} | "
                     f"**{pct(r['test_accuracy'])}** | {pct(r['best_test_accuracy'])} |")
    lines += ["", "Published (Fashion-MNIST's README, the same 60,000 / 10,000 split; not verified by its authors):", "",
              "| classifier | preprocessing | test accuracy |", "|---|---|---:|"]
    lines += [f"| {c} | {p} | {pct(a)} |" for c, p, a in doc["published"]]
    lines += ["", f"Machine: {doc['machine']}, {doc['threads']} threads; commit {doc['versions'].get('bppsa_commit', '?')}. "
              f"Commands: `fashion.json`."]
    return "\n".join(lines) + "\n"


def plot(doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("fashion_mnist: matplotlib missing: no figure", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(8, 4.8))
    offset = {}
    for r in doc["runs"]:
        start = offset.get(r.get("continues"), 0)
        xs = [start + i + 1 for i in range(len(r["epochs"]))]
        offset[r["name"]] = xs[-1]
        ax.plot(xs, [100 * e["test_accuracy"] for e in r["epochs"]], marker="o", ms=3,
                label=f"{r['label']}, {r['method']}")
    for c, _, a in doc["published"]:
        ax.axhline(100 * a, color="grey", lw=0.8, ls="--")
        ax.text(0.6, 100 * a + 0.05, f"{c}: {100 * a:.1f} %", fontsize=7, color="grey")
    ax.set_xlabel("epoch (a run that continues another starts where it ended)")
    ax.set_ylabel("test accuracy, % (10,000 test images)")
    ax.set_ylim(80, 95)
    ax.set_title("Fashion-MNIST trained with BPPSA, against the published benchmark (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"fashion_mnist: wrote {path}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "cpu", "fashion"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="gru,vgg", help="comma-separated: gru, vgg")
    ap.add_argument("--quick", action="store_true", help="smoke test: a few hundred images, 1 epoch, tiny models")
    ap.add_argument("--gru-hidden", type=int, default=128)
    ap.add_argument("--gru-layers", type=int, default=1)
    ap.add_argument("--gru-epochs", type=int, default=12)
    ap.add_argument("--gru-batch", type=int, default=64)
    ap.add_argument("--gru-lr", type=float, default=2e-3)
    ap.add_argument("--gru-backward", default="hybrid", choices=("hybrid", "blelloch"))
    ap.add_argument("--gru-reference", default="bp", choices=("bp", "none"),
                    help="the same GRU run with sequential BP beside it (none: skip it)")
    ap.add_argument("--vgg-div", type=int, default=4, help="VGG-11's channel widths divided by this (vgg11/N)")
    ap.add_argument("--vgg-backward", default="hybrid")
    ap.add_argument("--vgg-epochs", type=int, default=3)
    ap.add_argument("--vgg-decay-epochs", type=int, default=1)
    ap.add_argument("--vgg-batch", type=int, default=32)
    ap.add_argument("--vgg-lr", type=float, default=1e-3)
    ap.add_argument("--prune", type=float, default=0.9)
    ap.add_argument("--prune-epochs", type=int, default=1)
    a = ap.parse_args()
    only = set(a.only.split(","))
    if not only <= {"gru", "vgg"}:
        sys.exit(f"fashion_mnist: --only takes gru and/or vgg, not {a.only}")
    published = published_table()  # before hours of training: a missing file stops the run now
    run_versions = versions(a.build)  # the commit that trains, not the one checked out when it ends
    limit = []
    if a.quick:
        a.gru_hidden, a.gru_epochs, a.vgg_div, a.vgg_epochs, a.vgg_decay_epochs, a.prune_epochs = 16, 1, 32, 1, 1, 1
        limit = ["--limit-train", "512", "--limit-test", "256"]
    bppsa = os.path.join(a.build, "bppsa")
    work = os.path.join(a.out, "work")
    os.makedirs(work, exist_ok=True)
    cmds, runs = [], []
    T = str(a.threads)

    if "gru" in only:
        common = ["--threads", T, "--no-progress", "--seed", "4202"] + limit
        gru = ["--model", "gru", "--hidden", str(a.gru_hidden), "--layers", str(a.gru_layers), "--data", "mnist-rows",
               "--batch", str(a.gru_batch), "--epochs", str(a.gru_epochs), "--lr", str(a.gru_lr),
               "--clip-grad-norm", "1"]
        label = f"GRU over rows (H {a.gru_hidden}{', %d layers' % a.gru_layers if a.gru_layers > 1 else ''}) + Linear"
        for method in (a.gru_backward,) + (("bp",) if a.gru_reference == "bp" else ()):
            print(f"GRU, {method}", file=sys.stderr)
            r = train(bppsa, f"gru_{method}", gru + ["--backward", method], work, cmds, common)
            r.update(label=label, method=f"BPPSA ({method} scan)" if method != "bp" else "BP (reference)")
            runs.append(r)

    if "vgg" in only:
        common = ["--threads", T, "--no-progress", "--seed", "4202", "--batch", str(a.vgg_batch)] + limit
        arch = f"vgg11/{a.vgg_div}" if a.vgg_div > 1 else "vgg11"
        method = {"hybrid": "BPPSA (hybrid scan)", "blelloch": "BPPSA (Blelloch scan)"}.get(a.vgg_backward,
                                                                                            a.vgg_backward)
        print(f"{arch}, {a.vgg_backward}", file=sys.stderr)
        first = train(bppsa, "vgg", ["--model", "cnn", "--arch", arch, "--data", "mnist", "--epochs", str(a.vgg_epochs),
                                     "--lr", str(a.vgg_lr), "--backward", a.vgg_backward], work, cmds, common)
        first.update(label=f"VGG-11{'/' + str(a.vgg_div) if a.vgg_div > 1 else ''}", method=f"{method}, lr {a.vgg_lr:g}")
        runs.append(first)
        dense = first
        if a.vgg_decay_epochs > 0:
            dense = train(bppsa, "vgg_decay", ["--model", "cnn", "--init", first["checkpoint"], "--data", "mnist",
                                               "--epochs", str(a.vgg_decay_epochs), "--lr", str(a.vgg_lr / 10),
                                               "--backward", a.vgg_backward], work, cmds, common)
            dense.update(label=first["label"], method=f"{method}, then lr {a.vgg_lr / 10:g}", continues="vgg")
            runs.append(dense)
        pruned = train(bppsa, "vgg_pruned", ["--model", "cnn", "--init", dense["checkpoint"], "--prune", str(a.prune),
                                             "--data", "mnist", "--epochs", str(a.prune_epochs),
                                             "--lr", str(a.vgg_lr / 10), "--backward", a.vgg_backward],
                       work, cmds, common)
        pruned.update(label=f"{first['label']} pruned to {round(100 * a.prune)} %", method=f"{method}, retrained",
                      continues=dense["name"], dense_test_accuracy=dense["test_accuracy"])
        runs.append(pruned)

    for r in runs:
        r["checkpoint"] = os.path.relpath(r["checkpoint"], a.out)
    doc = {"machine": f"{cpu_model()}, {os.cpu_count()} cores", "threads": a.threads, "quick": a.quick,
           "versions": run_versions, "published_source": PUBLISHED_README, "published": published,
           "runs": runs, "commands": cmds}
    write_atomically(os.path.join(a.out, "fashion.json"), json.dumps(doc, indent=1))
    write_atomically(os.path.join(a.out, "fashion.md"), markdown(doc))
    plot(doc, os.path.join(a.out, "fig_fashion.png"))
    print(markdown(doc))


if __name__ == "__main__":
    main()
