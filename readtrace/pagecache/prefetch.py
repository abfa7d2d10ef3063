"""Sequential prefetch: stream files into the page cache with large reads.

Each thread owns one contiguous share of the files (taken in order as one byte stream) and reads it
through fds of its own, so every open file handle sees a purely sequential stream. Under torchrun
with torch.distributed initialised, the local ranks split the bytes first, so each byte is read once
per node, then meet at a barrier.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from readtrace.errors import InputError, UsageError
from readtrace.loader.fileio import MiB, open_fd, read_into
from readtrace.loader.spans import Piece, split_pieces
from readtrace.pagecache.pin import Pins, fits_in_memory

DEFAULT_CHUNK_BYTES = 16 * MiB
DEFAULT_THREADS = 4


@dataclass(frozen=True)
class PrefetchResult:
    """What one prefetch call read: bytes by this process, seconds, and its share of the node."""

    files: int
    bytes_read: int
    seconds: float
    local_rank: int = 0
    local_world_size: int = 1
    pins: Pins | None = field(default=None, compare=False, repr=False)  # held pages (pin=True)
    pin_note: str = ""  # why nothing or not everything was pinned

    @property
    def pinned_bytes(self) -> int:
        return self.pins.pinned_bytes if self.pins else 0

    @property
    def gbps(self) -> float:
        return self.bytes_read / self.seconds / 1e9 if self.seconds else 0.0


def prefetch(
    paths: Iterable[str | os.PathLike],
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    threads: int = DEFAULT_THREADS,
    progress: bool | None = None,
    distributed: bool | None = None,
    pin: bool = False,
) -> PrefetchResult:
    """Read ``paths`` once, sequentially, so that later loads hit the page cache.

    ``progress``: a progress bar on stderr (default: when stderr is a terminal). ``distributed``:
    split over local ranks (default: when LOCAL_RANK/LOCAL_WORLD_SIZE are set and torch.distributed
    is initialised; then every rank must call prefetch with the same paths). ``pin``: lock each
    range in memory right after reading it (``readtrace.pagecache.pin``), so proactive reclaim cannot drop
    it before the loader uses it; call ``result.pins.release()`` (or ``.hold(s)``) when done.
    """
    pieces = [(os.fspath(p), 0, _size(p)) for p in paths]
    split = _dist_initialised() if distributed is None else distributed
    rank, world = local_rank_and_size() if split else (0, 1)
    mine = split_pieces(pieces, world)[rank] if world > 1 else pieces
    result = prefetch_pieces(mine, chunk_bytes=chunk_bytes, threads=threads, progress=progress, pin=pin)
    if world > 1:
        _barrier()
    return replace(result, files=len(pieces), local_rank=rank, local_world_size=world)


def prefetch_pieces(mine: list[Piece], *, chunk_bytes: int = DEFAULT_CHUNK_BYTES, threads: int = DEFAULT_THREADS,
                    progress: bool | None = None, pin: bool = False) -> PrefetchResult:
    """Read byte ranges (path, start, end) once, sequentially, each thread a contiguous share of them
    on fds of its own: ``prefetch`` of a rank's own spans (readtrace.rerun.rankplan)."""
    if chunk_bytes <= 0 or threads <= 0:
        raise UsageError("chunk_bytes and threads must be positive")
    shares = split_pieces(mine, threads)
    total = sum(end - start for _, start, end in mine)
    pins, pin_note = _pins_for(mine, total) if pin else (None, "")
    show = sys.stderr.isatty() if progress is None else progress
    started = time.perf_counter()
    try:
        with _progress_bar(total, show) as advance, ThreadPoolExecutor(max(len(shares), 1)) as pool:
            futures = [pool.submit(_read_share, share, chunk_bytes, advance, pins) for share in shares]
            done = sum(f.result() for f in futures)
    except BaseException:
        if pins is not None:
            pins.release()
        raise
    if pins is not None:
        pin_note = "; ".join(pins.errors)
    return PrefetchResult(len({path for path, _, _ in mine}), done, time.perf_counter() - started, pins=pins,
                          pin_note=pin_note)


def _pins_for(pieces: list[Piece], total: int) -> tuple[Pins | None, str]:
    if not fits_in_memory(total):
        return None, f"not pinned: {total} bytes are more than half of MemAvailable"
    return Pins.for_paths(list(dict.fromkeys(path for path, _, _ in pieces))), ""


def local_rank_and_size() -> tuple[int, int]:
    """torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE, or (0, 1) outside torchrun."""
    try:
        rank = int(os.environ.get("LOCAL_RANK", "0"))
        world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1
    return (rank, world) if 0 <= rank < world else (0, 1)


def _read_share(share: list[Piece], chunk_bytes: int, advance: Callable[[int], None], pins: Pins | None) -> int:
    buf = memoryview(bytearray(chunk_bytes))
    done = 0
    for path, start, end in share:
        pinned = pins.get(path) if pins is not None else None
        with open_fd(path) as fd:
            pos = start
            while pos < end:
                n = read_into(fd, buf[:min(chunk_bytes, end - pos)], pos, chunk_bytes=chunk_bytes)
                if n == 0:
                    break  # the file shrank: nothing more to cache
                if pinned is not None:
                    pinned.pin(pos, pos + n)
                pos += n
                advance(n)
        done += pos - start
    return done


def _size(path: str | os.PathLike) -> int:
    try:
        return os.stat(path).st_size
    except OSError as e:
        raise InputError(f"cannot prefetch {os.fspath(path)}: {e.strerror}") from None


def _dist_initialised() -> bool:
    dist = sys.modules.get("torch.distributed")  # never import torch just to find out
    return bool(dist and dist.is_available() and dist.is_initialized())


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


@contextmanager
def _progress_bar(total: int, show: bool) -> Iterator[Callable[[int], None]]:
    """A rich progress bar when shown; otherwise a no-op counter. Yields a thread-safe advance(n)."""
    if not show:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    lock = threading.Lock()
    bar = Progress(TextColumn("prefetch"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   TimeRemainingColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task("prefetch", total=total)

    def advance(n: int) -> None:
        with lock:
            bar.advance(task, n)

    bar.start()
    try:
        yield advance
    finally:
        bar.stop()
