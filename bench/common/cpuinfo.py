"""The CPU's model name from /proc/cpuinfo, for the machine line of results files (bench/paper/paper.py,
pytorch.py, summarize_scan.py)."""


def cpu_model(default="unknown"):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default
