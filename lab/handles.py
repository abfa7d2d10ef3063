"""Does a file system keep read-ahead state per open file? Measure it: N forked workers each read their
contiguous share of a file in order, once through ONE open file shared by all (opened before the
fork) and once through an open file of their own, each time cold; compare time and backend requests."""

from __future__ import annotations

import os
from dataclasses import dataclass

from readtrace.measure.probe import read_shares
from readtrace.pagecache.evict import evict


@dataclass(frozen=True)
class HandleProbe:
    mode: str  # "shared" or "own"
    seconds: float
    requests: int | None  # backend requests in the run (None: no request log)


def probe(path: str | os.PathLike, requests=None, workers: int = 4, limit: int | None = None,
          backing=()) -> dict[str, HandleProbe]:
    """``{"shared": ..., "own": ...}``, each run cold. ``requests()``: the backend's request count so far
    (None: no request log); ``backing``: local files under the mount dropped from the cache too."""
    out = {}
    for mode in ("shared", "own"):
        evict([path, *map(str, backing)])
        before = requests() if requests else None
        seconds = read_shares(path, workers, shared=mode == "shared", limit=limit)
        out[mode] = HandleProbe(mode, seconds, None if before is None else requests() - before)
    return out
