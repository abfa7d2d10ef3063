"""Prove a fix: rerun a command as baseline and fixed, each cold, interleaved, and compare.

Each run: evict the checkpoint files (posix_fadvise DONTNEED of exactly those files), run the
unchanged command with the shim (``none`` for the baseline: it only records the tensor manifest),
recorded with readtrace's recorder when it is available and we are root. Repeats alternate the
order (B F, F B, ...) so drift on a shared machine hits both sides. Wall times exclude the shim's
own digest time (computed after each loader call, outside the clock). The baseline's tensors are
digested from the files after its run, so that hashing never reads a lazy mmap in an order the
script did not use (that would turn a random read pattern sequential and flatter the baseline).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from readtrace.errors import ExitStatus, ReadtraceError
from readtrace.inject.inject import shim_environment
from readtrace.inject.manifest import (
    Manifest,
    ManifestDiff,
    compare_manifests,
    fill_digests,
    read_manifest,
)
from readtrace.inject.protocol import FIX_STRATEGIES
from readtrace.pagecache.evict import Eviction, evict
from readtrace.pagecache.prefetch import prefetch
from readtrace.pagecache.residency import cache_survives_open

# A recorder runs ``cmd`` with ``env`` in ``cwd`` writing ``trace``; returns (exit code, wall s, summary).
Recorder = Callable[[list[str], dict, str | None, Path], tuple[int, float, dict | None]]


@dataclass
class Run:
    """One rerun: which side, its exit code and times, what it loaded, and its trace summary."""

    side: str  # "baseline" | "fixed"
    index: int
    exit_code: int
    wall_s: float  # the command's wall time minus the shim's digest time
    manifest: Manifest
    trace_path: str | None = None
    summary: dict | None = None  # report_json's summary + findings of the run's trace

    @property
    def loader_s(self) -> float:
        return self.manifest.loader_s


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

    def side(self, name: str) -> list[Run]:
        return [r for r in self.runs if r.side == name]

    def median(self, name: str, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.side(name))

    @property
    def speedup(self) -> float:
        fixed = self.median("fixed", "wall_s")
        return self.median("baseline", "wall_s") / fixed if fixed > 0 else float("inf")


def compare(
    command: Sequence[str],
    *,
    strategy: str = "both",
    repeat: int = 1,
    files: Sequence[str] | None = None,
    device: str | None = None,
    cwd: str | None = None,
    workdir: str | os.PathLike | None = None,
    recorder: Recorder | None = None,
    cold: bool = True,
    log: Callable[[str], None] = lambda line: None,
) -> Comparison:
    """Run ``command`` as baseline and fixed ``repeat`` times each, cold, interleaved; compare.

    ``files``: the checkpoint files to evict before each run (default: those the command loads
    through safetensors, found by one uncounted discovery run). ``recorder``: record each run (see
    ``default_recorder``); None runs it plainly. ``workdir`` keeps manifests, logs and traces.
    ``cold=False``: warm runs instead (the files read into the page cache before each run), to
    measure what the fix costs where nothing is slow.
    """
    if strategy not in FIX_STRATEGIES:
        raise ReadtraceError(f"unknown strategy {strategy!r} (choose from {', '.join(FIX_STRATEGIES)})",
                             ExitStatus.USAGE)
    if repeat < 1:
        raise ReadtraceError("--repeat must be at least 1", ExitStatus.USAGE)
    command = list(command)
    with _workdir(workdir) as work:
        notes: list[str] = []
        if files is None:
            log("discovery run (not counted): which checkpoint files does the command load?")
            discovery = _run(command, "discovery", 0, "none", work, device, cwd, None)
            files = sorted({c["file"] for c in discovery.manifest.calls if os.path.exists(c["file"])})
            if not files:
                notes.append("the command loaded nothing through safetensors: nothing to evict or route")
        runs, evictions = [], []
        for i in range(repeat):
            order = ("baseline", "fixed") if i % 2 == 0 else ("fixed", "baseline")
            for side in order:
                if cold:
                    evictions = evict(files)
                    log(f"run {i + 1}/{repeat} {side} (cold: {len(files)} file(s) evicted)")
                else:
                    prefetch(files, progress=False)
                    log(f"run {i + 1}/{repeat} {side} (warm: {len(files)} file(s) cached)")
                runs.append(_run(command, side, i, "none" if side == "baseline" else strategy, work, device,
                                 cwd, recorder, files))
        notes.extend(sorted({e.note for e in evictions if e.note}))
        dropping = [f for f in files if not cache_survives_open(f)]
        if dropping and strategy != "own-fd":
            notes.append(f"{len(dropping)} file(s) lose their page cache on every open() (a FUSE daemon without "
                         "keep_cache): prefetching cannot help a loader that opens them again; only the own-fd "
                         "loader (safetensors API) can")
        baseline = runs[0] if runs[0].side == "baseline" else runs[1]
        diffs = [compare_manifests(baseline.manifest, r.manifest) for r in runs if r is not baseline]
        diff = next((d for d in diffs if not d.all_identical), diffs[0])
        return Comparison(command, strategy, list(files), runs, evictions, diff, notes, cold)


def _run(command, side, index, strategy, work: Path, device, cwd, recorder, files=()) -> Run:
    stem = f"{side}-{index + 1}"
    manifest_path = work / f"{stem}.jsonl"
    with shim_environment(strategy, manifest_path, device=device, prefetch_files=files) as env:
        if recorder is not None:
            trace = work / f"{stem}.rtrace"
            with _stdout_to(work / f"{stem}.log"):  # the command's output must not mix with ours
                code, wall, summary = recorder(command, env, cwd, trace)
            trace_path = str(trace)
        else:
            code, wall = _run_plain(command, env, cwd, work / f"{stem}.log")
            summary, trace_path = None, None
    manifest = read_manifest(manifest_path)
    if code == 0:
        fill_digests(manifest)  # the baseline's, from the files, now that it has finished
    if code != 0:
        tail = _tail(work / f"{stem}.log")
        raise ReadtraceError(f"{side} run exited with {code}" + (f": {tail}" if tail else ""), ExitStatus.ERROR)
    return Run(side, index, code, max(wall - manifest.digest_s, 0.0), manifest, trace_path, summary)


def _run_plain(command, env, cwd, log_path: Path) -> tuple[int, float]:
    """Run without recording; the command's output goes to ``log_path`` (stdout stays ours)."""
    with open(log_path, "wb") as out:
        started = time.perf_counter()
        try:
            proc = subprocess.run(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise ReadtraceError(f"command not found: {command[0]}", ExitStatus.NOT_FOUND) from None
        return proc.returncode, time.perf_counter() - started


def default_recorder() -> tuple[Recorder | None, str | None]:
    """readtrace's recorder + analyzer when importable and root, else (None, why not)."""
    try:
        from readtrace.record import record_command
    except ImportError:
        return None, "runs not recorded: readtrace.record is not available in this build"
    if os.geteuid() != 0:
        return None, "runs not recorded: recording needs root (eBPF)"

    def record(command, env, cwd, trace: Path):
        result = record_command(command, str(trace), force=True, env=env, cwd=cwd, quiet=True)
        return result.exit_code, result.wall_s, trace_summary(result.trace_path)

    return record, None


def trace_summary(trace_path) -> dict | None:
    """The analyzer's JSON report of one trace: its ``summary`` plus the finding codes."""
    try:
        from readtrace.analyze import analyze
        from readtrace.report import report_json
    except ImportError:
        return None
    from readtrace.trace import load_trace

    report = report_json(analyze(load_trace(trace_path)))
    if isinstance(report, str):
        import json

        report = json.loads(report)
    summary = dict(report.get("summary", {}))
    summary["findings"] = [f.get("code") for f in report.get("findings", [])]
    return summary


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


class _workdir:  # noqa: N801 - a context manager used like a function
    """The given directory (kept), or a temporary one (removed)."""

    def __init__(self, path):
        self.path, self.tmp = path, None

    def __enter__(self) -> Path:
        if self.path is not None:
            Path(self.path).mkdir(parents=True, exist_ok=True)
            return Path(self.path)
        self.tmp = tempfile.TemporaryDirectory(prefix="readtrace-fix-")
        return Path(self.tmp.name)

    def __exit__(self, *exc):
        if self.tmp is not None:
            self.tmp.cleanup()
        return False


SYSTEM_PREFIXES = ("/proc/", "/sys/", "/dev/", "/usr/", "/lib", "/etc/", "/bin/", "/sbin/", "/run/")


def command_from_trace(path: str | os.PathLike) -> tuple[list[str], str | None, list[str]]:
    """(command, cwd, checkpoint files) of a recorded trace: the files it read, less system files."""
    from readtrace.trace import load_trace

    trace = load_trace(path)
    command = trace.meta.get("command")
    if not command:
        raise ReadtraceError(f"{path}: the trace does not record its command; give it: -- CMD", ExitStatus.BAD_TRACE)
    skip = SYSTEM_PREFIXES + tuple({p.rstrip("/") + "/" for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    files = sorted({p for p, size in zip(trace.files["path"], trace.files["size"], strict=True)
                    if isinstance(p, str) and size and size > 0 and not p.startswith(skip)
                    and os.path.isfile(p)})
    return list(command), trace.meta.get("cwd"), files


class _stdout_to:  # noqa: N801 - a context manager used like a function
    """Point file descriptor 1 at a file while a recorder runs a command that inherits it."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        sys.stdout.flush()
        self.saved = os.dup(1)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.close(fd)

    def __exit__(self, *exc):
        sys.stdout.flush()
        os.dup2(self.saved, 1)
        os.close(self.saved)
        return False
