"""The order of auto's trials, when one stops, and what the budget leaves untried.

- Order: fastest predicted first (fix/predict.py), so the best measured time is known early.
- Stop a trial: once it has run ``STOP_MARGIN`` x the best measured candidate + ``STOP_ABS_S`` it
  cannot be the fastest beyond noise, and once it has run longer than the gain a fix needs allows
  (``NO_HARM`` x the baseline's time, plus the baseline's digest time: the stop clock counts the
  shim's digests, the wall does not) it cannot be the fix; it is stopped (its process tree,
  fix/stop.py) and reported as "stopped at N s (slower than X)" or "(not 3 % faster than the baseline)".
- Stop trying: once a candidate with the baseline's tensors is within noise of the floor (a cold
  sequential read of the same bytes + the load warm, ``Floor.nothing_to_gain``), no other can beat it
  by a margin worth measuring; the rest are "not tried" and the notes say why.
- Correct the predictions by a miss: within the not-slow band of a measured floor (``margin`` under
  NO_HARM), where only candidates predicted to gain the margin are tried (fix/auto.py), a trial that did
  not gain it measured how far the model was under this load's time; the rest, predicted that much
  slower, are tried only while still predicted to gain it (a 4 s transformers load at 4.21 s, its
  floor 3.38 s: three candidates each ran 3.84-3.95 s where 3.83 s was needed).
- Beat the best measured, by the model's own measure: once a candidate ran to its end with the
  baseline's tensors, the rest are tried only where their prediction, corrected by the model's least
  miss on this load's measured trials, is at least 3 % under the best measured (a lab ``load_file``
  of 256 MiB, 5.9 s: the prefetch, predicted 1.67 s, took 1.34 s, so ``both`` at 1.67 s and own-fd at
  1.89 s come to 1.34 and 1.56 s, and OMP_NUM_THREADS=1 to its baseline's time less 0.33 s: none 3 %
  under 1.34 s; each had run before, 1.47-1.59 s). Those the model does not replay (a library's own
  lever) are still tried, last, under the stop rule.
- ``--budget SECONDS`` caps the comparison from its start: a candidate whose expected time no longer
  fits is "not tried", a running one is stopped at the budget.
- The price of a proof in the not-slow band: there a gain is under ``CLEAR_GAIN`` (2x), so proving one
  takes its trial, a fresh run of it and the baseline again (``proof``), and where the baseline is the
  recorded run, the floor's warm run before them (it gives the baseline's tensors): four whole loads
  for a gain of 9-20 %. A candidate whose proof does not fit what is left of ``--budget`` or, without
  one, of ``BAND_BUDGET`` x the baseline's time is "not tried", with its prediction, the price and the
  ``--budget`` that would buy it (the lab transformers load of 256 MiB at 20 ms, 5.0-5.8 s, 4.8-5.3 s
  its floor: three trials and a warm run for a "fix" 5-12 % faster, 4.0-4.5x the baseline in all, its
  verdict a coin toss between "fixed" and "not-slow" from one run to the next).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from readtrace.fix.candidates import NO_HARM, SLOW_MARGIN, Floor
from readtrace.fix.predict import Ranked
from readtrace.fix.verdict import confirmation_needed

STOP_MARGIN = 1.25  # a trial 25 % (+ STOP_ABS_S) slower than the best measured one cannot win beyond noise
STOP_ABS_S = 0.5
STOP_RULE = (f"a trial is stopped once it has run {round(100 * (STOP_MARGIN - 1))} % + {STOP_ABS_S:.1f} s longer "
             f"than the fastest candidate measured so far, or longer than {round(100 * NO_HARM)} % of the baseline's "
             f"time ({round(100 / SLOW_MARGIN)} % where the baseline is within the not-slow band of its floor): it "
             "can no longer be the fix")


BAND_BUDGET = 2.0  # x the baseline's wall: without --budget, the most a comparison spends within the not-slow band


@dataclass(frozen=True)
class NotTried:
    label: str
    predicted_s: float | None
    why: str
    predicted_by: str = ""


@dataclass
class Budget:
    """The comparison's time cap (``--budget``), counted from when it started."""

    seconds: float | None
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float | None:
        return None if self.seconds is None else self.seconds - self.elapsed()

    def band_left(self, baseline_s: float) -> tuple[float, str]:
        """(seconds left, of what) for a load within the not-slow band of its floor: of ``--budget``, else
        of ``BAND_BUDGET`` x the baseline's time."""
        if self.seconds is not None:
            return self.seconds - self.elapsed(), f"the --budget of {self.seconds:g} s"
        return (BAND_BUDGET * baseline_s - self.elapsed(),
                f"{BAND_BUDGET:g}x the baseline's {baseline_s:.2f} s, what a comparison spends without --budget on "
                "a load within the not-slow band of its floor")


@dataclass(frozen=True)
class Proof:
    """The cold runs that would prove a candidate the fix."""

    runs: tuple[tuple[str, float], ...]  # (what, expected seconds), in order

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.runs)

    def too_dear(self, budget: Budget, baseline_s: float, after_s: float = 0.0) -> str:
        """Why the proof, after ``after_s`` of trials before it, does not fit what is left of the band's
        budget (``Budget.band_left``), or ""."""
        left, of = budget.band_left(baseline_s)
        if after_s + self.seconds <= left:
            return ""
        runs = ", ".join(what for what, _ in self.runs)
        after = f" after the trials before it ({after_s:.1f} s)" if after_s else ""
        # the runs' times are predictions: the --budget offered leaves them a quarter more
        more = (budget.elapsed() + after_s + self.seconds) * 1.25
        return (f"proving it takes {len(self.runs)} cold run{'s' * (len(self.runs) > 1)} ({runs}: about "
                f"{self.seconds:.1f} s){after}, more than is left ({max(left, 0):.1f} s) of {of}; --budget "
                f"{math.ceil(more)} should buy it")


def proof(predicted_s: float, baseline_s: list[float], warm_s: float | None = None) -> Proof:
    """The runs proving a candidate predicted at ``predicted_s`` against baseline runs ``baseline_s``: the
    floor's warm run first where ``warm_s`` (a recorded baseline: it gives the baseline's tensors), the
    trial, and where its gain would be within noise (``verdict.confirmation_needed``, under CLEAR_GAIN)
    a fresh run of it and, beside a single baseline run, the baseline again."""
    runs = [("the floor's warm run", warm_s)] if warm_s is not None else []
    runs.append(("the trial", predicted_s))
    if confirmation_needed(predicted_s, baseline_s)[0]:
        runs.append(("a fresh run of it", predicted_s))
        if len(baseline_s) < 2:
            runs.append(("the baseline again", baseline_s[0]))
    return Proof(tuple(runs))


@dataclass
class Outcome:
    """The trials as run: each Run (stopped ones included), those with the baseline's tensors, and
    the candidates not tried (with why)."""

    trials: list = field(default_factory=list)
    ok: list = field(default_factory=list)
    not_tried: list[NotTried] = field(default_factory=list)
    floor_reached: str = ""  # why the rest were not tried, when a candidate reached the floor


def stop_limit(best_s: float | None, budget: Budget, no_gain_s: float | None = None) -> tuple[float | None, str]:
    """(seconds after which the next trial is stopped, why: "best", "baseline" or "budget"); None: no
    limit. ``no_gain_s``: past it a trial is no longer a gain over the baseline."""
    limits = []
    if no_gain_s is not None:
        limits.append((no_gain_s, "baseline"))
    if best_s is not None:
        limits.append((STOP_MARGIN * best_s + STOP_ABS_S, "best"))
    left = budget.left()
    if left is not None:
        limits.append((max(left, 0.0), "budget"))
    if not limits:
        return None, ""
    return min(limits)


def expected_s(row: Ranked, baseline_s: float, limit: float | None) -> float:
    """What a trial is expected to take: its prediction (else the baseline's time), at most its limit."""
    guess = row.predicted_s if row.predicted_s is not None else baseline_s
    return guess if limit is None else min(guess, limit)


def _stopped_because(why_limit: str, best, baseline_s: float, budget: Budget, margin: float) -> str:
    if why_limit == "best":
        return f" (slower than {best.label} {best.wall_s:.2f} s)"
    if why_limit == "baseline":
        return f" (not {round(100 * (1 - margin))} % faster than the baseline's {baseline_s:.2f} s: it cannot be the fix)"
    return f" (the --budget of {budget.seconds:g} s was spent)"


def _corrected_out(row: Ranked, miss: tuple, target_s: float, target: str) -> str:
    """Why ``row`` is not tried: its prediction corrected by ``miss`` = (trial, seconds the trial took over
    its prediction) is over ``target_s`` (``target`` says what that is); "" where it may still get there."""
    trial, late_s = miss
    if row.predicted_s is None or row.predicted_s + late_s <= target_s:
        return ""
    return (f"predicted at {row.predicted_s:.2f} s, but {trial.label} took {trial.wall_s:.2f} s against its "
            f"{trial.predicted_s:.2f} s predicted: {abs(late_s):.2f} s {'later' if late_s >= 0 else 'sooner'}, so "
            f"{row.predicted_s + late_s:.2f} s, {target}")


def run_trials(rows: list[Ranked], baseline_s: float, floor: Floor | None, budget: Budget,
               run: Callable[[Ranked, float | None, float, float], object],
               identical: Callable[[object], bool], digest_s: float = 0.0, margin: float = NO_HARM) -> Outcome:
    """Run ``rows`` in order: ``run(row, limit_s, expected_s, left_s)`` -> Run (``.stopped`` set when the
    limit stopped it), ``identical(run)``: it loaded the baseline's tensors. ``digest_s``: the shim's
    digest time in a run (on the stop clock, not in the wall); ``margin``: how much faster than the
    baseline a fix must be (auto._margin), so past ``margin`` x its time a trial cannot be the fix."""
    out = Outcome()
    no_gain_s = margin * baseline_s + digest_s
    best = None  # the fastest run with the baseline's tensors
    miss = None  # (trial, seconds it took over its prediction): the least such miss so far, in the band
    bias = None  # (trial, seconds over its prediction, any sign): the least over the trials with the baseline's tensors
    for i, row in enumerate(rows):
        label = row.candidate.label
        if out.floor_reached:
            out.not_tried.append(NotTried(label, row.predicted_s, out.floor_reached, row.basis))
            continue
        if miss is not None and (why := _corrected_out(row, miss, margin * baseline_s,
                                                       f"over the {margin * baseline_s:.2f} s a fix must take")):
            out.not_tried.append(NotTried(label, row.predicted_s, why, row.basis))
            continue
        if bias is not None and (why := _corrected_out(row, bias, NO_HARM * best.wall_s,
                                                       f"not 3 % faster than {best.label} ({best.wall_s:.2f} s)")):
            out.not_tried.append(NotTried(label, row.predicted_s, why, row.basis))
            continue
        limit, why_limit = stop_limit(best.wall_s if best else None, budget, no_gain_s)
        need = expected_s(row, baseline_s, limit if why_limit != "budget" else None)
        left = budget.left()
        if left is not None and left < need:
            out.not_tried.append(NotTried(label, row.predicted_s, f"--budget: {max(left, 0):.1f} s left of "
                                          f"{budget.seconds:g} s, it is expected to take {need:.1f} s", row.basis))
            continue
        still = sum(expected_s(r, baseline_s, limit) for r in rows[i:])
        trial = run(row, limit, need, still)
        trial.predicted_s, trial.predicted_by = row.predicted_s, row.basis
        out.trials.append(trial)
        if margin < NO_HARM and row.predicted_s is not None and (trial.exit_code == 0 or trial.stopped) \
                and trial.wall_s > margin * baseline_s and (miss is None or trial.wall_s - row.predicted_s < miss[1]):
            miss = (trial, trial.wall_s - row.predicted_s)  # the model's least miss on this load so far
        if trial.stopped:
            trial.stopped += _stopped_because(why_limit, best, baseline_s, budget, margin)
            continue
        if trial.exit_code != 0 or not identical(trial):
            continue
        out.ok.append(trial)
        if best is None or trial.wall_s < best.wall_s:
            best = trial
        if row.predicted_s is not None and (bias is None or trial.wall_s - row.predicted_s < bias[1]):
            bias = (trial, trial.wall_s - row.predicted_s)
        if floor is not None and floor.nothing_to_gain(trial.wall_s):
            out.floor_reached = (f"{label} ({trial.wall_s:.2f} s) is at most 3 % over the floor ({floor.total_s:.2f} s: "
                                 f"{floor.read_how} + {floor.warm_how}): no other candidate can "
                                 "beat it by a margin worth measuring")
    return out

