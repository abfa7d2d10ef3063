"""Shared-fd interleave: one open file (or FUSE handle, or mapping) read by several tasks, each of
them sequential on its own while the merged stream on the handle jumps around.

"In order" = forward from the previous end by at most ``interleave_max_gap`` (1 MiB). Darshan's
"sequential" misses the case (tasks taking turns over their own parts only jump forward within a
round), and gcsfuse's 8 MiB seek window hides it on small files although every wrap-around is a seek.
score = (byte-weighted in-order fraction of the tasks' own streams) - (that of the merged stream).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from readtrace.analyze.rules.thresholds import Thresholds
from readtrace.analyze.views.accesses import Accesses
from readtrace.analyze.views.grouping import group_bounds, group_sum, sorted_sum
from readtrace.analyze.views.streams import BaseOrders, classify, group_extents


@dataclass
class Pieces:
    """Per (stream, task) piece: the task's own figures inside one stream."""

    tid: np.ndarray
    bytes: np.ndarray
    consecutive: np.ndarray  # byte-weighted fractions
    sequential: np.ndarray
    in_order: np.ndarray
    first_offset: np.ndarray
    last_end: np.ndarray

    def take(self, index: np.ndarray) -> Pieces:
        return Pieces(**{name: values[index] for name, values in vars(self).items()})


def classify_pieces(acc: Accesses, sub: np.ndarray, n_sub: int, orders: BaseOrders, th: Thresholds) -> Pieces:
    """The pieces classified on their own."""
    cl = classify(acc, sub, n_sub, orders)
    starts, _ = group_bounds(cl.codes, n_sub)
    nb = cl.nbytes
    sub_bytes = sorted_sum(starts, nb)
    with np.errstate(invalid="ignore", divide="ignore"):
        own = {name: sorted_sum(starts, nb * flag) / sub_bytes
               for name, flag in (("consecutive", cl.consecutive), ("sequential", cl.sequential),
                                  ("in_order", cl.in_order(th.interleave_max_gap, th.reorder_window)))}
    first_offset, last_end = group_extents(cl, starts)
    return Pieces(tid=acc.tid[cl.order[starts]], bytes=sub_bytes, **own, first_offset=first_offset,
                  last_end=last_end)


def summarized_pieces(df: pd.DataFrame, extents: tuple[np.ndarray, np.ndarray]) -> Pieces:
    """The pieces as the summary of a kind with the very same groups saw them (no second pass)."""
    return Pieces(tid=df["tid"].to_numpy(), bytes=df["bytes"].to_numpy(),
                  consecutive=df["consecutive_fraction"].to_numpy(),
                  sequential=df["sequential_fraction"].to_numpy(), in_order=df["in_order_fraction"].to_numpy(),
                  first_offset=extents[0], last_end=extents[1])


def per_task(codes: np.ndarray, n: int, sub: tuple[np.ndarray, int], pieces: Pieces, streams: pd.DataFrame,
             th: Thresholds) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Interleave columns for ``streams`` (one row per code): the tasks' own fractions and the score;
    and the tasks' own figures, one row per (stream, task). ``sub``: codes of the (stream, task) pieces."""
    sub, n_sub = sub
    parent = np.zeros(n_sub, dtype=np.int64)
    parent[sub] = codes
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = group_sum(parent, n, pieces.bytes)
        out = pd.DataFrame({f"task_{name}_fraction": group_sum(parent, n, getattr(pieces, name) * pieces.bytes)
                            / weight for name in ("consecutive", "sequential", "in_order")})
    out["min_task_consecutive_fraction"] = pd.Series(pieces.consecutive).groupby(parent).min() \
        .reindex(range(n)).to_numpy()
    tasks = pd.DataFrame({
        "code": parent, "tid": pieces.tid, "bytes": pieces.bytes, "consecutive_fraction": pieces.consecutive,
        "sequential_fraction": pieces.sequential, "in_order_fraction": pieces.in_order,
        "first_offset": pieces.first_offset, "last_end": pieces.last_end})
    merged_in_order = streams["in_order_fraction"].to_numpy()
    # a log excerpt (four ReadFile lines) reads little but spans megabytes: the extent counts too
    span = pd.Series(pieces.last_end).groupby(parent).max().reindex(range(n)).fillna(0).to_numpy() - \
        pd.Series(pieces.first_offset).groupby(parent).min().reindex(range(n)).fillna(0).to_numpy()
    out["interleave_score"] = out["task_in_order_fraction"].to_numpy() - merged_in_order
    out["interleaved"] = (
        (streams["tasks"].to_numpy() >= th.interleave_min_tasks)
        & (out["task_in_order_fraction"] >= th.interleave_task_in_order_min).to_numpy()
        & (merged_in_order <= th.interleave_merged_in_order_max)
        & (out["interleave_score"] >= th.interleave_min_score).to_numpy()
        & (np.maximum(streams["bytes"].to_numpy(), span) >= th.interleave_min_bytes))
    return out, tasks


def stream_rows(acc: Accesses, ofd_key: int, opened: int, file_id: int) -> np.ndarray:
    """Rows of one open file / FUSE handle (``acc.handle`` key, ``acc.opened``) on one file, in time order."""
    rows = np.flatnonzero((acc.handle == ofd_key) & (acc.opened == opened) & (acc.file == file_id))
    return rows[np.argsort(acc.ts[rows], kind="stable")]


def evidence(acc: Accesses, rows: np.ndarray, inode: int, handle: int, lines: int) -> list[dict]:
    """The merged stream where tasks first take turns: one row per request (gcsfuse's log fields)."""
    tids = acc.tid[rows]
    switches = np.flatnonzero(tids[1:] != tids[:-1])
    start = int(switches[0]) if len(switches) else 0
    rows = rows[start:start + lines]
    return [{"inode": inode, "tid": t, "handle": handle, "offset": o, "bytes": b}
            for t, o, b in zip(acc.tid[rows].tolist(), acc.offset[rows].tolist(), acc.nbytes[rows].tolist(),
                               strict=True)]
