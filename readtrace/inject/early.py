"""Early reads: on a mount that drops a file's page cache on every open, read the checkpoint into
memory of our own at interpreter start-up, while the script imports its libraries.

A start-up prefetch into the page cache is useless there (the loader's own open() drops it), so the
own-fd loader used to read the file only when the loader asked for it, after torch and transformers
had imported. An early read overlaps that read with the imports: one sequential stream per file on an
fd of our own (or, where the own-fd loader reads with N threads, N streams, each its own span and
fd), into anonymous memory that the tensors then view (the same one allocation the own-fd loader's
copy would make). The shim takes a file's bytes once (``take``); a file that changed
since it was read is read again by the loader. Imports no torch.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from readtrace.loader.fileio import open_fd, read_into
from readtrace.loader.spans import split_spans
from readtrace.pagecache.pin import mem_available
from readtrace.rerun.records import EarlyReadCall

MEMORY_SHARE = 0.5  # early-read only what fits in this share of MemAvailable


@dataclass
class _Early:
    path: str
    identity: tuple[int, int, int, int]  # (st_dev, st_ino, st_size, st_mtime_ns) when it was read
    buffer: mmap.mmap
    done: threading.Event = field(default_factory=threading.Event)
    got: int = 0
    error: str | None = None
    seconds: float = 0.0


_EARLY: dict[str, _Early] = {}
_LOCK = threading.Lock()


def identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def fits(paths: list[str]) -> bool:
    """The files fit in MEMORY_SHARE of the memory available now (else leave them to the loader)."""
    available = mem_available()
    try:
        return available is not None and sum(os.path.getsize(p) for p in paths) <= MEMORY_SHARE * available
    except OSError:
        return False


def start(paths: list[str], *, chunk_bytes: int, readers: int = 1) -> list[str]:
    """Start reading ``paths`` front to back, one after another, in a background thread (``readers``:
    each file split into that many contiguous spans, each read on an fd of its own, as the own-fd
    loader with ``threads`` reads); returns the paths it reads (none when they do not fit in memory or
    cannot be opened)."""
    paths = [os.path.abspath(p) for p in dict.fromkeys(paths)]
    if not paths or not fits(paths):
        return []
    entries = []
    for path in paths:
        try:
            size = os.path.getsize(path)
            if size == 0:
                continue
            entries.append(_Early(path, (0, 0, 0, 0), mmap.mmap(-1, size)))
        except (OSError, ValueError):
            continue
    with _LOCK:
        _EARLY.update((e.path, e) for e in entries)
    if entries:
        threading.Thread(target=_read_all, args=(entries, chunk_bytes, max(1, readers)), name="readtrace-early-read",
                         daemon=True).start()
    return [e.path for e in entries]


def _read_all(entries: list[_Early], chunk_bytes: int, readers: int) -> None:
    for entry in entries:
        started = time.perf_counter()
        try:
            with open_fd(entry.path) as fd:
                entry.identity = identity(os.fstat(fd))
                spans = split_spans(len(entry.buffer), readers)
                if len(spans) <= 1:
                    entry.got = read_into(fd, memoryview(entry.buffer), 0, chunk_bytes=chunk_bytes)
                else:
                    entry.got = _read_spans(entry, spans, chunk_bytes)
        except OSError as e:
            entry.error = str(e)
        finally:
            entry.seconds = time.perf_counter() - started
            entry.done.set()


def _read_spans(entry: _Early, spans: list[tuple[int, int]], chunk_bytes: int) -> int:
    """Read each span of ``entry`` on an fd of its own, in parallel; the bytes read in all (a span
    that failed raises its OSError)."""

    def read(span: tuple[int, int]) -> int:
        lo, hi = span
        with open_fd(entry.path) as fd:
            return read_into(fd, memoryview(entry.buffer)[lo:hi], lo, chunk_bytes=chunk_bytes)

    with ThreadPoolExecutor(len(spans), thread_name_prefix="readtrace-early-read") as pool:
        return sum(pool.map(read, spans))


def take(path: str, strategy: str) -> tuple[memoryview | None, EarlyReadCall | None]:
    """The whole bytes of ``path`` as read early (waiting for the read to finish), once; None where
    there is no early read of it, it failed, or the file changed since. Also its manifest record
    (``strategy``: the rerun's)."""
    with _LOCK:
        entry = _EARLY.pop(os.path.abspath(path), None)
    if entry is None:
        return None, None
    waited = time.perf_counter()
    entry.done.wait()
    waited_s = time.perf_counter() - waited
    try:
        current = identity(os.stat(entry.path))
    except OSError as e:
        current, entry.error = None, entry.error or str(e)
    whole = entry.got == len(entry.buffer) == entry.identity[2]  # the size it had when we read it
    if entry.error or current != entry.identity or not whole:
        with contextlib.suppress(BufferError):
            entry.buffer.close()
        return None, _record(entry, strategy, waited_s,
                             entry.error or "the file changed since it was read: read again by the loader")
    return memoryview(entry.buffer), _record(entry, strategy, waited_s)


def never_taken(strategy: str) -> list[EarlyReadCall]:
    """The records of the early reads no load took (a loader the shim does not route read the file
    its own way: these bytes were read for nothing); forgets them."""
    with _LOCK:
        left = list(_EARLY.values())
        _EARLY.clear()
    return [_record(e, strategy, None, "never used: no load the shim routes asked for this file" if e.done.is_set()
                    else "never used, and still reading at exit") for e in left]


def _record(entry: _Early, strategy: str, waited_s: float | None, note: str | None = None) -> EarlyReadCall:
    return EarlyReadCall(file=entry.path, seconds=entry.seconds, bytes=entry.got, waited_s=waited_s, note=note,
                         strategy=strategy, pid=os.getpid())


def _forget_in_child() -> None:
    """A forked child has no reading thread: it keeps the reads that finished (copy-on-write)."""
    global _LOCK
    _LOCK = threading.Lock()
    for path, entry in list(_EARLY.items()):
        if not entry.done.is_set():
            del _EARLY[path]


os.register_at_fork(after_in_child=_forget_in_child)
