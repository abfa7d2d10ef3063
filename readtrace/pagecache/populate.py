"""Fill a loader's own mapping of a file, front to back, right after the loader mapped it.

For mounts that drop the page cache on every open() (a FUSE daemon without FOPEN_KEEP_CACHE: the
lab mount without --keep-cache, sshfs): a prefetch on an fd of our own is dropped again by the
loader's open, but faulting the loader's mapping in order (MADV_POPULATE_READ, Linux 5.14+) reads
through the loader's own open file, sequentially, with the kernel's readahead, and opens nothing.
"""

from __future__ import annotations

import ctypes
import time

MADV_POPULATE_READ = 22
STEP = 16 << 20

_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def populate(ranges: list[tuple[int, int]], step: int = STEP) -> tuple[int, float, str]:
    """(bytes populated, seconds, why not everything) for address ranges of file mappings."""
    started, done = time.perf_counter(), 0
    for start, end in sorted(ranges):
        pos = start
        while pos < end:
            n = min(step, end - pos)
            if _libc.madvise(pos, n, MADV_POPULATE_READ) != 0:
                err = ctypes.get_errno()
                return done, time.perf_counter() - started, f"madvise(MADV_POPULATE_READ) failed: errno {err}"
            done += n
            pos += n
    return done, time.perf_counter() - started, ""
