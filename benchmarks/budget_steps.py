# The reading side of budget_steps.sh, for the tables of the host benchmarks that source it: each
# step's status and seconds from steps.tsv, and its log.
import os


class Steps:
    def __init__(self, out):
        self.out = out
        self.steps = {}
        for line in open(os.path.join(out, "steps.tsv")):
            name, status, secs = line.rstrip("\n").split("\t")
            self.steps[name] = (status, float(secs))

    def text(self, name, ext=".log"):
        try:
            return open(os.path.join(self.out, name + ext), errors="replace").read()
        except OSError:
            return ""

    def ok(self, name):
        return self.steps.get(name, ("not run",))[0] == "ok"

    def status(self, name, digits=1):
        s, secs = self.steps.get(name, ("not run", 0.0))
        return f"{s}, {secs:.{digits}f} s" if s == "ok" or s.startswith(("failed", "timed")) else s
