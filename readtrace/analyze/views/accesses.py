"""The accesses of a trace as flat numpy columns: reads (syscalls), mmap faults, FUSE requests.

Every access carries the ids the streams group by: task (tid), process (pid), the open file it went
through (``handle``), file id. Built with hash joins, no row loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from readtrace.analyze.views.fileindex import UNKNOWN, FileIndex
from readtrace.analyze.views.grouping import dense_codes, is_one_value, one_value, take
from readtrace.analyze.views.nodes import handle_files, node_files
from readtrace.trace.schema import FUSE_READ

SOURCE_READ, SOURCE_FAULT, SOURCE_FUSE = 0, 1, 2
# Synthesized open-file keys when the recorder could not read the kernel's struct file * (positive,
# so they never collide with kernel pointers, which are negative as int64): (pid, fd) or (pid, file).
FD_KEY = 1 << 62
MAPPING_KEY = 3 << 61
_ANCESTRY_LEVELS = 8  # fork depth searched for the process that created a mapping


@dataclass
class Accesses:
    """Column arrays, one row per access with bytes > 0 and a known offset."""

    ts: np.ndarray  # int64 ns
    pid: np.ndarray  # int32 (the trace's dtype: no 10 M-row copy) or int64
    tid: np.ndarray  # int32 or int64
    file: np.ndarray  # int64 file id (-1 unknown)
    # int64: the open file the access went through. Reads and faults: the open file description's key
    # (kernel struct file *, else a synthesized (pid, fd) / (pid, file) key); FUSE requests: the
    # daemon handle's row in the handle table (Analysis.handles).
    handle: np.ndarray
    opened: np.ndarray  # int64: when that open file was opened, where its key was reused (else 0)
    offset: np.ndarray  # int64
    # int32 (a lean load's, where every value fits: sums of them must name int64) or int64
    nbytes: np.ndarray  # bytes returned (> 0)
    latency: np.ndarray  # ns (0 unknown)
    source: np.ndarray  # int8 SOURCE_*

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.offset + self.nbytes

    @classmethod
    def concat(cls, parts: list[Accesses]) -> Accesses:
        names = ("ts", "pid", "tid", "file", "handle", "opened", "offset", "nbytes", "latency", "source")
        used = [p for p in parts if len(p)]
        if len(used) == 1:
            return used[0]
        return cls(**{n: np.concatenate([getattr(p, n) for p in parts]) for n in names})


def _i64(series: pd.Series) -> np.ndarray:
    """The column as int64 numpy: a view when it already is one (no copy of a 10 M-row column)."""
    values = series.to_numpy()
    if values.dtype == np.int64:
        return values
    if values.dtype.kind in "iu":
        if is_one_value(values):  # a lean load's column of one value: stays one
            return np.broadcast_to(values[:1].astype(np.int64), len(values))
        return values.astype(np.int64)
    return series.to_numpy(dtype=np.int64, na_value=0)


def _ints(series: pd.Series) -> np.ndarray:
    """The column as integer numpy of its own width (a view), int64 where it is not integer."""
    values = series.to_numpy()
    return values if values.dtype.kind in "iu" else _i64(series)


def _lookup_table(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray, default=UNKNOWN) -> np.ndarray:
    """values[last row with key == wanted], vectorized; default where absent. Binary search in the
    (few) distinct keys: no hash table over the (many) wanted rows."""
    if len(keys) == 0:
        return np.full(len(wanted), default, dtype=np.int64)
    if is_one_value(wanted):  # one key wanted: one lookup
        return np.broadcast_to(_lookup_table(keys, values, wanted[:1].copy(), default), len(wanted))
    last = pd.Series(values).groupby(keys).last()  # sorted by key
    index, found = last.index.to_numpy(), last.to_numpy(dtype=np.int64)
    if len(index) == 1:  # one key (e.g. one shared open file): a comparison, no search
        return np.where(wanted == index[0], found[0], np.int64(default))
    pos = np.searchsorted(index, wanted)
    np.minimum(pos, len(index) - 1, out=pos)
    out = found[pos]
    out[index[pos] != wanted] = default
    return out


def _fd_key(pid: np.ndarray, fd: np.ndarray) -> np.ndarray:
    return (pid.astype(np.int64) << 24) ^ fd.astype(np.int64)


def app_files(events: pd.DataFrame, files: FileIndex) -> pd.DataFrame:
    """Rows of events that name a file (open, dup, mmap, reads with a path) with their file id."""
    named = events[(events["ino"] > 0) | events["path"].notna()]
    out = named[["ts_ns", "pid", "op", "fd", "ofd", "offset", "size"]].copy()
    out["file"] = files.lookup(named["dev"].to_numpy(), named["ino"].to_numpy(), named["path"])
    return out


def _open_key(events: pd.DataFrame) -> np.ndarray:
    """The open-file key of event rows: the kernel's struct file *, else (pid, fd)."""
    ofd = _i64(events["ofd"])
    return np.where(ofd != 0, ofd, _fd_key(_i64(events["pid"]), _i64(events["fd"])) | FD_KEY)


def opened_at(keys: np.ndarray, ts: np.ndarray, opens: pd.DataFrame) -> np.ndarray:
    """When the open file behind each access was opened, for keys opened more than once (0 elsewhere).

    The kernel recycles a freed struct file's address and a closed fd's number, so one key can name
    several open files in turn; (key, open time) tells them apart. Vectorized as-of join, run only on
    the accesses whose key was reused. None reused: 0 broadcast (read-only, no memory per row)."""
    none = np.broadcast_to(np.int64(0), len(keys))
    if opens.empty or len(keys) == 0:
        return none
    open_keys = _open_key(opens)
    counts = pd.Series(open_keys).value_counts()
    reused = counts.index[counts.to_numpy() > 1].to_numpy()
    if len(reused) == 0:
        return none
    out = np.zeros(len(keys), dtype=np.int64)
    rows = np.flatnonzero(np.isin(keys, reused))
    left = pd.DataFrame({"ts": ts[rows], "key": keys[rows], "row": rows}).sort_values("ts", kind="stable")
    pick = np.isin(open_keys, reused)
    right = pd.DataFrame({"ts": _i64(opens["ts_ns"])[pick], "key": open_keys[pick]})
    right = right.assign(opened=right["ts"]).sort_values("ts", kind="stable")
    joined = pd.merge_asof(left, right, on="ts", by="key", direction="backward")
    out[joined["row"].to_numpy()] = joined["opened"].fillna(0).to_numpy(dtype=np.int64)
    return out


def read_accesses(others: pd.DataFrame, files: FileIndex, reads: pd.DataFrame) -> tuple[Accesses, pd.DataFrame]:
    """Read syscalls (``reads``: one row per call, ``Trace.calls()``) that returned bytes at a known
    offset; also the reads that moved nothing (``file``, ``ret``: 0 at end of file, < 0 failed) or
    whose offset is unknown. ``others``: the other application events (opens, dups: ``Trace.others``)."""

    def col(name: str, convert=_i64) -> np.ndarray:
        return convert(reads[name])

    pid, fd, ofd = col("pid", _ints), col("fd"), col("ofd")
    named = app_files(others, files)
    path = reads["path"]
    file = files.lookup(col("dev"), reads["ino"].to_numpy(), path)
    del path
    todo = file < 0
    if todo.any():
        with_ofd = named[named["ofd"] != 0]
        file[todo] = _lookup_table(_i64(with_ofd["ofd"]), with_ofd["file"].to_numpy(), take(ofd, todo))
        todo = file < 0
        opens = named[named["op"] == "open"]
        file[todo] = _lookup_table(_fd_key(_i64(opens["pid"]), _i64(opens["fd"])), opens["file"].to_numpy(),
                                   _fd_key(take(pid, todo), take(fd, todo)))
    del todo, fd
    file = one_value(file)
    ret, offset = col("ret", _ints), col("offset")
    moved = (ret > 0) & (offset >= 0)
    idle = pd.DataFrame({"file": file[~moved], "ret": ret[~moved], "offset": offset[~moved]})
    keep = None if moved.all() else moved

    def kept(values: np.ndarray) -> np.ndarray:
        return values if keep is None else take(values, keep)

    # Without the kernel's struct file id, a (pid, fd) pair stands for the open file description.
    ofd_key = ofd if (ofd != 0).all() else np.where(ofd != 0, ofd, _fd_key(pid, col("fd")) | FD_KEY)
    ts = col("ts_ns")
    opened = opened_at(ofd_key, ts, others[others["op"] == "open"])
    acc = Accesses(
        ts=kept(ts), pid=kept(pid), tid=kept(col("tid", _ints)), file=kept(file), handle=kept(ofd_key),
        opened=kept(opened), offset=kept(offset), nbytes=kept(ret), latency=kept(col("latency_ns", _ints)),
        source=np.full(int(moved.sum()), SOURCE_READ, np.int8))
    return acc, idle


def _ancestors(events: pd.DataFrame) -> pd.Series:
    forks = events[events["op"] == "fork"]
    return pd.Series(_i64(forks["pid"]), index=_i64(forks["arg"])).groupby(level=0).last()


def fault_accesses(events: pd.DataFrame, pages: pd.DataFrame, files: FileIndex) -> Accesses:
    """mmap page faults, attributed to the mapping's open file description.

    A fault belongs to the latest mmap of its file by its process or, for forked workers that inherited
    the mapping, by the nearest ancestor that mapped it. No mapping found: one per (pid, file).
    """
    faults = pages[pages["op"] == "fault"]
    file = files.lookup(_i64(faults["dev"]), faults["ino"].to_numpy(), faults["path"])
    pid = _i64(faults["pid"])
    mmaps = events[events["op"] == "mmap"]
    mfile = files.lookup(_i64(mmaps["dev"]), mmaps["ino"].to_numpy(), mmaps["path"], add=False)
    mofd = _open_key(mmaps)
    mopened = opened_at(mofd, _i64(mmaps["ts_ns"]), events[events["op"] == "open"])
    mkey = _fd_key(_i64(mmaps["pid"]), mfile)
    ofd = np.zeros(len(faults), dtype=np.int64)
    opened = np.zeros(len(faults), dtype=np.int64)
    parent = _ancestors(events)
    owner = pid.copy()
    for _ in range(_ANCESTRY_LEVELS):
        todo = ofd == 0
        if not todo.any():
            break
        wanted = _fd_key(owner[todo], file[todo])
        ofd[todo] = _lookup_table(mkey, mofd, wanted, default=0)
        opened[todo] = _lookup_table(mkey, mopened, wanted, default=0)
        todo = ofd == 0
        pos = parent.index.get_indexer(owner[todo])
        if not (pos >= 0).any():
            break
        owner[np.flatnonzero(todo)[pos >= 0]] = parent.to_numpy()[pos[pos >= 0]]
    ofd = np.where(ofd != 0, ofd, _fd_key(pid, file) | MAPPING_KEY)
    return Accesses(
        ts=_i64(faults["ts_ns"]), pid=pid, tid=_i64(faults["tid"]), file=file, handle=ofd, opened=opened,
        offset=_i64(faults["offset"]), nbytes=_i64(faults["size"]).clip(min=0),
        latency=np.zeros(len(faults), np.int64), source=np.full(len(faults), SOURCE_FAULT, np.int8))


def fuse_accesses(fuse: pd.DataFrame, events: pd.DataFrame, app: Accesses, files: FileIndex
                  ) -> tuple[Accesses, pd.DataFrame]:
    """FUSE READ requests as accesses on their handle; also the handle table (connection, nodeid, fh)
    with each handle's file (see nodes.py: a nodeid is not an inode number)."""
    reads = fuse[(fuse["opcode"] == FUSE_READ) & (fuse["offset"] >= 0)]
    size = _i64(reads["size"])
    reply = _i64(reads["reply_bytes"])
    nbytes = np.where(reply >= 0, np.minimum(size, reply), size)
    keep = nbytes > 0
    reads, nbytes = reads[keep], nbytes[keep]
    conn = _i64(reads["connection"])
    node, fh = reads["nodeid"].to_numpy(np.uint64), reads["fh"].to_numpy(np.uint64)
    codes, n = dense_codes(conn, node, fh)
    table = pd.DataFrame({"connection": conn, "nodeid": node, "fh": fh}).groupby(codes).first() \
        .reindex(range(n)).reset_index(drop=True)
    table["file"] = handle_files(table, node_files(fuse, events, app, files), files, np.unique(app.file)) \
        if len(table) else np.zeros(0, dtype=np.int64)
    acc = Accesses(
        ts=_i64(reads["ts_ns"]), pid=_i64(reads["pid"]), tid=_i64(reads["tid"]),
        file=table["file"].to_numpy()[codes], handle=codes.astype(np.int64),  # the handle's row in table
        opened=np.zeros(len(reads), dtype=np.int64),
        offset=_i64(reads["offset"]), nbytes=nbytes, latency=_i64(reads["latency_ns"]),
        source=np.full(len(reads), SOURCE_FUSE, np.int8))
    return acc, table
