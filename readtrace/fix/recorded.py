"""The recorded run as a baseline run of ``fix --compare TRACE`` (issue 23): the trace a user recorded
is one cold run of the unchanged command, so the comparison need not pay for that slow load again.

It counts only where it is a run like the comparison's own: recorded by readtrace's eBPF recorder on
this machine (the comparison's runs are recorded under the same probes), its command the one compared,
run to its end with exit 0, its checkpoint files unchanged since (not modified after the recording
began, by their mtime), and cold: at least COLD_SHARE of the checkpoint bytes it read were fetched (page-cache
misses, or FUSE reads where the mount bypasses the cache). Its tensors were not digested (the user's
run had no shim), so it takes those of a run of the unchanged command made in the comparison (the
floor's warm run, or the comparison's own baseline run): that run, not the recorded one, stands for
the baseline's tensors, and the recorded run has no loader time."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from readtrace.errors import ReadtraceError
from readtrace.fix.runs import Run
from readtrace.inject.manifest import Manifest
from readtrace.trace.views import BACKEND_EBPF

COLD_SHARE = 0.9  # of the checkpoint bytes the recorded load read, at least this much came from storage


@dataclass(frozen=True)
class RecordedRun:
    """A recorded trace that can stand as a cold baseline run (``recorded_run``)."""

    trace_path: str
    wall_s: float
    summary: dict
    cold_share: float
    start_time: str
    made: bool = False  # recorded by the comparison itself, as a user records (fix/session.py record_baseline)

    def as_baseline(self, manifest: Manifest, index: int = 0) -> Run:
        """The baseline Run, with the tensors of ``manifest`` (a run of the unchanged command here)."""
        label = "unchanged (recorded without the shim)" if self.made else "unchanged (the recorded run)"
        return Run("baseline", index, 0, self.wall_s, manifest, self.trace_path, self.summary,
                   label=label, recorded=self.trace_path)

    def describe(self) -> str:
        what = "recorded here as the user would, without the shim" if self.made else "the recorded run"
        return (f"baseline run: {what} ({self.trace_path}, started {self.start_time[:19]}, "
                f"{self.wall_s:.2f} s, cold: {100 * self.cold_share:.0f} % of its checkpoint bytes were fetched)")


def recorded_run(trace_path: str, command: list[str], files: list[str]) -> tuple[RecordedRun | None, str]:
    """(the run, "") when the trace at ``trace_path`` can stand as a cold baseline run of ``command``
    loading ``files``, else (None, why not)."""
    try:
        from readtrace.analyze import analyze
        from readtrace.fix.tracefacts import summary_of
        from readtrace.trace import load_trace

        trace = load_trace(trace_path)
    except (ImportError, ReadtraceError, OSError) as e:
        return None, f"the trace cannot be read here ({e})"
    meta = trace.meta
    why = _unlike(meta, command, files)
    if why:
        return None, why
    analysis = analyze(trace)
    share = cold_share(analysis.files, files)
    if share is None:
        return None, "the recorded run read none of the checkpoint files"
    if share < COLD_SHARE:
        return None, (f"the recorded run was not cold: only {100 * share:.0f} % of the checkpoint bytes it read "
                      "were fetched, the rest came from the page cache")
    return RecordedRun(str(trace_path), float(meta["wall_s"]), summary_of(analysis), share,
                       str(meta.get("start_time") or "")), ""


def _unlike(meta: dict, command: list[str], files: list[str]) -> str:
    """Why the recorded run is not a run like the comparison's ("" when it is)."""
    if meta.get("backend") != BACKEND_EBPF:
        return f"it was not recorded with eBPF ({meta.get('backend')}), the comparison's runs are"
    if meta.get("attached"):
        return "it was attached to a running process, so it does not hold the whole load"
    if meta.get("interrupted") or meta.get("exit_code") != 0:
        return f"the recorded command did not run to its end with exit 0 (exit {meta.get('exit_code')})"
    if list(meta.get("command") or []) != list(command):
        return "the command compared is not the recorded one"
    if meta.get("hostname") != socket.gethostname():
        return f"it was recorded on another machine ({meta.get('hostname')})"
    if not isinstance(meta.get("wall_s"), int | float) or not meta["wall_s"] > 0:
        return "it records no wall time"
    try:
        started = datetime.fromisoformat(str(meta.get("start_time"))).timestamp()
    except ValueError:
        return "it records no start time"
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            return f"{path} cannot be read now"
        if st.st_mtime > started:
            return f"{os.path.basename(path)} was modified after the recording"
    return ""


def cold_share(files_table, checkpoint: list[str]) -> float | None:
    """Of the checkpoint bytes the load read (each file at most its size), the share fetched from storage:
    page-cache misses, or FUSE reads where those exceed them (a mount that bypasses the cache). None
    when it read none of them. ``files_table``: an Analysis's files."""
    rows = files_table[files_table["path"].isin(set(checkpoint))]
    if not len(rows):
        return None
    def column(name):
        return rows[name].fillna(0).to_numpy(dtype=np.float64).clip(min=0)

    size, read = column("size"), column("bytes_read")
    read = np.where(size > 0, np.minimum(read, size), read)
    fetched = np.minimum(np.maximum(column("cache_miss_unique_bytes"), column("fuse_read_bytes")), read)
    total = float(read.sum())
    return None if total <= 0 else float(fetched.sum()) / total
