"""Hold prefetched pages in the page cache until the load has used them.

A prefetched page looks cold until the loader touches it: it was filled once and not accessed since.
Proactive reclaim pages such pages out: DAMON's `pageout` schemes (DAMON_RECLAIM, and the scheme this
lab VM runs: paddr regions with <= 1 access for >= 60 s, 128 MiB/s) and memory.reclaim-driven agents
all end in the kernel's reclaim_pages(). On a gcsfuse-like mount every page lost that way comes back
as a small random READ on the loader's handle, each paying a first-byte latency. ``mlock`` of a
read-only shared mapping makes the pages unevictable; the pin is dropped after ``hold_s`` seconds or
at exit, and only when the files fit in half of MemAvailable (RLIMIT_MEMLOCK permitting).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from dataclasses import dataclass, field

DEFAULT_HOLD_S = 300.0
MAX_SHARE_OF_AVAILABLE = 0.5
PAGE = mmap.PAGESIZE

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass
class PinnedFile:
    """A read-only shared mapping of one file whose ranges can be locked in memory."""

    path: str
    size: int
    addr: int | None
    pinned_bytes: int = 0
    error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def map(cls, path: str) -> PinnedFile:
        try:
            size = os.stat(path).st_size
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if size else -1
        except OSError as e:
            return cls(path, 0, None, error=f"open: {e.strerror}")
        if size == 0:
            return cls(path, 0, None)
        try:
            addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        finally:
            os.close(fd)  # the mapping keeps the file open
        if addr in (None, MAP_FAILED):
            return cls(path, size, None, error=f"mmap: {os.strerror(ctypes.get_errno())}")
        return cls(path, size, addr)

    def pin(self, start: int, end: int) -> bool:
        """Lock the pages of [start, end) (already read, so no I/O); False once locking failed."""
        if self.addr is None or self.error:
            return False
        first, last = start // PAGE * PAGE, min(-(-end // PAGE) * PAGE, -(-self.size // PAGE) * PAGE)
        if last <= first:
            return True
        if _libc.mlock(self.addr + first, last - first) != 0:
            self.error = f"mlock: {os.strerror(ctypes.get_errno())}"  # e.g. RLIMIT_MEMLOCK
            return False
        self.pinned_bytes += last - first  # threads own disjoint ranges; a shared edge page counts twice
        return True

    def release(self) -> None:
        """Unlock and unmap (munmap drops the locks); idempotent and safe against a racing timer."""
        with self._lock:
            if self.addr is not None:
                _libc.munmap(self.addr, self.size)
                self.addr = None


class Pins:
    """The mappings of one prefetch call, released together (by ``release`` or a timer)."""

    def __init__(self, files: list[PinnedFile]):
        self.files = files
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    @classmethod
    def for_paths(cls, paths: list[str]) -> Pins:
        return cls([PinnedFile.map(p) for p in paths])

    def get(self, path: str) -> PinnedFile | None:
        return next((f for f in self.files if f.path == path), None)

    @property
    def pinned_bytes(self) -> int:
        return sum(f.pinned_bytes for f in self.files)

    @property
    def errors(self) -> list[str]:
        return [f"{f.path}: {f.error}" for f in self.files if f.error]

    def hold(self, seconds: float) -> None:
        """Release after ``seconds`` (a daemon timer: exiting earlier releases everything anyway)."""
        self._timer = threading.Timer(min(seconds, threading.TIMEOUT_MAX), self.release)
        self._timer.daemon = True
        self._timer.start()

    def release(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            for f in self.files:
                f.release()


def mem_available() -> int | None:
    """What the kernel says memory can still hold (MemAvailable, bytes); None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None


def fits_in_memory(total_bytes: int, share: float = MAX_SHARE_OF_AVAILABLE) -> bool:
    """Whether locking ``total_bytes`` leaves the machine at least (1 - share) of MemAvailable."""
    available = mem_available()
    return available is not None and total_bytes <= available * share
