"""The page-cache view: misses (bytes fetched), mmap faults, readahead windows, per file and task."""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.analyze.views.accesses import Accesses
from readtrace.analyze.views.fileindex import FileIndex
from readtrace.analyze.views.grouping import stable_by_group, union_length

READAHEAD_OPS = ("sync_ra", "async_ra")
# pages fetched into the cache: misses seen by eBPF, or runs the residency sampler saw become resident
MISS_OPS = ("miss", "resident")
MMAP_OPS = ("fault", "map_pages")


def page_rows(pages: pd.DataFrame, files: FileIndex) -> pd.DataFrame:
    """Pages with a file id, valid sizes only."""
    out = pages[["ts_ns", "pid", "tid", "op", "offset", "size"]].copy()
    out["file"] = files.lookup(pages["dev"].to_numpy(), pages["ino"].to_numpy(), pages["path"])
    return out[(out["size"] > 0) & (out["offset"] >= 0) & (out["file"] >= 0)]


def _union_by_file(rows: pd.DataFrame, n_files: int) -> np.ndarray:
    if rows.empty:
        return np.zeros(n_files)
    file = rows["file"].to_numpy().clip(min=0)
    offset = rows["offset"].to_numpy()
    order = stable_by_group(file, n_files, np.argsort(offset, kind="stable"))
    return union_length(file[order], n_files, offset[order], offset[order] + rows["size"].to_numpy()[order])


def per_file(rows: pd.DataFrame, n_files: int) -> pd.DataFrame:
    """Per file id: miss bytes (and unique), mmap bytes (unique), readahead windows, faults."""
    def total(mask, col="size"):
        sel = rows[mask]
        return np.bincount(sel["file"].clip(lower=0), weights=sel[col], minlength=n_files)

    op = rows["op"]
    is_miss = op.isin(MISS_OPS).to_numpy()
    df = pd.DataFrame({
        "cache_miss_bytes": total(is_miss),
        "cache_miss_unique_bytes": _union_by_file(rows[is_miss], n_files),
        "mmap_bytes": _union_by_file(rows[op.isin(MMAP_OPS).to_numpy()], n_files),
        "page_faults": np.bincount(rows["file"][op == "fault"].clip(lower=0), minlength=n_files),
        "readahead_windows": np.bincount(rows["file"][op.isin(READAHEAD_OPS)].clip(lower=0), minlength=n_files),
        "readahead_bytes": total(op.isin(READAHEAD_OPS).to_numpy()),
    }).astype(np.int64)
    df["cache_refetched_bytes"] = df["cache_miss_bytes"] - df["cache_miss_unique_bytes"]
    return df


def attribute(rows: pd.DataFrame, acc: Accesses) -> pd.DataFrame:
    """Misses and readahead joined to the open file that caused them: the access by the same task to
    the same file nearest in time (the read whose syscall fetched it, or the faulting mapping).
    Adds ``ofd``, ``opened`` (see Accesses) and ``file_id``."""
    wanted = rows[rows["op"].isin(("miss", *READAHEAD_OPS))]
    if wanted.empty or len(acc) == 0:
        return wanted.iloc[:0].assign(ofd=np.int64(0), opened=np.int64(0), file_id=np.int64(0))
    key = (wanted["tid"].to_numpy().astype(np.int64) << 24) ^ wanted["file"].to_numpy()
    left = pd.DataFrame({"ts": wanted["ts_ns"].to_numpy(), "key": key, "row": np.arange(len(wanted))})
    tid = acc.tid.astype(np.int64)
    mine = np.flatnonzero(np.isin((tid << 24) ^ acc.file, np.unique(key)))  # only these tasks' accesses
    mine = mine[np.argsort(acc.ts[mine], kind="stable")]
    right = pd.DataFrame({"ts": acc.ts[mine], "key": (tid[mine] << 24) ^ acc.file[mine],
                          "ofd": acc.handle[mine], "opened": acc.opened[mine]})
    joined = pd.merge_asof(left.sort_values("ts", kind="stable"), right, on="ts", by="key",
                           direction="nearest").sort_values("row")
    out = wanted.assign(ofd=joined["ofd"].to_numpy(), opened=joined["opened"].to_numpy(), file_id=wanted["file"])
    return out.dropna(subset=["ofd"]).astype({"ofd": np.int64, "opened": np.int64})


STREAM_KEYS = {"task": ["tid", "file_id"], "process": ["pid", "file_id"], "ofd": ["ofd", "opened", "file_id"],
               "file": ["file_id"]}


def add_to_streams(streams: pd.DataFrame, attributed: pd.DataFrame, page_view: bool) -> None:
    """Per stream: page-cache miss bytes, readahead bytes and windows it caused (null without a
    page-cache view; FUSE handles: null, the kernel's cache sits above them)."""
    names = ("cache_miss_bytes", "readahead_bytes", "readahead_windows")
    for name in names:
        streams[name] = np.nan
    if not page_view:
        return
    is_ra = attributed["op"].isin(READAHEAD_OPS)
    att = attributed.assign(cache_miss_bytes=np.where(attributed["op"] == "miss", attributed["size"], 0),
                            readahead_bytes=np.where(is_ra, attributed["size"], 0),
                            readahead_windows=is_ra.astype(np.int64))
    for kind, keys in STREAM_KEYS.items():
        rows = (streams["kind"] == kind).to_numpy()
        if not rows.any():
            continue
        sums = att.groupby(keys)[list(names)].sum()
        wanted = pd.MultiIndex.from_frame(streams.loc[rows, keys]) if len(keys) > 1 else \
            pd.Index(streams.loc[rows, keys[0]])
        streams.loc[rows, list(names)] = sums.reindex(wanted).fillna(0).to_numpy()
