"""Replay of gcsfuse's per-handle reader on a stream (internal/gcsx/random_reader.go).

A *seek* is a read that starts before the expected offset (the previous end) or more than
``gcsfuse_seek_window`` past it. Once the handle has seen >= 2 seeks with less than 8 MiB read per seek
on average it reads "random": each backend request fetches the average read size rounded up to the
next MiB (1..8 MiB) instead of up to ``--sequential-read-size-mb`` (200 MiB). A new backend request
starts at the first read, at every seek, and whenever a read runs past the current request's end.
Simplification: a run's requests are ceil(span / chunk) with the chunk chosen when the run opens.
Deviation: a step back of at most ``reorder_window`` is not a seek (kernel readahead requests in
flight overtake each other; counting them turned every small own-fd handle "random").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from readtrace.analyze.grouping import sorted_sum
from readtrace.analyze.thresholds import MiB, Thresholds


@dataclass
class Replay:
    """Per group: seeks, predicted read type, backend requests, where it turned random."""

    seeks: np.ndarray
    requests: np.ndarray
    random_bytes: np.ndarray  # bytes read while the handle was in random mode
    random_after: np.ndarray  # 1-based access number at which it turned random; 0 = never


def replay(codes: np.ndarray, starts: np.ndarray, offset: np.ndarray, prev_end: np.ndarray,
           nbytes: np.ndarray, th: Thresholds) -> Replay:
    """Rows ordered by (group, time); ``starts``: each group's first row; ``prev_end``: the previous
    read's end (a group's first read: its own offset).

    gcsfuse decides the read type when it opens a reader (getReadInfo), i.e. at the first read and at
    every seek: the replay works on those "runs" only, so per-read work is one flag and one cumsum.
    """
    n_groups, n = len(starts), len(offset)
    if n == 0:
        zeros = np.zeros(n_groups, dtype=np.int64)
        return Replay(seeks=zeros, requests=zeros, random_bytes=zeros, random_after=zeros)
    opens = (offset < prev_end - th.reorder_window) | (offset > prev_end + th.gcsfuse_seek_window)  # seeks ...
    seeks = sorted_sum(starts, opens)
    opens[starts] = True  # ... and each group's first read
    runs = np.flatnonzero(opens)
    del opens
    run_group = codes[runs]
    group_first_run = np.searchsorted(runs, starts)
    seeks_before = np.arange(len(runs)) - group_first_run[run_group]  # seeks seen when the run opens
    cum = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nbytes, out=cum[1:])
    run_end_row = np.r_[runs[1:], n]
    bytes_before = cum[runs] - cum[starts[run_group]]
    run_bytes = cum[run_end_row] - cum[runs]
    del cum
    # random once >= 2 seeks with < 8 MiB read per seek on average (integer form of the average test)
    is_random = (seeks_before >= th.gcsfuse_min_seeks_for_random) & \
        (bytes_before < th.gcsfuse_max_random_read * seeks_before)
    average = bytes_before // np.maximum(seeks_before, 1)
    chunk = np.where(is_random,
                     np.clip((average // MiB + 1) * MiB, th.gcsfuse_min_random_read, th.gcsfuse_max_random_read),
                     th.gcsfuse_sequential_read)
    span = np.maximum.reduceat(offset + nbytes, runs) - offset[runs]
    requests = sorted_sum(group_first_run, np.maximum(1, -(-span // chunk)))
    random_after = np.zeros(n_groups, dtype=np.int64)
    first_random = np.flatnonzero(is_random)
    if len(first_random):
        first_random = first_random[np.r_[True, run_group[first_random][1:] != run_group[first_random][:-1]]]
        g = run_group[first_random]
        random_after[g] = runs[first_random] - starts[g] + 1
    return Replay(seeks=seeks, requests=requests, random_bytes=sorted_sum(group_first_run, run_bytes * is_random),
                  random_after=random_after)


def sequential_requests(unique_bytes: np.ndarray, th: Thresholds) -> np.ndarray:
    """Backend requests one sequential reader of the same bytes would need."""
    return np.maximum(1, np.ceil(unique_bytes / th.gcsfuse_sequential_read)).astype(np.int64)
