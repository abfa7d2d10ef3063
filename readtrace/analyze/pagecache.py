"""The page-cache view: misses (bytes fetched), mmap faults, readahead windows, per file and task."""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.analyze.accesses import Accesses
from readtrace.analyze.fileindex import FileIndex
from readtrace.analyze.grouping import stable_by_group, union_length

READAHEAD_OPS = ("sync_ra", "async_ra")
MMAP_OPS = ("fault", "map_pages")


def page_rows(pages: pd.DataFrame, files: FileIndex) -> pd.DataFrame:
    """Pages with a file id, valid sizes only."""
    out = pages[["ts_ns", "pid", "tid", "op", "offset", "size"]].copy()
    out["file"] = files.lookup(pages["dev"].to_numpy(), pages["ino"].to_numpy(), pages["path"])
    return out[(out["size"] > 0) & (out["offset"] >= 0)]


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
    is_miss = (op == "miss").to_numpy()
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


def attribute(rows: pd.DataFrame, acc: Accesses, by_time: np.ndarray) -> pd.DataFrame:
    """Misses and readahead joined to the open file that caused them: the latest access by the same
    task to the same file at or before the page event (the read's fd or the faulting mapping)."""
    wanted = rows[rows["op"].isin(("miss", *READAHEAD_OPS))]
    if wanted.empty or len(acc) == 0:
        return wanted.assign(ofd=pd.Series(dtype=np.int64)).iloc[:0]
    left = pd.DataFrame({"ts": wanted["ts_ns"].to_numpy(), "key": (wanted["tid"].to_numpy().astype(np.int64) << 24)
                         ^ wanted["file"].to_numpy(), "row": np.arange(len(wanted))}).sort_values("ts")
    right = pd.DataFrame({"ts": acc.ts[by_time], "key": (acc.tid[by_time] << 24) ^ acc.file[by_time],
                          "ofd": acc.ofd[by_time]})
    joined = pd.merge_asof(left, right, on="ts", by="key", direction="backward").sort_values("row")
    out = wanted.copy()
    out["ofd"] = joined["ofd"].to_numpy()
    return out.dropna(subset=["ofd"]).astype({"ofd": np.int64})
