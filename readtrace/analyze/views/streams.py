"""Streams: the ordered accesses of one task, process, open file description, FUSE handle or file.

Classification (the words of docs/report.md; Darshan's counters):
- consecutive: offset == previous end (POSIX_CONSEC_READS)
- sequential: offset >= previous end, i.e. forward, gaps allowed (POSIX_SEQ_READS; includes consecutive)
- random: the rest, backward or overlapping (Drishti: total - sequential)
- seek (gcsfuse's word): starts before the previous end or more than ``gcsfuse_seek_window`` (8 MiB)
  past it; ``seek_fraction`` is what gcsfuse treats as a jump.
- in order: forward from the previous end by at most ``interleave_max_gap`` (1 MiB): what the
  interleave test uses.
Both forgive a step back of at most ``reorder_window`` (1 MiB): the kernel's readahead requests in
flight overtake each other on the way to the daemon; that is a reordering, not a jump. Tasks taking turns over their own parts are "sequential" to Darshan (within a
  round every jump is forward) but out of order here.
A stream's first access continues nothing and jumps nowhere: it counts as consecutive, not a seek.
Fractions come count-weighted (``*_count_fraction``) and byte-weighted (``*_fraction``).
Strides are the gap from the previous end (0 = consecutive).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from readtrace.analyze.rules.thresholds import Thresholds
from readtrace.analyze.storage import gcsfuse_replay
from readtrace.analyze.views.accesses import SOURCE_FAULT, Accesses
from readtrace.analyze.views.grouping import (
    FEW_GROUPS,
    Factor,
    factor,
    first_in_group,
    group_bounds,
    is_one_value,
    max_overlap,
    quantiles,
    selected_quantiles,
    sorted_sum,
    sorted_sum_where,
    stable_by_group,
    take,
    top_values,
    top_values_sorted,
    union_length,
)
from readtrace.analyze.views.histogram import LABELS, size_bin

KINDS = ("task", "process", "ofd", "fuse_handle", "file")


def _narrow(rows: np.ndarray) -> np.ndarray:
    """Row indices as int32 where they fit: half the memory of a kept 10 M-row order."""
    return rows.astype(np.int32) if len(rows) < 2**31 else rows


@dataclass
class BaseOrders:
    """Row orders and per-row values of one Accesses computed once and shared by every stream kind."""

    acc: Accesses

    @cached_property
    def time_ordered(self) -> bool:
        """Whether the accesses already are in time order (then ``by_time`` is None)."""
        ts = self.acc.ts
        return len(ts) < 2 or bool(np.all(ts[1:] >= ts[:-1]))

    @cached_property
    def by_time(self) -> np.ndarray | None:
        """Rows by time; None when they already are (no identity array kept)."""
        return None if self.time_ordered else np.argsort(self.acc.ts, kind="stable")

    @cached_property
    def by_offset(self) -> np.ndarray:
        """By (file, offset): every stream lies inside one file, so this is offset order per stream."""
        return _narrow(np.lexsort((self.acc.offset, self.acc.file)))

    @cached_property
    def timed(self) -> np.ndarray:
        """Rows with a latency, by latency."""
        rows = _narrow(np.flatnonzero(self.acc.latency > 0))
        return rows[np.argsort(self.acc.latency[rows], kind="stable")]

    def factor(self, name: str) -> Factor:
        """The Accesses column ``name`` factorized once for every kind that groups by it."""
        factors = self.__dict__.setdefault("_factors", {})
        if name not in factors:
            factors[name] = factor(getattr(self.acc, name))
        return factors[name]

    @cached_property
    def has_faults(self) -> bool:
        return bool((self.acc.source == SOURCE_FAULT).any())

    @cached_property
    def size_bins(self) -> np.ndarray:
        nbytes = self.acc.nbytes
        if is_one_value(nbytes):  # one read size: one bin
            return np.broadcast_to(size_bin(nbytes[:1]).astype(np.int8), len(nbytes))
        return size_bin(nbytes).astype(np.int8)

    @cached_property
    def size_codes(self) -> tuple[np.ndarray, np.ndarray]:
        nbytes = self.acc.nbytes
        if is_one_value(nbytes):  # one read size
            return np.broadcast_to(np.int32(0), len(nbytes)), nbytes[:1].copy()
        codes, uniques = pd.factorize(nbytes)
        return codes.astype(np.int32) if len(uniques) < 2**31 else codes, np.asarray(uniques)


@dataclass
class Classified:
    """Per-row classification in (group, time) order."""

    order: np.ndarray
    codes: np.ndarray
    offset: np.ndarray
    nbytes: np.ndarray
    gap: np.ndarray  # offset - the previous access's end (the stride); a group's first access: 0
    first: np.ndarray

    @property
    def consecutive(self) -> np.ndarray:
        return self.gap == 0

    @property
    def sequential(self) -> np.ndarray:
        return self.gap >= 0

    def seek(self, window: int, reorder: int = 0) -> np.ndarray:
        """Back by more than ``reorder`` or forward by more than ``window`` from the previous end."""
        return (self.gap < -reorder) | (self.gap > window)

    def in_order(self, max_gap: int, reorder: int = 0) -> np.ndarray:
        """Within [previous end - ``reorder``, previous end + ``max_gap``]."""
        return (self.gap >= -reorder) & (self.gap <= max_gap)


@dataclass
class Runs:
    """Contiguous runs of reads (each read starting where the one before it in its stream ended): per
    run its stream code and [start, end). The union of a stream's reads is the union of its runs."""

    codes: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def union_bytes(self, n: int) -> np.ndarray:
        order = np.lexsort((self.start, self.codes))
        return union_length(self.codes[order], n, self.start[order], self.end[order]).astype(np.int64)

    def relabel(self, image: np.ndarray) -> Runs:
        """The same runs under other stream codes (``image``: this coding's code -> the other's)."""
        return Runs(image[self.codes], self.start, self.end)


_RUNS_PER_ROW = 0.25  # runs are kept when they compress the rows at least 4-fold


def contiguous_runs(cl: Classified) -> Runs | None:
    """The streams' contiguous runs, or None when there are more than a quarter as many as rows."""
    begins = cl.gap != 0
    begins |= cl.first
    rows = np.flatnonzero(begins)
    del begins
    if len(rows) > _RUNS_PER_ROW * len(cl.gap):
        return None
    start = cl.offset[rows]
    return Runs(cl.codes[rows], start, start + sorted_sum(rows, cl.nbytes))


def classify(acc: Accesses, codes: np.ndarray, n: int, orders: BaseOrders) -> Classified:
    order = stable_by_group(codes, n, orders.by_time)
    if n <= 1 and orders.time_ordered:  # one stream, already in time order: views, no copies
        c, offset, nbytes = codes, acc.offset, acc.nbytes
    else:
        c, offset, nbytes = take(codes, order), acc.offset[order], take(acc.nbytes, order)
    first = first_in_group(c)
    gap = np.empty_like(offset)
    if len(offset):
        gap[0] = 0
        np.subtract(offset[1:], offset[:-1], out=gap[1:])
        gap[1:] -= nbytes[:-1]
        gap[first] = 0
    return Classified(order=order, codes=c, offset=offset, nbytes=nbytes, gap=gap, first=first)


def fractions(cl: Classified, starts: np.ndarray, counts: np.ndarray, nbytes: np.ndarray, th: Thresholds
              ) -> dict[str, np.ndarray]:
    """consecutive / sequential / random / seek / in-order fractions, byte- and count-weighted."""
    out = {}
    one_size = is_one_value(cl.nbytes)  # bytes = reads * size
    with np.errstate(invalid="ignore", divide="ignore"):
        # one flag of every row alive at a time
        for name, flags in (("consecutive", lambda: cl.consecutive), ("sequential", lambda: cl.sequential),
                            ("seek", lambda: cl.seek(th.gcsfuse_seek_window, th.reorder_window)),
                            ("in_order", lambda: cl.in_order(th.interleave_max_gap, th.reorder_window))):
            flag = flags()
            flagged = sorted_sum(starts, flag)
            flagged_bytes = flagged * cl.nbytes[0] if one_size else sorted_sum_where(starts, cl.nbytes, flag)
            del flag
            out[f"{name}_fraction"] = flagged_bytes / nbytes
            out[f"{name}_count_fraction"] = flagged / counts
    out["random_fraction"] = 1 - out["sequential_fraction"]
    out["random_count_fraction"] = 1 - out["sequential_count_fraction"]
    return out


def group_extents(cl: Classified, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the lowest offset read and the furthest end."""
    if len(starts) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if is_one_value(cl.nbytes):  # the furthest end is the furthest offset + the size: no ends of every row
        return np.minimum.reduceat(cl.offset, starts), np.maximum.reduceat(cl.offset, starts) + cl.nbytes[0]
    return np.minimum.reduceat(cl.offset, starts), np.maximum.reduceat(cl.offset + cl.nbytes, starts)


def summarize(acc: Accesses, codes: np.ndarray, n: int, orders: BaseOrders, th: Thresholds, kind: str,
              sub: tuple[np.ndarray, int] | None = None, replay: bool = False, extents: bool = False,
              runs: Runs | None = None) -> pd.DataFrame:
    """One row per stream code 0..n-1 with every per-stream figure.

    ``sub``: codes of the (stream, task) pieces, for tasks and concurrency; None when a stream is one task.
    ``extents``: also ``attrs["extents"]``, each stream's lowest offset and furthest end, and
    ``attrs["runs"]`` (``contiguous_runs``: None when they do not compress the rows).
    ``runs``: contiguous runs of these streams' reads from another kind (each inside one stream, in
    these codes): the union of the reads is computed from them.
    """
    cl = classify(acc, codes, n, orders)
    starts, counts = group_bounds(cl.codes, n)
    nbytes = sorted_sum(starts, cl.nbytes)
    first_rows = cl.order[starts]
    last_rows = cl.order[starts + counts - 1]
    df = pd.DataFrame({
        "kind": kind, "file_id": acc.file[first_rows], "pid": acc.pid[first_rows], "tid": acc.tid[first_rows],
        "ofd": acc.handle[first_rows], "opened": acc.opened[first_rows], "accesses": counts,
        "faults": sorted_sum(starts, acc.source[cl.order] == SOURCE_FAULT) if orders.has_faults
        else np.zeros(n, dtype=np.int64), "bytes": nbytes,
        **fractions(cl, starts, counts, nbytes, th),
        "first_ts_ns": acc.ts[first_rows], "last_ts_ns": acc.ts[last_rows],
    })
    df["top_strides"] = top_values_sorted(starts, counts, cl.gap) if n <= FEW_GROUPS \
        else top_values(cl.codes, n, cl.gap)
    latency_quantiles = _latency_quantiles(acc, codes, n, orders, cl, starts, counts)
    if extents:
        df.attrs["extents"] = group_extents(cl, starts)
    if replay:
        _add_replay(df, cl, starts, th)
    forward_only = bool(cl.sequential.all())
    if runs is None and (extents or not forward_only):
        runs = contiguous_runs(cl)
    if extents:
        df.attrs["runs"] = runs
    del cl
    if forward_only:
        df["unique_bytes"] = nbytes
    else:
        df["unique_bytes"] = _unique_bytes(acc, codes, n, orders) if runs is None else runs.union_bytes(n)
    df["reread_amplification"] = df["bytes"] / df["unique_bytes"].where(df["unique_bytes"] > 0)
    if replay:
        df["gcsfuse_sequential_requests"] = gcsfuse_replay.sequential_requests(df["unique_bytes"].to_numpy(), th)
    for q, values in zip((50, 99), latency_quantiles, strict=True):
        df[f"latency_p{q}_us"] = values / 1e3
    hist = np.bincount(codes.astype(np.int64) * len(LABELS) + orders.size_bins,
                       minlength=n * len(LABELS)).reshape(n, len(LABELS))
    df["size_hist"] = [dict(zip(LABELS, row.tolist(), strict=True)) for row in hist]
    size_codes, sizes = orders.size_codes
    df["top_sizes"] = top_values(codes, n, sizes, k=4, value_codes=size_codes)
    df["tasks"], df["concurrency"] = _tasks(acc, codes, n, sub)
    return df


def _latency_quantiles(acc: Accesses, codes: np.ndarray, n: int, orders: BaseOrders, cl: Classified,
                       starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per stream: p50 and p99 of the latencies > 0. Few streams: selected per stream (no sort of
    every row by latency); many: one shared latency order, reordered by stream."""
    if n > FEW_GROUPS:
        timed = stable_by_group(codes, n, orders.timed) if len(orders.timed) else orders.timed
        timed_codes, latency = codes[timed], acc.latency[timed]
        return tuple(quantiles(timed_codes, n, latency, q) for q in (0.5, 0.99))
    in_order = n <= 1 and orders.time_ordered
    # one stream's latencies gathered at a time: not a second copy of every row's
    per = np.array([selected_quantiles(acc.latency[s:s + c] if in_order else acc.latency[cl.order[s:s + c]],
                                       (0.5, 0.99), keep=lambda v: v > 0)
                    for s, c in zip(starts.tolist(), counts.tolist(), strict=True)], dtype=float).reshape(n, 2)
    return per[:, 0], per[:, 1]


def _unique_bytes(acc: Accesses, codes: np.ndarray, n: int, orders: BaseOrders) -> np.ndarray:
    """Bytes of the union of each stream's reads (rows in offset order per stream).
    (Streams that only move forward read disjoint ranges: their union is their bytes, no sort.)"""
    by_off = stable_by_group(codes, n, orders.by_offset)
    offset = acc.offset[by_off]
    end = np.add(offset, acc.nbytes[by_off], dtype=np.int64)
    return union_length(codes[by_off], n, offset, end).astype(np.int64)


def _tasks(acc: Accesses, codes: np.ndarray, n: int, sub: tuple[np.ndarray, int] | None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Distinct tasks per stream and the most of them active at once (each from its first access to
    the end of its last)."""
    if sub is None:
        return np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64)
    sub_codes, n_sub = sub
    parent = np.zeros(n_sub, dtype=np.int64)
    parent[sub_codes] = codes
    start = np.full(n_sub, np.iinfo(np.int64).max)
    stop = np.full(n_sub, np.iinfo(np.int64).min)
    np.minimum.at(start, sub_codes, acc.ts)
    np.maximum.at(stop, sub_codes, acc.ts + acc.latency)
    return np.bincount(parent, minlength=n).astype(np.int64), max_overlap(parent, n, start, stop)


def _add_replay(df: pd.DataFrame, cl: Classified, starts: np.ndarray, th: Thresholds) -> None:
    r = gcsfuse_replay.replay(cl.codes, starts, cl.offset, cl.gap, cl.nbytes, th)
    df["gcsfuse_seeks"] = r.seeks
    df["gcsfuse_requests"] = r.requests
    with np.errstate(invalid="ignore", divide="ignore"):
        random_share = r.random_bytes / df["bytes"].to_numpy()
    df["gcsfuse_read_type"] = np.where(random_share >= 0.5, "random", "sequential")
    df["gcsfuse_random_after"] = r.random_after
