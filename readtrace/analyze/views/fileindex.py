"""One id per file: (dev, ino) when known, else the path; joins the three views of a trace.

Inode numbers are u64 (object-store clients hash paths into all 64 bits): the (dev, ino) pair is
matched exactly, as two columns, never packed into one integer.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.fs.knowledge import fs_profile

UNKNOWN = -1
MINOR_MASK = (1 << 20) - 1  # a FUSE mount's dev is (0, minor) and its connection number is that minor


def _pairs(dev, ino) -> pd.MultiIndex:
    return pd.MultiIndex.from_arrays([np.asarray(dev, dtype=np.int64), np.asarray(ino, dtype=np.uint64)])


class FileIndex:
    """Files of a trace, numbered 0..n-1; lookups are vectorized (hash joins, no row loops)."""

    def __init__(self, files: pd.DataFrame):
        files = files.reset_index(drop=True)
        keep = ~_repeats(files["dev"].to_numpy(), files["ino"].to_numpy(), files["path"])
        self.table = files[keep].reset_index(drop=True)[["path", "dev", "ino", "size", "fstype",
                                                           "mountpoint"]].copy()
        self.table["ino"] = self.table["ino"].astype(np.uint64)
        self._refresh()

    def _refresh(self) -> None:
        """Hash indexes (dev, ino) -> row and path -> row; the first row wins where several match."""
        t = self.table
        known = np.flatnonzero(t["ino"].to_numpy() > 0)
        by_pair = pd.Series(known, index=_pairs(t["dev"].to_numpy()[known], t["ino"].to_numpy()[known]))
        by_pair = by_pair[~by_pair.index.duplicated()]
        named = t["path"].notna().to_numpy()
        by_path = pd.Series(np.flatnonzero(named), index=t["path"][named].astype(str).to_numpy())
        by_path = by_path[~by_path.index.duplicated()]
        self._pair_index, self._pair_rows = by_pair.index, by_pair.to_numpy()
        self._path_index, self._path_rows = by_path.index, by_path.to_numpy()

    @staticmethod
    def _find(index: pd.Index, rows: np.ndarray, wanted) -> np.ndarray:
        pos = index.get_indexer(wanted)
        return np.where(pos >= 0, rows[pos] if len(rows) else -1, UNKNOWN)

    def __len__(self) -> int:
        return len(self.table)

    def lookup(self, dev, ino, path=None, add: bool = True) -> np.ndarray:
        """file id per row from (dev, ino) or, failing that, path; unseen files are added."""
        dev = np.asarray(dev, dtype=np.int64)
        ino = np.asarray(ino, dtype=np.uint64)
        ids = np.full(len(dev), UNKNOWN, dtype=np.int64)
        has_ino = ino > 0
        if has_ino.any() and len(self._pair_rows):
            ids[has_ino] = self._find(self._pair_index, self._pair_rows, _pairs(dev[has_ino], ino[has_ino]))
        if path is not None:
            path = pd.Series(path).reset_index(drop=True)
            by_path = (ids < 0) & path.notna().to_numpy()
            if by_path.any():
                ids[by_path] = self._find(self._path_index, self._path_rows, path[by_path].astype(str).to_numpy())
        if add:
            ids = self._add_missing(ids, dev, ino, path)
        return ids

    def _add_missing(self, ids, dev, ino, path) -> np.ndarray:
        missing = ids < 0
        has_path = path.notna().to_numpy() if path is not None else np.zeros(len(ids), bool)
        missing &= (ino > 0) | has_path
        if not missing.any():
            return ids
        new = pd.DataFrame({
            "path": path[missing].to_numpy() if path is not None else None,
            "dev": dev[missing], "ino": ino[missing]})
        new = new[~_repeats(new["dev"].to_numpy(), new["ino"].to_numpy(), new["path"])]
        new["size"] = -1
        new["fstype"] = None
        new["mountpoint"] = None
        self.table = pd.concat([self.table, new], ignore_index=True)
        self._refresh()
        return self.lookup(dev, ino, path, add=False)

    def fuse_files(self) -> tuple[np.ndarray, np.ndarray]:
        """(file ids on FUSE mounts, their connection numbers)."""
        t = self.table
        ids = np.flatnonzero(t["fstype"].fillna("").str.startswith("fuse").to_numpy())
        return ids, t["dev"].to_numpy(dtype=np.int64)[ids] & MINOR_MASK

    def finish(self) -> pd.DataFrame:
        """The files table with an ``fs`` family and whether the fs keeps per-handle streams."""
        t = self.table.copy()
        t["fstype"] = t["fstype"].fillna("")
        unnamed = t["path"].isna()
        t.loc[unnamed, "path"] = "<dev " + t["dev"][unnamed].astype(str) + " ino " + t["ino"][unnamed].astype(str) + ">"
        profiles = [fs_profile(x) for x in t["fstype"]]
        t["fs_family"] = [p.family for p in profiles]
        t["per_handle_stream"] = [p.per_handle_stream for p in profiles]
        t["remote"] = [p.remote for p in profiles]
        t.index.name = "file_id"
        return t


def _repeats(dev: np.ndarray, ino: np.ndarray, path: pd.Series) -> np.ndarray:
    """Whether each row names a file an earlier row named: same (dev, ino) when the inode is known,
    else the same path."""
    ino = np.asarray(ino, dtype=np.uint64)
    known = ino > 0
    same_pair = _pairs(dev, ino).duplicated()
    names = pd.Series(path).reset_index(drop=True).fillna("").astype(str)
    same_path = np.zeros(len(ino), dtype=bool)
    same_path[~known] = names[~known].duplicated().to_numpy()
    return np.where(known, same_pair, same_path)
