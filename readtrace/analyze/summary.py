"""The typed summary of one trace (``Analysis.summary``): data only, beside the typed findings.

``Summary`` holds the load's totals; the time split (``TimeSplit``, analyze/views/timesplit.py) and the
what-if model's fixed prediction on the trace's own mount (``MountPrediction``, analyze/storage/whatif.py)
are fields of it. ``data()`` is its one JSON form, read by ``readtrace report --json`` ("summary") and
by ``fix``'s run records (``fix/compare.py`` ``trace_summary``): the keys flat, in field order, the
prediction's only where there is one. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar


def _fields(obj) -> dict:
    """A dataclass's fields by name, in order, values as they are (no copies)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


@dataclass
class TimeSplit:
    """Where the load's time went, from the scheduler view or the syscall and FUSE latencies."""

    time_split_source: str  # "sched" (scheduler view) | "syscalls" (read and FUSE latencies)
    io_wait_s: float  # wall seconds some task waited on file I/O (union over the tasks)
    io_wait_fraction: float | None  # of the wall (None: no wall)
    read_wait_s: float  # ... of it in read calls
    fault_wait_s: float  # ... in page faults
    fuse_wait_s: float  # ... on files of a FUSE mount
    data_wait_s: float  # ... on data files (not code or libraries): what the what-if model replaces
    io_wait_task_s: float  # thread-seconds: tasks waiting at once count each
    cpu_s: float | None  # thread-seconds on a CPU (None: no scheduler view)
    runq_s: float | None  # thread-seconds waiting for a CPU (None: no scheduler view)
    wait_file: str | None  # the file the load waited on longest (its path)
    wait_file_s: float  # wall seconds waited on it
    wait_file_fuse: bool  # it is on a FUSE mount
    wait_file_faults: bool  # most of its waits were page faults
    wait_tasks: int  # tasks that waited on it more than 1 % of its wait
    besides_hidden_s: float  # the slowest task's own time the union of the data waits covers (several
    # tasks reading: analyze/views/criticalpath.py); a load with no data wait still takes wall - data_wait_s + this


@dataclass
class MountPrediction:
    """The what-if model on the trace's own mount, the fixed pattern only."""

    mount_profile: str  # the storage profile's name (analyze/storage/whatif.py)
    mount_latency_ms: float  # its first-byte latency
    mount_request_ms: float  # its time per request of a stream already open
    predicted_fixed_s: float | None  # the load's wall fixed, predicted (None: no wall)
    fixed_strategy: str  # the fix it predicts: "prefetch" | "own-fd" | "sequential"
    mount_latency_recorded: bool = False  # that first byte measured from the load's own FUSE requests


@dataclass
class Summary:
    """One trace's totals. None means unknown (the view was not recorded), never zero."""

    complete: bool  # the trace holds the whole load (trace/completeness.py)
    incomplete_reasons: list[str]  # why not
    bytes_read: int  # read() bytes plus mapped bytes the load touched, over the files listed
    read_bytes: int  # ... through read calls
    mmap_bytes: int  # ... through page faults on mappings
    reads: int  # read calls
    page_faults: int  # page faults on file mappings
    files: int  # files listed (readtrace's own left out)
    readtrace_files_dropped: int  # readtrace's own logs and state, not the load's
    tasks: int  # threads that read
    processes: int  # processes that read
    cache_miss_bytes: int | None  # bytes fetched from storage into the page cache (None: no page-cache view)
    cache_refetched_bytes: int | None  # ... of them fetched again after eviction
    cache_miss_fraction: float | None  # cache misses of the bytes read, at most 1
    fuse_requests: int  # FUSE requests of every opcode
    fuse_read_requests: int  # FUSE READ requests
    fuse_read_bytes: int  # bytes the FUSE handles read
    handle_consecutive_fraction: float | None  # byte-weighted over the FUSE handles (None: no FUSE reads)
    handle_sequential_fraction: float | None  # ... sequential
    gcsfuse_predicted_requests: int | None  # GCS requests the gcsfuse replay predicts for the handles
    lost_events: int  # events the recorder counted as lost
    wall_s: float | None  # the load's wall time (None: a log without times)
    command: list[str] | None  # the recorded command
    exit_code: int | None  # its exit code
    backend: str  # how it was recorded (trace/views.py)
    missing_views: list[str]  # views the recording lacks
    not_seen: list[str]  # what could not be seen, and what that means
    container: dict  # ids and paths of another PID / mount namespace (analyze/views/namespaces.py)
    reads_from: dict | None  # the loader call that read most (analyze/views/attribution.py; None: no view)
    time: TimeSplit  # where the time went
    measured_mount: dict | None = None  # the checkpoint mount's measured profile (None: the prior only)
    replicated_rank_bytes: int = 0  # bytes more than one rank of a distributed job read
    prediction: MountPrediction | None = None  # the fix predicted on this mount (None: no model or no wall)
    FLAT: ClassVar[tuple[str, ...]] = ("time", "prediction")  # data(): their fields in their place

    def data(self) -> dict:
        """Every figure by name, in field order, the time split's and the prediction's flat in place
        (``report --json``'s "summary" keys; ``jsonreport.plain`` makes the values JSON)."""
        out: dict = {}
        for name, value in _fields(self).items():
            if name not in self.FLAT:
                out[name] = value
            elif value is not None:
                out.update(_fields(value))
        return out

