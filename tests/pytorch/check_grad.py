#!/usr/bin/env python3
"""`bppsa grad` against PyTorch autograd: random weights, shapes and lengths for nn.RNN,
nn.GRU and nn.LSTM with 1 and 2 layers, nn.LSTM with proj_size, and packed batches (a 'lengths'
tensor in the batch file against torch's PackedSequence); every parameter gradient and the loss must agree to
a relative error ≤ 1e-4 (max |a − b| / max |b| per tensor) in float32, for BP and BPPSA.
Also checks that a `bppsa train --save` checkpoint loads into the PyTorch module with
load_state_dict(strict=True) and gives the loss bppsa reports for it.

Usage: check_grad.py BPPSA_BINARY WORK_DIR. Exit 77 (CTest: skipped) without torch."""
import os
import sys

import numpy as np

from common import rel_err, require_torch, run, worst_grad_error

require_torch()
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import safetensors_np as st  # noqa: E402
from torch_models import Model  # noqa: E402


def check_case(binary, work, cell, layers, rng, case, proj=False, lengths=False):
    i, h, c = int(rng.integers(1, 9)), int(rng.integers(2, 17)), int(rng.integers(2, 12))
    t, b = int(rng.choice([1, 2, 5, 17, 64, 200])), int(rng.integers(1, 9))
    ps = int(rng.integers(1, h)) if proj else 0
    if lengths:
        t = max(t, 24)  # lengths spread over 1..T
    torch.manual_seed(1000 + case)
    model = Model(cell, i, h, layers, c, ps)
    with torch.no_grad():  # wider than the default init so the nonlinearities matter
        for p in model.parameters():
            p.mul_(float(rng.uniform(1.0, 2.5)))
    x = torch.randn(b, t, i)
    y = torch.from_numpy(rng.integers(0, c, size=b).astype(np.int64))
    batch = {"x": x.numpy(), "y": y.numpy()}
    if lengths:  # each sample its own length (any order): torch's packed batch is the oracle
        n = torch.from_numpy(rng.integers(1, t + 1, size=b).astype(np.int64))
        batch["lengths"] = n.numpy()
        _, hn = model.rnn(pack_padded_sequence(x, n, batch_first=True, enforce_sorted=False))
        logits = model.head((hn[0] if cell == "lstm" else hn)[-1])
    else:
        logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    model.zero_grad()
    loss.backward()
    wpath, xpath = os.path.join(work, f"w{case}.safetensors"), os.path.join(work, f"x{case}.safetensors")
    st.save(wpath, {k: v.detach().numpy() for k, v in model.state_dict().items()})
    st.save(xpath, batch)
    for backward, extra in (("bp", []), ("blelloch", []), ("hybrid", ["--threads", "2"]), ("auto", [])):
        gpath = os.path.join(work, f"g{case}_{backward}.safetensors")
        run([binary, "grad", "--model", cell, "--weights", wpath, "--batch", xpath, "--out", gpath,
             "--backward", backward] + extra)
        result = worst_grad_error(gpath, model, loss)
        if result is None:
            return False
        name, e = result
        status = "ok" if e <= 1e-4 else "FAIL"
        print(f"{cell} layers={layers} I={i} H={h}{f' P={ps}' if ps else ''} C={c} T={t} B={b}"
              f"{' lengths ' + ','.join(map(str, batch['lengths'])) if lengths else ''} {backward:8s}: "
              f"max rel err {e:.2e} ({name}) {status}")
        if e > 1e-4:
            return False
    return True


def check_checkpoint(binary, work, cell="gru", proj=0):
    """A checkpoint from `bppsa train` loads into the PyTorch module (strict) and gives the
    same loss on a batch as bppsa computes with it."""
    ck = os.path.join(work, f"train_{cell}{proj}.safetensors")
    run([binary, "train", "--model", cell, "--hidden", "6", "--layers", "2", "--data", "bitstream",
         "--steps", "12", "--samples", "200", "--epochs", "1", "--batch", "8", "--lr", "1e-3",
         "--no-progress", "--save", ck] + (["--proj", str(proj)] if proj else []))
    tensors, meta = st.load(ck)
    model = Model(cell, 1, 6, 2, 10, proj)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    rng = np.random.default_rng(5)
    x = torch.from_numpy((rng.random((4, 12, 1)) < 0.3).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, size=4).astype(np.int64))
    xpath, gpath = os.path.join(work, "xck.safetensors"), os.path.join(work, "gck.safetensors")
    st.save(xpath, {"x": x.numpy(), "y": y.numpy()})
    run([binary, "grad", "--model", cell, "--weights", ck, "--batch", xpath, "--out", gpath, "--backward", "bp"])
    g, _ = st.load(gpath)
    with torch.no_grad():
        ref = nn.functional.cross_entropy(model(x), y).item()
    e = rel_err(g["loss"].astype(np.float64), np.float64(ref))
    print(f"checkpoint from bppsa train ({cell}{f' --proj {proj}' if proj else ''}): strict load_state_dict ok, "
          f"metadata {meta}, loss rel err {e:.2e}")
    return e <= 1e-5


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(4202)
    ok, case = True, 0
    for cell in ("rnn", "gru", "lstm"):
        for layers in (1, 2):
            for _ in range(2):
                ok = check_case(binary, work, cell, layers, rng, case) and ok
                case += 1
    for layers in (1, 2, 3):  # LSTM with a projection (proj_size < hidden)
        ok = check_case(binary, work, "lstm", layers, rng, case, proj=True) and ok
        case += 1
    for cell, layers, proj in (("rnn", 2, False), ("gru", 1, False), ("lstm", 2, True)):  # samples of own lengths
        ok = check_case(binary, work, cell, layers, rng, case, proj=proj, lengths=True) and ok
        case += 1
    ok = check_checkpoint(binary, work) and ok
    ok = check_checkpoint(binary, work, "lstm", proj=3) and ok
    print("ALL OK" if ok else "SOME CHECKS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
