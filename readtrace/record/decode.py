"""Turn probe records into the trace tables (events, pages, fuse, files), batch by batch.

Vectorised over numpy record arrays; the only per-record Python work is for opens/forks/execs and
FUSE requests (few). State carried between batches: comm per thread, the traced threads, what each
(dev, ino) is called, and FUSE requests still waiting for their reply.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from readtrace.record.records import KIND

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
FUSE_OUT_HEADER = 16  # struct fuse_out_header precedes the data of every reply

APP_OPS = {
    KIND["READ"]: "read", KIND["PREAD"]: "pread", KIND["READV"]: "readv", KIND["PREADV"]: "preadv",
    KIND["MMAP"]: "mmap", KIND["MUNMAP"]: "munmap", KIND["LSEEK"]: "lseek", KIND["FADVISE"]: "fadvise",
    KIND["READAHEAD"]: "readahead", KIND["CLOSE"]: "close", KIND["DUP"]: "dup", KIND["EXIT"]: "exit",
}
PAGE_OPS = {
    KIND["FAULT"]: "fault", KIND["MAP_PAGES"]: "map_pages", KIND["GET_PAGES"]: "get_pages",
    KIND["MISS"]: "miss", KIND["SYNC_RA"]: "sync_ra", KIND["ASYNC_RA"]: "async_ra",
}
STR_OPS = {KIND["OPEN"]: "open", KIND["FORK"]: "fork", KIND["THREAD"]: "thread", KIND["EXEC"]: "exec"}


def _op_table(ops: dict[int, str]) -> np.ndarray:
    table = np.full(max(KIND.values()) + 1, None, dtype=object)
    for kind, name in ops.items():
        table[kind] = name
    return table


_APP_TABLE, _PAGE_TABLE, _STR_TABLE = _op_table(APP_OPS), _op_table(PAGE_OPS), _op_table(STR_OPS)


def exit_status(wait_status: np.ndarray) -> np.ndarray:
    """Kernel exit_code (wait status) -> shell-style exit code (128+signal when killed)."""
    sig = wait_status & 0x7F
    return np.where(sig != 0, 128 + sig, (wait_status >> 8) & 0xFF)


def _cstr(values: np.ndarray) -> list[str]:
    return [v.decode(errors="replace") for v in values]


@dataclass
class FileInfo:
    path: str | None
    size: int


@dataclass
class Decoder:
    """Stateful batch decoder; see the module docstring."""

    root_pid: int
    cwd: str
    comm: dict[int, str] = field(default_factory=dict)
    _comm_history: list[tuple[int, int, str]] = field(default_factory=list)  # (tid, from ts, comm)
    tids: set[int] = field(default_factory=set)
    files: dict[tuple[int, int], FileInfo] = field(default_factory=dict)
    _fuse_open: dict[tuple[int, int], dict] = field(default_factory=dict)

    def __post_init__(self):
        self.tids.add(self.root_pid)
        self._set_comm(self.root_pid, 0, Path("/proc/self/comm").read_text().strip())  # until it execs

    # --- strs ring: open / fork / thread / exec ---------------------------------------------------
    def strs(self, rec: np.ndarray) -> pd.DataFrame:
        if rec.size == 0:
            return pd.DataFrame()
        kinds = rec["kind"].astype(np.int64)
        comms, paths = _cstr(rec["comm"]), _cstr(rec["path"])
        is_open = kinds == KIND["OPEN"]
        for i, kind in enumerate(kinds):
            pid, tid, new_id = int(rec["pid"][i]), int(rec["tid"][i]), int(rec["arg"][i])
            ts = int(rec["ts_ns"][i])
            if kind in (KIND["FORK"], KIND["THREAD"]):
                self.tids.add(new_id)
                self._set_comm(new_id, ts, comms[i])
            elif kind == KIND["EXEC"]:
                self._set_comm(tid, ts, _exec_comm(paths[i], comms[i]))
                self._remember_exec(paths[i])
            else:
                if tid not in self.comm:
                    self._set_comm(tid, 0, comms[i])
                if is_open[i]:
                    paths[i] = self._absolute(paths[i], pid)
                    self._remember_open(rec[i], paths[i])
        return pd.DataFrame({
            "ts_ns": rec["ts_ns"].astype(np.int64), "pid": rec["pid"].astype(np.int32),
            "tid": rec["tid"].astype(np.int32), "comm": self._comms(rec["tid"], rec["ts_ns"]),
            "op": _STR_TABLE[kinds], "fd": np.where(is_open, rec["fd"], -1).astype(np.int32),
            "ofd": rec["ofd"].astype(np.int64), "path": [p if p else None for p in paths],
            "dev": rec["dev"].astype(np.int64), "ino": rec["ino"].astype(np.int64),
            "offset": np.full(rec.size, -1, np.int64), "size": np.where(is_open, rec["size"], -1),
            "ret": rec["ret"].astype(np.int64), "latency_ns": rec["latency_ns"].astype(np.int64),
            "arg": rec["arg"].astype(np.int64), "count": np.ones(rec.size, np.int64),
        })

    def _absolute(self, path: str, pid: int) -> str:
        if not path or os.path.isabs(path):
            return os.path.normpath(path) if path else path
        try:
            base = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # the process is gone already: the command's working directory
            base = self.cwd
        return os.path.normpath(os.path.join(base, path))

    def _remember_open(self, r, path: str) -> None:
        if r["ret"] < 0 or not r["ino"]:
            return
        key = (int(r["dev"]), int(r["ino"]))
        info = self.files.get(key)
        if info is None or info.path is None:
            self.files[key] = FileInfo(path, int(r["size"]))
        else:
            info.size = max(info.size, int(r["size"]))

    def _remember_exec(self, path: str) -> None:
        """The executable is mapped by the kernel, never opened: name it from a stat."""
        from readtrace.record.mounts import kernel_dev

        try:
            st = os.stat(path)
        except OSError:
            return
        key = (kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino)
        self.files.setdefault(key, FileInfo(os.path.normpath(path), st.st_size))

    # --- events ring: app, page-cache and FUSE records ---------------------------------------------
    def events(self, rec: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
        kinds = rec["kind"]
        app = rec[kinds < KIND["FAULT"]]
        pages = rec[(kinds >= KIND["FAULT"]) & (kinds < KIND["FUSE_SEND"])]
        fuse = rec[kinds >= KIND["FUSE_SEND"]]
        return self._app(app), self._pages(pages), self._fuse(fuse)

    def _note_unknown_files(self, pid: np.ndarray, dev: np.ndarray, ino: np.ndarray) -> None:
        """Files never opened by the tree (mapped by exec or the loader): named from /proc/PID/maps."""
        keys = np.unique(np.stack([pid.astype(np.int64), dev.astype(np.int64), ino.astype(np.int64)], axis=1),
                         axis=0)
        mapped: dict[int, dict] = {}
        for p, d, i in keys:
            key = (int(d), int(i))
            if not i or key in self.files:
                continue
            if p not in mapped:
                mapped[p] = mapped_files(int(p))
            path = mapped[p].get(key)
            self.files[key] = FileInfo(path, _size(path))

    def _paths(self, pid: np.ndarray, dev: np.ndarray, ino: np.ndarray) -> list[str | None]:
        self._note_unknown_files(pid, dev, ino)
        known = self.files
        return [known[(int(d), int(i))].path if i else None for d, i in zip(dev, ino, strict=True)]

    def _set_comm(self, tid: int, ts: int, comm: str) -> None:
        self.comm[tid] = comm
        self._comm_history.append((tid, ts, comm))

    def _comms(self, tids: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The comm each thread had at each timestamp (exec changes it mid-batch)."""
        if not self._comm_history:
            return np.full(len(tids), None, dtype=object)
        history = pd.DataFrame(self._comm_history, columns=["tid", "ts_ns", "comm"]).sort_values("ts_ns")
        rows = pd.DataFrame({"tid": tids.astype(np.int64), "ts_ns": ts.astype(np.int64),
                             "order": np.arange(len(tids))}).sort_values("ts_ns")
        history["tid"] = history["tid"].astype(np.int64)
        history["ts_ns"] = history["ts_ns"].astype(np.int64)
        merged = pd.merge_asof(rows, history, on="ts_ns", by="tid", direction="backward")
        return merged.sort_values("order")["comm"].to_numpy(dtype=object)

    def _app(self, rec: np.ndarray) -> pd.DataFrame:
        if rec.size == 0:
            return pd.DataFrame()
        kinds = rec["kind"].astype(np.int64)
        arg = rec["arg"].astype(np.int64)
        is_exit = kinds == KIND["EXIT"]
        arg = np.where(is_exit, exit_status(arg), arg)
        return pd.DataFrame({
            "ts_ns": rec["ts_ns"].astype(np.int64), "pid": rec["pid"].astype(np.int32),
            "tid": rec["tid"].astype(np.int32), "comm": self._comms(rec["tid"], rec["ts_ns"]), "op": _APP_TABLE[kinds],
            "fd": rec["fd"], "ofd": rec["ofd"].astype(np.int64), "path": self._paths(rec["pid"], rec["dev"], rec["ino"]),
            "dev": rec["dev"].astype(np.int64), "ino": rec["ino"].astype(np.int64), "offset": rec["offset"],
            "size": rec["size"], "ret": rec["ret"], "latency_ns": rec["latency_ns"].astype(np.int64),
            "arg": arg, "count": rec["count"].astype(np.int64),
        })

    def _pages(self, rec: np.ndarray) -> pd.DataFrame:
        if rec.size == 0:
            return pd.DataFrame()
        return pd.DataFrame({
            "ts_ns": rec["ts_ns"].astype(np.int64), "pid": rec["pid"].astype(np.int32),
            "tid": rec["tid"].astype(np.int32), "op": _PAGE_TABLE[rec["kind"].astype(np.int64)],
            "dev": rec["dev"].astype(np.int64), "ino": rec["ino"].astype(np.int64),
            "path": self._paths(rec["pid"], rec["dev"], rec["ino"]), "offset": rec["offset"] * PAGE_SIZE,
            "size": rec["size"] * PAGE_SIZE, "count": rec["count"].astype(np.int64),
        })

    def _fuse(self, rec: np.ndarray) -> list[dict]:
        """Join send / daemon read / end on (connection, unique); a request is done at its end."""
        done = []
        for r in rec:
            key = (int(r["dev"]), int(r["arg"]))
            req = self._fuse_open.setdefault(key, {"connection": key[0], "unique": key[1]})
            kind = int(r["kind"])
            if kind == KIND["FUSE_SEND"]:
                req.update(send_ts=int(r["ts_ns"]), opcode=int(r["fd"]), send_pid=int(r["pid"]),
                           send_tid=int(r["tid"]))
            elif kind == KIND["FUSE_DAEMON_READ"]:
                req.update(read_ts=int(r["ts_ns"]), opcode=int(r["fd"]), pid=int(r["pid"]), tid=int(r["tid"]),
                           nodeid=int(r["ofd"]), fh=int(r["ret"]), offset=int(r["offset"]),
                           size=int(r["size"]), daemon_tid=int(r["aux"]))
            else:
                req.update(end_ts=int(r["ts_ns"]), reply_len=int(r["size"]), error=int(r["ret"]))
                row = self._fuse_row(self._fuse_open.pop(key))
                if row is not None:
                    done.append(row)
        return done

    def _fuse_row(self, req: dict) -> dict | None:
        """One FUSE table row, or None for a request from outside the traced tree."""
        if "tid" not in req:  # the daemon's read was not decoded (not ours, or before attach)
            if req.get("send_tid") not in self.tids:
                return None
            req.update(pid=req["send_pid"], tid=req["send_tid"])
        start = req.get("send_ts", req.get("read_ts", req.get("end_ts", 0)))
        reply = req.get("reply_len", -1)
        return {
            "ts_ns": start, "pid": req["pid"], "tid": req["tid"], "connection": req["connection"],
            "unique": req["unique"], "opcode": req.get("opcode", -1), "nodeid": req.get("nodeid", -1),
            "fh": req.get("fh", -1), "offset": req.get("offset", -1), "size": req.get("size", -1),
            "reply_bytes": max(reply - FUSE_OUT_HEADER, 0) if reply >= 0 and not req.get("error") else -1,
            "latency_ns": req["end_ts"] - req["send_ts"] if "end_ts" in req and "send_ts" in req else -1,
            "daemon_tid": req.get("daemon_tid", 0),
        }

    def unfinished_fuse(self) -> list[dict]:
        """Requests still without a reply when recording stopped."""
        rows = [self._fuse_row(req) for req in self._fuse_open.values()]
        self._fuse_open.clear()
        return [r for r in rows if r is not None]


def mapped_files(pid: int) -> dict[tuple[int, int], str]:
    """(kernel dev, ino) -> path of the files mapped in a live process."""
    from readtrace.record.mounts import kernel_dev

    found = {}
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:  # exited already
        return found
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and parts[4] != "0":
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            found[(kernel_dev(major, minor), int(parts[4]))] = parts[5]
    return found


def _size(path: str | None) -> int:
    try:
        return os.stat(path).st_size if path else -1
    except OSError:
        return -1


def _exec_comm(path: str, comm: str) -> str:
    return comm or os.path.basename(path)[:15]


def files_table(files: dict[tuple[int, int], FileInfo], mounts) -> pd.DataFrame:
    """One row per (dev, ino) the tree touched, with its mount point and file system type."""
    from readtrace.record.mounts import mount_of

    rows = []
    for (dev, ino), info in sorted(files.items()):
        mount = mount_of(info.path, dev, mounts)
        if mount is None and info.path is None:
            continue  # pipes, sockets, anonymous inodes: not files
        rows.append({"path": info.path, "dev": dev, "ino": ino, "size": info.size,
                     "fstype": mount.fstype if mount else None,
                     "mountpoint": mount.mountpoint if mount else None})
    return pd.DataFrame(rows)
