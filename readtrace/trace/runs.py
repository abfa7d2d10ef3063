"""Undo the recorder's in-kernel merging of read runs, so every analysis sees one row per call.

The recorder merges consecutive complete reads of one size by one thread on one open file into a row
with ``count`` calls (``offset`` = first offset, ``size``/``ret``/``latency_ns`` = totals). Access
sizes, call counts, SMALL_REQUESTS and count-weighted fractions need the calls back. Their times are
spread over the run as ``ts_ns + i * latency_ns / count`` (a lower bound of the real spacing: the
time between calls is not recorded).

The expansion is bounded: past ``MAX_CALLS`` rows (a run of 2**40 calls would need 8 TiB per column)
every run is cut into pieces of ``per_row`` calls each (``calls_per_row``), and the analysis says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MAX_CALLS = 1 << 24  # rows an expansion may produce (~2 GiB of read columns)


def calls_per_row(*frames: pd.DataFrame | None, max_calls: int | None = None) -> int:
    """How many calls each expanded row stands for: 1 (every call its own row) unless the frames'
    calls add up to more than ``max_calls``."""
    max_calls = MAX_CALLS if max_calls is None else max_calls
    calls = rows = 0
    for f in frames:
        if f is not None and "count" in f.columns and len(f):
            counts = f["count"].to_numpy()
            if counts.dtype.kind in "iu" and counts.max() <= 1:  # nothing merged (a lean load's ints)
                calls += len(counts)
                rows += len(counts)
                continue
            counts = np.nan_to_num(f["count"].to_numpy(dtype=np.float64), nan=1.0)  # float: no overflow
            calls += int(np.clip(counts, 1, None).sum())
            rows += int((counts <= 1).sum())
    if calls <= max_calls:
        return 1
    return -(-(calls - rows) // max(1, max_calls - rows))


def expand_coalesced(events: pd.DataFrame, per_row: int = 1) -> pd.DataFrame:
    """``events`` with each merged row (count > 1) replaced by its ``count`` calls, in time order
    (``per_row`` > 1: by ceil(count / per_row) rows of about ``per_row`` calls each)."""
    if "count" not in events.columns:
        return events
    counts = events["count"].to_numpy()
    merged = counts > 1
    if not merged.any():
        return events
    runs = events[merged]
    n = runs["count"].to_numpy().astype(np.int64)
    if per_row > 1:
        n = -(-n // per_row)
    calls = runs.iloc[np.repeat(np.arange(len(runs)), n)].copy()  # positional: any index works
    step = np.arange(len(calls)) - np.repeat(np.cumsum(n) - n, n)  # 0..count-1 within each run
    size = _per_call(runs, "size", n)
    latency = _per_call(runs, "latency_ns", n)
    calls["offset"] = np.repeat(runs["offset"].to_numpy(), n) + step * np.repeat(runs["size"].to_numpy() // n, n)
    calls["ts_ns"] = np.repeat(runs["ts_ns"].to_numpy(), n) + step * np.repeat(runs["latency_ns"].to_numpy() // n, n)
    calls["size"] = size
    calls["latency_ns"] = latency
    calls["ret"] = _per_call(runs, "ret", n)
    calls["count"] = 1
    out = pd.concat([events[~merged], calls])
    return out.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def _per_call(runs: pd.DataFrame, column: str, n: np.ndarray) -> np.ndarray:
    """A run's total split evenly over its calls, one value per call; the last call keeps the
    remainder, so totals stay exact."""
    total = runs[column].to_numpy()
    out = np.repeat(total // n, n)
    out[np.cumsum(n) - 1] += total % n
    return out
