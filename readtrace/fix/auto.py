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
    SLOW_MARGIN,
    Candidate,
    Floor,
    candidates,
    confirmed,
)
from readtrace.fix.levers import seen_in
from readtrace.fix.runs import Run
from readtrace.fix.schedule import NotTried, Outcome, run_trials
from readtrace.fix.session import Session, reader_streams
from readtrace.fix.verdict import confirmation_needed
from readtrace.inject.manifest import compare_manifests


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
    runs, floor, floor_unknown = _baselines(session, keeps_cache)
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
    else:
        threads, why_threads = reader_streams(session.files)
        found, why_not = candidates(seen or {"load_file"}, keeps_cache, threads)
        notes.extend([*why_not, *([why_threads] if why_threads else [])])
        rows = predict.ranked(found, baseline.wall_s, (baseline.summary or {}).get("io_model"))
        outcome = _trials(session, baseline, rows, floor, notes)
        trials, not_tried = outcome.trials, outcome.not_tried
        identical = [t.label for t in outcome.ok]
        best = min(outcome.ok, key=lambda t: t.wall_s, default=None)
        if not found:
            why = "no candidate can act on this load (the notes say why)"
        elif not trials and not_tried:
            why = f"no candidate was tried: {not_tried[0].why}"
        elif best is None or best.wall_s > NO_HARM * baseline.wall_s:
            why = "no candidate was at least 3 % faster than the baseline" + (
                f" (best: {best.label}, {best.wall_s:.2f} s vs {baseline.wall_s:.2f} s)" if best else "")
        else:
            chosen = next(c for c in found if c.label == best.label)
            return _confirm(session, runs, chosen, best, (trials, floor, identical, floor_unknown, not_tried), repeat)
    choice = Choice(LEAVE_ALONE, why, trials, floor, identical, floor_unknown, not_tried)
    return choice, repeats(session, runs, LEAVE_ALONE, repeat)  # left alone: no run of the unchanged command again


def _baselines(session: Session, keeps_cache: bool) -> tuple[list[Run], Floor | None, str]:
    """(the baseline runs to start from, the floor or None, why none). The user's recorded run
    (``session.recorded``) is the first baseline run where the floor's warm run gives it its tensors;
    without a floor it is a second one, after a baseline run made here."""
    measurable = bool(session.files) and session.cold
    unknown = "" if measurable else "no checkpoint files" if not session.files else "the runs are warm"
    recorded = session.recorded
    if recorded is not None and measurable:
        floor, warm, unknown = session.floor(keeps_cache)
        if warm is not None:
            return [session.adopt_baseline(recorded.as_baseline(warm.manifest))], floor, unknown
    baseline = session.run("baseline", 0, LEAVE_ALONE)
    floor = None
    if recorded is None and measurable:
        floor, _, unknown = session.floor(keeps_cache)
    return [baseline] + ([recorded.as_baseline(baseline.manifest, index=1)] if recorded else []), floor, unknown


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
    why = (f"{chosen.label} was not at least {100 * (1 - _margin(floor, baselines)):.0f} % faster than every "
           f"baseline run, twice: {times}")
    choice = Choice(LEAVE_ALONE, why, trials, floor, identical, floor_unknown, not_tried, confirmation)
    return choice, repeats(session, runs, LEAVE_ALONE, repeat)


def _trials(session: Session, baseline: Run, rows: list[predict.Ranked], floor: Floor | None,
            notes: list[str]) -> Outcome:
    """Each candidate at most once, cold, in ``rows``' order (fix/schedule.py stops and leaves out)."""
    def run(row, limit_s, expect_s, left_s):
        return session.run("trial", 0, row.candidate, limit_s, expect_s, left_s)

    outcome = run_trials(rows, baseline.wall_s, floor, session.budget, run, lambda t: same_tensors(baseline, t),
                         baseline.manifest.digest_s)
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
