#!/usr/bin/env python3
"""`bppsa grad --model cnn` against PyTorch autograd: random nn.Sequential CNNs (convolutions
with any kernel, stride, padding and dilation on rectangular inputs, overlapping max-pools,
avg-pools, ReLU, Tanh, Linear), random weights and inputs; the loss and every parameter
gradient must agree to a relative error ≤ 1e-4 (max |a − b| / max |b| per tensor) in float32
for BP and every BPPSA scan. Also: a pruned `bppsa train --model cnn` checkpoint loads into
the PyTorch module with load_state_dict(strict=True), its pruned weights are exactly zero at
the requested sparsity, and PyTorch computes the loss bppsa reports for it.

Usage: check_cnn_grad.py BPPSA_BINARY WORK_DIR. Exit 77 (CTest: skipped) without torch."""
import os
import sys

import numpy as np

from common import rel_err, require_torch, run, worst_grad_error

require_torch()
import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import safetensors_np as st  # noqa: E402
from torch_models import sequential  # noqa: E402

# (architecture, input C×H×W): every operator and the window shapes the issue names.
CASES = [
    ("conv:4:3:1:1,relu,maxpool:2:2,conv:6:3:1:0,tanh,avgpool:2:2,flatten,linear:10", (2, 12, 12)),
    ("conv:5:3x2:2x1:1x0,relu,maxpool:3:2:1,conv:3:2:1:1:2,relu,flatten,linear:7", (3, 11, 9)),
    ("conv:4:5:1:2,tanh,maxpool:3:1,conv:4:1:1:0,relu,avgpool:3:2:1,flatten,linear:12,relu,linear:5", (1, 10, 13)),
    ("conv:3:3:3:0,relu,flatten,linear:6,tanh,linear:4", (2, 9, 9)),
    ("vgg11/16", (3, 32, 32)),
]


def check_case(binary, work, arch, shape, rng, case):
    torch.manual_seed(2000 + case)
    model = sequential(arch, shape)
    b = int(rng.integers(1, 5))
    x = torch.randn(b, *shape)
    with torch.no_grad():
        classes = model(x).shape[1]
    y = torch.from_numpy(rng.integers(0, classes, size=b).astype(np.int64))
    loss = nn.functional.cross_entropy(model(x), y)
    model.zero_grad()
    loss.backward()
    wpath, xpath = os.path.join(work, f"w{case}.safetensors"), os.path.join(work, f"x{case}.safetensors")
    st.save(wpath, {k: v.detach().numpy() for k, v in model.state_dict().items()})
    st.save(xpath, {"x": x.numpy(), "y": y.numpy()})
    ok = True
    for backward, extra in (("bp", []), ("linear", []), ("blelloch", []), ("hybrid", ["--threads", "2"]),
                            ("auto", [])):
        gpath = os.path.join(work, f"g{case}_{backward}.safetensors")
        run([binary, "grad", "--model", "cnn", "--arch", arch, "--weights", wpath, "--batch", xpath, "--out", gpath,
             "--backward", backward] + extra)
        result = worst_grad_error(gpath, model, loss)
        if result is None:
            return False
        name, e = result
        status = "ok" if e <= 1e-4 else "FAIL"
        print(f"{arch} on {shape} B={b} {backward:8s}: max rel err {e:.2e} ({name}) {status}")
        ok = ok and e <= 1e-4
    return ok


def check_pruned_checkpoint(binary, work):
    arch = "conv:4:3:1:1,relu,maxpool:2:2,conv:8:3:1:1,relu,maxpool:2:2,flatten,linear:10"
    dense, pruned = os.path.join(work, "dense.safetensors"), os.path.join(work, "pruned.safetensors")
    common = ["--model", "cnn", "--data", "mnist", "--limit-train", "256", "--limit-test", "64", "--batch", "32",
              "--lr", "1e-3", "--no-progress"]
    run([binary, "train", "--arch", arch, "--epochs", "1", "--save", dense] + common)
    run([binary, "train", "--init", dense, "--prune", "0.9", "--epochs", "1", "--backward", "blelloch",
         "--save", pruned] + common)
    tensors, meta = st.load(pruned)
    model = sequential(arch, (1, 32, 32))
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    weights = [v for k, v in tensors.items() if k.endswith("weight")]
    zeros = sum(int((w == 0).sum()) for w in weights) / sum(w.size for w in weights)
    rng = np.random.default_rng(9)
    x = torch.from_numpy(rng.standard_normal((5, 1, 32, 32)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, size=5).astype(np.int64))
    xpath, gpath = os.path.join(work, "xck.safetensors"), os.path.join(work, "gck.safetensors")
    st.save(xpath, {"x": x.numpy(), "y": y.numpy()})
    run([binary, "grad", "--model", "cnn", "--weights", pruned, "--batch", xpath, "--out", gpath, "--backward", "bp"])
    g, _ = st.load(gpath)
    with torch.no_grad():
        ref = nn.functional.cross_entropy(model(x), y).item()
    e = rel_err(g["loss"].astype(np.float64), np.float64(ref))
    ok = e <= 1e-5 and abs(zeros - 0.9) < 1e-3 and meta.get("bppsa.arch") == arch
    print(f"pruned checkpoint from bppsa train: strict load ok, {100 * zeros:.2f} % of weights zero (asked 90 %), "
          f"loss rel err {e:.2e} {'ok' if ok else 'FAIL'}")
    return ok


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(4203)
    ok = True
    for case, (arch, shape) in enumerate(CASES):
        ok = check_case(binary, work, arch, shape, rng, case) and ok
    # `--data mnist` reads bppsa's default folder: $BPPSA_MNIST, else Debian's Fashion-MNIST.
    mnist = os.environ.get("BPPSA_MNIST") or "/usr/share/datasets/fashion-mnist"
    if os.path.isdir(mnist):
        ok = check_pruned_checkpoint(binary, work) and ok
    else:
        print(f"no MNIST-format data at {mnist} (apt-get install dataset-fashion-mnist, or set BPPSA_MNIST): "
              "pruned-checkpoint check skipped")
    print("ALL OK" if ok else "SOME CHECKS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
