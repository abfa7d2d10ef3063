"""The page view without privileges: when each range of each file the command read or mapped became
resident in the page cache, sampled every few milliseconds.

Files are found by following strace's output as it is written (opens and mmaps with their fd path).
Each file is watched through ONE fd for the whole run, preferably the command's own open file
description taken with pidfd_getfd(2): no second open(), which on rclone/sshfs would drop the cached
pages being watched. Where the command closed the fd already, the file is opened once.

Rows (schema.PAGES, pid/tid 0: residency has no thread): ``resident_start`` what was cached when
the file was first sampled, ``resident`` a run of pages that became cached between two samples (at
the later one's time), ``evicted`` a run that left the cache.
"""

from __future__ import annotations

import ctypes
import os
import re
import stat
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from readtrace.fs.mounts import kernel_dev
from readtrace.pagecache.residency import PAGE, ResidencyMap

_PIDFD_GETFD = 438  # x86_64 and aarch64 (asm-generic)
_libc = ctypes.CDLL(None, use_errno=True)
_OPENED = re.compile(r"^(\d+) +[\d.]+ (?:open|openat|openat2)\(.*= (\d+)<(/[^>]*)>")
_MAPPED = re.compile(r"^(\d+) +[\d.]+ mmap\(.*, (\d+)<(/[^>]*)>, \w+\) = 0x")
_RESUMED_OPEN = re.compile(r"^(\d+) +[\d.]+ <\.\.\. (?:open|openat|openat2) resumed>.*= (\d+)<(/[^>]*)>")
SKIP_PREFIXES = ("/proc/", "/sys/", "/dev/", "/usr/", "/lib", "/etc/", "/run/")
_LIBRARY = re.compile(r"\.so(\.\d+)*$|\.pyc$|\.py$")
MIN_WATCH_BYTES = 1 << 20  # smaller files: sampled when found and at the end, not every interval


@dataclass
class _Watched:
    path: str
    dev: int
    ino: int
    map: ResidencyMap
    continuous: bool


@dataclass
class SamplerStats:
    samples: int = 0
    sample_s: float = 0.0  # time spent sampling (the sampler's own cost)
    files: int = 0
    own_fd: int = 0  # files watched through the command's own open file (pidfd_getfd)
    reopened: int = 0  # files the sampler had to open itself
    failed: int = 0
    max_gap_s: float = 0.0  # longest time between two samples
    reopened_paths: list[str] = field(default_factory=list)  # first few: on sshfs/rclone that open drops the cache
    unmeasurable: list[str] = field(default_factory=list)  # not ours, >= 1 MiB: mincore/cachestat would not tell
    unmeasurable_count: int = 0


def _tgid(tid: int) -> int:
    try:
        for line in open(f"/proc/{tid}/status"):  # noqa: SIM115 - read to the Tgid line
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return tid


def _their_fd(tid: int, fd: int) -> int | None:
    """A duplicate of the command's own fd (the same open file description), or None."""
    try:
        pidfd = os.pidfd_open(_tgid(tid))
    except OSError:
        return None
    try:
        got = _libc.syscall(_PIDFD_GETFD, pidfd, fd, 0)
        return got if got >= 0 else None
    finally:
        os.close(pidfd)


def can_measure(path: str, st: os.stat_result) -> bool:
    """Whether mincore/cachestat tell this process the truth about ``path``: the kernel answers only
    for files the caller owns or may write (can_do_mincore, since the 2019 page-cache side-channel
    fix): for other files mincore reports every page resident and cachestat refuses."""
    return os.geteuid() == 0 or st.st_uid == os.geteuid() or os.access(path, os.W_OK)


def _runs(pages: np.ndarray) -> list[tuple[int, int]]:
    """(first page, count) of each run of consecutive page numbers (sorted input)."""
    if len(pages) == 0:
        return []
    breaks = np.flatnonzero(np.diff(pages) != 1) + 1
    starts = np.r_[0, breaks]
    ends = np.r_[breaks, len(pages)]
    return [(int(pages[s]), int(e - s)) for s, e in zip(starts, ends, strict=True)]


class ResidencySampler(threading.Thread):
    """Follows ``strace_output`` and samples the files it names every ``interval_s`` until ``stop()``."""

    def __init__(self, strace_output: str, interval_s: float = 0.005, clock=time.monotonic_ns):
        super().__init__(name="readtrace-residency", daemon=True)
        self.output_path = strace_output
        self.interval_s = interval_s
        self.clock = clock
        self.stats = SamplerStats()
        self.rows: dict[str, list] = {c: [] for c in ("ts_ns", "op", "dev", "ino", "path", "offset", "size")}
        self._watched: dict[str, _Watched] = {}
        self._seen: set[str] = set()
        self._halt = threading.Event()
        self._tail = b""
        self._pos = 0
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def run(self) -> None:
        try:
            last = time.monotonic()
            while not self._halt.is_set():
                self._discover()
                self._sample_all(continuous_only=True)
                now = time.monotonic()
                self.stats.max_gap_s = max(self.stats.max_gap_s, now - last)
                last = now
                self._halt.wait(self.interval_s)
            self._discover()
            self._sample_all(continuous_only=False)
        except BaseException as e:  # reported by the recorder, never lost silently
            self.error = e
        finally:
            for w in self._watched.values():
                w.map.close()

    # -- discovery --------------------------------------------------------------------------------
    def _discover(self) -> None:
        try:
            with open(self.output_path, "rb") as f:
                f.seek(self._pos)
                data = f.read()
        except FileNotFoundError:
            return
        if not data:
            return
        self._pos += len(data)
        data = self._tail + data
        lines = data.split(b"\n")
        self._tail = lines.pop()
        for raw in lines:
            if b"open" not in raw and b"mmap(" not in raw:
                continue
            line = raw.decode(errors="replace")
            m = _OPENED.match(line) or _MAPPED.match(line) or _RESUMED_OPEN.match(line)
            if m:
                self._watch(int(m.group(1)), int(m.group(2)), m.group(3))

    def _watch(self, tid: int, fd: int, path: str) -> None:
        if path in self._seen:
            return
        self._seen.add(path)
        if path.startswith(SKIP_PREFIXES) or _LIBRARY.search(path):
            return
        try:
            st = os.stat(path)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return
        if not can_measure(path, st):
            self.stats.unmeasurable_count += 1
            if len(self.stats.unmeasurable) < 10 and st.st_size >= MIN_WATCH_BYTES:  # the ones that matter
                self.stats.unmeasurable.append(path)
            return
        own = _their_fd(tid, fd)
        if own is not None:
            mine = os.fstat(own)
            if (mine.st_dev, mine.st_ino) != (st.st_dev, st.st_ino):
                os.close(own)
                own = None
        try:
            fd_used = own if own is not None else os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            rmap = ResidencyMap(fd_used)
        except OSError:
            self.stats.failed += 1
            return
        self.stats.files += 1
        if own is not None:
            self.stats.own_fd += 1
        else:
            self.stats.reopened += 1
            if len(self.stats.reopened_paths) < 10:
                self.stats.reopened_paths.append(path)
        w = _Watched(path, kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino, rmap,
                     st.st_size >= MIN_WATCH_BYTES)
        self._watched[path] = w
        self._sample(w, first=True)

    # -- sampling ---------------------------------------------------------------------------------
    def _sample_all(self, continuous_only: bool) -> None:
        for w in self._watched.values():
            if w.continuous or not continuous_only:
                self._sample(w)

    def _sample(self, w: _Watched, first: bool = False) -> None:
        t = time.perf_counter()
        changed = w.map.sample()
        ts = self.clock()
        for first_page, before in changed:
            after = w.map.resident[first_page:first_page + len(before)]
            if first:
                self._emit(ts, "resident_start", w, first_page + np.flatnonzero(after))
                continue
            self._emit(ts, "resident", w, first_page + np.flatnonzero(after & ~before & 1))
            self._emit(ts, "evicted", w, first_page + np.flatnonzero(before & ~after & 1))
        self.stats.samples += 1
        self.stats.sample_s += time.perf_counter() - t

    def _emit(self, ts: int, op: str, w: _Watched, pages: np.ndarray) -> None:
        r = self.rows
        for start, count in _runs(pages):
            r["ts_ns"].append(ts)
            r["op"].append(op)
            r["dev"].append(w.dev)
            r["ino"].append(w.ino)
            r["path"].append(w.path)
            r["offset"].append(start * PAGE)
            r["size"].append(min(count * PAGE, w.map.size - start * PAGE))

    def pages_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows).assign(pid=0, tid=0, count=1)
