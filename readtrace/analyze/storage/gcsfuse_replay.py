"""Replay of gcsfuse's per-handle reader on a stream (internal/gcsx/random_reader.go).

A *seek* is a read that starts anywhere but the expected offset (the previous end), unless at most
``gcsfuse_seek_window`` past it (gcsfuse reads a short forward skip through). The reader's type is
decided whenever it opens a backend request: once the handle has seen >= 2 seeks with less than 8 MiB
read per seek on average it reads "random": the request fetches the average read size rounded up to
the next MiB (1..8 MiB) instead of up to ``--sequential-read-size-mb`` (200 MiB). A new backend request
starts at the first read, at every seek, and whenever a read runs past the current request's end; the
average is taken again there, so a long run after a few seeks grows its requests and may turn
sequential (the lab mount, 4 threads faulting one 256 MiB mapping: 176 requests logged by the daemon,
295 when each run kept the size chosen at its first request, 176 now).
A step back is a seek however small: gcsfuse, and the lab mount that follows it, close the reader
there. (An earlier deviation forgave steps back of up to 1 MiB as readahead reordering: the lab mount
logged 922 requests for a 4-thread load, 786 of its seeks such steps, and the replay counted 163.)

Up to EXACT_ROWS reads the replay is gcsfuse's reader itself, read by read (``simfs.model.HandleReader``,
the lab mount's: one home for its rules): a forward skip past a random request's end is a seek there,
which runs between seeks cannot see (4 threads faulting a 32 MiB mapping: 233 requests logged, 401 by
runs). Beyond it (a 10 M-event trace) the runs below, vectorized, approximate it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from readtrace.analyze.rules.thresholds import MiB, Thresholds
from readtrace.analyze.views.grouping import BLOCK, FEW_GROUPS, sorted_sum

EXACT_ROWS = 250_000  # reads replayed one by one through gcsfuse's reader (~1.3 s per million)


@dataclass
class Replay:
    """Per group: seeks, predicted read type, backend requests, where it turned random."""

    seeks: np.ndarray
    requests: np.ndarray
    random_bytes: np.ndarray  # bytes read while the handle was in random mode
    random_after: np.ndarray  # 1-based access number at which it turned random; 0 = never


def replay(codes: np.ndarray, starts: np.ndarray, offset: np.ndarray, gap: np.ndarray,
           nbytes: np.ndarray, th: Thresholds) -> Replay:
    """Rows ordered by (group, time); ``starts``: each group's first row; ``gap``: offset minus the
    previous read's end (a group's first read: 0).

    gcsfuse decides the read type when it opens a reader (getReadInfo), i.e. at the first read and at
    every seek: the replay works on those "runs" only, so per-read work is one flag and one cumsum.
    Runs the whole trace through (every read of a shared handle can be a seek): temporaries are
    freed as soon as they are used.
    """
    n_groups, n = len(starts), len(offset)
    if n == 0:
        zeros = np.zeros(n_groups, dtype=np.int64)
        return Replay(seeks=zeros, requests=zeros, random_bytes=zeros, random_after=zeros)
    if n <= EXACT_ROWS:
        return _read_by_read(starts, offset, nbytes, th)
    opens = is_seek(gap, th, reorder_window=0)  # seeks ...
    seeks = sorted_sum(starts, opens)
    opens[starts] = True  # ... and each group's first read
    # every read opens a run (a shared handle read in turns): run i is row i, no index of the runs
    runs = None if opens.all() else np.flatnonzero(opens)
    del opens
    n_runs = n if runs is None else len(runs)
    dtype = np.int32 if n_runs < 2**31 else np.int64
    if runs is not None:
        runs = runs.astype(dtype)
    span, run_bytes = _run_extent(runs, offset, nbytes)  # views of nbytes when every read is a run
    run_group = codes if runs is None else codes[runs]
    # keys of the runs' own dtype: no cast of every run
    group_first_run = starts if runs is None else np.searchsorted(runs, starts.astype(dtype))
    seeks_before = np.arange(n_runs, dtype=dtype)
    bytes_before = np.cumsum(run_bytes)
    bytes_before -= run_bytes
    if n_groups > 1:  # one group starts at run 0 with nothing read before it
        seeks_before -= group_first_run.astype(dtype)[run_group]  # seeks seen when the run opens
        bytes_before -= bytes_before[group_first_run][run_group]  # read on the handle before the run
    # random once >= 2 seeks with < 8 MiB read per seek on average (integer form of the average test:
    # bytes < seeks * 8 MiB  <=>  bytes // 8 MiB < seeks, without an overflowing product); block by
    # block: no third array of every run
    is_random = np.empty(n_runs, dtype=bool)
    for i in range(0, n_runs, BLOCK):
        np.less(bytes_before[i:i + BLOCK] // th.gcsfuse_max_random_read, seeks_before[i:i + BLOCK],
                out=is_random[i:i + BLOCK])
    is_random &= seeks_before >= th.gcsfuse_min_seeks_for_random
    # random runs longer than a request: sized again at each request (``_regrown``); what their first saw
    longer = np.flatnonzero(is_random & (span > th.gcsfuse_min_random_read))
    opened_after, seeks_at = bytes_before[longer], seeks_before[longer]
    chunk = bytes_before  # in place from here on: the average read per seek, rounded up to the next MiB
    chunk //= np.maximum(seeks_before, 1, out=seeks_before)
    del seeks_before, bytes_before
    chunk //= MiB
    chunk += 1
    chunk *= MiB
    np.clip(chunk, th.gcsfuse_min_random_read, th.gcsfuse_max_random_read, out=chunk)
    chunk[~is_random] = th.gcsfuse_sequential_read
    per_run = chunk  # ceil(span / chunk) backend requests per run (span >= 1), in place block by block
    for i in range(0, n_runs, BLOCK):
        np.floor_divide(span[i:i + BLOCK] - 1, chunk[i:i + BLOCK], out=per_run[i:i + BLOCK])
    per_run += 1
    del chunk
    regrown, random_read = _regrown(span[longer], run_bytes[longer], opened_after, seeks_at, th)
    per_run[longer] = regrown
    requests = sorted_sum(group_first_run, np.maximum(1, per_run, out=per_run))
    random_after = np.zeros(n_groups, dtype=np.int64)
    first_random, g = _first_in_groups(is_random, group_first_run, run_group)
    if len(first_random):
        random_after[g] = (first_random if runs is None else runs[first_random]) - starts[g] + 1
    random_run_bytes = np.multiply(run_bytes, is_random, out=per_run)
    random_run_bytes[longer] = random_read
    random_bytes = sorted_sum(group_first_run, random_run_bytes)
    return Replay(seeks=seeks, requests=requests, random_bytes=random_bytes, random_after=random_after)


def _read_by_read(starts: np.ndarray, offset: np.ndarray, nbytes: np.ndarray, th: Thresholds) -> Replay:
    """The replay by gcsfuse's reader itself, one per group, fed its reads in order."""
    seek, new, random = _plans(starts, offset, nbytes, th)
    first_random = np.where(random, np.arange(len(offset)), len(offset))
    group_first_random = np.minimum.reduceat(first_random, starts)
    random_after = np.where(group_first_random < len(offset), group_first_random - starts + 1, 0)
    return Replay(seeks=np.add.reduceat(seek, starts).astype(np.int64),
                  requests=np.maximum(np.add.reduceat(new, starts), 1).astype(np.int64),
                  random_bytes=np.add.reduceat(np.where(random, nbytes, 0), starts).astype(np.int64),
                  random_after=random_after.astype(np.int64))


def new_requests(starts: np.ndarray, offset: np.ndarray, nbytes: np.ndarray, th: Thresholds) -> np.ndarray | None:
    """Per read (rows ordered by group, then time; ``starts``: each group's first row): whether gcsfuse's
    reader opens a backend request for it, which pays a first byte; None over EXACT_ROWS reads."""
    return _plans(starts, offset, nbytes, th)[1] if len(offset) <= EXACT_ROWS else None


def _plans(starts: np.ndarray, offset: np.ndarray, nbytes: np.ndarray, th: Thresholds
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seek, new request, random mode) per read, from one ``simfs.model.HandleReader`` per group, with
    the reader settings of ``th``."""
    from readtrace.simfs.model import HandleReader, ReaderRules

    rules = ReaderRules(max_skip=th.gcsfuse_seek_window, min_seeks_for_random=th.gcsfuse_min_seeks_for_random,
                        random_average=th.gcsfuse_max_random_read, min_random_range=th.gcsfuse_min_random_read,
                        max_random_range=th.gcsfuse_max_random_read, sequential_range=th.gcsfuse_sequential_read)
    n = len(offset)
    seek, new, random = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    ends = [*starts[1:].tolist(), n]
    for first, last in zip(starts.tolist(), ends, strict=True):
        reader = HandleReader(1 << 62, rules)  # the file's end does not matter to the count
        for i, o, size in zip(range(first, last), offset[first:last].tolist(), nbytes[first:last].tolist(),
                              strict=True):
            plan = reader.plan(o, size)
            seek[i], new[i], random[i] = plan.seek, plan.new_request, plan.mode == "random"
    return seek, new, random


def is_seek(gap: np.ndarray, th: Thresholds, reorder_window: int | None = None) -> np.ndarray:
    """Reads that start a new run: before the previous end (by more than ``reorder_window``, default
    the thresholds': a per-handle prefetcher waits for requests that overtook each other) or past the
    seek window."""
    back = th.reorder_window if reorder_window is None else reorder_window
    return (gap < -back) | (gap > th.gcsfuse_seek_window)


def _regrown(span: np.ndarray, run_bytes: np.ndarray, read_before: np.ndarray, seeks: np.ndarray,
             th: Thresholds) -> tuple[np.ndarray, np.ndarray]:
    """(backend requests, bytes read while random) of runs that opened random: each next request is
    sized from the average read per seek at its start (the run's bytes so far count; its seeks do not
    change), and once that average reaches ``gcsfuse_max_random_read`` the reader turns sequential.
    All runs advance one request per step."""
    m = len(span)
    density = run_bytes / np.maximum(span, 1)  # bytes read per byte of the run's extent (skips read through)
    pos, read, rand = np.zeros(m), np.zeros(m), np.zeros(m)
    count = np.zeros(m, dtype=np.int64)
    active = np.arange(m)
    while len(active):
        total = read_before[active] + read[active].astype(np.int64)
        random = total // th.gcsfuse_max_random_read < seeks[active]
        size = np.clip((total // seeks[active] // MiB + 1) * MiB, th.gcsfuse_min_random_read,
                       th.gcsfuse_max_random_read)
        step = np.minimum(np.where(random, size, th.gcsfuse_sequential_read), span[active] - pos[active])
        count[active] += 1
        rand[active] += np.where(random, step * density[active], 0.0)
        read[active] += step * density[active]
        pos[active] += step
        active = active[pos[active] < span[active]]
    return count, np.minimum(rand.round().astype(np.int64), run_bytes)


def _first_in_groups(flags: np.ndarray, group_first: np.ndarray, group: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(index of each group's first flagged row, its group) for the groups with one; rows ordered by
    group, ``group_first``: each group's first row. Few groups: searched group by group (no index of
    every flagged row: the shared handle's every run turns random)."""
    if len(group_first) > FEW_GROUPS:
        first = np.flatnonzero(flags)
        if len(first):
            first = first[np.r_[True, group[first][1:] != group[first][:-1]]]
        return first, group[first]
    ends = [*group_first[1:].tolist(), len(flags)]
    found = [(s + int(np.argmax(flags[s:e])), g) for g, (s, e) in enumerate(zip(group_first.tolist(), ends, strict=True))
             if e > s and flags[s:e].any()]
    return (np.array([f for f, _ in found], dtype=np.int64), np.array([g for _, g in found], dtype=np.int64))


def _run_extent(runs: np.ndarray | None, offset: np.ndarray, nbytes: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per run (rows ``runs[i]`` up to the next run): bytes from its first offset to its furthest end,
    and bytes read. Every read its own run (``runs`` None: a shared handle read in turns): both are the
    read sizes."""
    if runs is None:
        return nbytes, nbytes
    end = offset + nbytes
    span = np.maximum.reduceat(end, runs)
    del end
    span -= offset[runs]
    return span, np.add.reduceat(nbytes, runs, dtype=np.int64)


def sequential_requests(unique_bytes: np.ndarray, th: Thresholds) -> np.ndarray:
    """Backend requests one sequential reader of the same bytes would need."""
    return np.maximum(1, np.ceil(unique_bytes / th.gcsfuse_sequential_read)).astype(np.int64)
