"""Which file each FUSE node is, from what the trace saw, never from ``nodeid == ino``.

A FUSE nodeid is the daemon's own handle for a node (libfuse counts them, go-fuse uses pointers);
the inode number the application sees is whatever the daemon reports in its attributes, so the two
agree only for some daemons. Evidence, strongest first:

1. OPEN requests. The kernel sends FUSE_OPEN from the thread inside open(2): an OPEN of thread T
   while T's open syscall was in flight names that open's file (dev/ino from the kernel's own
   struct file).
2. READ requests. The kernel sends them from the thread whose read or page fault needs the data
   (readahead included): the latest application access of that thread on a file of the same
   connection names the file. A nodeid takes the file most of its READs point to.
3. The only FUSE file the application used on the connection (``handle_files``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.analyze.views.fileindex import UNKNOWN, FileIndex
from readtrace.trace.schema import FUSE_OPEN, FUSE_READ

_KEY = ["connection", "nodeid"]


def _requests(fuse: pd.DataFrame, opcode: int) -> pd.DataFrame:
    req = fuse[(fuse["opcode"] == opcode) & (fuse["nodeid"] > 0)]
    return pd.DataFrame({"ts": req["ts_ns"].to_numpy(np.int64), "tid": req["tid"].to_numpy(np.int64),
                         "connection": req["connection"].to_numpy(np.int64),
                         "nodeid": req["nodeid"].to_numpy(np.uint64)}).sort_values("ts", kind="stable")


def _on_connection(file: np.ndarray, files: FileIndex) -> np.ndarray:
    """The FUSE connection of each file id (-1: not on a FUSE mount, or unknown)."""
    ids, conns = files.fuse_files()
    conn_of = np.full(len(files) + 1, -1, dtype=np.int64)  # the last slot answers UNKNOWN (-1)
    conn_of[ids] = conns
    return conn_of[file]


def _from_opens(fuse: pd.DataFrame, opens: pd.DataFrame, files: FileIndex) -> pd.DataFrame:
    req = _requests(fuse, FUSE_OPEN)
    if req.empty or opens.empty:
        return pd.DataFrame(columns=[*_KEY, "file"])
    file = files.lookup(opens["dev"].to_numpy(), opens["ino"].to_numpy(), opens["path"], add=False)
    ts = opens["ts_ns"].to_numpy(np.int64)
    calls = pd.DataFrame({"ts": ts, "tid": opens["tid"].to_numpy(np.int64),
                          "end": ts + opens["latency_ns"].to_numpy(np.int64), "file": file,
                          "file_conn": _on_connection(file, files)}).sort_values("ts", kind="stable")
    joined = pd.merge_asof(req, calls, on="ts", by="tid", direction="backward")
    hit = (joined["ts"] <= joined["end"]) & (joined["file_conn"] == joined["connection"]) & (joined["file"] >= 0)
    return joined.loc[hit, [*_KEY, "file"]].astype({"file": np.int64})


def _from_reads(fuse: pd.DataFrame, app, files: FileIndex) -> pd.DataFrame:
    req = _requests(fuse, FUSE_READ)
    conn = _on_connection(app.file, files) if len(app) and not req.empty else np.empty(0, np.int64)
    on_fuse = conn >= 0
    if req.empty or not on_fuse.any():
        return pd.DataFrame(columns=[*_KEY, "file"])
    seen = pd.DataFrame({"ts": app.ts[on_fuse].astype(np.int64), "tid": app.tid[on_fuse].astype(np.int64),
                         "connection": conn[on_fuse], "file": app.file[on_fuse]}).sort_values("ts", kind="stable")
    joined = pd.merge_asof(req, seen, on="ts", by=["tid", "connection"], direction="backward").dropna(subset="file")
    votes = joined.groupby([*_KEY, "file"]).size().rename("n").reset_index()
    best = votes.sort_values("n", ascending=False, kind="stable").drop_duplicates(_KEY)
    return best[[*_KEY, "file"]].astype({"file": np.int64})


def node_files(fuse: pd.DataFrame, events: pd.DataFrame, app, files: FileIndex) -> pd.DataFrame:
    """One row per (connection, nodeid) the evidence names: its file id."""
    opens = events[(events["op"] == "open") & (events["ret"] >= 0)]
    found = pd.concat([_from_opens(fuse, opens, files), _from_reads(fuse, app, files)], ignore_index=True)
    return found.drop_duplicates(_KEY).reset_index(drop=True)  # an OPEN's word wins over READ votes


def handle_files(table: pd.DataFrame, nodes: pd.DataFrame, files: FileIndex, used: np.ndarray) -> np.ndarray:
    """File id of each FUSE handle (connection, nodeid, fh): its node's file, else the only FUSE file
    the application used on that connection (without an application view: the only one listed)."""
    ids = np.full(len(table), UNKNOWN, dtype=np.int64)
    if len(table) == 0:
        return ids
    if len(nodes):
        index = pd.MultiIndex.from_arrays([nodes["connection"].to_numpy(np.int64),
                                           nodes["nodeid"].to_numpy(np.uint64)])
        pos = index.get_indexer(pd.MultiIndex.from_arrays([table["connection"].to_numpy(np.int64),
                                                           table["nodeid"].to_numpy(np.uint64)]))
        ids[pos >= 0] = nodes["file"].to_numpy(np.int64)[pos[pos >= 0]]
    fuse_ids, conns = files.fuse_files()
    used_fuse = np.isin(fuse_ids, used)
    connection = table["connection"].to_numpy(np.int64)
    for conn in np.unique(connection[ids < 0]):
        candidates = fuse_ids[used_fuse & (conns == conn)]
        if len(candidates) == 0:  # no application view (a FUSE-only trace): the files the trace lists
            candidates = fuse_ids[conns == conn]
        if len(candidates) == 1:
            ids[(ids < 0) & (connection == conn)] = candidates[0]
    return ids
