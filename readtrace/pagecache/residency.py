"""How much of a file is in the page cache: cachestat(2) (Linux 6.5+), else mincore(2) on a mapping.

Both open the file. On a FUSE mount whose daemon does not ask to keep the cache (rclone, sshfs), that
open() itself drops the file's pages: there, what is measured is what a fresh open would see.
"""

from __future__ import annotations

import ctypes
import mmap
import os

from readtrace.loader.fileio import CACHESTAT_NR as _CACHESTAT
from readtrace.loader.fileio import CachestatRange as _Range
from readtrace.loader.fileio import CachestatResult as _Cachestat
from readtrace.loader.fileio import cachestat as _cachestat
from readtrace.loader.fileio import map_readonly, open_fd, unmap

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def cached_pages(path: str | os.PathLike) -> tuple[int, int]:
    """(pages in the page cache, pages in the file) for ``path``."""
    with open_fd(path, sequential=False) as fd:
        return _pages(fd)


def all_cached(fd: int) -> bool:
    """Whether every page of ``fd``'s file is in the page cache (a read of it fetches nothing)."""
    cached, total = _pages(fd)
    return total > 0 and cached >= total


def _pages(fd: int) -> tuple[int, int]:
    """(pages in the page cache, pages in the file) for an open file."""
    size = os.fstat(fd).st_size
    total = -(-size // PAGE)
    return (_count(fd, size), total) if total else (0, 0)


def resident_fraction(path: str | os.PathLike) -> float:
    """Fraction of the file's pages in the page cache (1.0 for an empty file)."""
    cached, total = cached_pages(path)
    return cached / total if total else 1.0


cached_in = _cachestat  # pages of a byte range of an open file in the cache (readtrace.inject.mapfill)


def _mincore(fd: int, size: int) -> int:
    addr = map_readonly(fd, size, what="mmap for mincore")
    try:
        pages = -(-size // PAGE)
        vec = (ctypes.c_ubyte * pages)()
        if _libc.mincore(addr, size, vec) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mincore failed: {os.strerror(err)}")
        return sum(b & 1 for b in vec)
    finally:
        unmap(addr, size)


def cache_survives_open(path: str | os.PathLike, probe_bytes: int = 1 << 20) -> bool:
    """Whether the file's cached pages survive another open() (FUSE daemons without FOPEN_KEEP_CACHE
    drop them): read the first MiB on one fd, open a second, count what is still cached."""
    with open_fd(path, sequential=False) as fd:
        size = os.fstat(fd).st_size
        if size == 0:
            return True
        os.pread(fd, min(size, probe_bytes), 0)
        before = _count(fd, size)
        with open_fd(path, sequential=False):
            pass
        return _count(fd, size) >= max(before // 2, 1)


def _count(fd: int, size: int) -> int:
    cached = _cachestat(fd)
    return cached if cached is not None else _mincore(fd, size)


class ResidencyMap:
    """Which pages of one open file are in the page cache, sampled again and again on ONE fd (a second
    open() on rclone/sshfs would drop the very pages being watched): a private read-only mapping made
    once; cachestat(2) per CHUNK finds the chunks whose count changed and only those are read with
    mincore(2) (a whole 400 MiB file costs 3-10 ms of mincore, its per-chunk cachestat well under 1 ms).
    Without cachestat (kernels before 6.5) every sample is a whole-file mincore."""

    CHUNK = 4 << 20

    def __init__(self, fd: int):
        import numpy as np

        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.pages = -(-self.size // PAGE)
        self.resident = np.zeros(self.pages, dtype=np.uint8)  # the last sample, 1 = cached
        self._addr = None
        self._counts: list[int] = [-1] * (-(-self.size // self.CHUNK))
        self._stat = _Cachestat()
        self._cachestat = _CACHESTAT is not None and _cachestat(fd) is not None
        if self.pages:
            self._addr = map_readonly(fd, self.size, private=True, what="mmap for mincore")

    def _changed_chunks(self) -> list[int]:
        if not self._cachestat:
            return list(range(len(self._counts)))
        changed = []
        for i in range(len(self._counts)):
            rng = _Range(i * self.CHUNK, self.CHUNK)
            if _libc.syscall(_CACHESTAT, self.fd, ctypes.byref(rng), ctypes.byref(self._stat), 0) != 0:
                return list(range(len(self._counts)))
            # against the pages mincore showed: cachestat counts pages still being read in, which
            # mincore (uptodate pages only) shows one sample later
            if self._stat.nr_cache != self._counts[i]:
                changed.append(i)
        return changed

    def sample(self) -> list[tuple[int, object]]:
        """[(first page, previous vector slice)] for each chunk that changed; ``resident`` is updated."""
        out = []
        per_chunk = self.CHUNK // PAGE
        for i in self._changed_chunks():
            first = i * per_chunk
            n = min(per_chunk, self.pages - first)
            before = self.resident[first:first + n].copy()
            offset = first * PAGE
            length = min(self.CHUNK, self.size - offset)
            if _libc.mincore(self._addr + offset, length, self.resident[first:].ctypes.data) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore failed: {os.strerror(err)}")
            self.resident[first:first + n] &= 1
            self._counts[i] = int(self.resident[first:first + n].sum())
            out.append((first, before))
        return out

    def close(self) -> None:
        if self._addr is not None:
            unmap(self._addr, self.size)
            self._addr = None
        os.close(self.fd)
