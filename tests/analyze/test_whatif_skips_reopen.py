"""A per-handle prefetcher whose short forward skips were measured to cost a first byte (rclone waits
``--vfs-read-wait``, 20 ms, for the gap to fill, then reopens its reader) is charged a run per skip:
a 64 MiB mmap load_file on rclone skipped 256 KiB ~100 times at ~20.5 ms each and was predicted 28-32 %
under its wall with those skips charged as continuing. Where the same skips were served at once (rclone
at 256 MiB: 0.27 ms), they stay continuing, and the first byte is the seeks' (a median over the opened
requests, cheap skips included, had put it at ~0 ms). Synthetic frames of that shape on an rclone mount."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lab.synthetic import KiB, files_frame, fuse_from_reads, opens, worker_reads
from readtrace.analyze import analyze
from readtrace.analyze.storage.whatif import mount_profile, own_mount_predictions
from readtrace.trace import make_trace

PATH = "/mnt/rclone/model.safetensors"
SEEK_MS, NEXT_MS = 20.0, 0.1


def _skipping_load(skip_ms: float, runs: int = 100, chunk: int = 128 * KiB):
    """One task reads runs of two 128 KiB requests in order, skipping 256 KiB between runs (each skip
    served in ``skip_ms``), then jumps 16 MiB back and forth a few times (seeks: SEEK_MS)."""
    reads = worker_reads(1, 3 * runs, chunk, True, step_ns=0, latency_ns=int(NEXT_MS * 1e6))
    reads = reads[np.arange(len(reads)) % 3 != 2].reset_index(drop=True)  # every third chunk skipped
    lat = np.where(np.arange(len(reads)) % 2 == 0, skip_ms, NEXT_MS)
    lat[0] = SEEK_MS
    seeks = reads.iloc[:8].copy()  # then a few true seeks: far back in the file
    seeks["offset"] = (np.arange(8) * 7 % 8) * 16 * 128 * KiB
    reads = pd.concat([reads, seeks], ignore_index=True)
    lat = np.r_[lat, np.full(8, SEEK_MS)]
    reads["latency_ns"] = (lat * 1e6).astype(np.int64)
    reads["ts_ns"] = 1_000_000 + np.r_[0, np.cumsum(reads["latency_ns"].to_numpy()[:-1] + 10_000)]
    fuse = fuse_from_reads(reads)
    fuse["latency_ns"] = reads["latency_ns"].to_numpy() - 1_000
    events = pd.concat([opens(reads, PATH), reads], ignore_index=True)
    meta = {"command": ["python", "load.py"], "exit_code": 0, "lost_events": 0}
    return analyze(make_trace(events=events, fuse=fuse, meta=meta,
                              files=files_frame(PATH, 3 * runs * chunk, "fuse.rclone", mountpoint="/mnt/rclone")))


@pytest.mark.parametrize("skip_ms, reopens", [(SEEK_MS, True), (0.2, False)])
def test_short_skips_are_runs_where_they_were_measured_to_reopen(skip_ms, reopens):
    a = _skipping_load(skip_ms)
    p = mount_profile(a)
    assert p.model == "prefetch" and p.skips_reopen is reopens
    assert 0.8 * SEEK_MS <= p.latency_ms + p.request_ms <= 1.2 * SEEK_MS  # the seeks' first byte, not the skips'
    # reopening: each skip pays a first byte (charged as continuing, ~1/10 of the wait); cheap: the seeks do,
    # once per run (their first byte measured over the cheap skips had been ~0 ms: ~1/10 of the wait)
    [own] = own_mount_predictions(a)
    waited = a.summary.time.data_wait_s
    assert 0.7 * waited <= own.predicted_io_s <= 1.3 * waited, (own.predicted_io_s, waited)
