"""Streams: the ordered accesses of one task, process, open file description, FUSE handle or file.

Classification (DESIGN.md words; Darshan's counters):
- consecutive: offset == previous end (POSIX_CONSEC_READS)
- sequential: offset >= previous end, i.e. forward, gaps allowed (POSIX_SEQ_READS; includes consecutive)
- random: the rest, backward or overlapping (Drishti: total - sequential)
- seek (gcsfuse's word): starts before the previous end or more than ``gcsfuse_seek_window`` (8 MiB)
  past it; ``seek_fraction`` is what a per-handle daemon treats as a jump. Interleaved quarters are
  "sequential" to Darshan (every jump is forward) but seeks to gcsfuse.
A stream's first access continues nothing and jumps nowhere: it counts as consecutive, not a seek.
Fractions come count-weighted (``*_count_fraction``) and byte-weighted (``*_fraction``).
Strides are the gap from the previous end (0 = consecutive).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from readtrace.analyze import gcsfuse
from readtrace.analyze.accesses import SOURCE_FAULT, Accesses
from readtrace.analyze.grouping import (
    first_in_group,
    group_bounds,
    group_sum,
    max_overlap,
    quantiles,
    stable_by_group,
    top_values,
    union_length,
)
from readtrace.analyze.histogram import LABELS, histogram
from readtrace.analyze.thresholds import Thresholds

KINDS = ("task", "process", "ofd", "fuse_handle", "file")


@dataclass
class BaseOrders:
    """Row orders of one Accesses computed once and shared by every stream kind."""

    acc: Accesses

    @cached_property
    def by_time(self) -> np.ndarray:
        ts = self.acc.ts
        if len(ts) < 2 or bool(np.all(ts[1:] >= ts[:-1])):
            return np.arange(len(ts))
        return np.argsort(ts, kind="stable")

    @cached_property
    def by_offset(self) -> np.ndarray:
        """By (file, offset): every stream lies inside one file, so this is offset order per stream."""
        return np.lexsort((self.acc.offset, self.acc.file))

    @cached_property
    def timed(self) -> np.ndarray:
        """Rows with a latency, by latency."""
        rows = np.flatnonzero(self.acc.latency > 0)
        return rows[np.argsort(self.acc.latency[rows], kind="stable")]


@dataclass
class Classified:
    """Per-row classification in (group, time) order, for callers that need more than the summary."""

    order: np.ndarray
    codes: np.ndarray
    first: np.ndarray
    consecutive: np.ndarray
    sequential: np.ndarray
    seek: np.ndarray


def classify(acc: Accesses, codes: np.ndarray, n: int, orders: BaseOrders, window: int) -> Classified:
    order = stable_by_group(codes, n, orders.by_time)
    c = codes[order]
    offset = acc.offset[order]
    end = offset + acc.nbytes[order]
    first = first_in_group(c)
    prev_end = np.empty_like(end)
    if len(end):
        prev_end[1:] = end[:-1]
        prev_end[0] = offset[0]
    return Classified(order=order, codes=c, first=first,
                      consecutive=first | (offset == prev_end), sequential=first | (offset >= prev_end),
                      seek=~first & ((offset < prev_end) | (offset > prev_end + window)))


def _fractions(cl: Classified, nb: np.ndarray, n: int, counts: np.ndarray, nbytes: np.ndarray) -> dict:
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, flag in (("consecutive", cl.consecutive), ("sequential", cl.sequential), ("seek", cl.seek)):
            out[f"{name}_fraction"] = group_sum(cl.codes, n, np.where(flag, nb, 0)) / nbytes
            out[f"{name}_count_fraction"] = group_sum(cl.codes, n, flag) / counts
    out["random_fraction"] = 1 - out["sequential_fraction"]
    out["random_count_fraction"] = 1 - out["sequential_count_fraction"]
    return out


def summarize(acc: Accesses, codes: np.ndarray, n: int, orders: BaseOrders, th: Thresholds,
              kind: str, replay: bool = False) -> tuple[pd.DataFrame, Classified]:
    """One row per stream code 0..n-1 with every per-stream figure."""
    cl = classify(acc, codes, n, orders, th.gcsfuse_seek_window)
    nb = acc.nbytes[cl.order]
    counts = group_sum(codes, n).astype(np.int64)
    nbytes = group_sum(codes, n, acc.nbytes).astype(np.int64)
    starts, _ = group_bounds(cl.codes, n)
    first_rows = cl.order[starts]
    last_rows = cl.order[starts + counts - 1]
    by_off = stable_by_group(codes, n, orders.by_offset)
    unique = union_length(codes[by_off], n, acc.offset[by_off], acc.offset[by_off] + acc.nbytes[by_off])
    timed = stable_by_group(codes, n, orders.timed) if len(orders.timed) else orders.timed
    lat_codes, lat = codes[timed], acc.latency[timed]
    gaps = np.where(cl.first, 0, acc.offset[cl.order] - np.r_[0, (acc.offset + acc.nbytes)[cl.order][:-1]])
    df = pd.DataFrame({
        "kind": kind,
        "file_id": acc.file[first_rows],
        "pid": acc.pid[first_rows],
        "tid": acc.tid[first_rows],
        "ofd": acc.ofd[first_rows],
        "accesses": counts,
        "faults": group_sum(codes, n, acc.source == SOURCE_FAULT).astype(np.int64),
        "bytes": nbytes,
        "unique_bytes": unique.astype(np.int64),
        **_fractions(cl, nb, n, counts, nbytes),
        "latency_p50_us": quantiles(lat_codes, n, lat, 0.5) / 1e3,
        "latency_p99_us": quantiles(lat_codes, n, lat, 0.99) / 1e3,
        "first_ts_ns": acc.ts[first_rows],
        "last_ts_ns": acc.ts[last_rows],
    })
    df["reread_amplification"] = df["bytes"] / df["unique_bytes"].where(df["unique_bytes"] > 0)
    hist = histogram(codes, n, acc.nbytes)
    df["size_hist"] = [dict(zip(LABELS, row.tolist(), strict=True)) for row in hist]
    df["top_sizes"] = top_values(codes, n, acc.nbytes)
    df["top_strides"] = top_values(cl.codes, n, gaps)
    df["tasks"], df["concurrency"] = _tasks(acc, codes, n)
    if replay:
        _add_replay(df, acc, cl, n, th)
    return df, cl


def _tasks(acc: Accesses, codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct tasks per stream and the most of them active at once (first to last access each)."""
    pairs = pd.DataFrame({"g": codes, "tid": acc.tid, "ts": acc.ts, "end": acc.ts + acc.latency})
    spans = pairs.groupby(["g", "tid"], sort=False).agg(start=("ts", "min"), end=("end", "max")).reset_index()
    g = spans["g"].to_numpy()
    return (np.bincount(g, minlength=n).astype(np.int64),
            max_overlap(g, n, spans["start"].to_numpy(), spans["end"].to_numpy()))


def _add_replay(df: pd.DataFrame, acc: Accesses, cl: Classified, n: int, th: Thresholds) -> None:
    offset = acc.offset[cl.order]
    r = gcsfuse.replay(cl.codes, n, cl.first, offset, offset + acc.nbytes[cl.order], th)
    df["gcsfuse_seeks"] = r.seeks
    df["gcsfuse_requests"] = r.requests
    df["gcsfuse_sequential_requests"] = gcsfuse.sequential_requests(df["unique_bytes"].to_numpy(), th)
    with np.errstate(invalid="ignore", divide="ignore"):
        random_share = r.random_bytes / df["bytes"].to_numpy()
    df["gcsfuse_read_type"] = np.where(random_share >= 0.5, "random", "sequential")
    df["gcsfuse_random_after"] = r.random_after
