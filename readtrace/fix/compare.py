"""Prove a fix: rerun a command as baseline and fixed, each cold, interleaved, and compare.

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

The rest of a comparison: ``runs`` (one rerun), ``session`` (the runs of a comparison), ``auto`` (its
choice), ``tracefacts`` (what a recorded trace says).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from readtrace.errors import NoEvidenceError, UsageError
from readtrace.fix import coldlock
from readtrace.fix.auto import Choice, choose
from readtrace.fix.candidates import LEAVE_ALONE, OWN, ROUTED_CALLS, Candidate
from readtrace.fix.levers import seen_in
from readtrace.fix.progress import Progress, quiet
from readtrace.fix.recorded import RecordedRun, recorded_run
from readtrace.fix.recording import analyse, attaching, detaching
from readtrace.fix.runs import Recorder, Run, must_succeed, run_command
from readtrace.fix.schedule import Budget
from readtrace.fix.session import Session, cache_kept
from readtrace.fix.tracefacts import command_from_trace
from readtrace.fix.workdir import work_dir
from readtrace.fs.procmaps import mapped_by
from readtrace.inject.manifest import ManifestDiff, compare_manifests
from readtrace.pagecache.evict import Eviction
from readtrace.record.launch import sudo_credentials
from readtrace.rerun.protocol import FIX_STRATEGIES
from readtrace.rerun.rankplan import RankPlan


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
    recorded_from: str | None = None,
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
    ``recorded_from``: the trace the command came from; auto counts its run as a cold baseline run
    where it is one like the comparison's own (fix/recorded.py).
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
            discovery = run_command(command, "discovery", 0, "none", work, device, cwd, recorder)
            must_succeed(discovery)
            seen = seen_in(discovery.manifest.calls)
            files = sorted({c.file for c in discovery.manifest.calls if c.file and os.path.isfile(c.file)})
            if not files and discovery.trace_path:  # a loader the shim does not see: what the load read
                files = command_from_trace(discovery.trace_path, command)[2]
        files = list(files)
        notes += held.enter_context(coldlock.holding(files, wait=wait, say=tell))  # one compare per file
        if cold and (held := mapped_elsewhere(files)):
            raise NoEvidenceError("the runs cannot be cold: eviction leaves the pages another process maps: "
                                  + "; ".join(held))
        session = Session(command, work, device, cwd, recorder, files, cold, log, spans_from,
                           budget=Budget(budget), progress=progress or quiet())
        if recorded_from and strategy == "auto" and cold and files:
            with attaching(recorder):  # the probes compile while the recorded trace is analysed
                session.recorded = _recorded(recorded_from, command, files, recorder is not None, notes, log)
        if session.recorded is None and recorder is not None and strategy == "auto" and cold and files:
            session.recorded = _made_recording(session, notes, log)
        dropping = [f for f in files if not cache_kept(f)]
        if strategy == "auto" and cold:  # warm runs measure the shim's own per-file choice instead
            choice, runs = choose(session, seen, not dropping, repeat, notes)
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
        with detaching(recorder):  # no run follows: the probes detach while the traces are analysed
            analyse(comparison.runs)  # the summaries the table reads, while the traces still exist
        return comparison


def _made_recording(session: Session, notes: list[str], log: Callable[[str], None]) -> RecordedRun | None:
    """The first baseline run recorded here as the user would (``Session.record_baseline``), or None with
    a note saying why it cannot stand as one (the comparison then makes its baselines with the shim)."""
    return _standing(*session.record_baseline(), "the first baseline run, recorded without the shim, is not counted",
                     notes, log)


def _recorded(trace: str, command: list[str], files: list[str], recording: bool, notes: list[str],
              log: Callable[[str], None]) -> RecordedRun | None:
    """The recorded run as a baseline run, or None with a note saying why not."""
    if not recording:
        notes.append("the recorded run is not a baseline run here: it ran under readtrace's probes, "
                     "the comparison's runs do not (not recorded)")
        return None
    return _standing(*recorded_run(trace, command, files), "the recorded run is not a baseline run here", notes, log)


def _standing(found: RecordedRun | None, why: str, refused: str, notes: list[str],
              log: Callable[[str], None]) -> RecordedRun | None:
    """``found`` as baseline run 1, said in the log and the notes; or None, with ``refused: why`` noted."""
    if found is None:
        notes.append(f"{refused}: {why}")
        return None
    log(found.describe())
    notes.append(found.describe())
    return found


def _diff(runs: list[Run]) -> ManifestDiff:
    """The baseline's tensors against every other run's of a side (the first that differs); a load left
    alone with no other run: against themselves (how many were seen)."""
    runs = [r for r in runs if not r.manifest.failures]  # a manifest known to lack records proves nothing
    baselines = [r for r in runs if r.side == "baseline"]
    others = [r for r in runs if r.side == "fixed"] + [r for r in baselines[1:] if not r.recorded]
    if not baselines:
        return ManifestDiff(0, 0, [], [], [])
    diffs = [compare_manifests(baselines[0].manifest, r.manifest) for r in others or baselines[:1]]
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
    if c.diff.count == 0 and not all(r.recorded and not r.manifest.calls for r in c.runs):  # else none compared
        why.append("no tensors were seen in any run (the load does not go through safetensors or torch.load): "
                   "the runs' tensors could not be compared")
    if c.choice is None and c.strategy == "own-fd" and not _own_fd_acted(c):
        why.append("the own-fd loader did not act: no load in the fixed run(s) went through "
                   f"{', '.join(ROUTED_CALLS)} (what it takes over), so what differs between the runs is not the fix")
    return why


def _own_fd_acted(c: Comparison) -> bool:
    """Whether a fixed run loaded anything through the own-fd loader (a routed call that did not fall back)."""
    return any(call.call in ROUTED_CALLS and call.strategy == "own-fd" and not call.fallback
               for run in c.side("fixed") for call in run.manifest.calls)


def mapped_elsewhere(files: Iterable[str]) -> list[str]:
    """"FILE (mapped by PID (comm), ...)" for each file another process maps now: eviction cannot make
    its mapped pages cold, so no run would be."""
    return [f"{f} (mapped by {', '.join(who)})" for f in files if (who := mapped_by(f, exclude=(os.getpid(),)))]
