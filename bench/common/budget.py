"""The time budget both GPU-machine drivers (gpu/gpu.py, cpu_scaling/cpu_scaling.py) run their programs under:
what does not fit, times out or fails is printed and listed in `skipped`, each command run in
`commands`.

Skipped is not failed: a part the budget leaves out (not started because fewer seconds are left than
it needs, or stopped because the budget ran out while it ran) is recorded as skipped ("time budget
spent"); only a program that exits with an error, or hits its *own* timeout (a hang), is recorded
as failed (failed=True, which makes the driver exit 1)."""
import subprocess
import time

BUDGET_SPENT = "time budget spent"


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

    def limit(self, what, timeout, needs=5, share=None):
        """The seconds a program may run: its own timeout, at most its share of the budget (when
        given) and what is left of it. None, recorded as skipped, when fewer than `needs` seconds
        (its typical duration; at least 5) are left: a program is not started only to be killed by
        the budget."""
        left = self.left() if share is None else min(share, self.left())
        if left < max(5, needs):
            self.skip(what, f"{BUDGET_SPENT} ({max(0, left):.0f} s left"
                      + (f", it takes about {needs:.0f} s)" if needs > 5 else ")"))
            return None
        return min(timeout, left)

    def killed(self, what, limit, timeout, kept=""):
        """Records a program killed at `limit` seconds: skipped when the limit was the budget's (below
        the program's own timeout), failed when it hit its own timeout."""
        if limit < timeout:
            self.skip(what, f"{BUDGET_SPENT}: stopped after {limit:.0f} s{kept}")
        else:
            self.skip(what, f"timed out after {limit:.0f} s (its own timeout){kept}", failed=True)

    def run_program(self, cmd, what, timeout, needs=5, share=None, kept="", **kwargs):
        """subprocess.run(cmd, **kwargs) within limit(what, timeout, needs, share): (state, process),
        state "ran" (process: its CompletedProcess), "not started" or "killed" (process None; both
        recorded as above, `kept` added to the reason of a kill, e.g. what of its output survives)."""
        limit = self.limit(what, timeout, needs, share)
        if limit is None:
            return "not started", None
        self.commands.append(" ".join(cmd))
        try:
            return "ran", subprocess.run(cmd, timeout=limit, **kwargs)
        except subprocess.TimeoutExpired:
            self.killed(what, limit, timeout, kept)
            return "killed", None
