#!/usr/bin/env python3
"""PyTorch's side of the GPU benchmark (bench/gpu/run.sh): torch.nn.RNN/GRU/LSTM + Linear head
on CUDA (cuDNN), every configuration of a plan in one process. Also writes the weights and data both
sides use.

  torch_gpu.py export --plan PLAN.json --work DIR
      for every configuration: DIR/<id>/weights.safetensors (torch's default init from the plan's
      seed, PyTorch's state_dict names) and DIR/<id>/batch.safetensors (x F32 [B, T, F], y I64 [B]):
      the format of `bppsa grad --weights W --batch X`, which bench_gpu_step reads. Data: the paper's
      bitstream (label p ~ U{0..9}, T bits ~ Bernoulli(0.05 + 0.1p)), or for the GRU shapes standard
      normal features (MFCCs standardised over time, as IRMAS's are; IRMAS is not on the GPU machine)
      with labels ~ U{0..C−1}. Needs no GPU.
  torch_gpu.py time --plan PLAN.json --work DIR --out RECORDS.jsonl [--device cuda|cpu] [--reps 5]
                    [--warmup 2] [--budget SECONDS] [--no-profile]
      one JSON line per configuration (appended and flushed as each finishes, so a run cut short
      keeps what it measured).

Definitions (as bench/paper/torch_paper.py and bench_paper, docs/method.md §5): forward = zero_grad, model(x) and the
mean cross-entropy up to the loss value on the host; backward = loss.backward() (every parameter
gradient); optimizer = Adam's step; iteration = the three. Times: CUDA events on the GPU (the CPU
clock with --device cpu); `--warmup` untimed iterations (the first one is the memory probe), then
`--reps` timed ones: median, min, max and every sample. Memory (CUDA): torch.cuda.max_memory_allocated
over the first iteration (parameters, data and Adam's state included), above what was allocated
before it, and its growth during the backward alone. FP32: TF32 is switched off for cuDNN's RNNs
and matmuls (bppsa computes in full FP32 and the first losses must agree); configurations with
"tf32_also" are timed a second time with TF32 allowed (PyTorch's default for cuDNN), recorded with
"tf32": true; every record has the settings it ran with and this PyTorch's defaults. The cuDNN RNN algorithm: what
PyTorch's heuristic (aten/src/ATen/native/cudnn/RNN.cpp, get_algo) selects for the shape, and, when
the profiler works, the CUDA kernels one iteration launched (persistent kernels are named so)."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "common"))
sys.path.insert(0, os.path.join(HERE, "..", "common"))  # precision
sys.path.insert(0, os.path.join(HERE, "..", "paper"))  # torch_paper
sys.path.insert(0, HERE)
import safetensors_np as st  # noqa: E402
from torch_models import Model  # noqa: E402
from torch_paper import Timer, time_iterations  # noqa: E402  (bench/paper/torch_paper.py's timing)
from precision import precision_state, set_tf32  # noqa: E402,F401  (TF32 through the API this torch has)


def save_atomic(path, tensors):
    tmp = path + ".tmp"
    st.save(tmp, tensors)
    os.replace(tmp, path)


def make_data(cfg, seed):
    """x [B, T, F] float32, y [B] int64 for one configuration."""
    rng = np.random.default_rng(seed)
    b, t, f = cfg["batch"], cfg["steps"], cfg["features"]
    if cfg["data"] == "bitstream":
        if f != 1:
            raise ValueError(f"{cfg['id']}: bitstream has 1 feature, the plan says {f}")
        p = rng.integers(0, 10, size=b)
        x = (rng.random((b, t, 1)) < (0.05 + 0.1 * p)[:, None, None]).astype(np.float32)
        return x, p.astype(np.int64)
    if cfg["data"] == "gaussian":
        x = rng.standard_normal((b, t, f)).astype(np.float32)
        return x, rng.integers(0, cfg["classes"], size=b).astype(np.int64)
    raise ValueError(f"{cfg['id']}: unknown data '{cfg['data']}' (bitstream or gaussian)")


def export(plan, work):
    seed = plan["seed"]
    for i, cfg in enumerate(plan["configs"]):
        d = os.path.join(work, cfg["id"])
        os.makedirs(d, exist_ok=True)
        torch.manual_seed(seed + i)
        model = Model(cfg["cell"], cfg["features"], cfg["hidden"], cfg.get("layers", 1), cfg["classes"])
        save_atomic(os.path.join(d, "weights.safetensors"),
                    {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()})
        x, y = make_data(cfg, seed + i)
        save_atomic(os.path.join(d, "batch.safetensors"), {"x": x, "y": y})
    print(f"torch_gpu: exported {len(plan['configs'])} configurations into {work}", flush=True)


def load(cfg, work, device):
    d = os.path.join(work, cfg["id"])
    for name in ("weights.safetensors", "batch.safetensors"):
        if not os.path.isfile(os.path.join(d, name)):
            sys.exit(f"torch_gpu: {d}/{name} is missing; run `torch_gpu.py export` first")
    w, _ = st.load(os.path.join(d, "weights.safetensors"))
    data, _ = st.load(os.path.join(d, "batch.safetensors"))
    model = Model(cfg["cell"], cfg["features"], cfg["hidden"], cfg.get("layers", 1), cfg["classes"])
    model.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()}, strict=True)
    model.to(device)
    return model, torch.from_numpy(data["x"]).to(device), torch.from_numpy(data["y"]).to(device)


def cudnn_heuristic(cfg, device):
    """The algorithm PyTorch's get_algo picks for this shape (fp32, unpacked input, no projection),
    forward and backward: PERSIST_STATIC_SMALL_H when cuDNN ≥ 8.2.1, sm ≥ 6 and H ≤ 384 (RNN) /
    192 (GRU, LSTM) forward, ≤ 256 / 128 backward; else STANDARD (PERSIST_STATIC is for fp16 only)."""
    if device.type != "cuda" or not torch.backends.cudnn.is_available():
        return None
    v = torch.backends.cudnn.version() or 0
    major, _ = torch.cuda.get_device_capability(device)
    h, plain = cfg["hidden"], cfg["cell"] == "rnn"
    small = v >= 8201 and major >= 6
    fw = "PERSIST_STATIC_SMALL_H" if small and h <= (384 if plain else 192) else "STANDARD"
    bw = "PERSIST_STATIC_SMALL_H" if small and h <= (256 if plain else 128) else "STANDARD"
    return {"forward": fw, "backward": bw, "source": "PyTorch's get_algo heuristic, re-evaluated here"}


def profile_kernels(model, opt, x, y):
    """The CUDA kernels of one iteration, by total time (None when the profiler cannot see them)."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None)
            if t is None:
                t = getattr(e, "cuda_time_total", 0)
            if t and t > 0:
                rows.append({"name": e.key[:160], "calls": e.count, "us": round(t, 1)})
        rows.sort(key=lambda r: -r["us"])
        return {"kernels": rows[:12], "persistent": any("ersist" in r["name"] for r in rows)}
    except Exception as e:  # the profiler is optional evidence
        return {"error": f"{type(e).__name__}: {e}"}


def time_config(cfg, args, device, tf32):
    set_tf32(tf32)
    torch.manual_seed(0)
    model, x, y = load(cfg, args.work, device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.get("lr", 3e-5))
    ce = torch.nn.functional.cross_entropy
    cuda = device.type == "cuda"
    timer = Timer(device)

    # Memory probe: the first iteration.
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    opt.zero_grad(set_to_none=True)
    loss = ce(model(x), y)
    loss0 = loss.item()
    if cuda:
        torch.cuda.synchronize()
        after_fw = torch.cuda.memory_allocated()
        peak_fw = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
        peak_bw = torch.cuda.max_memory_allocated()
    opt.step()
    if cuda:
        torch.cuda.synchronize()
        peak_all = max(peak_fw, torch.cuda.max_memory_allocated())

    times = time_iterations(model, opt, x, y, timer, args.warmup, args.reps)
    rec = {"impl": "pytorch", "id": cfg["id"], "method": "pytorch-tf32" if tf32 else "pytorch", "tf32": tf32,
           "device": device.type, "cell": cfg["cell"], "hidden": cfg["hidden"], "steps": cfg["steps"],
           "features": cfg["features"], "batch": cfg["batch"], "classes": cfg["classes"], "sweeps": cfg["sweeps"],
           "loss0": loss0, "reps": args.reps, "warmup": args.warmup, **times, "torch": torch.__version__,
           "torch_cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
           "cudnn_enabled": torch.backends.cudnn.enabled, "precision": precision_state(),
           "precision_default": args.precision_default, "threads": args.threads}
    if cuda:
        rec["memory"] = {"peak_bytes": peak_all, "iteration_peak_bytes": peak_all - start,
                         "backward_peak_bytes": peak_bw - after_fw, "forward_bytes": after_fw - start,
                         "allocated_before_bytes": start}
        rec["gpu"] = torch.cuda.get_device_name(device)
        rec["cudnn_algo"] = cudnn_heuristic(cfg, device)
        if cfg.get("profile") and args.profile and torch.backends.cudnn.enabled:
            rec["profile"] = profile_kernels(model, opt, x, y)
    return rec


def run_time(plan, args):
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_gpu: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 77
    torch.set_num_threads(args.threads)
    args.precision_default = precision_state()  # what this PyTorch does unless told otherwise
    deadline = time.time() + args.budget
    done = skipped = 0
    with open(args.out, "a") as out:
        for cfg in plan["configs"]:
            for tf32 in ([False, True] if cfg.get("tf32_also") and device.type == "cuda" else [False]):
                what = f"{cfg['id']}{' (tf32)' if tf32 else ''}"
                if time.time() > deadline:
                    print(f"torch_gpu: skipped {what}: time budget spent", flush=True)
                    skipped += 1
                    continue
                t0 = time.time()
                rec = time_config(cfg, args, device, tf32)
                out.write(json.dumps(rec) + "\n")
                out.flush()
                os.fsync(out.fileno())
                done += 1
                print(f"  {time.time() - t0:6.1f} s  pytorch {what}: backward {1e3 * rec['backward']['median']:.3f} ms,"
                      f" iteration {1e3 * rec['total']['median']:.3f} ms", flush=True)
    print(f"torch_gpu: {done} timed, {skipped} skipped", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["export", "time"])
    p.add_argument("--plan", required=True, help="the configurations (JSON, written by bench/gpu/gpu.py)")
    p.add_argument("--work", required=True, help="folder of the exported weights and batches")
    p.add_argument("--out", help="JSON lines, one record per configuration (time)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--budget", type=float, default=1e9, help="seconds; configurations after it are skipped")
    p.add_argument("--no-profile", dest="profile", action="store_false", help="do not list the CUDA kernels")
    args = p.parse_args()
    if args.reps < 1 or args.warmup < 1 or args.threads < 1:
        p.error("--reps, --warmup and --threads must be ≥ 1")
    with open(args.plan) as f:
        plan = json.load(f)
    if args.mode == "export":
        export(plan, args.work)
        return 0
    if not args.out:
        p.error("time needs --out")
    return run_time(plan, args)


if __name__ == "__main__":
    sys.exit(main())
