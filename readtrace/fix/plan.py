"""What ``fix --compare`` will run before it runs anything: each run of the user's command, in order,
and how many there will be (``--plan`` prints it and runs nothing; every compare says the count first).
A command with side effects (appending to a ledger, writing a checkpoint, sending data) does them on
every run: the user judges that from this plan.

The count mirrors ``compare``: a discovery run unless the files are known (``--files``, a trace); then
``repeat`` interleaved pairs; with ``auto`` (cold) the floor's warm run, the baseline, each candidate
that can apply (at most those of ``candidates`` for a load that uses every routed call), fastest
predicted first (fix/predict.py), a confirmation pair where the best gain is within noise
(verdict.confirmation_needed), then the remaining pairs: a maximum, since auto stops early where the
baseline is not slow, nothing applies, a candidate reaches the floor or ``--budget`` is spent, and
a trial slower than the best so far is stopped before its end (fix/schedule.py).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import TextIO

from readtrace.escape import printable
from readtrace.fix.candidates import candidates
from readtrace.fix.schedule import STOP_RULE
from readtrace.fix.verdict import CLEAR_GAIN
from readtrace.rerun.records import FORKED_SHARED

# Everything a discovery run can see: the candidates for it are every candidate auto can try.
EVERY_CALL = {"load_file", "safe_open", "torch.load", "torch.load:mmap", "import:transformers", FORKED_SHARED}


@dataclass(frozen=True)
class Plan:
    steps: list[str]  # one line per run of the command (or per group of repeats)
    most: int  # the most times the command runs
    exact: bool  # it runs exactly ``most`` times
    what: str = ""  # "strategy auto, --repeat 1, cold"
    notes: tuple[str, ...] | list[str] = ()  # how auto orders and stops its runs

    def count(self) -> str:
        return f"{self.most} times" if self.exact else f"up to {self.most} times"

    def headline(self) -> str:
        return (f"fix --compare runs the command {self.count()} (--plan lists the runs): "
                "whatever it does besides loading (side effects) happens each time")


def plan(strategy: str, repeat: int, *, files_known: bool, cold: bool = True, budget: float | None = None,
         recorded: bool = False) -> Plan:
    """The runs ``compare(strategy=..., repeat=..., files=... if files_known else None, cold=..., budget=...)``
    makes (at most); ``recorded``: the command comes from a trace (``recorded_from``)."""
    how = "cold" if cold else "warm"
    what = f"strategy {strategy}, --repeat {repeat}, {how}" + (f", --budget {budget:g} s" if budget else "")
    steps = [] if files_known else ["discovery: the unchanged command once, to find the checkpoint files it loads"]
    if strategy == "auto" and cold:
        with_cache, without = candidates(EVERY_CALL, True)[0], candidates(EVERY_CALL, False)[0]
        labels = list(dict.fromkeys(c.label for c in with_cache + without))
        steps += ["floor: the same bytes read sequentially, then the command warm (where the mount drops the "
                  "page cache on every open: read into a local copy, and the command warm from it, root only); "
                  "first, so that the cold runs after it take the tensors' digests from it"
                  + ("; its tensors stand for the recorded run's" if recorded else ""),
                  "baseline 1: the unchanged command, cold" + (
                      " (the recorded run instead, where it was cold, on this machine, its files unchanged, and "
                      "the floor's warm run loads; where it cannot, the recorded run is baseline 2)"
                      if recorded else "")]
        where = {c.label: ", only where the mount keeps the page cache" for c in with_cache} | \
            {c.label: ", only where the mount drops the page cache on every open" for c in without}
        for c in with_cache:
            if c.label in where and any(w.label == c.label for w in without):
                where[c.label] = ""
        steps += [f"candidate: {label}, cold (if the baseline is slow on reads and it applies to this load"
                  f"{where[label]})" for label in labels]
        steps += ["confirmation: the fastest candidate again and the baseline again (unless two baseline runs were "
                  f"made), cold, only where its gain is under {CLEAR_GAIN:.0f}x (within noise)"]
        if repeat > 1:
            steps.append(f"repeats: baseline and fixed, interleaved, until each side has {repeat} runs "
                         f"(up to {2 * (repeat - 1)})")
        tried = max(len(with_cache), len(without))  # a mount keeps the page cache or drops it
        most = (0 if files_known else 1) + 1 + 1 + tried + 2 + 2 * (repeat - 1)
        notes = ["the candidates run fastest predicted first (the what-if model on the baseline's trace), not in "
                 "the order listed; " + STOP_RULE + "; none runs after one at most 3 % over the floor; where the "
                 "baseline is within the not-slow band of its floor, only those predicted at 91 % of it or less run, "
                 "whose proof (the trial, and under 2x a fresh run and the baseline again) fits in 2x the baseline's "
                 "time or the --budget (one predicted to take the load out of that band runs whatever its proof "
                 "costs), "
                 "and after one that did not get there, only those still predicted to with the time it took over its "
                 "prediction added"
                 + ("; none starts that no longer fits the --budget, and one running is stopped at it" if budget else "")]
        return Plan(steps, most, exact=False, what=what, notes=notes)
    fixed = f"readtrace {strategy}"
    for i in range(repeat):
        order = ("baseline", "fixed") if i % 2 == 0 else ("fixed", "baseline")
        steps += [f"{side} {i + 1}: " + ("the unchanged command" if side == "baseline" else fixed) + f", {how}"
                  for side in order]
    return Plan(steps, len(steps), exact=True, what=what)


def render_plan(p: Plan, command: list[str], cwd: str | None, files: list[str] | None, shown: str | None,
                out: TextIO) -> None:
    """``fix --compare --plan``: the command, each run and the count (``shown``: whose trace it is from)."""
    print(f"fix --compare plan (nothing was run): {p.what}", file=out)
    print(f"  command: {printable(shlex.join(command))} (cwd {printable(cwd or os.getcwd())})", file=out)
    if shown:
        print(f"  {shown}", file=out)
    if files:
        print(f"  checkpoint files evicted before each run: {len(files)}", file=out)
    for i, step in enumerate(p.steps, 1):
        print(f"  {i:2d}. {step}", file=out)
    for note in p.notes:
        print(f"  ({note})", file=out)
    print(f"The command runs {p.count()}: whatever it does besides loading (appending to a file, writing a "
          "checkpoint, sending data) happens each time.", file=out)

