"""The runs of one comparison (``Session``): each made cold (or warm) first, all with the same recorder,
with what a baseline run decides for the others (the rank plan, early reads)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from readtrace.errors import ReadtraceError
from readtrace.fix.candidates import ROUTED_CALLS, Candidate, Floor, sequential_read_s
from readtrace.fix.levers import seen_in
from readtrace.fix.localcopy import NoLocalCopy, local_copies
from readtrace.fix.progress import Progress, figures, quiet
from readtrace.fix.recorded import RecordedRun, recorded_run
from readtrace.fix.runs import Recorder, Run, must_succeed, record_unchanged, run_command
from readtrace.fix.schedule import Budget
from readtrace.fix.tracefacts import spans_by_path, trace_summary
from readtrace.inject.digestcache import CACHE_NAME, carry_over, file_key
from readtrace.inject.manifest import Manifest
from readtrace.loader.fileio import MiB
from readtrace.measure.profile import cached_for_path
from readtrace.pagecache.evict import Eviction, evict
from readtrace.pagecache.prefetch import prefetch
from readtrace.pagecache.residency import cache_survives_open
from readtrace.record.launch import output_rights, sudo_credentials
from readtrace.rerun.protocol import prefetches
from readtrace.rerun.rankplan import RankPlan, plan_from_spans, split_plan

UNWARM = "this mount drops the page cache on every open, so the same load cannot run warm from it"


@dataclass
class Session:
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
    recorded: RecordedRun | None = None  # the user's recorded run, a cold baseline run already made (fix/recorded.py)

    @contextmanager
    def prepared(self, what: str, expect_s: float | None = None, left_s: float | None = None) -> Iterator[None]:
        """The files evicted (a cold run), or cached and held there until the block ends (a warm one)."""
        with ExitStack() as held:
            if self.cold:
                self.evictions = evict(self.files)
                how = f"cold: {len(self.files)} file(s) evicted"
            else:
                how = f"warm: {len(self.files)} file(s) cached{held.enter_context(self.held_in_cache())}"
            self.log(f"{what} ({how}); {figures(self.budget.elapsed(), expect_s, left_s)}")
            yield

    @contextmanager
    def held_in_cache(self) -> Iterator[str]:
        """The files read into the page cache and pinned there until the block ends ("" or "; why not
        pinned"): proactive reclaim (readtrace.pagecache.pin: this VM's DAMON pageout) drops cached pages
        nobody touched for seconds, and a warm run that fetched them again from the mount is not warm."""
        fetched = prefetch(self.files, progress=False, pin=True)
        try:
            yield f"; {fetched.pin_note}" if fetched.pin_note else ""
        finally:
            if fetched.pins is not None:
                fetched.pins.release()

    def run(self, side: str, index: int, candidate: Candidate, limit_s: float | None = None,
            expect_s: float | None = None, left_s: float | None = None) -> Run:
        self.count += 1
        what = f"run {self.count} {side} [{candidate.label if side != 'baseline' else 'unchanged'}]"
        if self.plan is not None and prefetches(candidate.strategy):
            candidate = replace(candidate, settings={**candidate.settings, "prefetch_plan": str(self.plan_path)})
        if self.early_read is False:
            candidate = replace(candidate, settings={**candidate.settings, "early_read": False})
        with self.prepared(what, expect_s, left_s), self.progress.running(what, expect_s, left_s,
                                                                          self.budget.elapsed()):
            run = run_command(self.command, side, index, candidate.strategy, self.work, self.device, self.cwd,
                       self.recorder, self.files, candidate, stem=f"{self.count:02d}-{side}", limit_s=limit_s)
        run.label = candidate.label
        if side == "baseline":
            self.adopt_baseline(run)
        return run

    def record_baseline(self) -> tuple[RecordedRun | None, str]:
        """The first baseline run, recorded as a user records it (no shim), to stand as the recorded run of
        ``fix --compare TRACE`` does (fix/recorded.py): its trace lets the floor go without a warm run
        where the load is already at it (``_at_recorded_floor``); (the run, "") or (None, why not)."""
        self.count += 1
        what = f"run {self.count} baseline [unchanged, recorded without the shim]"
        with self.prepared(what), self.progress.running(what, elapsed_s=self.budget.elapsed()):
            code, trace = record_unchanged(self.command, self.work, self.cwd, self.recorder, f"{self.count:02d}-baseline")
        if code != 0:
            return None, f"the load exited {code}"
        found, why = recorded_run(trace, self.command, self.files)
        return (replace(found, made=True) if found else None), why

    def adopt_baseline(self, run: Run) -> Run:
        """What a baseline run decides for the runs after it: early reads, the rank plan."""
        must_succeed(run)
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

    def cold_read(self) -> tuple[int, float, int]:
        """(bytes, seconds, streams) of the files read cold as the own-fd loader reads them on this mount:
        the mount's probed N streams where those measured faster, else one."""
        self.evictions = evict(self.files)  # the comparison's proof of cold runs where no run follows (at the floor)
        streams = reader_streams(self.files)[0] or 1
        return (*sequential_read_s(self.files, streams=streams), streams)

    def floor(self, keeps_cache: bool, without_warm: Callable[[Floor], str] | None = None
              ) -> tuple[Floor | None, Run | None, str]:
        """(the floor, its warm run of the unchanged command: a manifest of the baseline's tensors, why
        there is none): the same bytes read cold as the own-fd loader reads them, then the command warm;
        where the mount drops the page cache on every open, warm from a local copy (fix/localcopy.py).
        ``without_warm``: given the floor with the recorded run's own time (``Floor.from_recorded``), why
        that floor stands without a warm run, or "" (``_at_recorded_floor``)."""
        if keeps_cache:
            size, read_s, streams = self.cold_read()
            if at := self._at_recorded_floor(size, read_s, streams, without_warm):
                return at, None, ""
            with self.held_in_cache() as note:
                warm = self._warm(f"floor: the same bytes read sequentially, then the command warm{note}")
            if warm.exit_code != 0:  # the baseline run after it says how the command fails
                return None, None, f"the load failed (exit {warm.exit_code}) when run warm"
            return Floor(size, read_s, warm.wall_s, streams), warm, ""
        self.evictions = evict(self.files)
        before = {path: file_key(path) for path in self.files}
        try:
            with local_copies(self.files, reader_streams(self.files)[0] or 1) as copies:
                read = (f"{Floor(copies.bytes, copies.read_s, 0.0, copies.streams).read_how} "
                        f"({copies.bytes / MiB:.1f} MiB) took {copies.read_s:.2f} s here")
                if (at := self._at_recorded_floor(copies.bytes, copies.read_s, copies.streams, without_warm)):
                    return at, None, ""
                warm = self._warm("floor: the same bytes read sequentially into a local copy, then the command "
                                  "warm from it", copies.binds)
                self._keep_digests(before, {path: file_key(copy) for path, copy in copies.binds.items()})
        except NoLocalCopy as e:
            size, read_s, streams = self.cold_read()
            return None, None, (f"{UNWARM}, and {e}; {Floor(size, read_s, 0.0, streams).read_how} "
                                f"({size / MiB:.1f} MiB) took {read_s:.2f} s here")
        except subprocess.SubprocessError:  # the bind mounts failed in the child: the command never ran
            return None, None, f"{UNWARM}, and its files could not be bound over by local copies; {read}"
        if warm.exit_code != 0:
            return None, None, (f"{UNWARM}, and the load failed (exit {warm.exit_code}) when run warm from local "
                                f"copies of its files; {read}")
        return Floor(copies.bytes, copies.read_s, warm.wall_s, copies.streams, local_copy=True), warm, ""

    def _at_recorded_floor(self, size: int, read_s: float, streams: int,
                           without_warm: Callable[[Floor], str] | None) -> Floor | None:
        """The floor without a warm run, where the recorded run (``self.recorded``) lets it go: its own
        time besides its waits on the checkpoint stands for the warm load (``Floor.from_recorded``) where
        ``without_warm`` says why no warm run is needed (fix/auto.py: within noise of that floor, or in
        its not-slow band with no change predicted to gain)."""
        if self.recorded is None or without_warm is None:
            return None
        floor = Floor.from_recorded(size, read_s, streams, self.recorded.summary)
        why = without_warm(floor) if floor is not None else ""
        if not why:
            return None
        self.log(f"floor: {why}: no warm run needed")
        return floor

    def _keep_digests(self, before: dict[str, str | None], copied: dict[str, str | None]) -> None:
        """The warm run digested the copies' mapped tensors (inject/digestcache.py): keep them for each
        file unchanged since before its copy was read, so the next run does not read it again for them."""
        with output_rights(sudo_credentials()):  # the work directory is the invoking user's
            for path, key in before.items():
                if key is not None and file_key(path) == key:
                    carry_over(self.work / CACHE_NAME, copied.get(path), key)

    def _warm(self, what: str, binds: dict[str, str] | None = None) -> Run:
        """The unchanged command, not recorded, its files cached (or bound over by local copies)."""
        self.log(what)
        with self.progress.running("floor: the command warm", elapsed_s=self.budget.elapsed()):
            return run_command(self.command, "warm", 0, "none", self.work, self.device, self.cwd, None, self.files,
                               binds=binds)


def early_read_helps(baseline: Manifest) -> bool:
    """Read files early in fixed runs only where the baseline loaded through calls the own-fd loader
    routes (a raw mmap would only get a second read), and not in a distributed job: the first Python
    process there is the launcher (torchrun), which loads nothing."""
    return not baseline.ranked and any(c in ROUTED_CALLS for c in seen_in(baseline.calls))


def cache_kept(path: str) -> bool:
    """Whether the page cache of ``path`` survives an open: as its mount's cached profile measured it
    (readtrace probe), else tried now."""
    profile = cached_for_path(path)
    if profile is not None:
        return profile.cache_survives_open
    try:
        return cache_survives_open(path)
    except (OSError, ReadtraceError):
        return True


def reader_streams(files: list[str]) -> tuple[int | None, str]:
    """(threads for the own-fd loader, why) from the cached profile of the mount of ``files``' first
    (readtrace probe, ``MountProfile.reader_streams``); (None, "") where one reader it is."""
    profile = cached_for_path(files[0]) if files else None
    if profile is None or profile.reader_streams < 2:
        return None, ""
    return profile.reader_streams, (f"the own-fd loader reads with {profile.streams} own-fd streams: on this mount "
                             f"{profile.streams} streams measured {profile.parallel_mbps:.3g} MB/s against "
                             f"{profile.sequential_mbps:.3g} MB/s for one ({profile.stream_gain:.1f}x, readtrace "
                             f"probe {profile.date})")
