"""The finding types: data only (numbers, names, evidence rows). Prose is rendered in readtrace/report/.

``Finding`` holds what every finding has; one subclass per code adds that code's figures. Every field
is a plain JSON value (``dataclasses.asdict`` is the JSON form), so a CI job can gate on ``score``,
``wait_s`` or ``predicted_fixed_s`` without parsing text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

SEVERITIES = ("high", "warn", "info")


@dataclass
class Finding:
    """Common fields. ``wait_s``/``predicted_s``/``predicted_fixed_s`` are filled in after the rules ran
    (time split, what-if model) where the trace allows it; None means unknown."""

    CODE: ClassVar[str] = ""
    severity: str  # "high" | "warn" | "info"
    file: str | None = None  # the file the finding is about (its path)
    fstype: str = ""
    fs_family: str = ""  # the knowledge table's name for the file system
    fs_levers: str = ""  # the file system's own knobs (from the knowledge table)
    fs_known: bool = True  # False: the table does not know this file system; the judgement is generic
    wait_s: float | None = None  # time the load waited on this file (reads, faults, FUSE replies)
    # What it cost (analyze/rules/cost.py): the file's share of the load's wait less ``floor_s`` (one sequential
    # read of the same bytes on that mount, ``floor_model`` names the model; None: no model knows it),
    # charged to the finding that causes it (``role`` "cause"); the others on that file say how it shows
    # (``role`` "mechanism" or "precondition", ``cause`` its code, ``cost_s`` 0). The costs of all
    # findings add up to at most the wall. None: not known (no wall or no waits in the trace).
    cost_s: float | None = None
    cost_fraction: float | None = None  # of the wall
    floor_s: float | None = None
    floor_model: str = ""
    role: str = "cause"
    cause: str = ""
    predicted_s: float | None = None  # what-if model: this load on this mount, as recorded
    predicted_fixed_s: float | None = None  # ... and with the fix applied
    evidence: list[dict] = field(default_factory=list)  # structured rows (their keys: per code)
    inferred: bool = False  # rests on a view that was inferred, not seen (see ``basis``)
    basis: str = ""  # the view the finding rests on and how it was obtained (trace/views.py)
    # the loader's own levers for this file in this program, checked against the installed version
    # (python_calls view, analyze/views/attribution.py): {"call", "keyword", "change", "library", "version"}
    library_levers: list[dict] = field(default_factory=list)
    # levers the mount's measured profile (readtrace probe) says cannot gain here: {"lever", "because"}
    not_expected: list[dict] = field(default_factory=list)
    # levers the what-if model predicts to gain on this mount, each with the whole load's predicted time
    # (analyze/storage/levers.py): {"lever", "predicted_s", "load_s" (its wall as recorded), "basis", "apply"
    # (how to get it where readtrace applies it, else None)}
    lever_predictions: list[dict] = field(default_factory=list)

    @property
    def code(self) -> str:
        return self.CODE

    def data(self) -> dict:
        """Every figure as plain data, ``code`` first."""
        return {"code": self.code, **asdict(self)}


@dataclass
class SharedFdInterleave(Finding):
    """Several tasks read one file through one open file / FUSE handle / mapping, taking turns.
    Evidence rows: ``{"tid", "inode", "handle", "offset", "bytes"}`` where the tasks first take turns.
    ``task_rows``: each task's own figures in the shared stream."""

    CODE: ClassVar[str] = "SHARED_FD_INTERLEAVE"
    view: str = "ofd"  # "fuse_handle" (the daemon's view) | "ofd" (the app's open file) | "residency"
    # ("residency": fronts inferred from page-cache residency samples; ``tasks`` counts fronts and
    # ``task_rows`` holds one row per front: front, first_offset, last_end, bytes, sequential_fraction)
    mapping: bool = False  # the shared "open file" is one mmap mapping faulted by several tasks
    per_handle: bool = False  # the file system keeps read-ahead state per handle: the pattern costs
    tasks: int = 0
    min_task_consecutive_fraction: float = 0.0
    consecutive_fraction: float = 0.0
    out_of_order_fraction: float = 0.0  # of bytes
    score: float = 0.0
    inode: int = 0
    handle: int = 0
    predicted_requests: int | None = None  # gcsfuse replay of the recorded stream
    sequential_requests: int | None = None  # ... of one sequential reader
    task_rows: list[dict] = field(default_factory=list)


@dataclass
class RandomOnFuseHandle(Finding):
    """A per-handle file system's handle (or open file) read mostly after seeks."""

    CODE: ClassVar[str] = "RANDOM_ON_FUSE_HANDLE"
    view: str = "fuse_handle"
    stream: str = ""  # the stream's label ("handle 3", "ofd 0x...")
    handle: int | None = None
    seek_fraction: float = 0.0
    bytes: int = 0
    seeks: int = 0
    random_after: int = 0  # gcsfuse replay: the read that turned the reader random (0: never)
    jumps: int = 0  # FUSE requests that did not continue the handle's previous one (views/jumps.py)
    jump_wait_s: float = 0.0  # what they waited beyond the handle's median continuing request, measured
    read_type: str = ""  # gcsfuse replay's final reader type
    predicted_requests: int = 0
    sequential_requests: int = 0
    top_strides: list = field(default_factory=list)  # [[gap, count], ...]
    top_sizes: list = field(default_factory=list)  # [[bytes, count], ...]


@dataclass
class SmallRequests(Finding):
    CODE: ClassVar[str] = "SMALL_REQUESTS"
    remote: bool = False
    small: int = 0  # reads under ``small_bytes``
    reads: int = 0
    small_bytes: int = 0
    median_bytes: float = 0.0
    size_hist: dict = field(default_factory=dict)
    top_sizes: list = field(default_factory=list)


@dataclass
class MmapFaultStorm(Finding):
    CODE: ClassVar[str] = "MMAP_FAULT_STORM"
    remote: bool = False
    faults: int = 0
    tasks: int = 0
    mmap_bytes: int = 0
    read_bytes: int = 0
    cache_miss_fraction: float | None = None
    readahead_windows: int = 0


@dataclass
class ColdCache(Finding):
    """Evidence rows: ``{"path", "miss_bytes", "bytes_read"}`` (the coldest files)."""

    CODE: ClassVar[str] = "COLD_CACHE"
    files: int = 0
    miss_bytes: int = 0
    bytes_read: int = 0
    miss_fraction: float = 0.0


@dataclass
class CacheEvictedReread(Finding):
    CODE: ClassVar[str] = "CACHE_EVICTED_REREAD"
    refetched_bytes: int = 0
    miss_bytes: int = 0
    miss_unique_bytes: int = 0
    reread_amplification: float | None = None
    fuse: bool = False  # the FUSE daemon may have dropped the cache on open
    evicted_by: str = ""  # what reclaimed page cache during the run (pagecache/reclaim.py CAUSES; "": unknown)
    eviction: str = ""  # the sentence that says so, from the trace's counters


@dataclass
class SmallFuseReadahead(Finding):
    CODE: ClassVar[str] = "SMALL_FUSE_READAHEAD"
    requests: int = 0
    median_bytes: float = 0.0
    bytes: int = 0
    connection: int = 0
    recommended_kb: int = 0


@dataclass
class LostEvents(Finding):
    CODE: ClassVar[str] = "LOST_EVENTS"
    lost: int = 0
    detail: dict | None = None  # lost per source, where the recorder said


@dataclass
class ReplicatedReads(Finding):
    """Several nodes (traces) fetched the same file's bytes from a remote / FUSE mount.
    Evidence rows: ``{"trace", "host", "bytes"}`` per node."""

    CODE: ClassVar[str] = "REPLICATED_READS"
    nodes: int = 0
    file_bytes: int = 0  # the file's size (or the bytes one node read, where the size is unknown)
    aggregate_bytes: int = 0  # what all nodes fetched together
    replication: float = 0.0  # aggregate_bytes / file_bytes
    saved_bytes: int = 0  # fetched once for the job (span- or rank-split prefetch shared by the nodes)


@dataclass
class LoadSkew(Finding):
    """Stragglers: one node (or rank) took much longer to load than the median.
    Evidence rows: ``{"name", "load_s"}`` for every node or rank, slowest first."""

    CODE: ClassVar[str] = "LOAD_SKEW"
    scope: str = "node"  # "node" | "rank"
    slowest: str = ""
    slowest_s: float = 0.0
    median_s: float = 0.0
    skew: float = 0.0  # slowest_s / median_s


FINDING_TYPES: tuple[type[Finding], ...] = (
    SharedFdInterleave, RandomOnFuseHandle, SmallRequests, MmapFaultStorm, ColdCache, CacheEvictedReread,
    SmallFuseReadahead, LostEvents, ReplicatedReads, LoadSkew)
