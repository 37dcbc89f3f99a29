"""The time budget both GPU-machine drivers (bench_gpu.py, cpu_scaling.py) run their programs under:
what does not fit, times out or fails is printed and listed in `skipped`, each command run in
`commands`."""
import time


class BudgetDriver:
    skip_line = "{status}: {what}: {why}"  # how a skipped or failed part is printed

    def __init__(self, a):
        self.a = a
        self.deadline = time.time() + a.budget
        self.skipped = []
        self.commands = []

    def left(self):
        return self.deadline - time.time()

    def skip(self, what, why, failed=False):
        print(self.skip_line.format(status="FAILED" if failed else "skipped", what=what, why=why), flush=True)
        self.skipped.append({"what": what, "why": why, "failed": failed})

    def limit(self, what, timeout):
        """The seconds a program may run (its timeout, at most what is left of the budget); None,
        recorded in skipped, when fewer than 5 are left."""
        limit = min(timeout, self.left())
        if limit < 5:
            self.skip(what, "time budget spent")
            return None
        return limit
