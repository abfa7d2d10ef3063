"""Prove a fix: rerun a command as baseline and fixed, each cold, interleaved, and compare.
Over 400 lines: orchestration, one rerun, recorder adapter, trace parsing; split after issue 23 lands (issue 27).

Each run: evict the checkpoint files (posix_fadvise DONTNEED of exactly those files), run the
unchanged command with the shim (``none`` for the baseline: it only records the tensor manifest),
recorded with readtrace's recorder when it is available and we are root. Repeats alternate the
order (B F, F B, ...) so drift on a shared machine hits both sides. Wall times exclude the shim's
own digest time (computed after each loader call, outside the clock). Each run's tensors are
digested when its loader call returns (``readtrace.inject.loaded``): lazy mappings from the file's
bytes at that moment, read past the page cache, so that hashing never reads a mapping in an order
the script did not use (that would turn a random read pattern sequential and flatter the baseline).
``auto`` (the default) measures before it acts: see ``readtrace.fix.candidates``. A comparison that
cannot back a claim (nothing loaded, nothing evicted) says why in ``Comparison.unproven``.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from readtrace.errors import NoEvidenceError, ReadtraceError, TraceError, UsageError
from readtrace.fix import child, coldlock, predict, stop
from readtrace.fix.candidates import (
    LEAVE_ALONE,
    NO_HARM,
    OWN,
    ROUTED_CALLS,
    Candidate,
    Floor,
    candidates,
    confirmed,
    sequential_read_s,
)
from readtrace.fix.levers import seen_in
from readtrace.fix.progress import Progress, figures, quiet
from readtrace.fix.recording import analyse
from readtrace.fix.schedule import Budget, NotTried, Outcome, run_trials
from readtrace.fix.verdict import confirmation_needed
from readtrace.fix.workdir import work_dir
from readtrace.fs.datafiles import DATA_SUFFIXES, SYSTEM_PREFIXES, VOLUME_MIN_BYTES
from readtrace.fs.datafiles import is_code as _is_code
from readtrace.fs.procmaps import mapped_by
from readtrace.inject.manifest import (
    Manifest,
    ManifestDiff,
    compare_manifests,
    fill_digests,
    read_manifest,
)
from readtrace.loader.fileio import MiB
from readtrace.measure.profile import cached_for_path
from readtrace.pagecache.evict import Eviction, evict
from readtrace.pagecache.prefetch import prefetch
from readtrace.pagecache.residency import cache_survives_open
from readtrace.record.launch import sudo_credentials
from readtrace.replace import new_file, no_follow
from readtrace.rerun.environment import shim_environment
from readtrace.rerun.protocol import FIX_STRATEGIES, prefetches
from readtrace.rerun.rankplan import RankPlan, plan_from_spans, split_plan

# A recorder runs ``cmd`` with ``env`` in ``cwd`` writing ``trace``; returns (exit code, wall s, summary).
Recorder = Callable[[list[str], dict, str | None, Path], tuple[int, float, dict | None]]


@dataclass
class Run:
    """One rerun: which side, its exit code and times, what it loaded, and its trace summary."""

    side: str  # "baseline" | "fixed" | "trial" | "warm"
    index: int
    exit_code: int
    wall_s: float  # the command's wall time minus the shim's digest time
    manifest: Manifest
    trace_path: str | None = None
    summary: dict | None = None  # report_json's summary + findings of the run's trace
    label: str = ""  # the candidate it ran (auto)
    log: str = ""  # the last lines of its output, when it failed
    stopped: str = ""  # "stopped at 5.2 s (slower than ...)": its time limit stopped it (fix/schedule.py)
    predicted_s: float | None = None  # auto's trials: the predicted cold wall time (fix/predict.py)
    predicted_by: str = ""  # how that was predicted, or why it was not

    @property
    def loader_s(self) -> float:
        return self.manifest.loader_s


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


@dataclass
class Comparison:
    command: list[str]
    strategy: str
    files: list[str]
    runs: list[Run]
    evictions: list[Eviction]
    diff: ManifestDiff
    notes: list[str] = field(default_factory=list)
    cold: bool = True
    choice: Choice | None = None
    # Why no speedup or identity can be claimed (nothing loaded, nothing evicted ...): empty when both can.
    unproven: list[str] = field(default_factory=list)
    plan: RankPlan | None = None  # torchrun: what each rank prefetched in the fixed runs

    def side(self, name: str) -> list[Run]:
        return [r for r in self.runs if r.side == name]

    def median(self, name: str, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.side(name))

    @property
    def left_alone(self) -> bool:
        """auto changed nothing: its "fixed" runs are the unchanged command again."""
        return self.choice is not None and self.choice.chosen is LEAVE_ALONE

    @property
    def speedup(self) -> float | None:
        """Baseline wall / fixed wall (medians), only under the verdict ``fixed`` (fix/verdict.py: the fixed
        runs beat the baseline's beyond their spread); None otherwise, and for a load left alone."""
        from readtrace.fix.verdict import verdict_of  # verdict.py types against this module

        return verdict_of(self).speedup

    @property
    def rerun_ratio(self) -> float | None:
        """Left alone: baseline / rerun of the unchanged command (how far apart two runs of it are here)."""
        return self._wall_ratio() if self.left_alone else None

    def _wall_ratio(self) -> float | None:
        if not self.side("fixed") or not self.side("baseline") or not self.evictions_cold:
            return None
        fixed = self.median("fixed", "wall_s")
        return self.median("baseline", "wall_s") / fixed if fixed > 0 else None

    @property
    def evictions_cold(self) -> bool:
        """Every checkpoint file was made cold before the runs (or the runs were meant warm)."""
        if not self.cold:
            return bool(self.files)
        return bool(self.evictions) and all(e.after <= 0.01 for e in self.evictions)


def compare(
    command: Sequence[str],
    *,
    strategy: str = "auto",
    repeat: int = 1,
    files: Sequence[str] | None = None,
    device: str | None = None,
    cwd: str | None = None,
    workdir: str | os.PathLike | None = None,
    recorder: Recorder | None = None,
    cold: bool = True,
    log: Callable[[str], None] = lambda line: None,
    spans_from: str | None = None,
    wait: bool = True,
    tell: Callable[[str], None] | None = None,
    budget: float | None = None,
    progress: Progress | None = None,
) -> Comparison:
    """Run ``command`` as baseline and fixed ``repeat`` times each, cold, interleaved; compare.

    ``files``: the checkpoint files to evict before each run (default: those the command loads
    through safetensors or torch.load, found by one uncounted discovery run). ``strategy="auto"``
    first measures the baseline against the floor (a sequential read of the same bytes plus the
    command warm) and, unless it is within noise of it, each candidate (readtrace's strategies, the
    loader's own levers) once, cold; the fastest with identical tensors is the fix when it beats the
    baseline runs beyond their spread twice, else the load is left alone (fix/verdict.py words it). ``recorder``: record each run (see ``default_recorder``);
    None runs it plainly. ``workdir`` keeps manifests, logs and traces. ``cold=False``: warm runs.
    Under torchrun (tensors tagged with a rank) the fixed runs' prefetch follows a rank plan
    (rerun/rankplan.py) from ``spans_from`` (a trace of the job) or the baseline's own trace. Another
    compare measuring one of the same files is waited for (fix/coldlock.py), said through ``tell``
    (default ``log``), or with ``wait=False`` a ReadtraceError. ``budget``: seconds auto may spend in
    all (fix/schedule.py: candidates that no longer fit are not tried); ``progress``: a live display.
    """
    if strategy not in FIX_STRATEGIES:
        raise UsageError(f"unknown strategy {strategy!r} (choose from {', '.join(FIX_STRATEGIES)})")
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    command = list(command)
    tell = tell or log  # what the user must hear even when ``log`` is quiet (a wait, where runs are kept)
    with work_dir(workdir, sudo_credentials(), tell) as work, ExitStack() as held:
        if callable(getattr(recorder, "close", None)):  # fix/recording.RunRecorder: its probes end with the compare
            held.callback(recorder.close)
        notes: list[str] = []
        seen: set[str] = set()
        if files is None:
            log("discovery run (not counted): which checkpoint files does the command load?")
            discovery = _run(command, "discovery", 0, "none", work, device, cwd, recorder)
            _must_succeed(discovery)
            seen = seen_in(discovery.manifest.calls)
            files = sorted({c.file for c in discovery.manifest.calls if c.file and os.path.isfile(c.file)})
            if not files and discovery.trace_path:  # a loader the shim does not see: what the load read
                files = command_from_trace(discovery.trace_path, command)[2]
        files = list(files)
        notes += held.enter_context(coldlock.holding(files, wait=wait, say=tell))  # one compare per file
        if cold and (held := mapped_elsewhere(files)):
            raise NoEvidenceError("the runs cannot be cold: eviction leaves the pages another process maps: "
                                  + "; ".join(held))
        session = _Session(command, work, device, cwd, recorder, files, cold, log, spans_from,
                           budget=Budget(budget), progress=progress or quiet())
        dropping = [f for f in files if not _cache_kept(f)]
        if strategy == "auto" and cold:  # warm runs measure the shim's own per-file choice instead
            choice, runs = _choose(session, seen, not dropping, repeat, notes)
            fixed = choice.chosen
        else:
            choice, runs = None, []
            fixed = Candidate(f"readtrace {strategy}", strategy, OWN.get(strategy, ""))
            for i in range(repeat):
                order = ("baseline", "fixed") if i % 2 == 0 else ("fixed", "baseline")
                runs += [session.run(side, i, LEAVE_ALONE if side == "baseline" else fixed) for side in order]
            if dropping and strategy in ("prefetch", "both"):
                notes.append(f"{len(dropping)} file(s) lose their page cache on every open() (a FUSE daemon "
                             "without keep_cache): prefetching cannot help a loader that opens them again; "
                             "only the own-fd loader (safetensors API, torch.load) can")
        notes.extend(sorted({e.note for e in session.evictions if e.note}))
        comparison = Comparison(command, strategy, files, runs, session.evictions, _diff(runs), notes, cold,
                                choice, plan=session.plan)
        comparison.unproven = _unproven(comparison)
        analyse(comparison.runs)  # the summaries the table reads, while the traces still exist
        return comparison


def _diff(runs: list[Run]) -> ManifestDiff:
    runs = [r for r in runs if not r.manifest.failures]  # a manifest known to lack records proves nothing
    baselines = [r for r in runs if r.side == "baseline"]
    others = [r for r in runs if r.side == "fixed"]
    if not baselines or not others:
        return ManifestDiff(0, 0, [], [], [])
    diffs = [compare_manifests(baselines[0].manifest, r.manifest) for r in others + baselines[1:]]
    return next((d for d in diffs if not d.all_identical), diffs[0])


def _unproven(c: Comparison) -> list[str]:
    """Why the table may not claim a speedup or identical tensors (empty: it may)."""
    why = []
    if not c.files:
        why.append("no checkpoint files were found (nothing was loaded through safetensors or torch.load and "
                   "none were given with --files): nothing was evicted, so the runs were not cold")
    elif c.cold and not c.evictions_cold:
        warm = [f"{os.path.basename(e.path)} {100 * e.after:.0f} %" + (f" ({e.note})" if e.note else "")
                for e in c.evictions if e.after > 0.01]
        why.append("the runs were not cold: still cached after eviction: " + ", ".join(warm))
    for r in c.runs:
        why.extend(f"{r.side} run {r.index + 1}: {failure}" for failure in dict.fromkeys(r.manifest.failures))
    if c.diff.count == 0:
        why.append("no tensors were seen in any run (the load does not go through safetensors or torch.load): "
                   "the runs' tensors could not be compared")
    return why


@dataclass
class _Session:
    """One comparison's runs: each made cold (or warm) first, all with the same recorder."""

    command: list[str]
    work: Path
    device: str | None
    cwd: str | None
    recorder: Recorder | None
    files: list[str]
    cold: bool
    log: Callable[[str], None]
    spans_from: str | None = None  # a recorded trace of the job: each rank's byte spans (else the baseline's)
    evictions: list[Eviction] = field(default_factory=list)
    count: int = 0
    plan: RankPlan | None = None  # torchrun: what each rank prefetches in fixed runs
    plan_path: Path | None = None
    early_read: bool | None = None  # may fixed runs read files early (inject/early.py)? None: no baseline yet
    budget: Budget = field(default_factory=lambda: Budget(None))
    progress: Progress = field(default_factory=quiet)

    def prepare(self, what: str, expect_s: float | None = None, left_s: float | None = None) -> None:
        if self.cold:
            self.evictions = evict(self.files)
            how = f"cold: {len(self.files)} file(s) evicted"
        else:
            prefetch(self.files, progress=False)
            how = f"warm: {len(self.files)} file(s) cached"
        self.log(f"{what} ({how}); {figures(self.budget.elapsed(), expect_s, left_s)}")

    def run(self, side: str, index: int, candidate: Candidate, limit_s: float | None = None,
            expect_s: float | None = None, left_s: float | None = None) -> Run:
        self.count += 1
        what = f"run {self.count} {side} [{candidate.label if side != 'baseline' else 'unchanged'}]"
        self.prepare(what, expect_s, left_s)
        if self.plan is not None and prefetches(candidate.strategy):
            candidate = replace(candidate, settings={**candidate.settings, "prefetch_plan": str(self.plan_path)})
        if self.early_read is False:
            candidate = replace(candidate, settings={**candidate.settings, "early_read": False})
        with self.progress.running(what, expect_s, left_s, self.budget.elapsed()):
            run = _run(self.command, side, index, candidate.strategy, self.work, self.device, self.cwd,
                       self.recorder, self.files, candidate, stem=f"{self.count:02d}-{side}", limit_s=limit_s)
        run.label = candidate.label
        if side == "baseline":
            _must_succeed(run)
            if self.early_read is None:
                self.early_read = early_read_helps(run.manifest)
            if self.plan is None:
                self._plan_from(run)
        return run

    def _plan_from(self, baseline: Run) -> None:
        """Under torchrun: which bytes each rank prefetches in the fixed runs (rerun/rankplan.py), from
        the given trace, else the baseline's; without a trace, the files split over local ranks."""
        if not self.files or not baseline.manifest.ranked:
            return
        spans = self.spans_from or baseline.trace_path
        summary = trace_summary(spans) if spans and spans != baseline.trace_path else baseline.summary
        plan = plan_from_spans(spans_by_path(summary), self.files) if summary else None
        self.plan = plan or split_plan(self.files, "the runs were not recorded: each rank's byte spans are unknown, "
                                       "so the files are split over each node's local ranks")
        self.plan_path = self.work / "rank-plan.json"
        self.plan.save(self.plan_path)

    def floor(self) -> Floor:
        evict(self.files)
        size, read_s = sequential_read_s(self.files)
        prefetch(self.files, progress=False)
        self.log("floor: the same bytes read sequentially, then the command warm")
        with self.progress.running("floor: the command warm", elapsed_s=self.budget.elapsed()):
            warm = _run(self.command, "warm", 0, "none", self.work, self.device, self.cwd, None, self.files)
        _must_succeed(warm)
        return Floor(size, read_s, warm.wall_s)


def _choose(session: _Session, seen: set[str], keeps_cache: bool, repeat: int, notes: list[str]):
    """auto: unless the baseline is within noise of its floor, try the candidates once each, cold, the
    fastest predicted first, stopping those that fall behind and the rest once one reaches the floor
    (fix/schedule.py); the fastest with identical tensors, when at least 3 % faster, is the fix. Its
    gain stands on that one run where it is beyond noise (``verdict.confirmation_needed``); else it is
    the fix only when it and a fresh cold run of it are both at least 3 % faster than both of two
    baseline runs (the spread rule, ``candidates.confirmed``); then the remaining interleaved repeats."""
    baseline = session.run("baseline", 0, LEAVE_ALONE)
    seen = seen or seen_in(baseline.manifest.calls)
    runs = [baseline]
    floor = session.floor() if keeps_cache and session.files and session.cold else None
    floor_unknown = "" if floor is not None else "no checkpoint files" if not session.files else \
        "this mount drops the page cache on every open, so the same load cannot run warm"
    if floor is None and session.files and session.cold:  # half of the floor is still worth knowing
        evict(session.files)
        size, read_s = sequential_read_s(session.files)
        floor_unknown += f"; a sequential read of the same {size / MiB:.1f} MiB took {read_s:.2f} s here"
    trials: list[Run] = []
    identical: list[str] = []
    not_tried: list[NotTried] = []
    if not session.files:
        why = "no checkpoint files were found: nothing to act on"
    elif floor is not None and floor.nothing_to_gain(baseline.wall_s):
        why = (f"the baseline ({baseline.wall_s:.2f} s) is at most {100 * (1 - NO_HARM):.0f} % over a sequential read "
               f"of the same bytes on this mount ({floor.read_s:.2f} s) plus the same load warm "
               f"({floor.warm_s:.2f} s): nothing to gain beyond noise")
    else:
        found, why_not = candidates(seen or {"load_file"}, keeps_cache)
        notes.extend(why_not)
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
    if not any(r.side == "fixed" for r in runs):
        runs.append(session.run("fixed", 0, LEAVE_ALONE))
    return choice, _repeats(session, runs, LEAVE_ALONE, repeat)


def _confirm(session: _Session, runs: list[Run], chosen: Candidate, best: Run, measured: tuple, repeat: int):
    """The fastest candidate ``best``: kept on its one run where its gain is beyond noise, else run again
    with the baseline again (when the budget allows) and kept only when both runs beat both baselines."""
    trials, floor, identical, floor_unknown, not_tried = measured
    baseline = runs[0]
    needed, confirmation = confirmation_needed(best.wall_s, [baseline.wall_s])
    head = f"fastest of {len(trials)} candidate(s) measured cold, tensors identical"
    left = session.budget.left()
    if not needed or (left is not None and left < best.wall_s + baseline.wall_s):
        unconfirmed = "" if not needed else (f"it needed a confirmation run ({confirmation}), for which the "
                                             f"--budget left no time ({max(left, 0):.0f} s left)")
        runs.append(replace(best, side="fixed"))
        choice = Choice(chosen, f"{head}, {best.wall_s:.2f} s vs the baseline's {baseline.wall_s:.2f} s: "
                        f"{confirmation}", trials, floor, identical, floor_unknown, not_tried, confirmation,
                        unconfirmed)
        return choice, runs if unconfirmed else _repeats(session, runs, chosen, repeat)
    fresh = session.run("fixed", 0, chosen, expect_s=best.wall_s, left_s=best.wall_s + baseline.wall_s)
    again = session.run("baseline", 1, LEAVE_ALONE, expect_s=baseline.wall_s, left_s=baseline.wall_s)
    runs.append(again)
    times = f"{best.wall_s:.2f} s and {fresh.wall_s:.2f} s vs the baseline's {baseline.wall_s:.2f} s and {again.wall_s:.2f} s"
    if fresh.exit_code == 0 and _identical(baseline, fresh) and \
            confirmed([best.wall_s, fresh.wall_s], [baseline.wall_s, again.wall_s]):
        runs.append(fresh)
        choice = Choice(chosen, f"{head}, and in a fresh cold run again at least 3 % faster than both baseline "
                        f"runs: {times}", trials, floor, identical, floor_unknown, not_tried, confirmation)
        return choice, _repeats(session, runs, choice.chosen, repeat)
    fresh.side, fresh.label, again.side = "trial", f"{chosen.label} (again)", "fixed"
    trials.append(fresh)  # the unchanged command's second run is the fixed side of a load left alone
    why = f"{chosen.label} was not at least 3 % faster than both baseline runs, twice: {times}"
    choice = Choice(LEAVE_ALONE, why, trials, floor, identical, floor_unknown, not_tried, confirmation)
    return choice, _repeats(session, runs, LEAVE_ALONE, repeat)


def _trials(session: _Session, baseline: Run, rows: list[predict.Ranked], floor: Floor | None,
            notes: list[str]) -> Outcome:
    """Each candidate at most once, cold, in ``rows``' order (fix/schedule.py stops and leaves out)."""
    def run(row, limit_s, expect_s, left_s):
        return session.run("trial", 0, row.candidate, limit_s, expect_s, left_s)

    outcome = run_trials(rows, baseline.wall_s, floor, session.budget, run, lambda t: _identical(baseline, t))
    for trial in outcome.trials:
        if trial.exit_code != 0 and not trial.stopped:
            notes.append(f"{trial.label}: the command failed with it (exit {trial.exit_code}): {trial.log}")
    differing = [t.label for t in outcome.trials if t.exit_code == 0 and t not in outcome.ok]
    if differing:
        notes.append("not considered, loaded different tensors: " + ", ".join(differing))
    if outcome.floor_reached and outcome.not_tried:
        notes.append(f"{outcome.floor_reached}: not tried: " + ", ".join(n.label for n in outcome.not_tried))
    return outcome


def _repeats(session: _Session, runs: list[Run], chosen: Candidate, repeat: int) -> list[Run]:
    """``runs`` plus interleaved pairs until each side has ``repeat`` runs."""
    for i in range(1, repeat):
        order = ("fixed", "baseline") if i % 2 else ("baseline", "fixed")
        for side in order:
            if sum(r.side == side for r in runs) < repeat:
                runs.append(session.run(side, i, LEAVE_ALONE if side == "baseline" else chosen))
    return runs


def _identical(baseline: Run, other: Run) -> bool:
    return compare_manifests(baseline.manifest, other.manifest).all_identical


def _must_succeed(run: Run) -> None:
    if run.exit_code != 0:
        raise ReadtraceError(f"{run.side} run exited with {run.exit_code}" + (f": {run.log}" if run.log else ""))


def early_read_helps(baseline: Manifest) -> bool:
    """Read files early in fixed runs only where the baseline loaded through calls the own-fd loader
    routes (a raw mmap would only get a second read), and not in a distributed job: the first Python
    process there is the launcher (torchrun), which loads nothing."""
    return not baseline.ranked and any(c in ROUTED_CALLS for c in seen_in(baseline.calls))


def _cache_kept(path: str) -> bool:
    """Whether the page cache of ``path`` survives an open: as its mount's cached profile measured it
    (readtrace probe), else tried now."""
    profile = cached_for_path(path)
    if profile is not None:
        return profile.cache_survives_open
    try:
        return cache_survives_open(path)
    except (OSError, ReadtraceError):
        return True


def _run(command, side, index, strategy, work: Path, device, cwd, recorder, files=(), candidate=None,
         stem=None, limit_s: float | None = None) -> Run:
    """One rerun with the shim (``candidate``: its protocol settings and plain environment), stopped
    after ``limit_s`` seconds (fix/stop.py; ``Run.stopped`` says so)."""
    stem = stem or f"{side}-{index + 1}"
    manifest_path = work / f"{stem}.jsonl"
    settings, extra_env = (candidate.settings, candidate.env) if candidate else ({}, {})
    with stop.limited(limit_s) as limit, \
            shim_environment(strategy, manifest_path, device=device, prefetch_files=files, files=tuple(files),
                             base_env={**os.environ, **extra_env, **limit.env}, **settings) as env:
        if recorder is not None:
            trace = work / f"{stem}.rtrace"
            try:
                with _stdout_to(work / f"{stem}.log"):  # the command's output must not mix with ours
                    code, wall, summary = recorder(command, env, cwd, trace)
            except ReadtraceError:
                _check_work(work, f"{side} run {index + 1}")  # the trace had nowhere to go: unproven
                raise
            trace_path = str(trace)
        else:
            code, wall = _run_plain(command, env, cwd, work / f"{stem}.log")
            summary, trace_path = None, None
    _check_work(work, f"{side} run {index + 1}")
    manifest = read_manifest(manifest_path)
    if _full(work):
        manifest.failures.append(f"the file system of {work} is full: the run's manifest may lack records")
    if code == 0:
        fill_digests(manifest)  # any the shim could not take when the load returned
    tail = _tail(work / f"{stem}.log") if code != 0 and limit.fired_at_s is None else ""
    wall = max(wall - manifest.digest_s, 0.0)
    stopped = f"stopped at {wall:.1f} s" if limit.fired_at_s is not None and code != 0 else ""
    return Run(side, index, code, wall, manifest, trace_path, summary, log=tail, stopped=stopped)


def _check_work(work: Path, run: str) -> None:
    """The work directory must outlive each run: without it the run's manifest is lost."""
    if not work.is_dir():
        raise NoEvidenceError(f"the work directory {work} disappeared during the {run}: its manifest is lost, "
                              "nothing proven (the command itself ran to its end)")


def _full(work: Path) -> bool:
    try:
        return os.statvfs(work).f_bavail == 0
    except OSError:
        return False


def _run_plain(command, env, cwd, log_path: Path) -> tuple[int, float]:
    """Run without recording; the command's output goes to ``log_path`` (stdout stays ours)."""
    with os.fdopen(new_file(log_path), "wb") as out:
        started = time.perf_counter()
        code = child.run(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if code == 128 + signal.SIGINT:  # Ctrl-C reached the run first: stop like the user asked
            raise KeyboardInterrupt
        return code, time.perf_counter() - started


def default_recorder() -> tuple[Recorder | None, str | None]:
    """readtrace's recorder + analyzer when importable and root, else (None, why not)."""
    try:
        import readtrace.record  # noqa: F401
    except ImportError:
        return None, "runs not recorded: readtrace.record is not available in this build"
    if os.geteuid() != 0:
        return None, "runs not recorded: recording needs root (eBPF)"

    from readtrace.fix.recording import RunRecorder

    return RunRecorder(), None  # one probe set for all runs of a comparison (compare closes it)


def trace_summary(trace_path) -> dict | None:
    """One trace's summary as a Run keeps it: the Analysis's ``summary`` as plain data plus its findings'
    codes and figures, read from the Analysis itself (no renderer in between)."""
    try:
        from readtrace.analyze import analyze
        from readtrace.report.jsonreport import plain
    except ImportError:
        return None
    import json

    from readtrace.trace import load_trace

    analysis = analyze(load_trace(trace_path))
    summary = plain(analysis.summary.data())
    findings = [plain(f.data()) for f in analysis.findings]
    summary["findings"] = [f["code"] for f in findings]
    # what fix/verdict.py's own_change needs to name the user's own lever
    summary["finding_facts"] = [{k: f.get(k) for k in ("code", "tasks", "mapping", "view")} for f in findings]
    summary["io_model"] = predict.io_model(analysis)  # what auto ranks its candidates by (fix/predict.py)
    if analysis.rank_spans:  # a distributed job: per rank (bytes, spans, wait) and its byte spans
        paths = analysis.files["path"]
        summary["ranks"] = json.loads(analysis.ranks.drop(columns=["pids"]).to_json(orient="records"))
        summary["rank_spans"] = {str(r): [[paths[f], s, e] for f, s, e in spans]
                                 for r, spans in analysis.rank_spans.items()}
    return summary


def spans_by_path(summary: dict) -> dict[int, list]:
    """rank -> [(path, start, end)] from a trace summary's ``rank_spans``."""
    return {int(r): [tuple(p) for p in spans] for r, spans in (summary.get("rank_spans") or {}).items()}


def _tail(path: Path, lines: int = 3) -> str:
    try:
        with open(path, errors="replace", opener=no_follow) as f:
            text = f.read().strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


# A file of no data suffix is a checkpoint file by volume (fs/datafiles.VOLUME_MIN_BYTES read) and at least
# VOLUME_SHARE of the most any such file gave the load (a tokenizer or config beside the weights is not).
VOLUME_SHARE = 0.10


def checkpoint_files(files: Iterable[tuple[str, int, int]], cwd: str | None = None) -> list[str]:
    """The checkpoint files among a trace's ``files`` = (path, size, bytes the load read or faulted):
    absolute paths (a relative one taken from ``cwd``) of existing non-empty files that carry the load's
    data, by suffix (DATA_SUFFIXES), as a shard named by an ``*.index.json`` the load read, or by volume;
    never code (executables, shared objects, Python sources and bytecode, anything of an installed
    Python environment, wherever it lives), nor system files."""
    rows = []
    for path, size, touched in files:
        if not isinstance(path, str) or not path or not size or size <= 0:
            continue
        path = os.path.normpath(os.path.join(cwd or os.getcwd(), path))
        if not path.startswith(SYSTEM_PREFIXES) and os.path.isfile(path) and not _is_code(path):
            rows.append((path, int(size), int(touched or 0)))
    shards = _index_shards(p for p, _, _ in rows)
    by_name = {p for p, _, _ in rows if p.endswith(DATA_SUFFIXES) or p in shards}
    others = [(p, touched or size) for p, size, touched in rows if p not in by_name and not p.endswith(".json")]
    most = max((v for _, v in others), default=0)
    by_volume = {p for p, v in others if v >= VOLUME_MIN_BYTES and v >= VOLUME_SHARE * most}
    return sorted(by_name | by_volume)


def _index_shards(paths: Iterable[str]) -> set[str]:
    """The shard files named by the ``*.index.json`` files among ``paths`` (their weight_map)."""
    import json

    shards = set()
    for index in (p for p in paths if p.endswith(".index.json")):
        try:
            with open(index) as f:
                weight_map = json.load(f).get("weight_map") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(weight_map, dict):
            shards.update(os.path.join(os.path.dirname(index), str(v)) for v in weight_map.values())
    return shards


def command_from_trace(path: str | os.PathLike, command: list[str] | None = None
                       ) -> tuple[list[str], str | None, list[str]]:
    """(command, cwd, checkpoint files) of a recorded trace: see ``checkpoint_files``."""
    from readtrace.trace import load_trace

    trace = load_trace(path)
    command = command or trace.meta.get("command")
    if not command:
        raise TraceError(f"{path}: the trace does not record its command; give it: -- CMD")
    cwd = trace.meta.get("cwd")
    touched = _bytes_touched(trace)
    files = [(p, size, touched.get(p, 0)) for p, size in zip(trace.files["path"], trace.files["size"], strict=True)]
    return list(command), cwd, checkpoint_files(files, cwd)


def _bytes_touched(trace) -> dict[str, int]:
    """path -> bytes the recorded load read from it (read syscalls) or faulted in (page faults)."""
    touched: dict[str, int] = {}
    reads = trace.reads
    if len(reads):
        for p, n in reads.assign(ret=reads["ret"].clip(lower=0)).groupby("path", observed=True)["ret"].sum().items():
            touched[p] = touched.get(p, 0) + int(n)
    pages = trace.pages
    if len(pages):
        faults = pages[pages["op"].isin(("fault", "map_pages"))]
        for p, n in faults.groupby("path", observed=True)["size"].sum().items():
            touched[p] = touched.get(p, 0) + int(n)
    return touched


def mapped_elsewhere(files: Iterable[str]) -> list[str]:
    """"FILE (mapped by PID (comm), ...)" for each file another process maps now: eviction cannot make
    its mapped pages cold, so no run would be."""
    return [f"{f} (mapped by {', '.join(who)})" for f in files if (who := mapped_by(f, exclude=(os.getpid(),)))]


@contextmanager
def _stdout_to(path: Path) -> Iterator[None]:
    """Point file descriptor 1 at a file while a recorder runs a command that inherits it."""
    sys.stdout.flush()
    saved = os.dup(1)
    fd = new_file(path)
    os.dup2(fd, 1)
    os.close(fd)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
