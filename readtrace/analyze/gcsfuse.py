"""Replay of gcsfuse's per-handle reader on a stream (internal/gcsx/random_reader.go).

A *seek* is a read that starts before the expected offset (the previous end) or more than
``gcsfuse_seek_window`` past it. Once the handle has seen >= 2 seeks with less than 8 MiB read per seek
on average it reads "random": each backend request fetches the average read size rounded up to the
next MiB (1..8 MiB) instead of up to ``--sequential-read-size-mb`` (200 MiB). A new backend request
starts at the first read, at every seek, and whenever a read runs past the current request's end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from readtrace.analyze.grouping import group_sum
from readtrace.analyze.thresholds import MiB, Thresholds


@dataclass
class Replay:
    """Per group: seeks, predicted read type, backend requests, where it turned random."""

    seeks: np.ndarray
    requests: np.ndarray
    random_bytes: np.ndarray  # bytes read while the handle was in random mode
    random_after: np.ndarray  # 1-based access number at which it turned random; 0 = never
    seek: np.ndarray  # per row (in the given order): this read was a seek


def replay(codes: np.ndarray, n_groups: int, first: np.ndarray, offset: np.ndarray, end: np.ndarray,
           th: Thresholds) -> Replay:
    """Rows ordered by (group, time); ``first`` marks each group's first read."""
    nbytes = end - offset
    prev_end = np.empty_like(end)
    if len(end):
        prev_end[0] = offset[0]
        prev_end[1:] = end[:-1]
    seek = ~first & ((offset < prev_end) | (offset > prev_end + th.gcsfuse_seek_window))
    # Cumulative seeks (this read included) and bytes read before this read, restarting per group.
    run_start = np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))
    cum_seeks = np.cumsum(seek)
    seeks_so_far = cum_seeks - (cum_seeks[run_start] - seek[run_start])
    cum_bytes = np.cumsum(nbytes)
    bytes_before = cum_bytes - nbytes - (cum_bytes[run_start] - nbytes[run_start])
    average = bytes_before / np.maximum(seeks_so_far, 1)
    is_random = (seeks_so_far >= th.gcsfuse_min_seeks_for_random) & (average < th.gcsfuse_max_random_read)
    chunk = np.where(is_random,
                     np.clip((average // MiB + 1) * MiB, th.gcsfuse_min_random_read, th.gcsfuse_max_random_read),
                     th.gcsfuse_sequential_read)
    # A run = reads served by requests opened at one seek; it needs ceil(span / chunk) requests.
    opens = first | seek
    run_rows = np.flatnonzero(opens)
    span = np.maximum.reduceat(end, run_rows) - offset[run_rows] if len(run_rows) else np.zeros(0, np.int64)
    per_run = np.maximum(1, np.ceil(span / chunk[run_rows])).astype(np.int64)
    requests = group_sum(codes[run_rows], n_groups, per_run).astype(np.int64)
    random_after = np.zeros(n_groups, dtype=np.int64)
    rows = np.flatnonzero(is_random)
    if len(rows):
        first_random = rows[np.r_[True, codes[rows][1:] != codes[rows][:-1]]]
        random_after[codes[first_random]] = first_random - run_start[first_random] + 1
    return Replay(seeks=group_sum(codes, n_groups, seek).astype(np.int64), requests=requests,
                  random_bytes=group_sum(codes, n_groups, np.where(is_random, nbytes, 0)),
                  random_after=random_after, seek=seek)


def sequential_requests(unique_bytes: np.ndarray, th: Thresholds) -> np.ndarray:
    """Backend requests one sequential reader of the same bytes would need."""
    return np.maximum(1, np.ceil(unique_bytes / th.gcsfuse_sequential_read)).astype(np.int64)
