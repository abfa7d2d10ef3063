"""Make exactly the given files cold: posix_fadvise(DONTNEED) on each, residency before and after.

Never touches other files (no drop_caches); flushes pages someone else left dirty (fdatasync) so they
can be dropped, and tries again for about 5 s while more than 1 % stays (a loader that just exited
may still map them). Pages a running process still maps, or that a socket or pipe still references
(sendfile/splice), may stay: the note names the processes that map the file or hold it open. A file
system with its own cache (FUSE daemons, NFS servers) or one living in memory is named in a note.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from readtrace.errors import InputError
from readtrace.fs.knowledge import cold_cache_caveat
from readtrace.fs.mounts import file_mount
from readtrace.fs.procmaps import mapped_by, opened_by
from readtrace.loader.fileio import open_fd
from readtrace.pagecache.residency import cached_pages


@dataclass(frozen=True)
class Eviction:
    """One file's page-cache residency before and after eviction, and why it may not be cold."""

    path: str
    pages: int
    cached_before: int
    cached_after: int
    fstype: str
    note: str | None

    @property
    def before(self) -> float:
        return self.cached_before / self.pages if self.pages else 0.0

    @property
    def after(self) -> float:
        return self.cached_after / self.pages if self.pages else 0.0


def evict(paths: Iterable[str | os.PathLike]) -> list[Eviction]:
    """Drop each file's pages from the page cache; report residency before/after per file."""
    return [_evict_one(os.fspath(p)) for p in paths]


RETRY_WAITS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 1.6)  # pages of a process still exiting are unmapped soon after


def _evict_one(path: str) -> Eviction:
    try:
        before, pages = cached_pages(path)
        mount = file_mount(path)
        fstype = mount.fstype if mount else "unknown"
        note = cold_cache_caveat(fstype)
        with open_fd(path, sequential=False) as fd:
            os.fdatasync(fd)  # a freshly written file's dirty pages would survive DONTNEED
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            after, _ = cached_pages(path)
            for wait in RETRY_WAITS_S if note is None else ():  # a cache that can drop: try again
                if after <= pages // 100:
                    break
                time.sleep(wait)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                after, _ = cached_pages(path)
    except OSError as e:
        raise InputError(f"cannot evict {path}: {e.strerror or e}") from None
    if note is None and pages and after > pages // 100:
        note = f"{after}/{pages} pages stayed cached ({_held_by(path)})"
    return Eviction(path, pages, before, after, fstype, note)


def _held_by(path: str) -> str:
    """Who may keep the pages: a process mapping the file, else one holding it open (a file server that
    sendfile()s it leaves page references in socket buffers a client has not read yet)."""
    if mapped := mapped_by(path):
        return f"mapped by {', '.join(mapped)}"
    if opened := opened_by(path):
        return (f"none maps it; open in {', '.join(opened)}: pages sent by sendfile/splice into a socket "
                "or pipe stay until read")
    return "none maps or opens it now: dirty, or held by a socket or pipe it was sent into"
