"""Does a file system keep read-ahead state per open file? Measure it: N forked workers each read their
contiguous share of a file in order, once through ONE open file shared by all (opened before the
fork) and once through an open file of their own, each time cold; compare time and backend requests."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from readtrace.pagecache.evict import evict

CHUNK = 1 << 20


@dataclass(frozen=True)
class HandleProbe:
    mode: str  # "shared" or "own"
    seconds: float
    requests: int | None  # backend requests in the run (None: no request log)


def read_shares(path: str | os.PathLike, workers: int, shared: bool, chunk: int = CHUNK,
                limit: int | None = None) -> float:
    """Seconds for ``workers`` forked readers to pread their contiguous shares of ``path`` (of its
    first ``limit`` bytes)."""
    size = min(os.path.getsize(path), limit or os.path.getsize(path))
    share = -(-size // workers)
    fd = os.open(path, os.O_RDONLY) if shared else -1
    started = time.perf_counter()
    children = []
    for i in range(workers):
        pid = os.fork()
        if pid == 0:  # the worker: read [lo, hi) in order, then leave without running any cleanup
            code = 0
            try:
                own = fd if shared else os.open(path, os.O_RDONLY)
                offset, hi = i * share, min(size, (i + 1) * share)
                while offset < hi:
                    got = os.pread(own, min(chunk, hi - offset), offset)
                    if not got:
                        break
                    offset += len(got)
            except BaseException:
                code = 1
            os._exit(code)
        children.append(pid)
    failed = [pid for pid in children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
    seconds = time.perf_counter() - started
    if shared:
        os.close(fd)
    if failed:
        raise OSError(f"{len(failed)} reader(s) of {path} failed")
    return seconds


def probe(path: str | os.PathLike, requests=None, workers: int = 4, limit: int | None = None
          ) -> dict[str, HandleProbe]:
    """``{"shared": ..., "own": ...}``, each run cold. ``requests()``: the backend's request count so far
    (None: no request log)."""
    out = {}
    for mode in ("shared", "own"):
        evict([path])
        before = requests() if requests else None
        seconds = read_shares(path, workers, shared=mode == "shared", limit=limit)
        out[mode] = HandleProbe(mode, seconds, None if before is None else requests() - before)
    return out
