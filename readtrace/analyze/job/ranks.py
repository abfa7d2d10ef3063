"""Per rank of a distributed job: bytes, time waiting, files and byte spans, and spans read twice.

Ranks come from the recorder (``meta["ranks"]``: pid -> RANK, LOCAL_RANK, WORLD_SIZE ... read from
each process's environment at exec). A process that forked without exec (a DataLoader worker, a
multiprocessing fork) belongs to its parent's rank; processes of no rank (the launcher) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from readtrace.analyze.views.accesses import Accesses
from readtrace.analyze.views.grouping import (
    FEW_GROUPS,
    dense_codes,
    first_in_group,
    running_max_in_group,
    union_length,
)

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
    nbytes: np.ndarray  # the ends are offset + nbytes: no array of them held through the ranks
    ts: np.ndarray
    latency: np.ndarray

    @classmethod
    def of(cls, app: Accesses, pages: pd.DataFrame) -> Touches:
        mapped = pages[pages["op"] == "map_pages"] if len(pages) else pages
        if not len(mapped):  # the accesses' own columns: no copy of every access
            return cls(pid=app.pid, file=app.file, offset=app.offset, nbytes=app.nbytes, ts=app.ts,
                       latency=app.latency)
        off = mapped["offset"].to_numpy(np.int64)
        col = lambda name: mapped[name].to_numpy(np.int64)  # noqa: E731
        return cls(pid=np.concatenate([app.pid.astype(np.int64), col("pid")]),
                   file=np.concatenate([app.file, col("file")]),
                   offset=np.concatenate([app.offset, off]), nbytes=np.concatenate([app.nbytes, col("size")]),
                   ts=np.concatenate([app.ts, col("ts_ns")]),
                   latency=np.concatenate([app.latency, np.zeros(len(off), np.int64)]))


def per_rank(touches: Touches | None, ranks: dict[int, dict[str, int]], t0_ns: int, data_files: np.ndarray,
             waits=None) -> pd.DataFrame:
    """One row per rank (RANK_COLUMNS) over what it touched of ``data_files`` (file ids: checkpoints,
    not code and libraries); empty when the trace has no ranks.

    ``bytes_read``: bytes read, faulted or mapped from the cache; ``span_bytes``: bytes of the byte
    spans the rank touched (union over its files); ``wait_s``: time during which at least one of its
    threads waited on a file (``waits``: the time split's wait stretches, analyze/views/timesplit.py; without
    them its read calls' latency); ``first_s``/``last_s``: its first and last access after t0.
    """
    if not ranks or touches is None or not len(touches.pid):
        return pd.DataFrame(columns=list(RANK_COLUMNS))
    pids, rank_ids = _by_pid(ranks)
    rank = _rank_of(touches.pid, pids, rank_ids)
    mine = (rank >= 0) & np.isin(touches.file, data_files)
    rank, file, offset, nbytes, ts, latency = _rows(mine, rank, touches.file, touches.offset, touches.nbytes,
                                                    touches.ts, touches.latency)
    out = pd.DataFrame({"rank": np.unique(rank_ids)})
    out = out.set_index("rank", drop=False)
    waited = waits is not None and len(waits.pid)
    if len(rank):
        codes, n = dense_codes(rank)
        figures = {"bytes_read": (nbytes, "sum"), "files": (file, "nunique"), "first_s": (ts, "min"),
                   "last_s": (ts, "max"), **({} if waited else {"wait_s": (latency, "sum")})}
        for name, values in _per_code(codes, n, figures).items():
            out[name] = pd.Series(values, index=_labels(codes, n, rank))
        for name in ("first_s", "last_s"):
            out[name] = (out[name] - t0_ns) / 1e9
        if not waited:
            out["wait_s"] = out["wait_s"] / 1e9
        out["span_bytes"] = _span_bytes(rank, file, offset, nbytes)
    if waited:
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


def _per_code(codes: np.ndarray, n: int, figures: dict[str, tuple[np.ndarray, str]]) -> dict[str, np.ndarray]:
    """Per code 0..n-1, each figure's reduction ("sum", "min", "max", "nunique") of its values. Few
    codes: one code's rows at a time (a pandas groupby factorizes every row again for each figure)."""
    if n > FEW_GROUPS:
        return {name: getattr(pd.Series(values, copy=False).groupby(codes), how)().to_numpy()
                for name, (values, how) in figures.items()}
    out: dict[str, list] = {name: [] for name in figures}
    for k in range(n):
        rows = np.flatnonzero(codes == k)
        for name, (values, how) in figures.items():
            v = values[rows]
            out[name].append(len(np.unique(v)) if how == "nunique" else getattr(v, how)())
    return {name: np.array(v) for name, v in out.items()}


def _by_code(codes: np.ndarray, n: int, start: np.ndarray, end: np.ndarray, sizes: bool = False):
    """(code, its start, its end) per code 0..n-1 (few codes), in start order: one code's rows at a
    time, sorted only where they are not in order already (a rank's reads in time order mostly are).
    ``sizes``: ``end`` holds the ranges' sizes (their ends made one code at a time)."""
    for k in range(n):
        rows = None if n == 1 else np.flatnonzero(codes == k)
        s, e = (start, end) if rows is None else (start[rows], end[rows])
        del rows
        if sizes:
            e = np.add(s, e, dtype=np.int64)
        if len(s) > 1 and (s[1:] < s[:-1]).any():
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
        yield k, s, e


def _union_by_code(codes: np.ndarray, n: int, start: np.ndarray, end: np.ndarray, sizes: bool = False
                   ) -> np.ndarray:
    """Per code 0..n-1: length of the union of its [start, end) ranges (few codes: code by code, no
    sort of every row; else the sort order freed before the union's own arrays). ``sizes``: as
    ``_by_code``."""
    if n <= FEW_GROUPS:
        out = np.zeros(n)
        for k, s, e in _by_code(codes, n, start, end, sizes):
            out[k] = union_length(np.broadcast_to(np.int32(0), len(s)), 1, s, e)[0] if len(s) else 0.0
        return out
    if sizes:
        end = np.add(start, end, dtype=np.int64)
    order = np.lexsort((start, codes))
    codes, start, end = codes[order], start[order], end[order]
    del order
    return union_length(codes, n, start, end)


def _labels(codes: np.ndarray, n: int, values: np.ndarray) -> np.ndarray:
    """The value of each of the ``n`` codes (``values`` the same for every row of a code)."""
    out = np.zeros(n, dtype=values.dtype)
    out[codes] = values
    return out


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
    return pd.Series(union / 1e9, index=_labels(codes, n, rank))


def _span_bytes(rank: np.ndarray, file: np.ndarray, offset: np.ndarray, nbytes: np.ndarray) -> pd.Series:
    """Per rank: bytes covered by the union of its [offset, offset + nbytes) ranges, file by file."""
    codes, n = dense_codes(rank, file)
    union = _union_by_code(codes, n, offset, nbytes, sizes=True)
    return pd.Series(union).groupby(_labels(codes, n, rank)).sum().astype(np.int64)


def replicated_bytes(touches: Touches, ranks: dict[int, dict[str, int]], spans: pd.DataFrame,
                     data_files: np.ndarray) -> int:
    """Bytes of data files touched by more than one rank: the ranks' span bytes minus the union of all."""
    if spans.empty:
        return 0
    ranked = np.isin(touches.pid, np.fromiter(ranks, dtype=np.int64)) & np.isin(touches.file, data_files)
    if not ranked.any():
        return 0
    file, offset, nbytes = _rows(ranked, touches.file, touches.offset, touches.nbytes)
    codes, n = dense_codes(file)
    union = _union_by_code(codes, n, offset, nbytes, sizes=True)
    return max(0, int(spans["span_bytes"].sum() - union.sum()))


def byte_spans(touches: Touches | None, ranks: dict[int, dict[str, int]], data_files: np.ndarray,
               gap: int = 0) -> dict[int, list[tuple[int, int, int]]]:
    """Per rank: the byte spans it touched of ``data_files``, as sorted, merged (file id, start, end);
    spans less than ``gap`` bytes apart are merged (the gap is cheaper to read than a new request)."""
    if not ranks or touches is None or not len(touches.pid):
        return {}
    rank = _rank_of(touches.pid, *_by_pid(ranks))
    mine = (rank >= 0) & np.isin(touches.file, data_files) & (touches.nbytes > 0)
    if not mine.any():
        return {}
    rank, file, start, nbytes = _rows(mine, rank, touches.file.astype(np.int64, copy=False),
                                      touches.offset.astype(np.int64, copy=False), touches.nbytes)
    codes, n = dense_codes(rank, file)
    out: dict[int, list[tuple[int, int, int]]] = {}
    if n <= FEW_GROUPS:
        rank_of, file_of = _labels(codes, n, rank), _labels(codes, n, file)
        for k, s, e in _by_code(codes, n, start, nbytes, sizes=True):
            reach = np.maximum.accumulate(e)
            opens = np.ones(len(s), dtype=bool)
            opens[1:] = s[1:] > reach[:-1] + gap  # a span starts where nothing before it reaches
            heads = np.flatnonzero(opens)
            tails = np.append(heads[1:], len(s)) - 1
            spans = out.setdefault(int(rank_of[k]), [])
            spans += [(int(file_of[k]), int(s[h]), int(reach[t])) for h, t in zip(heads.tolist(), tails.tolist(),
                                                                                 strict=True)]
        return out
    end = np.add(start, nbytes, dtype=np.int64)
    order = np.lexsort((start, codes))
    codes, rank, file, start, end = codes[order], rank[order], file[order], start[order], end[order]
    reach = running_max_in_group(codes, end)
    opens = first_in_group(codes).copy()
    opens[1:] |= start[1:] > reach[:-1] + gap  # a span starts where nothing before it reaches
    heads = np.flatnonzero(opens)
    tails = np.append(heads[1:], len(start)) - 1
    for h, t in zip(heads.tolist(), tails.tolist(), strict=True):
        out.setdefault(int(rank[h]), []).append((int(file[h]), int(start[h]), int(reach[t])))
    return out
