"""What `fix --compare --strategy auto` tries, and the floor it measures the baseline against.

The candidates: readtrace's own strategies that can act on what the discovery run saw (own-fd for
loads through safetensors or torch.load; prefetch where the mount keeps the page cache across
opens; populate through the loader's own open file where the script maps a checkpoint with Python's
mmap: a raw mmap, numpy.memmap, GGUFReader), and the one-line levers of the detected loaders
(``readtrace.fix.levers``). The floor: a cold sequential read of the same bytes on the same mount
(``dd bs=16M``) plus the same command warm. A baseline within noise (3 %) of it is left alone untried;
otherwise every candidate is measured, and a load left alone is called "not slow" only within
``SLOW_MARGIN`` + ``SLOW_ABS_S`` of it (fix/verdict.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from readtrace.fix.levers import NO_FORKED_SHARING, levers_for
from readtrace.loader.fileio import MiB, open_fd
from readtrace.pagecache.prefetch import prefetch
from readtrace.rerun.protocol import OWN_FD_PER_FORK, POPULATE
from readtrace.rerun.records import FORKED_SHARED, MAPPED

ROUTED_CALLS = ("load_file", "safe_open", "torch.load")
SLOW_MARGIN = 1.10  # a load left alone within 10 % (and SLOW_ABS_S) of its floor is called "not slow"
SLOW_ABS_S = 1.0
NO_HARM = 0.97  # a side beats the other only when its slowest run is >= 3 % faster than the other's fastest


def confirmed(candidate_s: Sequence[float], baseline_s: Sequence[float], margin: float = NO_HARM) -> bool:
    """The spread rule: EVERY run of the candidate at least 3 % (``margin``) faster than EVERY baseline run
    (the two ranges do not overlap). One lucky run among several candidates' is how a no-op looks like a
    gain on a busy machine; a baseline median over two runs can carry one outlier (7.30 s and 3.65 s)."""
    return bool(candidate_s) and bool(baseline_s) and max(candidate_s) <= margin * min(baseline_s)


@dataclass(frozen=True)
class Candidate:
    label: str  # "readtrace prefetch", "lever safetensors-pread"
    strategy: str  # the shim's READTRACE_FIX for the rerun
    change: str  # the one-line change a user makes to get it
    settings: dict = field(default_factory=dict)  # protocol.Rerun fields for the rerun (lever=...)
    env: dict = field(default_factory=dict)  # plain environment variables (OMP_NUM_THREADS=1)


LEAVE_ALONE = Candidate("left alone", "none", "nothing: the command ran unchanged")
OWN = {
    "prefetch": "readtrace fix --strategy prefetch -- CMD (or r = readtrace.pagecache.prefetch.prefetch(files, pin=True) "
                "before loading, r.pins.release() after: as measured, the pages held in memory until loaded)",
    "own-fd": "readtrace fix --strategy own-fd -- CMD (or from readtrace.loader.loader import load_file)",
    "both": "readtrace fix --strategy both -- CMD",
    OWN_FD_PER_FORK: "open the checkpoint in each worker, after the fork, not before "
                     "(or readtrace fix --strategy own-fd-per-fork -- CMD)",
    POPULATE: "before mmap() (or the first read after open()), read the file front to back on the same fd, in 2 MiB "
              "os.preadv calls into one reused buffer, so that the threads fault on a warm page cache "
              "(or readtrace fix --strategy populate -- CMD)",
}
READ_IN_PYTHON = "dcp.load"  # a loader that reads its checkpoint through Python's open (the shim records it)


def candidates(seen: set[str], keeps_cache: bool, reader_threads: int | None = None
               ) -> tuple[list[Candidate], list[str]]:
    """(candidates to try, notes on what cannot be tried) for a load that used ``seen``.

    Where the mount keeps the page cache, the prefetch runs in the background while the script
    starts (its loads wait for it) when every load the script makes is one the shim sees; where the
    mount drops it on every open, ``prefetch`` populates the loader's own mapping after its open.
    ``reader_threads``: the own-fd loader's readers (each its own fd and range) where the mount
    measured several streams faster than one (session.reader_streams).
    """
    routed = any(c in ROUTED_CALLS for c in seen)
    forked = FORKED_SHARED in seen  # forked workers read through their parent's open file description
    hooked = any(c in ROUTED_CALLS or c.startswith("pattern:") for c in seen) and "load" not in seen
    notes, found = [], []
    if MAPPED in seen or READ_IN_PYTHON in seen:  # read ahead through the loader's own open file: kept on any mount
        found.append(Candidate("readtrace populate", POPULATE, OWN[POPULATE]))
    if forked:  # each worker reopens it after the fork (readtrace.inject.forkfd): one handle per worker
        found.append(Candidate("readtrace own fd per forked worker", OWN_FD_PER_FORK, OWN[OWN_FD_PER_FORK]))
    threads = {"threads": reader_threads} if reader_threads else {}
    if routed:
        found.append(Candidate("readtrace own-fd", "own-fd", own_fd_change(reader_threads), threads))
    background = {"prefetch_background": True} if hooked else {}
    if keeps_cache:
        found.append(Candidate("readtrace prefetch", "prefetch", OWN["prefetch"], background))
        if routed:
            found.append(Candidate("readtrace both", "both", OWN["both"], {**background, **threads}))
    elif routed:
        found.append(Candidate("readtrace populate after open", "prefetch", OWN["prefetch"]))
        notes.append("this mount drops the page cache on every open(): instead of a prefetch before the loader "
                     "opens the file, its own mapping is populated front to back right after its open")
    else:
        notes.append("this mount drops the page cache on every open(): a prefetch before the loader opens the "
                     "file is wasted, so it is not tried; the loader is not one readtrace can route")
    if not routed and not forked and MAPPED not in seen and READ_IN_PYTHON not in seen:
        notes.append("nothing the script loads goes through safetensors or torch.load: only the prefetch can act"
                     if keeps_cache else "nothing the script loads can be routed")
        notes.append(NO_FORKED_SHARING)
    found += [Candidate(f"lever {lv.name}", "none", lv.change, lv.settings(), lv.env) for lv in levers_for(seen)]
    return found, notes


def own_fd_change(threads: int | None) -> str:
    """The own-fd loader's one-line change, with its readers where there are several."""
    if not threads:
        return OWN["own-fd"]
    return (f"readtrace fix --strategy own-fd --threads {threads} -- CMD (or from readtrace.loader.loader "
            f"import load_file; load_file(path, threads={threads}))")


@dataclass(frozen=True)
class Floor:
    """What the load cannot beat here: a cold sequential read of its bytes + the same command warm."""

    bytes: int
    read_s: float
    warm_s: float
    streams: int = 1  # own-fd streams the read took: the mount's probed N where those measured faster
    local_copy: bool = False  # the warm run read a local copy of the files (the mount drops the page cache)
    warm_recorded: bool = False  # warm_s is the recorded run's time besides its waits on the files: no warm run

    @classmethod
    def from_recorded(cls, size: int, read_s: float, streams: int, summary: dict) -> Floor | None:
        """The floor with the recorded run's own time for the warm load: its wall less its waits on the
        checkpoint, plus the own time those waits covered where several tasks read (what the what-if
        model carries into its fixed prediction); None where the trace split no waits."""
        wall, waited = summary.get("wall_s"), summary.get("data_wait_s")
        if wall is None or waited is None or summary.get("time_split_source") is None:
            return None
        warm = max(float(wall) - float(waited) + float(summary.get("besides_hidden_s") or 0.0), 0.0)
        return cls(size, read_s, warm, streams, warm_recorded=True)

    @property
    def read_how(self) -> str:
        return ("a sequential read of the same bytes" if self.streams == 1
                else f"the same bytes read in order by {self.streams} own-fd streams")

    @property
    def warm_how(self) -> str:
        if self.warm_recorded:
            return "the recorded run's own time besides its waits on the checkpoint"
        return "the same load warm from a local copy" if self.local_copy else "the same load warm"

    @property
    def warm_from(self) -> str:
        return "recorded run" if self.warm_recorded else "local copy" if self.local_copy else "page cache"

    @property
    def total_s(self) -> float:
        return self.read_s + self.warm_s

    def nothing_to_gain(self, baseline_s: float) -> bool:
        """Within noise (3 %) of the floor: no candidate is worth measuring."""
        return NO_HARM * baseline_s <= self.total_s

    def not_slow(self, baseline_s: float) -> bool:
        """Close enough to the floor to call a load left alone "not slow"."""
        return within_band(baseline_s, self.total_s)


def within_band(baseline_s: float, of_s: float) -> bool:
    """``baseline_s`` within the not-slow band of ``of_s`` (10 % + 1 s over it)."""
    return baseline_s <= SLOW_MARGIN * of_s + SLOW_ABS_S


def sequential_read_s(files: Sequence[str], chunk_bytes: int = 16 * MiB, streams: int = 1) -> tuple[int, float]:
    """(bytes, seconds) of reading ``files`` front to back on one fd each in 16 MiB reads (dd bs=16M), or
    with ``streams`` > 1 as readtrace's own-fd loader reads on a mount where N streams measured faster
    (the prefetch's N contiguous shares, each on a fadvised fd of its own): the floor a fix can reach
    there (sshfs at 20 ms: 64 MiB in 0.95 s by 4 own-fd readers, 2.95-5.7 s by one). The caller makes
    them cold first."""
    if streams > 1:
        read = prefetch(files, chunk_bytes=chunk_bytes, threads=streams, progress=False, distributed=False)
        return read.bytes_read, read.seconds
    buf = memoryview(bytearray(chunk_bytes))
    total = 0
    started = time.perf_counter()
    for path in files:
        with open_fd(path) as fd:
            while n := os.readv(fd, [buf]):
                total += n
    return total, time.perf_counter() - started
