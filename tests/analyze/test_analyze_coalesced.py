"""Reads the recorder merged in kernel (``count`` > 1) are analysed as the calls they stand for."""

import numpy as np
import pandas as pd
from test_analyze_findings import codes, files_frame, only

from readtrace.analyze import analyze
from readtrace.trace import make_trace
from readtrace.trace.runs import expand_coalesced

KiB, MiB = 1024, 1 << 20


def _storm(count_per_row: int, rows: int = 2) -> pd.DataFrame:
    """``rows`` merged runs of 4 KiB reads by one thread, back to back."""
    run = 4 * KiB * count_per_row
    return pd.DataFrame({
        "ts_ns": 100_000 * np.arange(rows), "pid": 1, "tid": 1, "op": "pread", "fd": 3, "ofd": 77,
        "path": "/n/f", "offset": run * np.arange(rows), "size": run, "ret": run,
        "latency_ns": 4_000 * count_per_row, "count": count_per_row})


def test_expand_restores_every_call():
    calls = expand_coalesced(make_trace(events=_storm(3)).events)
    assert calls["offset"].tolist() == [0, 4096, 8192, 12288, 16384, 20480]
    assert (calls["size"] == 4096).all() and (calls["ret"] == 4096).all() and (calls["count"] == 1).all()
    assert (calls["latency_ns"] == 4000).all()
    assert calls["ts_ns"].tolist() == [0, 4000, 8000, 100_000, 104_000, 108_000]
    assert calls["size"].sum() == 2 * 3 * 4096


def test_expand_leaves_uncoalesced_traces_alone():
    events = make_trace(events=_storm(1)).events
    assert expand_coalesced(events) is events


def test_a_merged_4k_storm_is_still_small_requests():
    trace = make_trace(events=_storm(20), files=files_frame("/n/f", 1 << 30, "fuse.gcsfuse", dev=50, ino=9))
    a = analyze(trace)
    assert "SMALL_REQUESTS" in codes(a)
    f = only(a, "SMALL_REQUESTS")
    assert (f.small, f.reads, f.median_bytes) == (40, 40, 4 * KiB)
    assert a.summary.bytes_read == 40 * 4 * KiB
