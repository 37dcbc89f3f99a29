"""What every peer shares: the configurations, the data and weights file, the timing method
(medians after warm-ups), the peak-memory method (VmHWM after /proc/self/clear_refs "5") and the
busy-core process. Imports neither torch nor JAX: each worker imports only its own framework."""
import json
import os
import statistics
import subprocess
import sys
import time

CLASSES = 10
FEATURES = 1  # the paper's bitstream: one input feature per step


def config(cell, hidden, steps, batch, features=FEATURES):
    name = f"{cell} H{hidden} T{steps} B{batch}" + (f" I{features}" if features != FEATURES else "")
    return {"name": name, "cell": cell, "hidden": hidden, "steps": steps, "batch": batch, "features": features,
            "classes": CLASSES}


SHAPE_KEYS = ("cell", "hidden", "steps", "batch", "features")  # what every record repeats of its configuration


def configs(quick, grid="peers"):
    """The sweep: the paper's RNN against T and B, GRU and LSTM at H 64 and 256, and every cell at
    the large states (H 512 and 1024 at T 28, 100, 1000 and B 1, 16, 64). Quick: two tiny shapes
    that still take every peer and the tanh-RNN and jacrev (LSTM, 2H state) paths of the JAX
    BPPSA. grid "cost-model": the shapes bench/auto/run.sh
    fits auto's cost model to (every cell at H 16–256, T 1 (a decoder step's call) and 30–3000, B 1–64, the input size 1 or H
    in a checkerboard over T and B so that the model's input-projection feature is told apart
    from its elementwise one; quick: two small ones for each of two cells, enough for a fit)."""
    if grid == "cost-model":
        if quick:
            return [config(c, h, 10, 2, f) for c in ("RNN", "LSTM") for h, f in ((8, 1), (16, 16))]
        return [config(c, h, t, b, h if (i + j) % 2 else FEATURES) for c in ("RNN", "GRU", "LSTM")
                for h in (16, 64, 256) for i, t in enumerate((30, 300, 3000, 1)) for j, b in enumerate((1, 16, 64))]
    if quick:
        return [config("RNN", 20, 20, 16), config("LSTM", 8, 10, 4)]
    out = [config("RNN", 20, t, 16) for t in (10, 30, 100, 300, 1000, 3000, 10000, 30000)]
    out += [config("RNN", 20, 1000, b) for b in (1, 4, 64, 256)]
    out += [config(c, h, 1000, 16) for c in ("GRU", "LSTM") for h in (64, 256)]
    out += [config(c, h, t, b) for c in ("RNN", "GRU", "LSTM") for h in (512, 1024) for t in (28, 100, 1000)
            for b in (1, 16, 64)]
    return out


def state_size(cfg):
    return 2 * cfg["hidden"] if cfg["cell"] == "LSTM" else cfg["hidden"]


def pin_threads(threads):
    """Every worker runs on cores 0..threads-1 (the busy-core process takes the last core)."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, set(cores[:threads]))


def xla_env(threads):
    """Environment for a JAX worker, set before jax is imported: one CPU device, Eigen's
    intra-op pool at `threads`."""
    flags = os.environ.get("XLA_FLAGS", "")
    flags += f" --xla_force_host_platform_device_count=1 --xla_cpu_multi_thread_eigen=true " \
             f"intra_op_parallelism_threads={threads}"
    return {"XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu"}


def timed(fn, reps, warmup, before=None):
    """Median of `reps` runs of fn() after `warmup`; `before` (untimed) runs ahead of each."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    samples = []
    for _ in range(reps):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples), "samples": samples}


def adaptive_reps(one_call_s, reps, warmup, budget_s):
    """Fewer repetitions for long calls: about budget_s of timed calls, at least 3 reps (1 when a
    call alone is longer than budget_s); the warm-ups are dropped first (the worker's compile and memory calls have warmed it already)."""
    n = int(budget_s / max(one_call_s, 1e-9))
    if n < 1:  # one call is longer than the whole budget: one timed call each
        return 1, 0
    r = max(3, min(reps, n))
    return r, max(0, min(warmup, n - r))


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def rss():
    return _status("VmRSS")


def peak_of(fn, base):
    """Peak resident memory while fn() runs, above `base` (the process's RSS with the model, data
    and framework loaded and nothing run): VmHWM reset by clear_refs 5 just before."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        method = "VmHWM after clear_refs 5, minus VmRSS after set-up"
    except OSError:
        method = "VmHWM (not resettable here), minus VmRSS after set-up"
    fn()
    return {"bytes": max(0, _status("VmHWM") - base), "method": method}


# A process that keeps one core busy (pinned to it) until stopped: bench/busy_core/busy_core.py's.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "busy_core"))
from busy_core import Hog  # noqa: E402,F401


def busy_core():
    """The machine's last core, where the spinning process goes (as bench/busy_core/busy_core.py)."""
    return (os.cpu_count() or 1) - 1


def emit(record):
    """The worker's answer: one JSON line, last on stdout."""
    sys.stdout.write("\n@@RESULT " + json.dumps(record) + "\n")
    sys.stdout.flush()
