#!/usr/bin/env python3
"""The CLI on the GPU, end to end (run by scripts/gpu_check.sh on the GPU machine):
`bppsa grad --device cuda` against `bppsa grad` (the CPU engine) and PyTorch autograd on the GPU
(float32, TF32 off through bench/common/precision.py, printed) for nn.RNN, nn.GRU and nn.LSTM with 1 and 2 layers and random shapes: every
parameter gradient and the loss within 1e-4 relative (max |a − b| / max |b| per tensor), for
--backward bp, fused (the fused scan), blelloch and hybrid (the generic GPU scan) and auto; then
`bppsa train --device cuda --check` on bitstream (the GPU's gradients against the CPU engine's
BP), a GPU run's checkpoint evaluated on both devices, and --resume on the GPU bit-identical to
an uninterrupted GPU run. The same helpers as tests/pytorch/check_grad.py (common.py,
torch_models.Model, safetensors_np).

Usage: check_cli_gpu.py BPPSA_BINARY WORK_DIR [--quick]. Exit 77 without torch+CUDA or without a
GPU bppsa can use, 1 on a failed check (a missing gradient or loss included: a FAIL line)."""
import copy
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pytorch"))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "common"))
from common import rel_err, require_torch, run, worst_grad_error  # noqa: E402

require_torch()
import torch  # noqa: E402
from torch import nn  # noqa: E402

from precision import precision_state, set_tf32  # noqa: E402  (bench/common: TF32 through the API this torch has)

import safetensors_np as st  # noqa: E402
from torch_models import Model  # noqa: E402

TOL = 1e-4
FAILURES = []


def check(ok, label):
    print(f"{'ok  ' if ok else 'FAIL'} {label}", flush=True)
    if not ok:
        FAILURES.append(label)


def check_grads(gpath, model, loss, label, tol=TOL):
    """Checks bppsa's gradients in gpath against the model's (after loss.backward()): a missing
    gradient is a failed check too. Returns the worst relative error (inf when missing)."""
    result = worst_grad_error(gpath, model, loss)
    if result is None:
        check(False, f"{label}: the loss or a gradient is missing from {os.path.basename(gpath)} (named above)")
        return float("inf")
    name, e = result
    check(e <= tol, f"{label}: {e:.2e} ({name}, bound {tol:.1e})")
    return e


def torch_worst(model, ref):
    """The worst relative error of model's gradients against ref's (same names, after backward)."""
    got = dict(model.named_parameters())
    return max(rel_err(got[k].grad.double().cpu().numpy(), p.grad.double().cpu().numpy())
               for k, p in ref.named_parameters())


def grad_case(binary, work, cell, layers, rng, case, quick):
    i, h, c = int(rng.integers(1, 9)), int(rng.integers(2, 40)), int(rng.integers(2, 12))
    t = int(rng.choice([1, 2, 5, 17, 64, 200] + ([] if quick else [1000])))
    b = int(rng.integers(1, 17))
    torch.manual_seed(2000 + case)
    model = Model(cell, i, h, layers, c)
    with torch.no_grad():  # wider than the default init so the nonlinearities matter
        for p in model.parameters():
            p.mul_(float(rng.uniform(1.0, 2.0)))
    x = torch.randn(b, t, i)
    y = torch.from_numpy(rng.integers(0, c, size=b).astype(np.int64))
    wpath, xpath = os.path.join(work, f"w{case}.safetensors"), os.path.join(work, f"x{case}.safetensors")
    st.save(wpath, {k: v.detach().numpy() for k, v in model.state_dict().items()})
    st.save(xpath, {"x": x.numpy(), "y": y.numpy()})
    # The oracle: PyTorch in float64 on the CPU.
    ref = copy.deepcopy(model).double()
    loss64 = nn.functional.cross_entropy(ref(x.double()), y)
    loss64.backward()
    # PyTorch's gradients on the GPU (cuDNN), fp32 without TF32, then moved back for comparison.
    model = model.cuda()
    loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
    model.zero_grad()
    loss.backward()
    model = model.cpu()
    label = f"{cell} layers={layers} I={i} H={h} C={c} T={t} B={b}"
    cpu_path = os.path.join(work, f"g{case}_cpu.safetensors")
    run([binary, "grad", "--model", cell, "--weights", wpath, "--batch", xpath, "--out", cpu_path, "--backward", "bp"])
    cpu, _ = st.load(cpu_path)
    # This record's own fp32 error, as the CPU engine and cuDNN show it against float64 (long chains
    # with wide weights lose digits in any fp32 order): GPU results are held to 4× the larger, 1e-4 at least.
    e_cudnn = torch_worst(model, ref)
    e_cpu = check_grads(cpu_path, ref, loss64, f"{label} cpu bp vs torch(float64)", max(TOL, 4 * e_cudnn))
    print(f"     {label}: cuDNN fp32 vs float64 {e_cudnn:.2e}", flush=True)
    bound = max(TOL, 4 * max(e_cpu, e_cudnn))
    for backward in ("bp", "fused", "blelloch", "hybrid", "auto"):
        if backward in ("blelloch", "hybrid") and t * b * (2 * h if cell == "lstm" else h) ** 2 > 5e7:
            continue  # the generic scan stores T·B Jacobians: only where they are small
        gpath = os.path.join(work, f"g{case}_cuda_{backward}.safetensors")
        run([binary, "grad", "--model", cell, "--weights", wpath, "--batch", xpath, "--out", gpath,
             "--backward", backward, "--device", "cuda"])
        check_grads(gpath, ref, loss64, f"{label} cuda {backward:8s} vs torch(float64)", bound)
        check_grads(gpath, model, loss, f"{label} cuda {backward:8s} vs torch(cuda)", bound)
        g, _ = st.load(gpath)
        missing = sorted(set(cpu) - set(g))
        if missing:
            check(False, f"{label} cuda {backward:8s} vs the CPU engine: missing {', '.join(missing)}")
            continue
        worst = max((rel_err(g[k].astype(np.float64), cpu[k].astype(np.float64)), k) for k in cpu)
        check(worst[0] <= bound, f"{label} cuda {backward:8s} vs the CPU engine: {worst[0]:.2e} ({worst[1]}, bound {bound:.1e})")


def train_checks(binary, work, quick):
    small = ["--model", "gru", "--hidden", "16", "--layers", "2", "--data", "bitstream", "--steps", "100",
             "--samples", "400" if quick else "1500", "--batch", "16", "--lr", "1e-2", "--no-progress"]
    # --check: the GPU's gradients (fused scan) against the CPU engine's BP from the same weights.
    r = subprocess.run([binary, "train", "--device", "cuda", "--backward", "fused", "--epochs", "1", "--check"] + small,
                       capture_output=True, text=True)
    check(r.returncode == 0 and "cuda fused vs the CPU engine's bp" in r.stdout,
          f"train --device cuda --check: rc {r.returncode}: {(r.stdout + r.stderr).strip()[-400:]}")
    # A GPU checkpoint evaluates the same on both devices.
    ck = os.path.join(work, "gpu.safetensors")
    run([binary, "train", "--device", "cuda", "--backward", "bp", "--epochs", "2", "--save", ck] + small)
    import json
    ev = [json.loads(run([binary, "eval", "--checkpoint", ck, "--data", "bitstream", "--steps", "100", "--samples",
                          small[small.index("--samples") + 1], "--json"] + (["--device", "cuda"] if d else [])))
          for d in (False, True)]
    # A near-tie between two classes may flip one prediction: at most one sample in a thousand may differ.
    n = int(ev[0]["samples"])
    flips = round(abs(ev[0]["accuracy"] - ev[1]["accuracy"]) * n)
    check(flips <= max(1, n // 1000) and abs(ev[0]["loss"] - ev[1]["loss"]) <= 1e-4 * abs(ev[0]["loss"]),
          f"eval of a GPU checkpoint, cpu vs cuda: {ev[0]['accuracy']:.4f}/{ev[0]['loss']:.6f} vs "
          f"{ev[1]['accuracy']:.4f}/{ev[1]['loss']:.6f}")
    # --resume on the GPU continues exactly: 1 epoch + resume to 2 == 2 epochs straight.
    one = os.path.join(work, "one.safetensors")
    run([binary, "train", "--device", "cuda", "--backward", "bp", "--epochs", "1", "--save", one] + small)
    run([binary, "train", "--device", "cuda", "--backward", "bp", "--epochs", "2", "--resume", one, "--save", one] + small)
    a, _ = st.load(ck)
    b, _ = st.load(one)
    check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a),
          "train --device cuda --resume: bit-identical to the uninterrupted run")


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: check_cli_gpu.py BPPSA_BINARY WORK_DIR [--quick]")
    binary, work = sys.argv[1], sys.argv[2]
    quick = "--quick" in sys.argv[3:]
    os.makedirs(work, exist_ok=True)
    if not torch.cuda.is_available():
        print("PyTorch has no CUDA device; skipping")
        sys.exit(77)
    set_tf32(False)  # IEEE FP32 for cuDNN's RNNs and the head's matmul, as bppsa computes
    probe = subprocess.run([binary, "grad", "--device", "cuda", "--model", "rnn", "--weights", binary, "--batch",
                            binary, "--out", os.path.join(work, "probe")], capture_output=True, text=True)
    if "built without CUDA" in probe.stderr or "no CUDA device" in probe.stderr:
        print("bppsa cannot use a GPU here:", probe.stderr.strip())
        sys.exit(77)
    print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0), flush=True)
    print("precision:", ", ".join(f"{k} {v}" for k, v in precision_state().items()), flush=True)
    rng = np.random.default_rng(4242)
    case = 0
    for cell in ("rnn", "gru", "lstm"):
        for layers in (1, 2):
            for _ in range(1 if quick else 2):
                grad_case(binary, work, cell, layers, rng, case, quick)
                case += 1
    train_checks(binary, work, quick)
    print("ALL OK" if not FAILURES else f"{len(FAILURES)} FAILED: {FAILURES}")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
