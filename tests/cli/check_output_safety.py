#!/usr/bin/env python3
"""Issue 44: what `bppsa` does with what already sits at the paths it writes, done for real:
links planted by another user (`nobody`, in a 1777 folder, where this runs as root) at the
--save lock and at an output, device nodes, a FIFO and a process's descriptor link as outputs,
the clean-up of stale temporaries beside files it did not write, `--resume` of a checkpoint that
another process is saving, a flipped bit in a checkpoint, and a --log naming an input file.

The system's own /dev/null and /dev/stdout are never used as outputs here (an old binary would
replace them): a private null device (mknod, as root) and a private link to /proc/self/fd/1.

Usage: check_output_safety.py BPPSA_BINARY WORK_DIR [CHECK...]."""
import glob
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import numpy as np  # noqa: E402
import safetensors_np as st  # noqa: E402
from check_cli_guards import BIN, WORK, check, path, read, run, run_checks  # noqa: E402  (same arguments)
from fake_idx import fake_mnist  # noqa: E402

SMALL = ["train", "--model", "gru", "--hidden", "5", "--data", "bitstream", "--steps", "15", "--samples", "120",
         "--batch", "8", "--lr", "1e-2", "--no-progress", "--epochs", "1"]
NOBODY = 65534


def run_bytes(args, label, **kw):
    """`args` with stdout as bytes (or where kw sends it): exit 0 expected."""
    r = subprocess.run([BIN] + args, stderr=subprocess.PIPE, **kw)
    check(r.returncode == 0, f"{label} -> rc {r.returncode}: {r.stderr.decode(errors='replace')[-800:]}")
    return r


def as_nobody(cmd):
    """Runs cmd as user nobody; False where this process cannot (not root, or no setpriv)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] + cmd,
                       capture_output=True)
    return r.returncode == 0


def shared_folder():
    """A world-writable sticky folder, as /tmp is: where another user can plant links."""
    d = tempfile.mkdtemp(prefix="bppsa-shared-", dir="/tmp")
    os.chmod(d, 0o1777)
    return d


def victim_file(folder):
    v = os.path.join(folder, "victim")
    with open(v, "wb") as f:
        f.write(b"root's precious file\n")
    os.chmod(v, 0o600)
    return v


def null_device():
    """A private null device in WORK (as root), else the system's, which a user cannot replace."""
    dev = path("null")
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return dev
    except PermissionError:
        return None if os.geteuid() == 0 else "/dev/null"


def weights_and_batch():
    """A checkpoint and a batch for `grad`."""
    w = path("w.safetensors")
    if not os.path.exists(w):
        run(SMALL + ["--save", w], label="a checkpoint for grad")
        x = (np.random.default_rng(1).random((3, 15, 1)) < 0.5).astype(np.float32)
        st.save(path("x.safetensors"), {"x": x, "y": np.array([1, 2, 3], dtype=np.int64)})
    return ["grad", "--model", "gru", "--weights", w, "--batch", path("x.safetensors")]


def check_lock_links():
    """Defect 1: the --save lock never follows a link, and never truncates another user's file."""
    shared = shared_folder()
    try:
        victim = victim_file(shared)
        ck = os.path.join(shared, "ck.safetensors")
        by_nobody = as_nobody(["ln", "-s", victim, ck + ".lock"])
        if not by_nobody:
            print("note: the link is planted by this user (planting it as nobody needs root and setpriv)")
            os.symlink(victim, ck + ".lock")
        run(SMALL + ["--save", ck], 1, [ck + ".lock", "--save", "symbolic link", "remove it"],
            "a --save whose lock is a planted link is refused")
        check(read(victim) == b"root's precious file\n", "the file the link pointed to is untouched")
        check(not os.path.exists(ck), "nothing was trained and saved")
        # The same in a 0777 folder without the sticky bit.
        os.chmod(shared, 0o777)
        run(SMALL + ["--save", ck], 1, ["symbolic link"], "the same in a 0777 folder")
        check(read(victim) == b"root's precious file\n", "the file is still untouched")
        if by_nobody:
            ck2 = os.path.join(shared, "theirs.safetensors")
            check(as_nobody(["sh", "-c", f"echo 'their own file' > '{ck2}.lock'"]), "nobody writes a lock file")
            run(SMALL + ["--save", ck2], 1, [ck2 + ".lock", f"belongs to user {NOBODY}", "--save"],
                "a lock file another user created is refused")
            check(read(ck2 + ".lock") == b"their own file\n", "and is not truncated")
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def check_device_outputs():
    """Defect 2: a device, a FIFO and a descriptor link are written, never replaced."""
    grad = weights_and_batch()
    dev = null_device()
    if dev is None:
        print("skip the device-node checks: mknod refused although root")
    else:
        before = os.lstat(dev)
        run(grad + ["--out", dev], 0, label=f"grad --out {dev}")
        link = path("out-link")
        os.symlink(dev, link)
        run(grad + ["--out", link], 0, label="grad --out a link to the device")
        run(SMALL + ["--save", dev], 1, ["--save", "not a regular file"], "train --save to a device is refused")
        after = os.lstat(dev)
        check(stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev,
              "the device node is still the same device node")
        check(os.path.islink(link), "the link to it is still a link")
        check(not glob.glob(path(".null*")) and not glob.glob(path(".out-link*")), "no temporary was left")

    fifo = path("g.fifo")
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(read(fifo)), daemon=True)  # blocks forever if replaced
    reader.start()
    r = run(grad + ["--out", fifo], 0, label="grad --out a FIFO", timeout=60)
    reader.join(30)
    if r.returncode != 0 and reader.is_alive():
        open(fifo, "wb").close()  # release the reader
    check(got and got[0][8:9] == b"{" and b'"bppsa.crc32"' in got[0], "the reader got the safetensors image")
    check(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO is still a FIFO")

    out = path("stdout")
    os.symlink("/proc/self/fd/1", out)
    r = run_bytes(grad + ["--out", out], "grad --out a link to /proc/self/fd/1 (as /dev/stdout is)",
                  stdout=subprocess.PIPE)
    check(r.stdout[8:9] == b"{" and b'"bppsa.crc32"' in r.stdout, "the image went to the process's stdout")
    check(os.path.islink(out), "the link is still a link")
    with open(path("captured"), "wb") as f:
        f.write(b"before\n")
        f.flush()
        run_bytes(grad + ["--out", out], "grad --out /proc/self/fd/1 with stdout a file", stdout=f)
    data = read(path("captured"))
    check(data.startswith(b"before\n") and b'"bppsa.crc32"' in data, "appended to the file behind stdout")


def check_output_links():
    """Defect 2: a link to a file is written through (the link kept); a planted one is refused."""
    grad = weights_and_batch()
    os.makedirs(path("runs"), exist_ok=True)
    real = path("runs", "g1.safetensors")
    open(real, "wb").write(b"old")
    link = path("latest.safetensors")
    os.symlink(os.path.join("runs", "g1.safetensors"), link)
    run(grad + ["--out", link], 0, label="grad --out a link to a file")
    check(os.path.islink(link) and os.readlink(link) == os.path.join("runs", "g1.safetensors"), "the link is kept")
    check(read(real)[8:9] == b"{" and b'"bppsa.crc32"' in read(real), "the file it leads to holds the gradients")
    shared = shared_folder()
    try:
        victim = victim_file(shared)
        out = os.path.join(shared, "g.safetensors")
        if not as_nobody(["ln", "-s", victim, out]):
            print("skip the planted output link: needs root and setpriv to act as nobody")
            return
        run(grad + ["--out", out], 1, [out, f"owned by user {NOBODY}"], "grad --out a link nobody planted is refused")
        check(read(victim) == b"root's precious file\n", "the file it points to is untouched")
        check(os.path.islink(out), "the planted link is left as it is")
        log = os.path.join(shared, "log.jsonl")
        check(as_nobody(["ln", "-s", victim, log]), "nobody plants a link at a --log path")
        run(SMALL + ["--log", log], 1, [log, f"owned by user {NOBODY}"], "train --log to a link nobody planted")
        check(read(victim) == b"root's precious file\n", "the file it points to is not truncated")
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def check_stale_temporaries():
    """Defect 6: a save removes only the temporaries of its own files, of dead processes."""
    d = path("tmpclean")
    os.makedirs(d)
    dead = subprocess.Popen(["true"])
    dead.wait()
    p = dead.pid
    ours = [f".d.safetensors.tmp.{p}.0", f".d.optim.8-0123456789abcdef.safetensors.tmp.{p}.3"]
    others = [".dotfile.tmp.999999.0", ".d-notes.tmp.999998.1", f".dd.safetensors.tmp.{p}.0",
              f".d.notes.tmp.{p}.0", f".d.optim.x.safetensors.tmp.{p}.0", f".d.safetensors.tmp.{os.getpid()}.0"]
    for f in ours + others:
        open(os.path.join(d, f), "wb").write(b"partial")
    run(SMALL + ["--save", os.path.join(d, "d.safetensors")], label="a save beside other files' temporaries")
    check(not [f for f in ours if os.path.exists(os.path.join(d, f))], "the dead saves' temporaries are removed")
    kept = [f for f in others if os.path.exists(os.path.join(d, f))]
    check(kept == others, f"every other file is kept: lost {sorted(set(others) - set(kept))}")


def check_resume_while_saving(resumes=100):
    """Defect 7: --resume F while another process saves F every few milliseconds."""
    ck = path("busy.safetensors")
    fast = ["train", "--model", "gru", "--hidden", "4", "--data", "bitstream", "--steps", "4", "--samples", "24",
            "--batch", "8", "--lr", "1e-2", "--no-progress", "--threads", "1"]
    saver = subprocess.Popen([BIN] + fast + ["--epochs", "1000000", "--save", ck], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(ck) and time.monotonic() < deadline:
            time.sleep(0.01)
        failed = []
        for _ in range(resumes):
            r = subprocess.run([BIN] + fast + ["--epochs", "1", "--resume", ck], capture_output=True, text=True)
            if r.returncode != 0:
                failed.append(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc {r.returncode}")
        check(saver.poll() is None, "the saving run was running throughout")
        check(not failed, f"{resumes} resumes while another process saves: {len(failed)} failed: {failed[:3]}")
    finally:
        saver.send_signal(signal.SIGKILL)
        saver.wait()


def check_flipped_bit():
    """A flipped bit in a saved weight is refused on load, naming the tensor and the file."""
    ck = path("flip.safetensors")
    run(SMALL + ["--save", ck], label="a checkpoint to corrupt")
    data = bytearray(read(ck))
    data[-3] ^= 0x10  # in the last tensor's data
    open(ck, "wb").write(bytes(data))
    names = sorted(st.load(ck)[0])
    run(SMALL[:-2] + ["--epochs", "2", "--resume", ck], 1, [ck, f"tensor '{names[-1]}' fails its checksum"],
        "--resume of a checkpoint with a flipped bit")


def check_log_inputs():
    """--log naming one of the run's input files (an IDX file of --data-dir) is refused, the file intact."""
    idx = fake_mnist(path("idx"))
    labels = os.path.join(idx, "train-labels-idx1-ubyte")
    before = read(labels)
    cnn = ["train", "--model", "cnn", "--arch", "flatten,linear:10", "--data", "mnist", "--data-dir", idx,
           "--epochs", "1", "--no-progress"]
    run(cnn + ["--log", labels], 1, ["--log", labels, "data"], "--log = an IDX file of --data-dir")
    link = path("log-link.jsonl")
    os.symlink(labels, link)
    run(cnn + ["--log", link], 1, ["--log", "train-labels-idx1-ubyte"], "--log = a link to an IDX file")
    check(read(labels) == before, "the IDX file is untouched")


def check_empty_save():
    run(SMALL + ["--save", ""], 2, ["--save", "empty name"], "--save '' is a usage error")
    ck = path("resumed.safetensors")
    run(SMALL + ["--save", ck], label="a checkpoint to resume")
    run(SMALL[:-1] + ["2", "--resume", ck], 0, ["without --save", "not saved"], "--resume without --save says so")


def main():
    run_checks((check_lock_links, check_device_outputs, check_output_links, check_stale_temporaries,
                check_resume_while_saving, check_flipped_bit, check_log_inputs, check_empty_save))


if __name__ == "__main__":
    main()
