"""Undo the recorder's in-kernel merging of read runs, so every analysis sees one row per call.

The recorder merges consecutive complete reads of one size by one thread on one open file into a row
with ``count`` calls (``offset`` = first offset, ``size``/``ret``/``latency_ns`` = totals). Access
sizes, call counts, SMALL_REQUESTS and count-weighted fractions need the calls back. Their times are
spread over the run as ``ts_ns + i * latency_ns / count`` (a lower bound of the real spacing: the
time between calls is not recorded).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def expand_coalesced(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` with each merged row (count > 1) replaced by its ``count`` calls, in time order."""
    if "count" not in events.columns:
        return events
    counts = events["count"].to_numpy()
    merged = counts > 1
    if not merged.any():
        return events
    runs = events[merged]
    n = runs["count"].to_numpy().astype(np.int64)
    calls = runs.iloc[np.repeat(np.arange(len(runs)), n)].copy()  # positional: any index works
    step = np.arange(len(calls)) - np.repeat(np.cumsum(n) - n, n)  # 0..count-1 within each run
    size = _per_call(runs, "size", n)
    latency = _per_call(runs, "latency_ns", n)
    calls["offset"] = np.repeat(runs["offset"].to_numpy(), n) + step * size
    calls["ts_ns"] = np.repeat(runs["ts_ns"].to_numpy(), n) + step * latency
    calls["size"] = size
    calls["latency_ns"] = latency
    calls["ret"] = _per_call(runs, "ret", n)
    calls["count"] = 1
    out = pd.concat([events[~merged], calls])
    return out.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def _per_call(runs: pd.DataFrame, column: str, n: np.ndarray) -> np.ndarray:
    """A run's total split evenly over its calls, one value per call."""
    return np.repeat(runs[column].to_numpy() // n, n)
