"""How ``auto`` chooses: the baseline against its floor, each candidate once, cold, the fastest predicted
first (fix/schedule.py), the fastest with identical tensors confirmed where its gain needs it; then
the interleaved repeats."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from readtrace.fix import predict
from readtrace.fix.candidates import (
    LEAVE_ALONE,
    NO_HARM,
    SLOW_ABS_S,
    SLOW_MARGIN,
    Candidate,
    Floor,
    candidates,
    confirmed,
    within_band,
)
from readtrace.fix.levers import seen_in
from readtrace.fix.recorded import RecordedRun
from readtrace.fix.runs import Run
from readtrace.fix.schedule import Budget, NotTried, Outcome, proof, run_trials
from readtrace.fix.session import Session, reader_streams
from readtrace.fix.verdict import confirmation_needed
from readtrace.inject.manifest import Manifest, compare_manifests


@dataclass
class Choice:
    """What ``auto`` chose and why, with every candidate's measured cold run."""

    chosen: Candidate
    why: str
    trials: list[Run] = field(default_factory=list)
    floor: Floor | None = None
    identical: list[str] = field(default_factory=list)  # labels of the trials that loaded the same tensors
    floor_unknown: str = ""  # why the floor was not measured (floor None)
    not_tried: list[NotTried] = field(default_factory=list)  # candidates left out (floor reached, --budget)
    confirmation: str = ""  # whether the chosen candidate was run again, and why (verdict.confirmation_needed)
    unconfirmed: str = ""  # why a gain that needed a confirmation run has none: no gain is claimed


def choose(session: Session, seen: set[str], keeps_cache: bool, repeat: int, notes: list[str]):
    """auto: unless the baseline is within noise of its floor, try the candidates once each, cold, the
    fastest predicted first, stopping those that fall behind and the rest once one reaches the floor
    (fix/schedule.py); the fastest with identical tensors, when at least 3 % faster, is the fix. Its
    gain stands on that one run where it is beyond noise (``verdict.confirmation_needed``); else it is
    the fix only when it and a fresh cold run of it are both at least 3 % faster than both of two
    baseline runs (the spread rule, ``candidates.confirmed``); then the remaining interleaved repeats."""
    no_warm = WithoutWarm(session.recorded, keeps_cache, session.budget) if session.recorded else None
    runs, floor, floor_unknown = _baselines(session, keeps_cache, no_warm)
    baseline = runs[0]
    seen = seen or seen_in(baseline.manifest.calls)
    trials: list[Run] = []
    identical: list[str] = []
    not_tried: list[NotTried] = []
    if not session.files:
        why = "no checkpoint files were found: nothing to act on"
    elif floor is not None and floor.nothing_to_gain(baseline.wall_s):
        why = (f"the baseline ({baseline.wall_s:.2f} s) is at most {100 * (1 - NO_HARM):.0f} % over "
               f"{floor.read_how} on this mount ({floor.read_s:.2f} s) plus {floor.warm_how} "
               f"({floor.warm_s:.2f} s): nothing to gain beyond noise")
    elif floor is not None and floor.warm_recorded:  # in its not-slow band, nothing worth its proof
        why = (f"the baseline ({baseline.wall_s:.2f} s) is within the not-slow band of its floor ({floor.total_s:.2f} s: "
               f"{floor.read_how} {floor.read_s:.2f} s + {floor.warm_how} {floor.warm_s:.2f} s) and {no_warm.why}")
    else:
        threads, why_threads = reader_streams(session.files)
        found, why_not = candidates(seen or {"load_file"}, keeps_cache, threads)
        notes.extend([*why_not, *([why_threads] if why_threads else [])])
        model = (baseline.summary or {}).get("io_model")
        rows = predict.ranked(found, baseline.wall_s, model, floor.warm_s if floor else None)
        margin = _margin(floor, runs)
        rows, unpromising = _promising(rows, [r.wall_s for r in runs], margin, floor if model else None, notes,
                                       session.budget)
        outcome = _trials(session, baseline, rows, floor, notes, margin)
        trials, not_tried = outcome.trials, unpromising + outcome.not_tried
        identical = [t.label for t in outcome.ok]
        best = min(outcome.ok, key=lambda t: t.wall_s, default=None)
        if not found:
            why = "no candidate can act on this load (the notes say why)"
        elif not trials and not_tried:
            why = f"no candidate was tried: {not_tried[0].why}"
        elif best is None or best.wall_s > margin * baseline.wall_s:
            why = f"no candidate was at least {_percent(margin)} % faster than the baseline" + (
                f" (best: {best.label}, {best.wall_s:.2f} s vs {baseline.wall_s:.2f} s)" if best else "")
        else:
            chosen = next(c for c in found if c.label == best.label)
            return _confirm(session, runs, chosen, best, (trials, floor, identical, floor_unknown, not_tried), repeat)
    choice = Choice(LEAVE_ALONE, why, trials, floor, identical, floor_unknown, not_tried)
    return choice, repeats(session, runs, LEAVE_ALONE, repeat)  # left alone: no run of the unchanged command again


def _baselines(session: Session, keeps_cache: bool, no_warm: WithoutWarm | None
               ) -> tuple[list[Run], Floor | None, str]:
    """(the baseline runs to start from, the floor or None, why none). The floor runs first: its warm run
    digests the mapped tensors from the page cache (or its local copy), so no cold run after it reads
    the files again for them (a 220 MiB transformers load on the lab mount: 5.4 s of digest reads in its
    baseline run, the load itself 4.5 s). The user's recorded run (``session.recorded``) is the first
    baseline run where the floor's warm run gives it its tensors; without one it is a second, after a
    baseline run made here."""
    measurable = bool(session.files) and session.cold
    unknown = "" if measurable else "no checkpoint files" if not session.files else "the runs are warm"
    floor = warm = None
    if measurable:
        floor, warm, unknown = session.floor(keeps_cache, no_warm)
    recorded = session.recorded
    if recorded is not None and warm is not None:
        return [session.adopt_baseline(recorded.as_baseline(warm.manifest))], floor, unknown
    if recorded is not None and floor is not None and floor.warm_recorded:  # at its floor: no run follows
        return [recorded.as_baseline(Manifest([], []))], floor, unknown
    baseline = session.run("baseline", 0, LEAVE_ALONE)
    return [baseline] + ([recorded.as_baseline(baseline.manifest, index=1)] if recorded else []), floor, unknown


@dataclass
class WithoutWarm:
    """Why the floor with the recorded run's own time stands without a warm run (``Session.floor``), or
    "": the recorded run waited on its checkpoint no longer than the floor's read took (within noise of
    that floor), or it is in the floor's not-slow band and no change to its reads is worth its proof
    there (``no_change_worth``): the band rule would try none, so the warm run, a whole load, would
    only have measured that floor again (rclone, transformers, 256 MiB: 0.69 s of waits in a 4.1 s
    load, the read 0.33 s, the fastest change 3.91 s where 3.76 s was needed). ``why``: the last reason
    given, for the choice."""

    recorded: RecordedRun
    keeps_cache: bool
    budget: Budget
    why: str = ""

    def __call__(self, floor: Floor) -> str:
        wall = self.recorded.wall_s
        self.why = ""
        if floor.nothing_to_gain(wall):
            return (f"the recorded run ({wall:.2f} s) waited no longer on its checkpoint than {floor.read_how} "
                    f"took ({floor.read_s:.2f} s)")
        if floor.not_slow(wall):
            self.why = no_change_worth(wall, self.recorded.summary, self.keeps_cache, self.budget, floor.warm_s)
            if self.why:
                return (f"the recorded run ({wall:.2f} s) is within the not-slow band of its floor "
                        f"({floor.total_s:.2f} s), and {self.why}")
        return ""


def no_change_worth(wall_s: float, summary, keeps_cache: bool, budget: Budget, warm_s: float) -> str:
    """Why no change to the reads is worth a run in the not-slow band: the fastest the storage model
    predicts for any (``predict.fastest_change``) is over what a fix must take there, or proving it
    (the floor's warm run ``warm_s``, the trial, its confirmation: ``schedule.proof``) does not fit the
    band's budget; "" where one is, or the trace has no model."""
    model = summary.get("io_model")
    if model is None:
        return ""
    need_s = wall_s / SLOW_MARGIN
    best_s, basis = predict.fastest_change(wall_s, model, keeps_cache)
    if best_s > need_s:
        return (f"no change to its reads is predicted to make it {_percent(1 / SLOW_MARGIN)} % faster: the fastest "
                f"predicted {best_s:.2f} s ({basis}), a fix must take at most {need_s:.2f} s")
    if dear := _not_worth_proving(best_s, [wall_s], budget, warm_s):
        return (f"the fastest change to its reads is predicted at {best_s:.2f} s ({basis}), "
                f"{_percent(best_s / wall_s)} % faster, {dear}")
    return ""


def _not_worth_proving(predicted_s: float, baseline_s: list[float], budget: Budget, warm_s: float | None = None,
                       before_s: float = 0.0) -> str:
    """Why a candidate predicted at ``predicted_s`` is not worth its proof: the baseline (the first of
    ``baseline_s``) is within the not-slow band of that prediction too, and the proof (``schedule.proof``,
    after ``before_s`` of trials) does not fit the band's budget; "" where it is worth it. A change
    predicted to take the load out of its band is worth any proof (a 7.5 s transformers load of 1 GiB,
    its prefetch 5.1 s: 1.48x)."""
    if not within_band(baseline_s[0], predicted_s):
        return ""
    dear = proof(predicted_s, baseline_s, warm_s).too_dear(budget, baseline_s[0], before_s)
    return f"the baseline within the not-slow band of that too (a gain the band calls noise), but {dear}" if dear else ""


def _margin(floor: Floor | None, baselines: list[Run]) -> float:
    """How much faster a confirmed candidate's runs must be: 3 %, or 10 % (SLOW_MARGIN) where the baseline
    is within the not-slow band of its floor: there a few-% "gain" of the best of several candidates, run
    again, is how the noise of a busy machine looks (a local 8 MiB load, 2 s, "fixed" by a prefetch)."""
    median = statistics.median(r.wall_s for r in baselines)
    return 1 / SLOW_MARGIN if floor is not None and floor.not_slow(median) else NO_HARM


def _confirm(session: Session, runs: list[Run], chosen: Candidate, best: Run, measured: tuple, repeat: int):
    """The fastest candidate ``best``: kept on its one run where its gain is beyond noise, else run again
    (with the baseline again, unless two baseline runs were made) when the budget allows, and kept only
    when both its runs beat every baseline run."""
    trials, floor, identical, floor_unknown, not_tried = measured
    baseline = runs[0]
    baselines = [r for r in runs if r.side == "baseline"]
    needed, confirmation = confirmation_needed(best.wall_s, [r.wall_s for r in baselines])
    head = f"fastest of {len(trials)} candidate(s) measured cold, tensors identical"
    left = session.budget.left()
    again_s = baseline.wall_s if len(baselines) < 2 else 0.0
    if not needed or (left is not None and left < best.wall_s + again_s):
        unconfirmed = "" if not needed else (f"it needed a confirmation run ({confirmation}), for which the "
                                             f"--budget left no time ({max(left, 0):.0f} s left)")
        runs.append(replace(best, side="fixed"))
        choice = Choice(chosen, f"{head}, {best.wall_s:.2f} s vs the baseline's {baseline.wall_s:.2f} s: "
                        f"{confirmation}", trials, floor, identical, floor_unknown, not_tried, confirmation,
                        unconfirmed)
        return choice, runs if unconfirmed else repeats(session, runs, chosen, repeat)
    fresh = session.run("fixed", 0, chosen, expect_s=best.wall_s, left_s=best.wall_s + again_s)
    if again_s:
        baselines.append(session.run("baseline", 1, LEAVE_ALONE, expect_s=baseline.wall_s, left_s=baseline.wall_s))
        runs.append(baselines[-1])
    times = (f"{best.wall_s:.2f} s and {fresh.wall_s:.2f} s vs the baseline's "
             + " and ".join(f"{r.wall_s:.2f} s" for r in baselines))
    if fresh.exit_code == 0 and same_tensors(baseline, fresh) and \
            confirmed([best.wall_s, fresh.wall_s], [r.wall_s for r in baselines], _margin(floor, baselines)):
        runs.append(fresh)
        choice = Choice(chosen, f"{head}, and in a fresh cold run again at least 3 % faster than both baseline "
                        f"runs: {times}", trials, floor, identical, floor_unknown, not_tried, confirmation)
        return choice, repeats(session, runs, choice.chosen, repeat)
    fresh.side, fresh.label = "trial", f"{chosen.label} (again)"
    trials.append(fresh)
    why = (f"{chosen.label} was not at least {_percent(_margin(floor, baselines))} % faster than every "
           f"baseline run, twice: {times}")
    choice = Choice(LEAVE_ALONE, why, trials, floor, identical, floor_unknown, not_tried, confirmation)
    return choice, repeats(session, runs, LEAVE_ALONE, repeat)


def _promising(rows: list[predict.Ranked], baseline_s: list[float], margin: float, floor: Floor | None,
               notes: list[str], budget: Budget) -> tuple[list[predict.Ranked], list[NotTried]]:
    """(the rows to try, those not tried). Where the baseline (its runs' walls ``baseline_s``, the first
    the baseline) is within the not-slow band of its measured floor (``margin`` below NO_HARM) and the
    storage model predicts from its trace (``floor`` given), a fix must take ``margin`` x the baseline
    or less: only candidates predicted to get there, and whose proof (``schedule.proof``, after the
    trials before it) fits the band's budget, are tried (each still measured); the others, and those the
    model cannot replay, are listed as not tried. Out of the band, or without a model, every candidate
    is measured."""
    if floor is None or margin >= NO_HARM:
        return rows, []
    first = baseline_s[0]
    need_s = margin * first
    keep: list[predict.Ranked] = []
    skipped: list[NotTried] = []
    for r in rows:
        if r.predicted_s is None or r.predicted_s > need_s:
            skipped.append(NotTried(r.candidate.label, r.predicted_s, (
                f"predicted at {r.predicted_s:.2f} s" if r.predicted_s is not None
                else "not predicted (the storage model does not replay it)") + f", a fix must take at most {need_s:.2f} s",
                r.basis))
            continue
        if dear := _not_worth_proving(r.predicted_s, baseline_s, budget, before_s=sum(k.predicted_s for k in keep)):
            skipped.append(NotTried(r.candidate.label, r.predicted_s, f"predicted at {r.predicted_s:.2f} s, {dear}",
                                    r.basis))
            continue
        keep.append(r)
    if skipped:
        notes.append(f"the baseline ({first:.2f} s) is within the not-slow band of its floor ({floor.total_s:.2f} s "
                     f"+ {round(100 * (SLOW_MARGIN - 1))} % + {SLOW_ABS_S:g} s), where a fix must be "
                     f"{_percent(margin)} % faster than every baseline run, proved within what a comparison spends "
                     "there: only candidates predicted to be were tried; not tried: "
                     + ", ".join(n.label for n in skipped))
    return keep, skipped


def _percent(margin: float) -> int:
    return round(100 * (1 - margin))


def _trials(session: Session, baseline: Run, rows: list[predict.Ranked], floor: Floor | None,
            notes: list[str], margin: float) -> Outcome:
    """Each candidate at most once, cold, in ``rows``' order (fix/schedule.py stops and leaves out)."""
    def run(row, limit_s, expect_s, left_s):
        return session.run("trial", 0, row.candidate, limit_s, expect_s, left_s)

    outcome = run_trials(rows, baseline.wall_s, floor, session.budget, run, lambda t: same_tensors(baseline, t),
                         baseline.manifest.digest_s, margin)
    for trial in outcome.trials:
        if trial.exit_code != 0 and not trial.stopped:
            notes.append(f"{trial.label}: the command failed with it (exit {trial.exit_code}): {trial.log}")
    differing = [t.label for t in outcome.trials if t.exit_code == 0 and t not in outcome.ok]
    if differing:
        notes.append("not considered, loaded different tensors: " + ", ".join(differing))
    if outcome.floor_reached and outcome.not_tried:
        notes.append(f"{outcome.floor_reached}: not tried: " + ", ".join(n.label for n in outcome.not_tried))
    return outcome


def repeats(session: Session, runs: list[Run], chosen: Candidate, repeat: int) -> list[Run]:
    """``runs`` plus interleaved pairs until each side has ``repeat`` runs."""
    for i in range(1, repeat):
        order = ("fixed", "baseline") if i % 2 else ("baseline", "fixed")
        for side in order:
            if sum(r.side == side for r in runs) < repeat:
                runs.append(session.run(side, i, LEAVE_ALONE if side == "baseline" else chosen))
    return runs


def same_tensors(baseline: Run, other: Run) -> bool:
    return compare_manifests(baseline.manifest, other.manifest).all_identical
