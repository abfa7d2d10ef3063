"""Memory settings for our own process: numpy arrays on small pages, and (around a batch analysis)
freed big arrays kept for reuse. The analysis of a 10 M-event trace allocates and frees arrays of
10^7 rows hundreds of times; on this kind of VM every fresh page of them costs a fault."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt parameters (malloc.h)
DEFAULT_TRIM_THRESHOLD, DEFAULT_MMAP_MAX = 128 * 1024, 65536
KEEP_FREED = 2**31 - 1  # trim threshold: keep up to 2 GiB of freed heap for the next arrays


def small_pages() -> None:
    """No transparent huge pages for this process's numpy arrays (numpy madvises them on Linux): the
    first touch of 960 MB took 1.80 s on huge pages, 0.40 s on small ones here. This process only
    (traced and rerun commands keep their environment); a user's NUMPY_MADVISE_HUGEPAGE wins."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _set_madvise_hugepage
    _set_madvise_hugepage(False)


@contextlib.contextmanager
def reuse_freed_memory() -> Iterator[None]:
    """Inside: glibc serves big allocations from its heap, not one mmap each, and keeps what is freed.
    Otherwise every array over 32 MiB is unmapped when freed and the next one faults all its pages
    in again (report --what-if of 10 M events: 10.7-10.9 s -> 7.9-8.3 s, peak RSS 1.72 -> 1.88 GiB).
    After: glibc's defaults, and the freed heap returned (malloc_trim). Not glibc: nothing changes."""
    try:
        libc = ctypes.CDLL(None)
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        yield
        return
    mallopt(M_MMAP_MAX, 0)
    mallopt(M_TRIM_THRESHOLD, KEEP_FREED)
    try:
        yield
    finally:
        mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
        mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
        trim(0)
