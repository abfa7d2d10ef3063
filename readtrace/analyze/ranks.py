"""Per rank of a distributed job: bytes, time waiting, files and byte spans, and spans read twice.

Ranks come from the recorder (``meta["ranks"]``: pid -> RANK, LOCAL_RANK, WORLD_SIZE ... read from
each process's environment at exec). A process that forked without exec (a DataLoader worker, a
multiprocessing fork) belongs to its parent's rank; processes of no rank (the launcher) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from readtrace.analyze.accesses import Accesses
from readtrace.analyze.grouping import dense_codes, first_in_group, running_max_in_group, union_length

RANK_COLUMNS = ("rank", "local_rank", "world_size", "pids", "bytes_read", "wait_s", "files", "span_bytes",
                "first_s", "last_s", "load_s")


def process_ranks(meta: dict, events: pd.DataFrame) -> dict[int, dict[str, int]]:
    """pid -> its rank variables, forked children inheriting their parent's (in fork order)."""
    ranks = {int(pid): dict(rank) for pid, rank in (meta.get("ranks") or {}).items()}
    if not ranks or events is None or not len(events):
        return ranks
    forks = events[events["op"] == "fork"].sort_values("ts_ns", kind="stable")
    for parent, child in zip(forks["pid"].tolist(), forks["arg"].tolist(), strict=True):
        if parent in ranks and int(child) not in ranks:
            ranks[int(child)] = ranks[parent]
    return ranks


@dataclass
class Touches:
    """What each process touched: its reads and faults (app accesses) plus the pages it mapped that
    were cached already (``map_pages``: a second rank on a node finds the first rank's pages)."""

    pid: np.ndarray
    file: np.ndarray
    offset: np.ndarray
    end: np.ndarray
    ts: np.ndarray
    latency: np.ndarray

    @classmethod
    def of(cls, app: Accesses, pages: pd.DataFrame) -> Touches:
        mapped = pages[pages["op"] == "map_pages"] if len(pages) else pages
        if not len(mapped):  # the accesses' own columns: no copy of every access
            return cls(pid=app.pid, file=app.file, offset=app.offset, end=app.end, ts=app.ts, latency=app.latency)
        off = mapped["offset"].to_numpy(np.int64)
        end = off + mapped["size"].to_numpy(np.int64)
        col = lambda name: mapped[name].to_numpy(np.int64)  # noqa: E731
        return cls(pid=np.concatenate([app.pid.astype(np.int64), col("pid")]),
                   file=np.concatenate([app.file, col("file")]),
                   offset=np.concatenate([app.offset, off]), end=np.concatenate([app.end, end]),
                   ts=np.concatenate([app.ts, col("ts_ns")]),
                   latency=np.concatenate([app.latency, np.zeros(len(off), np.int64)]))


def per_rank(touches: Touches | None, ranks: dict[int, dict[str, int]], t0_ns: int, data_files: np.ndarray,
             waits=None) -> pd.DataFrame:
    """One row per rank (RANK_COLUMNS) over what it touched of ``data_files`` (file ids: checkpoints,
    not code and libraries); empty when the trace has no ranks.

    ``bytes_read``: bytes read, faulted or mapped from the cache; ``span_bytes``: bytes of the byte
    spans the rank touched (union over its files); ``wait_s``: time during which at least one of its
    threads waited on a file (``waits``: the time split's wait stretches, analyze/timesplit.py; without
    them its read calls' latency); ``first_s``/``last_s``: its first and last access after t0.
    """
    if not ranks or touches is None or not len(touches.pid):
        return pd.DataFrame(columns=list(RANK_COLUMNS))
    pids, rank_ids = _by_pid(ranks)
    rank = _rank_of(touches.pid, pids, rank_ids)
    mine = (rank >= 0) & np.isin(touches.file, data_files)
    rank, file, offset, end, ts, latency = _rows(mine, rank, touches.file, touches.offset, touches.end,
                                                 touches.ts, touches.latency)
    out = pd.DataFrame({"rank": np.unique(rank_ids)})
    out = out.set_index("rank", drop=False)
    if len(rank):
        # one column at a time (a frame of every column would be copied into one block)
        out["bytes_read"] = pd.Series(end - offset, copy=False).groupby(rank).sum()
        out["wait_s"] = pd.Series(latency, copy=False).groupby(rank).sum() / 1e9
        out["files"] = pd.Series(file, copy=False).groupby(rank).nunique()
        by_ts = pd.Series(ts, copy=False).groupby(rank)
        out["first_s"] = (by_ts.min() - t0_ns) / 1e9
        out["last_s"] = (by_ts.max() - t0_ns) / 1e9
        del by_ts
        out["span_bytes"] = _span_bytes(rank, file, offset, end)
    if waits is not None and len(waits.pid):
        out["wait_s"] = _wait_union(waits, pids, rank_ids)
    first_meta = {}
    for pid in sorted(ranks):
        first_meta.setdefault(ranks[pid]["rank"], ranks[pid])
    out["local_rank"] = [first_meta[r].get("local_rank", -1) for r in out.index]
    out["world_size"] = [first_meta[r].get("world_size", -1) for r in out.index]
    out["pids"] = [sorted(p for p in ranks if ranks[p]["rank"] == r) for r in out.index]
    for col in ("bytes_read", "files", "span_bytes"):
        out[col] = out.get(col, pd.Series(0, index=out.index)).fillna(0).astype(np.int64)
    out["wait_s"] = out.get("wait_s", pd.Series(0.0, index=out.index)).fillna(0.0)
    for col in ("first_s", "last_s"):
        out[col] = out.get(col, pd.Series(np.nan, index=out.index))
    out["load_s"] = out["last_s"] - out["first_s"]
    return out.reset_index(drop=True)[list(RANK_COLUMNS)]


def _by_pid(ranks: dict[int, dict[str, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(pids ascending, the rank of each)."""
    pids = np.fromiter(ranks, dtype=np.int64)
    rank_ids = np.array([ranks[p]["rank"] for p in ranks], dtype=np.int64)
    order = np.argsort(pids)
    return pids[order], rank_ids[order]


def _rank_of(pid: np.ndarray, pids: np.ndarray, rank_ids: np.ndarray) -> np.ndarray:
    """The rank of each pid (pids sorted, as _by_pid gives them); -1 for a pid of no rank."""
    pos = np.searchsorted(pids, pid)
    np.clip(pos, 0, len(pids) - 1, out=pos)  # in place from here on: one array of every row
    unknown = pids[pos] != pid
    out = np.take(rank_ids, pos, out=pos)
    out[unknown] = -1
    return out


def _rows(keep: np.ndarray, *columns: np.ndarray) -> tuple[np.ndarray, ...]:
    """The ``keep`` rows of each column; every row kept: the columns themselves (no copies)."""
    return columns if keep.all() else tuple(c[keep] for c in columns)


def _union_by_code(codes: np.ndarray, n: int, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per code 0..n-1: length of the union of its [start, end) ranges (the sort order freed before
    the union's own arrays)."""
    order = np.lexsort((start, codes))
    codes, start, end = codes[order], start[order], end[order]
    del order
    return union_length(codes, n, start, end)


def _first_rows(codes: np.ndarray, n: int) -> np.ndarray:
    """The first row of each of the ``n`` groups (codes unsorted)."""
    first = np.zeros(n, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]
    return first


def _wait_union(waits, pids: np.ndarray, rank_ids: np.ndarray) -> pd.Series:
    """Per rank: seconds covered by the union of its threads' wait stretches (pids sorted)."""
    rank = _rank_of(waits.pid.astype(np.int64), pids, rank_ids)
    mine = rank >= 0
    if not mine.any():
        return pd.Series(dtype=float)
    rank, start, end = _rows(mine, rank, waits.start.astype(np.int64, copy=False),
                             waits.end.astype(np.int64, copy=False))
    codes, n = dense_codes(rank)
    union = _union_by_code(codes, n, start, end)
    first = _first_rows(codes, n)
    return pd.Series(union / 1e9, index=rank[first])


def _span_bytes(rank: np.ndarray, file: np.ndarray, offset: np.ndarray, end: np.ndarray) -> pd.Series:
    """Per rank: bytes covered by the union of its [offset, end) ranges, file by file."""
    codes, n = dense_codes(rank, file)
    union = _union_by_code(codes, n, offset, end)
    first = _first_rows(codes, n)
    return pd.Series(union).groupby(rank[first]).sum().astype(np.int64)


def replicated_bytes(touches: Touches, ranks: dict[int, dict[str, int]], spans: pd.DataFrame,
                     data_files: np.ndarray) -> int:
    """Bytes of data files touched by more than one rank: the ranks' span bytes minus the union of all."""
    if spans.empty:
        return 0
    ranked = np.isin(touches.pid, np.fromiter(ranks, dtype=np.int64)) & np.isin(touches.file, data_files)
    if not ranked.any():
        return 0
    file, offset, end = _rows(ranked, touches.file, touches.offset, touches.end)
    codes, n = dense_codes(file)
    union = _union_by_code(codes, n, offset, end)
    return max(0, int(spans["span_bytes"].sum() - union.sum()))


def byte_spans(touches: Touches | None, ranks: dict[int, dict[str, int]], data_files: np.ndarray,
               gap: int = 0) -> dict[int, list[tuple[int, int, int]]]:
    """Per rank: the byte spans it touched of ``data_files``, as sorted, merged (file id, start, end);
    spans less than ``gap`` bytes apart are merged (the gap is cheaper to read than a new request)."""
    if not ranks or touches is None or not len(touches.pid):
        return {}
    rank = _rank_of(touches.pid, *_by_pid(ranks))
    mine = (rank >= 0) & np.isin(touches.file, data_files) & (touches.end > touches.offset)
    if not mine.any():
        return {}
    rank, file, start, end = _rows(mine, rank, touches.file.astype(np.int64, copy=False),
                                   touches.offset.astype(np.int64, copy=False), touches.end.astype(np.int64, copy=False))
    codes, _ = dense_codes(rank, file)
    order = np.lexsort((start, codes))
    codes, rank, file, start, end = codes[order], rank[order], file[order], start[order], end[order]
    reach = running_max_in_group(codes, end)
    opens = first_in_group(codes).copy()
    opens[1:] |= start[1:] > reach[:-1] + gap  # a span starts where nothing before it reaches
    heads = np.flatnonzero(opens)
    tails = np.append(heads[1:], len(start)) - 1
    out: dict[int, list[tuple[int, int, int]]] = {}
    for h, t in zip(heads.tolist(), tails.tolist(), strict=True):
        out.setdefault(int(rank[h]), []).append((int(file[h]), int(start[h]), int(reach[t])))
    return out
