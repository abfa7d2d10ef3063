"""The object-store cost model: profiles and the per-handle reader (pure, no I/O, no sleeping).

``gcsfuse`` follows gcsfuse internal/gcsx/random_reader.go: a handle holds at most one backend
stream ``[start, limit)``. A read at ``start`` continues it; a small forward skip (< 8 MiB) is read
through and discarded; any other position closes the stream (a *seek*) and opens a new one, which
costs a first-byte latency. After >= 2 seeks with < 8 MiB read per seek on average the handle is
*random* and new streams cover only 1-8 MiB (the average read per seek, rounded up to whole MiB);
otherwise a stream covers up to 200 MiB (``--sequential-read-size-mb``).
``nfs``: no per-handle state, every request is one backend RPC. ``local``: free.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024
MAX_SKIP = 8 * MiB  # gcsfuse maxReadSize: forward skips below this are read through
MIN_RANDOM_RANGE = 1 * MiB  # gcsfuse minReadSize
MAX_RANDOM_RANGE = 8 * MiB
MIN_SEEKS_FOR_RANDOM = 2
SEQUENTIAL_RANGE = 200 * MiB  # gcsfuse default --sequential-read-size-mb


@dataclass(frozen=True)
class Profile:
    """What a file system of this kind costs. ``per_handle``: gcsfuse-like stream per handle."""

    name: str
    per_handle: bool
    has_latency: bool
    async_read: bool  # let the kernel send readahead requests concurrently (FUSE_ASYNC_READ)


PROFILES: dict[str, Profile] = {
    "gcsfuse": Profile("gcsfuse", per_handle=True, has_latency=True, async_read=False),
    "nfs": Profile("nfs", per_handle=False, has_latency=True, async_read=True),
    "local": Profile("local", per_handle=False, has_latency=False, async_read=True),
}


@dataclass(frozen=True)
class Plan:
    """What one FUSE read costs on the backend."""

    new_request: bool  # a backend request/stream starts (pays the first-byte latency)
    seek: bool  # the handle's open stream was discarded because the read was elsewhere
    transfer_bytes: int  # bytes that cross the modelled link (read size + skipped bytes)
    mode: str  # "sequential" or "random" (the handle's read type), "stateless" without handles
    range_end: int  # end of the backend range serving this read (-1 when stateless)


@dataclass(frozen=True)
class ReaderRules:
    """gcsfuse's reader settings; analyze's replay takes them from its thresholds (``--threshold``)."""

    max_skip: int = MAX_SKIP  # forward skips below this are read through
    min_seeks_for_random: int = MIN_SEEKS_FOR_RANDOM
    random_average: int = MAX_SKIP  # random once the average read per seek is below this
    min_random_range: int = MIN_RANDOM_RANGE
    max_random_range: int = MAX_RANDOM_RANGE
    sequential_range: int = SEQUENTIAL_RANGE


class HandleReader:
    """gcsfuse's per-handle random reader, reduced to its bookkeeping. Not thread-safe: the
    caller serialises reads of one handle (gcsfuse holds the handle's lock across a read)."""

    def __init__(self, file_size: int, rules: ReaderRules = ReaderRules()):
        self.file_size = file_size
        self.rules = rules
        self.start = -1  # next offset of the open stream; -1: no stream open
        self.limit = -1  # end of the open stream's range
        self.seeks = 0
        self.total_read = 0
        self.mode = "sequential"

    def plan(self, offset: int, size: int) -> Plan:
        """Advance the state for a read of ``size`` bytes at ``offset`` and return its cost."""
        size = max(0, min(size, self.file_size - offset))
        skipped = 0
        if self.start >= 0 and self.start < offset and offset - self.start < self.rules.max_skip:
            skipped = min(offset, self.limit) - self.start
            self.start += skipped
        seek = False
        if self.start >= 0 and (self.start != offset or offset + size > self.limit):
            seek = self.start != offset  # a stream too short for the read is replaced, not a seek
            self.seeks += seek
            self.start = self.limit = -1
        new_request = self.start < 0 and size > 0
        if new_request:
            self._open_stream(offset)
        range_end = self.limit
        if size > 0:
            self.start = offset + size
            self.total_read += size
            if self.start >= self.limit:
                self.start = self.limit = -1  # gcsfuse closes a stream that reached its limit
        return Plan(new_request, seek, size + skipped, self.mode, range_end)

    def _open_stream(self, offset: int) -> None:
        end = self.file_size
        average = self.total_read // self.seeks if self.seeks else 0
        r = self.rules
        if self.seeks >= r.min_seeks_for_random and average < r.random_average:
            self.mode = "random"
            end = offset + min(max((average // MiB + 1) * MiB, r.min_random_range), r.max_random_range)
        else:
            self.mode = "sequential"
        self.start = offset
        self.limit = min(end, offset + self.rules.sequential_range, self.file_size)


def stateless_plan(offset: int, size: int) -> Plan:
    """An nfs-like request: one backend RPC per read, whoever sends it."""
    return Plan(new_request=size > 0, seek=False, transfer_bytes=size, mode="stateless", range_end=-1)
