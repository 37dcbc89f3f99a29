"""What every results file of the GPU machine's benchmarks records about where it ran (CPU, cores,
memory, GPU, driver, CUDA, torch and cuDNN versions, commit), and the atomic JSON/text writes
both drivers use. Standard library only (torch is asked only when the caller already imported it)."""
import datetime
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(cmd, timeout=20):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def commit():
    """The commit of the tree (with the count of modified tracked files), else what
    scripts/pack_deps.sh recorded in .deps/COMMIT (a copy of the tree without .git)."""
    head = _run(["git", "-C", ROOT, "rev-parse", "HEAD"])
    if head:
        dirty = _run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]) or ""
        n = len([line for line in dirty.splitlines() if line.strip()])
        return head + (f" + {n} modified tracked files" if n else "")
    path = os.path.join(ROOT, ".deps", "COMMIT")
    if os.path.isfile(path):
        with open(path) as f:
            first = f.readline().strip()
        return first.removeprefix("commit ") + " (from .deps/COMMIT: no .git here)"
    return None


def gpus():
    """nvidia-smi's view of the GPUs: [{name, driver, memory, compute_cap, max_sm_clock}], [] without one."""
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm",
                "--format=csv,noheader"])
    rows = []
    for line in (out or "").splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 5:
            rows.append({"name": f[0], "driver": f[1], "memory": f[2], "compute_cap": f[3], "max_sm_clock": f[4]})
    return rows


def machine(threads=None, extra=None):
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            mem_gb = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        mem_gb = None
    info = {"cpu": model, "cores": len(os.sched_getaffinity(0)), "memory_gb": mem_gb, "os": platform.platform(),
            "python": platform.python_version(), "threads_used": threads, "gpus": gpus(), "bppsa_commit": commit(),
            "date": datetime.datetime.now().isoformat(timespec="seconds")}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    info.update(extra or {})
    return info


def write_text(path, text):
    """Atomically: a temporary file beside `path`, flushed, fsync'ed, renamed over it."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path, obj):
    write_text(path, json.dumps(obj, indent=1) + "\n")
