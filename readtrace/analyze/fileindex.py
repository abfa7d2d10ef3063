"""One id per file: (dev, ino) when known, else the path; joins the three views of a trace."""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.analyze.filesystems import fs_profile

UNKNOWN = -1
_MINOR_MASK = (1 << 20) - 1


def _key(dev: np.ndarray, ino: np.ndarray) -> np.ndarray:
    """A single int64 for (dev, ino); inode numbers fit in 40 bits on every fs we meet."""
    return (dev.astype(np.int64) << 40) ^ ino.astype(np.int64)


class FileIndex:
    """Files of a trace, numbered 0..n-1; lookups are vectorized (hash joins, no row loops)."""

    def __init__(self, files: pd.DataFrame):
        files = files.reset_index(drop=True)
        by_ino = files["ino"].to_numpy() > 0
        ident = np.where(by_ino, _key(files["dev"].to_numpy(), files["ino"].to_numpy()).astype(str),
                         "p:" + files["path"].fillna("").astype(str).to_numpy())
        keep = ~pd.Series(ident).duplicated().to_numpy()
        self.table = files[keep].reset_index(drop=True)[["path", "dev", "ino", "size", "fstype",
                                                           "mountpoint"]].copy()
        self._refresh()

    def _refresh(self) -> None:
        """Hash indexes (dev, ino) -> row and path -> row; the first row wins where several match."""
        t = self.table
        known = t["ino"].to_numpy() > 0
        by_key = pd.Series(np.flatnonzero(known), index=_key(t["dev"].to_numpy()[known], t["ino"].to_numpy()[known]))
        by_key = by_key[~by_key.index.duplicated()]
        named = t["path"].notna().to_numpy()
        by_path = pd.Series(np.flatnonzero(named), index=t["path"][named].astype(str).to_numpy())
        by_path = by_path[~by_path.index.duplicated()]
        self._key_index, self._key_rows = by_key.index, by_key.to_numpy()
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
        ino = np.asarray(ino, dtype=np.int64)
        ids = np.full(len(dev), UNKNOWN, dtype=np.int64)
        has_ino = ino > 0
        if has_ino.any():
            ids[has_ino] = self._find(self._key_index, self._key_rows, _key(dev[has_ino], ino[has_ino]))
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
        new["ident"] = np.where(new["ino"] > 0, _key(new["dev"].to_numpy(), new["ino"].to_numpy()).astype(str),
                                "p:" + new["path"].fillna("").astype(str))
        new = new.drop_duplicates("ident")
        new["size"] = -1
        new["fstype"] = None
        new["mountpoint"] = None
        self.table = pd.concat([self.table, new.drop(columns="ident")], ignore_index=True)
        self._refresh()
        return self.lookup(dev, ino, path, add=False)

    def on_connection(self, connection: np.ndarray, nodeid: np.ndarray, used: np.ndarray) -> np.ndarray:
        """file id of FUSE requests: the FUSE file on that connection with ino == nodeid, else the only
        FUSE file the app used on that connection (connection == minor of the mount's dev)."""
        t = self.table
        is_fuse = t["fstype"].fillna("").str.startswith("fuse").to_numpy()
        minor = t["dev"].to_numpy() & _MINOR_MASK
        ids = np.full(len(connection), UNKNOWN, dtype=np.int64)
        fuse_ids = np.flatnonzero(is_fuse)
        if len(fuse_ids) == 0:
            return ids
        by_node = pd.Index(_key(minor[fuse_ids], t["ino"].to_numpy()[fuse_ids]))
        pos = by_node.get_indexer(_key(connection, nodeid))
        ids[pos >= 0] = fuse_ids[pos[pos >= 0]]
        used_fuse = np.intersect1d(fuse_ids, used)
        for conn in np.unique(connection[ids < 0]):
            candidates = used_fuse[minor[used_fuse] == conn]
            if len(candidates) == 1:
                ids[(ids < 0) & (connection == conn)] = candidates[0]
        return ids

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
