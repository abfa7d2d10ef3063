"""One rerun of the command for ``fix --compare``: the shim's environment around it, recorded (the
recorder) or plain, its output kept in the work directory, its manifest read back (digests filled)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from readtrace.errors import NoEvidenceError, ReadtraceError
from readtrace.fix import child, stop
from readtrace.inject.manifest import Manifest, fill_digests, read_manifest
from readtrace.replace import new_file, no_follow
from readtrace.rerun.environment import shim_environment

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
    recorded: str = ""  # the user's recorded trace, standing as this run (fix/recorded.py): its manifest is another's

    @property
    def loader_s(self) -> float | None:
        """Seconds inside loader calls; None for the recorded run (no shim timed them)."""
        return None if self.recorded else self.manifest.loader_s


def must_succeed(run: Run) -> None:
    if run.exit_code != 0:
        raise ReadtraceError(f"{run.side} run exited with {run.exit_code}" + (f": {run.log}" if run.log else ""))


def run_command(command, side, index, strategy, work: Path, device, cwd, recorder, files=(), candidate=None,
         stem=None, limit_s: float | None = None, binds=None) -> Run:
    """One rerun with the shim (``candidate``: its protocol settings and plain environment), stopped
    after ``limit_s`` seconds (fix/stop.py; ``Run.stopped`` says so). ``binds``: an unrecorded run that
    sees each file as its local copy (fix/localcopy.py)."""
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
            code, wall = _run_plain(command, env, cwd, work / f"{stem}.log", binds)
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


def record_unchanged(command, work: Path, cwd, recorder: Recorder, stem: str) -> tuple[int, str]:
    """Record the unchanged command as a user does (``readtrace record``: no shim), its output kept in the
    work directory: (exit code, trace path)."""
    trace = work / f"{stem}.rtrace"
    with _stdout_to(work / f"{stem}.log"):
        code, _, _ = recorder(command, dict(os.environ), cwd, trace)
    _check_work(work, "recorded baseline run")
    return code, str(trace)


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


def _run_plain(command, env, cwd, log_path: Path, binds=None) -> tuple[int, float]:
    """Run without recording; the command's output goes to ``log_path`` (stdout stays ours)."""
    with os.fdopen(new_file(log_path), "wb") as out:
        started = time.perf_counter()
        code = child.run(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         binds=binds)
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


def _tail(path: Path, lines: int = 3) -> str:
    try:
        with open(path, errors="replace", opener=no_follow) as f:
            text = f.read().strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


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
