"""What every results file of the GPU machine's benchmarks records about where it ran (CPU, cores,
memory, GPU, driver, CUDA, torch and cuDNN versions, commit), and the atomic JSON/text writes
both drivers use. Standard library only (torch is asked only when the caller already imported it)."""
import datetime
import hashlib
import json
import os
import platform
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(cmd, timeout=20):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _git(*args):
    """git in this tree (safe.directory: a copy owned by another user, run as root, is still read);
    None when git or a repository of this very tree is missing."""
    top = _run(["git", "-c", "safe.directory=*", "-C", ROOT, "rev-parse", "--show-toplevel"])
    if not top or os.path.realpath(top) != os.path.realpath(ROOT):  # not a .git of some parent folder
        return None
    return _run(["git", "-c", "safe.directory=*", "-C", ROOT, *args])


def tree_state():
    """How this tree compares with what scripts/pack_deps.sh packed (.deps/MANIFEST.sha256: every
    tracked and untracked-not-ignored file's sha256 at packing), as scripts/gpu_check.sh prints it:
    "as packed (commit X, N modified files at packing)" or "K files differ from what pack_deps.sh
    packed"; None without a manifest."""
    deps = os.path.join(ROOT, ".deps")
    manifest = os.path.join(deps, "MANIFEST.sha256")
    if not os.path.isfile(manifest):
        return None
    differ = 0
    with open(manifest) as f:
        for line in f:
            digest, _, name = line.rstrip("\n").partition("  ")
            if not name:
                continue
            try:
                with open(os.path.join(ROOT, name), "rb") as g:
                    same = hashlib.sha256(g.read()).hexdigest() == digest.lstrip("\\")
            except OSError:
                same = False
            differ += not same
    if differ:
        return f"{differ} files differ from what pack_deps.sh packed"
    packed = {}
    with open(os.path.join(deps, "COMMIT")) as f:
        for line in f:
            key, _, value = line.strip().partition(" ")
            packed.setdefault(key, value)
    untracked = int(packed.get("untracked") or 0)
    return (f"as packed (commit {(packed.get('commit') or 'unknown').split()[0]}, {packed.get('modified', '?')} modified "
            f"files at packing" + (f", {untracked} untracked)" if untracked else ")"))


def commit():
    """The commit of the tree: what scripts/gpu_check.sh found ($BPPSA_TREE_COMMIT), else git's (with
    the count of modified tracked files), else what scripts/pack_deps.sh recorded in .deps/COMMIT (a
    copy of the tree without a usable .git) with how the tree compares with what it packed."""
    if os.environ.get("BPPSA_TREE_COMMIT"):
        return os.environ["BPPSA_TREE_COMMIT"]
    head = _git("rev-parse", "HEAD")
    if head:
        dirty = _git("status", "--porcelain", "--untracked-files=no") or ""
        n = len([line for line in dirty.splitlines() if line.strip()])
        return head + (f" + {n} modified tracked files" if n else "")
    path = os.path.join(ROOT, ".deps", "COMMIT")
    if os.path.isfile(path):
        with open(path) as f:
            first = f.readline().strip()
        state = tree_state()
        return first.removeprefix("commit ") + " (recorded by scripts/pack_deps.sh: no usable .git here)" + \
            (f"; tree: {state}" if state else "")
    return None


def provenance(detail=None):
    """{"commit", "dirty", "commit_detail"} of this tree, from commit()'s line (or `detail`): the commit's
    hash; dirty when tracked files were modified (at packing, or since), untracked files were packed, or
    the tree differs from what was packed; None where it cannot be told."""
    s = commit() if detail is None else detail
    if not s:
        return {"commit": None, "dirty": None, "commit_detail": None}
    head, _, tree = s.partition("; tree: ")
    m = re.match(r"([0-9a-f]{7,40})\b", head)
    changed = lambda text, what: bool(re.search(r"\b[1-9][0-9]* " + what, text))  # noqa: E731
    if tree.startswith("as packed"):  # the tree is what pack_deps.sh packed: only the packing counts
        dirty = changed(tree, "modified files at packing") or changed(tree, "untracked")
    elif "files differ" in tree:
        dirty = True
    elif "as packed by scripts/pack_deps.sh" in head:
        dirty = None
    else:
        dirty = changed(head, "modified") or "files differ" in head
    return {"commit": m.group(1) if m else None, "dirty": dirty, "commit_detail": s}


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
    prov = provenance(info["bppsa_commit"])
    info.update(commit=prov["commit"], dirty=prov["dirty"], gpu=info["gpus"][0]["name"] if info["gpus"] else None)
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


def read_jsonl(path):
    """The records of a JSON-lines file ([] when it is missing; a torn last line, of a program killed
    while writing it, is left out)."""
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def stamp_jsonl(path, info):
    """Every record of a C++ program's JSON lines with the commit, the dirty flag and the GPU of
    machine()'s `info`, rewritten atomically; the records."""
    records = [{**r, "commit": info["commit"], "dirty": info["dirty"], "gpu": info["gpu"]} for r in read_jsonl(path)]
    write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    return records

