"""What the jumps on each FUSE handle cost the load, measured on its own requests.

A per-handle file system (gcsfuse, rclone, s3fs ...) streams each open handle from one backend range:
a READ request that does not start where the handle's previous one ended opens a new range and pays
its first byte again. Which jumps cost, and how much, is read off the recorded request latencies, not
assumed: a jump the daemon serves from its own buffer costs nothing here. On rclone at 20 ms, a
torch.distributed.checkpoint load read 99 % of its bytes in order, yet its 48 jumps (each item's zip
directory read before its records) waited 1.09 s of its 1.27 s.
"""

from __future__ import annotations

import numpy as np

from readtrace.analyze.views.accesses import Accesses


def handle_jumps(fuse: Accesses, n_handles: int) -> tuple[np.ndarray, np.ndarray]:
    """Per handle code (0..n_handles-1): (jumps, seconds they waited beyond the handle's median
    continuing request). A jump is a request that does not start where the handle's previous request
    (in time order) ended; the handle's first request is not one (every reader pays a first byte)."""
    jumps, extra = np.zeros(n_handles, dtype=np.int64), np.zeros(n_handles)
    known = fuse.handle >= 0
    if not known.any():
        return jumps, extra
    rows = np.flatnonzero(known)
    order = rows[np.lexsort((fuse.ts[rows], fuse.handle[rows]))]
    code, offset = fuse.handle[order], fuse.offset[order]
    end = offset + fuse.nbytes[order]  # not fuse.end: that is every request's, not only these
    latency = fuse.latency[order].astype(float)
    same = np.zeros(len(order), dtype=bool)
    same[1:] = code[1:] == code[:-1]
    jump = same.copy()
    jump[1:] &= offset[1:] != end[:-1]
    continuing = same & ~jump & (latency > 0)
    starts = np.searchsorted(code, np.arange(n_handles + 1))
    for c in np.unique(code[jump]):
        lo, hi = starts[c], starts[c + 1]  # the handle's rows (sorted by code)
        typical = latency[lo:hi][continuing[lo:hi]]
        paid = latency[lo:hi][jump[lo:hi]]
        jumps[c] = len(paid)
        base = np.median(typical) if len(typical) else 0.0
        extra[c] = np.clip(paid[paid > 0] - base, 0, None).sum() / 1e9
    return jumps, extra
