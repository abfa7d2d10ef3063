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

from readtrace.fs.procmaps import mapped_files
from readtrace.record.attach import OpenFile, Recovered
from readtrace.record.namespaces import Namespaces
from readtrace.record.ranks import rank_of
from readtrace.record.records import KIND, STR_EVENT_DTYPE, event_view, str_view
from readtrace.trace.schema import WAIT_IN

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
FUSE_OUT_HEADER = 16  # struct fuse_out_header precedes the data of every reply

APP_OPS = {
    KIND["READ"]: "read", KIND["PREAD"]: "pread", KIND["READV"]: "readv", KIND["PREADV"]: "preadv",
    KIND["MMAP"]: "mmap", KIND["MUNMAP"]: "munmap", KIND["LSEEK"]: "lseek", KIND["FADVISE"]: "fadvise",
    KIND["READAHEAD"]: "readahead", KIND["CLOSE"]: "close", KIND["DUP"]: "dup", KIND["EXIT"]: "exit",
    KIND["BLOCK"]: "wait",
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
# A wait record's RT_* "waited in" kind -> its WAIT_IN index (readtrace/trace/schema.py).
_WAIT_CODE = np.full(max(KIND.values()) + 1, WAIT_IN.index("other"), dtype=np.int64)
_WAIT_CODE[[KIND["READ"], KIND["PREAD"], KIND["READV"], KIND["PREADV"]]] = WAIT_IN.index("read")
_WAIT_CODE[KIND["FAULT"]] = WAIT_IN.index("fault")
_WAIT_CODE[[KIND[k] for k in ("OPEN", "MMAP", "MUNMAP", "LSEEK", "FADVISE", "READAHEAD", "CLOSE", "DUP")]] = \
    WAIT_IN.index("syscall")


def exit_status(wait_status: np.ndarray) -> np.ndarray:
    """Kernel exit_code (wait status) -> shell-style exit code (128+signal when killed)."""
    sig = wait_status & 0x7F
    return np.where(sig != 0, 128 + sig, (wait_status >> 8) & 0xFF)


PATH_BYTES = STR_EVENT_DTYPE.fields["path"][0].itemsize  # the probe's path buffer, NUL included
CUT_MARK = "…"  # ends a path the probe cut (meta "truncated_paths" counts them)


def _cstr(values: np.ndarray) -> list[str]:
    return [v.decode(errors="replace") for v in values]


EVENT_COLUMNS = ["ts_ns", "pid", "tid", "comm", "op", "fd", "ofd", "path", "dev", "ino", "offset", "size", "ret",
                 "latency_ns", "arg", "count"]


@dataclass
class AttachedState:
    """What the decoder needs of an attach (record/attach.py): the recovered files and mappings, the
    recorder's fds borrowed from them and its pid (whose records name their struct files)."""

    recovered: Recovered
    borrowed: dict[int, OpenFile]
    resolver_pid: int
    attach_ns: int  # monotonic ns before the probes were attached: the recovered rows' time
    emitted: bool = False
    resolved: int = 0  # recovered open files whose struct file the probes named


@dataclass
class FileInfo:
    path: str | None
    size: int
    pid: int = 0  # the process whose open, mapping or exec named it (its mount namespace's path)


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
    mapped_names: dict[tuple[int, int], str] = field(default_factory=dict)  # from /proc/PID/maps
    ranks: dict[int, dict[str, int]] = field(default_factory=dict)  # pid -> RANK, LOCAL_RANK ... at exec
    _ofd_files: list[pd.DataFrame] = field(default_factory=list)  # (ofd, ts_ns, dev, ino) seen so far
    truncated_paths: int = 0  # paths longer than the probe's buffer, marked with CUT_MARK
    attached: AttachedState | None = None  # record -p / --cgroup: what existed before the probes
    namespaces: Namespaces | None = None  # record -p / --cgroup: tasks' ids and paths in their namespaces

    def __post_init__(self):
        self.tids.add(self.root_pid)
        self._set_comm(self.root_pid, 0, Path("/proc/self/comm").read_text().strip())  # until it execs

    # --- strs ring: open / fork / thread / exec ---------------------------------------------------
    def note_strs(self, rec: np.ndarray) -> list[str]:
        """Live part, while the processes exist: threads, comms, exec'd images, absolute open paths.

        Returns the paths (opens made absolute) for ``strs_frame`` later: no pandas work here, so the
        recorder takes little CPU from the workload while it runs.
        """
        kinds = rec["kind"]
        opens, tasks = str_view(rec, "open"), str_view(rec, "task")
        comms, paths = _cstr(rec["comm"]), _cstr(rec["path"])
        cut = [i for i, raw in enumerate(rec["path"].tolist()) if len(raw) >= PATH_BYTES - 1]
        for i in cut:  # the probe's buffer was full: the kernel's path went on, ours stops here
            paths[i] += CUT_MARK
        self.truncated_paths += len(cut)
        for i, kind in enumerate(kinds.tolist()):
            pid, tid, new_id = int(rec["pid"][i]), int(rec["tid"][i]), int(tasks["id"][i])
            ts = int(rec["ts_ns"][i])
            if kind in (KIND["FORK"], KIND["THREAD"]):
                self.tids.add(new_id)
                self._set_comm(new_id, ts, comms[i])
                if self.namespaces is not None:  # a fork's new process, or a thread of the creator's
                    self.namespaces.note(new_id if kind == KIND["FORK"] else pid, new_id,
                                         int(tasks["inner_id"][i]), parent=pid)
            elif kind == KIND["EXEC"]:
                self._set_comm(tid, ts, _exec_comm(paths[i], comms[i]))
                self._remember_exec(paths[i], pid)
                if self.namespaces is not None:
                    self.namespaces.exec_seen(pid)
                self.mapped_names.update(mapped_files(pid))  # the kernel maps ld.so: never opened
                rank = rank_of(pid)
                if rank is not None:
                    self.ranks[pid] = rank
            else:
                if tid not in self.comm:
                    self._set_comm(tid, 0, comms[i])
                if kind == KIND["OPEN"]:
                    paths[i] = self._absolute(paths[i], pid)
                    self._remember_open(opens[i], paths[i], pid)
        o = opens[kinds == KIND["OPEN"]]
        self._remember_ofds(o["file"], o["ts_ns"], o["dev"], o["ino"])
        return paths

    def strs_frame(self, rec: np.ndarray, paths: list[str]) -> pd.DataFrame:
        """The events rows of open/fork/thread/exec records already seen by ``note_strs``."""
        if rec.size == 0:
            return pd.DataFrame()
        kinds = rec["kind"].astype(np.int64)
        is_open = kinds == KIND["OPEN"]
        o, task = str_view(rec, "open"), str_view(rec, "task")

        def of_open(values: np.ndarray, other, dtype) -> np.ndarray:
            return np.where(is_open, values, other).astype(dtype)

        return pd.DataFrame({
            "ts_ns": rec["ts_ns"].astype(np.int64), "pid": rec["pid"].astype(np.int32),
            "tid": rec["tid"].astype(np.int32), "comm": self._comms(rec["tid"], rec["ts_ns"]),
            "op": _STR_TABLE[kinds], "fd": of_open(o["ret"], -1, np.int32),
            "ofd": of_open(o["file"], 0, np.uint64).astype(np.int64), "path": [p if p else None for p in paths],
            "dev": of_open(o["dev"], 0, np.int64), "ino": of_open(o["ino"], 0, np.uint64),
            "offset": np.full(rec.size, -1, np.int64), "size": of_open(o["i_size"], -1, np.int64),
            "ret": of_open(o["ret"], 0, np.int64), "latency_ns": of_open(o["latency_ns"], 0, np.uint64).astype(np.int64),
            "arg": np.where(is_open, o["flags"], task["id"]).astype(np.int64), "count": np.ones(rec.size, np.int64),
        })

    def _absolute(self, path: str, pid: int) -> str:
        if not path or os.path.isabs(path):
            return os.path.normpath(path) if path else path
        try:  # relative to the process's cwd now (a chdir between open and drain would mislead)
            base = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # the process is gone already: the command's working directory
            base = self.cwd
        return os.path.normpath(os.path.join(base, path))

    def _remember_ofds(self, ofd, ts, dev, ino) -> None:
        known = (np.asarray(ino) != 0) & (np.asarray(ofd) != 0)
        if known.any():
            self._ofd_files.append(pd.DataFrame({
                "ofd": np.asarray(ofd, dtype=np.uint64)[known].astype(np.int64),
                "ts_ns": np.asarray(ts, dtype=np.int64)[known],
                "dev": np.asarray(dev)[known].astype(np.int64), "ino": np.asarray(ino)[known].astype(np.uint64)}))
            if len(self._ofd_files) > 64:  # compact: keep only where an ofd starts naming another file
                h = pd.concat(self._ofd_files, ignore_index=True).sort_values(["ofd", "ts_ns"])
                same = (h[["ofd", "dev", "ino"]] == h[["ofd", "dev", "ino"]].shift()).all(axis=1)
                self._ofd_files = [h[~same]]

    def forget_before(self, ts_ns: int) -> None:
        """Keep of the history only what records from ``ts_ns`` on can need: per struct file and per
        thread the entry in force at ``ts_ns``, and every later one. (A merged run held in the kernel
        from before, whose struct file was freed and given to another open since, then gets no path
        instead of a wrong one.)"""
        if self._ofd_files:
            h = pd.concat(self._ofd_files, ignore_index=True)
            old = h["ts_ns"].to_numpy() <= ts_ns
            in_force = h[old].sort_values("ts_ns", kind="stable").drop_duplicates("ofd", keep="last")
            self._ofd_files = [pd.concat([in_force, h[~old]], ignore_index=True)]
        in_force_comm: dict[int, tuple[int, int, str]] = {}
        later = []
        for entry in self._comm_history:
            tid, ts, _ = entry
            if ts > ts_ns:
                later.append(entry)
            elif tid not in in_force_comm or ts >= in_force_comm[tid][1]:
                in_force_comm[tid] = entry
        self._comm_history = [*in_force_comm.values(), *later]

    def _fill_read_files(self, rec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """dev/ino of reads (the probes leave them out): from the latest open of the same struct file."""
        dev, ino = rec["dev"].astype(np.int64), rec["ino"].astype(np.uint64)
        missing = (ino == 0) & (rec["file"] != 0)
        if not missing.any() or not self._ofd_files:
            return dev, ino
        history = pd.concat(self._ofd_files, ignore_index=True).sort_values("ts_ns", ignore_index=True)
        wanted = pd.DataFrame({"ofd": rec["file"][missing].astype(np.int64),
                               "ts_ns": rec["ts_ns"][missing].astype(np.int64),
                               "order": np.arange(int(missing.sum()))}).sort_values("ts_ns")
        # Join the history's row number, not its columns: a u64 inode must not pass through float NaN.
        found = pd.merge_asof(wanted, history[["ofd", "ts_ns"]].assign(row=np.arange(len(history))), on="ts_ns",
                              by="ofd", direction="backward").sort_values("order")
        row = found["row"].to_numpy(dtype=np.float64)
        hit = ~np.isnan(row)
        rows = row[hit].astype(np.int64)
        where = np.flatnonzero(missing)[hit]
        dev[where] = history["dev"].to_numpy(dtype=np.int64)[rows]
        ino[where] = history["ino"].to_numpy(dtype=np.uint64)[rows]
        return dev, ino

    def _remember_open(self, r, path: str, pid: int) -> None:
        if r["ret"] < 0 or not r["ino"]:
            return
        key = (int(r["dev"]), int(r["ino"]))
        info = self.files.get(key)
        if info is None or info.path is None:
            self.files[key] = FileInfo(path, int(r["i_size"]), pid)
        else:
            info.size = max(info.size, int(r["i_size"]))
            if path:  # the latest open names it: a file written under a temporary name, then renamed
                info.path, info.pid = path, pid  # (save_pretrained) is read by its final one

    def _remember_exec(self, path: str, pid: int) -> None:
        """The executable is mapped by the kernel, never opened: name it from a stat."""
        from readtrace.fs.mounts import kernel_dev

        try:
            st = os.stat(path)
        except OSError:
            return
        key = (kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino)
        self.files.setdefault(key, FileInfo(os.path.normpath(path), st.st_size, pid))

    # --- attach: processes and state from before the probes ----------------------------------------
    def attach(self, threads: dict[int, tuple[int, str]], state: AttachedState) -> None:
        """Processes already running: their threads (tid -> (pid, comm)) and what they held open."""
        self.attached = state
        self.add_threads(threads)

    def add_threads(self, threads: dict[int, tuple[int, str]]) -> None:
        for tid, (pid, comm) in threads.items():
            if tid not in self.tids:
                self.tids.add(tid)
                self._set_comm(tid, 0, comm)
            if self.namespaces is not None:
                self.namespaces.note(pid, tid)

    def _recovery_rows(self, rec: np.ndarray) -> tuple[np.ndarray, pd.DataFrame]:
        """Once, at the first batch: the recorder's own records (its lseeks on the borrowed fds, see
        record/attach.py) give each recovered open file its struct file; they leave the batch, and the
        recovered opens and mappings become rows at the attach time."""
        state = self.attached
        if state is None or state.emitted:
            return rec, pd.DataFrame()
        state.emitted = True
        mine = (rec["pid"] == state.resolver_pid) & (rec["kind"] < KIND["FUSE_SEND"])
        seeks = event_view(rec[mine & (rec["kind"] == KIND["LSEEK"])], "io")
        ofds = {}
        for ours, file, dev, ino in zip(seeks["fd"].tolist(), seeks["file"].tolist(), seeks["dev"].tolist(),
                                        seeks["ino"].tolist(), strict=True):
            f = state.borrowed.get(ours)
            if f is not None and file and (dev, ino) == (f.dev, f.ino):
                ofds[(f.pid, f.fd)] = file
        state.resolved = len(ofds)
        rows = []
        for f in state.recovered.files:
            ofd = ofds.get((f.pid, f.fd), 0)
            rows.append((f.pid, "open", f.fd, ofd, f.path, f.dev, f.ino, -1, f.size, f.fd, f.flags))
            self.files.setdefault((f.dev, f.ino), FileInfo(f.path, f.size, f.pid))
        for n, m in enumerate(state.recovered.mappings, start=1):  # no struct file known: ids 1..N (and in
            # the probes' mmaps table: Session.note_mappings)
            rows.append((m.pid, "mmap", -1, n, m.path, m.dev, m.ino, m.offset, m.end - m.start, m.start, m.start))
            self.files.setdefault((m.dev, m.ino), FileInfo(m.path, _size(m.path), m.pid))
        if not rows:
            return rec[~mine], pd.DataFrame()
        cols = ["pid", "op", "fd", "ofd", "path", "dev", "ino", "offset", "size", "ret", "arg"]
        frame = pd.DataFrame(rows, columns=cols)
        n = len(frame)
        ofd = np.array([int(v) for v in frame["ofd"]], dtype=np.uint64)
        ino = np.array([int(v) for v in frame["ino"]], dtype=np.uint64)
        opened = (frame["op"] == "open").to_numpy() & (ofd != 0)
        self._remember_ofds(ofd[opened], np.full(int(opened.sum()), state.attach_ns, np.int64),
                            frame["dev"].to_numpy()[opened], ino[opened])
        pid = frame["pid"].to_numpy(np.int32)
        frame = frame.assign(ts_ns=np.full(n, state.attach_ns, np.int64), tid=pid,
                             comm=[self.comm.get(int(p)) for p in pid], fd=frame["fd"].astype(np.int32),
                             ofd=ofd.astype(np.int64), dev=frame["dev"].astype(np.int64), ino=ino,
                             latency_ns=np.zeros(n, np.int64), count=np.ones(n, np.int64))
        return rec[~mine], frame[EVENT_COLUMNS]

    # --- events ring: app, page-cache and FUSE records ---------------------------------------------
    def events(self, rec: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame, list[dict]]:
        rec, recovered = self._recovery_rows(rec)
        kinds = rec["kind"]
        is_exit, is_wait = kinds == KIND["EXIT"], kinds == KIND["BLOCK"]
        io = event_view(rec[(kinds < KIND["FAULT"]) & ~is_exit & ~is_wait], "io")
        pages = event_view(rec[(kinds >= KIND["FAULT"]) & (kinds < KIND["FUSE_SEND"])], "pages")
        fuse = rec[kinds >= KIND["FUSE_SEND"]]
        app = [recovered, self._app(io), self._exits(event_view(rec[is_exit], "exit")),
               self._waits(event_view(rec[is_wait], "wait"))]
        app = pd.concat([f for f in app if len(f)], ignore_index=True) if any(len(f) for f in app) else pd.DataFrame()
        return app, self._pages(pages), self._fuse(fuse)

    def _paths(self, pid: np.ndarray, dev: np.ndarray, ino: np.ndarray) -> np.ndarray:
        """Path of each row's (dev, ino); files never opened by the tree (mapped by exec or the
        loader) are named from /proc/PID/maps. Vectorised: Python work per distinct file only."""
        codes, keys, first = _factorize_files(dev, ino)
        paths = np.full(len(keys), None, dtype=object)
        maps: dict[int, dict] = {}
        for k, (d, i) in enumerate(keys):
            if not i:
                continue
            info = self.files.get((d, i))
            if info is None:
                p = int(pid[first[k]])
                if p not in maps:
                    maps[p] = mapped_files(p)
                path = maps[p].get((d, i)) or self.mapped_names.get((d, i))
                info = self.files[(d, i)] = FileInfo(path, _size(path), p)
            paths[k] = info.path
        return paths[codes]

    def _set_comm(self, tid: int, ts: int, comm: str) -> None:
        self.comm[tid] = comm
        self._comm_history.append((tid, ts, comm))

    def _comms(self, tids: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The comm each thread had at each timestamp (exec changes it mid-batch)."""
        codes, uniq = pd.factorize(tids.astype(np.int64))
        history = pd.DataFrame(self._comm_history, columns=["tid", "ts_ns", "comm"])
        changes = history.groupby("tid").size()
        out = np.array([self.comm.get(int(t)) for t in uniq], dtype=object)[codes]
        multi = [int(t) for t in uniq if changes.get(int(t), 0) > 1]
        if multi:  # threads that exec'd: pick the comm in force at each row's time
            rows = np.flatnonzero(np.isin(tids, multi))
            h = history[history.tid.isin(multi)].astype({"tid": np.int64, "ts_ns": np.int64}).sort_values("ts_ns")
            want = pd.DataFrame({"tid": tids[rows].astype(np.int64), "ts_ns": ts[rows].astype(np.int64),
                                 "row": rows}).sort_values("ts_ns")
            got = pd.merge_asof(want, h, on="ts_ns", by="tid", direction="backward")
            out[got["row"].to_numpy()] = got["comm"].to_numpy(dtype=object)
        return out

    def _app(self, rec: np.ndarray) -> pd.DataFrame:
        if rec.size == 0:
            return pd.DataFrame()
        kinds = rec["kind"].astype(np.int64)
        self._remember_ofds(rec["file"], rec["ts_ns"], rec["dev"], rec["ino"])
        dev, ino = self._fill_read_files(rec)
        return pd.DataFrame({
            "ts_ns": rec["ts_ns"].astype(np.int64), "pid": rec["pid"].astype(np.int32),
            "tid": rec["tid"].astype(np.int32), "comm": self._comms(rec["tid"], rec["ts_ns"]), "op": _APP_TABLE[kinds],
            "fd": rec["fd"], "ofd": rec["file"].astype(np.int64), "path": self._paths(rec["pid"], dev, ino),
            "dev": dev, "ino": ino, "offset": rec["offset"],
            "size": rec["size"], "ret": rec["ret"], "latency_ns": rec["latency_ns"].astype(np.int64),
            "arg": rec["arg"], "count": rec["count"].astype(np.int64),
        })

    def _waits(self, rec: np.ndarray) -> pd.DataFrame:
        """Stretches off the CPU in file I/O: ``arg`` = what it waited in (schema.WAIT_IN index)."""
        if rec.size == 0:
            return pd.DataFrame()
        n = rec.size
        dev, ino = rec["dev"].astype(np.int64), rec["ino"].astype(np.uint64)
        return pd.DataFrame({
            "ts_ns": rec["ts_ns"].astype(np.int64), "pid": rec["pid"].astype(np.int32),
            "tid": rec["tid"].astype(np.int32), "comm": self._comms(rec["tid"], rec["ts_ns"]), "op": "wait",
            "fd": np.full(n, -1, np.int32), "ofd": rec["file"].astype(np.int64),
            "path": self._paths(rec["pid"], dev, ino), "dev": dev, "ino": ino,
            "offset": np.full(n, -1, np.int64), "size": np.full(n, -1, np.int64), "ret": np.zeros(n, np.int64),
            "latency_ns": rec["latency_ns"].astype(np.int64), "arg": _WAIT_CODE[rec["in_kind"].astype(np.int64)],
            "count": np.ones(n, np.int64),
        })

    def _exits(self, rec: np.ndarray) -> pd.DataFrame:
        """Thread exits: ``arg`` = the shell-style exit code, ``ret`` = 1 when the process ended."""
        if rec.size == 0:
            return pd.DataFrame()
        n = rec.size
        return pd.DataFrame({
            "ts_ns": rec["ts_ns"].astype(np.int64), "pid": rec["pid"].astype(np.int32),
            "tid": rec["tid"].astype(np.int32), "comm": self._comms(rec["tid"], rec["ts_ns"]), "op": "exit",
            "fd": np.full(n, -1, np.int32), "ofd": np.zeros(n, np.int64), "path": None,
            "dev": np.zeros(n, np.int64), "ino": np.zeros(n, np.uint64), "offset": np.full(n, -1, np.int64),
            "size": np.full(n, -1, np.int64), "ret": rec["group_dead"].astype(np.int64),
            "latency_ns": np.zeros(n, np.int64), "arg": exit_status(rec["wait_status"].astype(np.int64)),
            "count": np.ones(n, np.int64),
        })

    def _pages(self, rec: np.ndarray) -> pd.DataFrame:
        if rec.size == 0:
            return pd.DataFrame()
        return pd.DataFrame({
            "ts_ns": rec["ts_ns"].astype(np.int64), "pid": rec["pid"].astype(np.int32),
            "tid": rec["tid"].astype(np.int32), "op": _PAGE_TABLE[rec["kind"].astype(np.int64)],
            "dev": rec["dev"].astype(np.int64), "ino": rec["ino"].astype(np.uint64),
            "path": self._paths(rec["pid"], rec["dev"], rec["ino"]),
            "offset": rec["first"].astype(np.int64) * PAGE_SIZE,
            "size": rec["npages"].astype(np.int64) * PAGE_SIZE, "count": rec["count"].astype(np.int64),
        })

    def _fuse(self, rec: np.ndarray) -> list[dict]:
        """Join send / daemon read / end on (connection, unique); a request is done at its end."""
        done = []
        requests, daemon = event_view(rec, "fuse").tolist(), event_view(rec, "daemon")
        names = event_view(rec, "fuse").dtype.names
        for i, kind in enumerate(rec["kind"].tolist()):
            if kind == KIND["FUSE_DAEMON_READ"]:
                d = daemon[i]
                key = (int(d["connection"]), int(d["unique"]))
                req = self._fuse_open.setdefault(key, {"connection": key[0], "unique": key[1]})
                body = bool(d["has_read_in"])  # fuse_read_in copied: fh, offset, size
                req.update(read_ts=int(d["ts_ns"]), opcode=int(d["opcode"]), pid=int(d["pid"]), tid=int(d["tid"]),
                           nodeid=int(d["nodeid"]), fh=int(d["fh"]) if body else 0,
                           offset=int(d["offset"]) if body else -1, size=int(d["size"]) if body else -1,
                           daemon_tid=int(d["daemon_tid"]))
                continue
            r = dict(zip(names, requests[i], strict=True))
            key = (int(r["connection"]), int(r["unique"]))
            req = self._fuse_open.setdefault(key, {"connection": key[0], "unique": key[1]})
            if kind == KIND["FUSE_SEND"]:
                req.update(send_ts=r["ts_ns"], opcode=r["opcode"], send_pid=r["pid"], send_tid=r["tid"])
            else:
                req.update(end_ts=r["ts_ns"], reply_len=r["len"], error=r["error"])
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
            "unique": req["unique"], "opcode": req.get("opcode", -1), "nodeid": req.get("nodeid", 0),
            "fh": req.get("fh", 0), "offset": req.get("offset", -1), "size": req.get("size", -1),
            "reply_bytes": max(reply - FUSE_OUT_HEADER, 0) if reply >= 0 and not req.get("error") else -1,
            "latency_ns": req["end_ts"] - req["send_ts"] if "end_ts" in req and "send_ts" in req else -1,
            "daemon_tid": req.get("daemon_tid", 0),
        }

    def unfinished_fuse(self) -> list[dict]:
        """Requests still without a reply when recording stopped."""
        rows = [self._fuse_row(req) for req in self._fuse_open.values()]
        self._fuse_open.clear()
        return [r for r in rows if r is not None]


def _factorize_files(dev: np.ndarray, ino: np.ndarray):
    """codes per row, the distinct (dev, ino) pairs, and the first row of each pair."""
    dev, ino = dev.astype(np.uint64), ino.astype(np.uint64)
    key = (dev << np.uint64(40)) ^ ino  # exact unless ino >= 2**40; verified below
    codes, _uniq = pd.factorize(key)
    if not len(codes):
        return codes, [], np.empty(0, dtype=np.int64)
    first = _first_rows(codes)
    if not ((dev[first][codes] == dev) & (ino[first][codes] == ino)).all():  # a collision: exact path
        codes = pd.DataFrame({"d": dev, "i": ino}).groupby(["d", "i"], sort=False).ngroup().to_numpy()
        first = _first_rows(codes)
    keys = list(zip(dev[first].astype(np.int64).tolist(), ino[first].tolist(), strict=True))
    return codes, keys, first


def _first_rows(codes: np.ndarray) -> np.ndarray:
    first = np.empty(codes.max() + 1, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes))[::-1]
    return first


def _size(path: str | None) -> int:
    try:
        return os.stat(path).st_size if path else -1
    except OSError:
        return -1


def _exec_comm(path: str, comm: str) -> str:
    return comm or os.path.basename(path)[:15]


def files_table(files: dict[tuple[int, int], FileInfo], mounts,
                namespaces: Namespaces | None = None) -> pd.DataFrame:
    """One row per (dev, ino) the tree touched, with its mount point and file system type (in the mount
    namespace of the process that named it) and, named in another namespace, the host's path."""
    from readtrace.fs.mounts import mount_of

    rows = []
    for (dev, ino), info in sorted(files.items()):
        theirs = namespaces.mounts_of(info.pid) if namespaces is not None else None
        mount = mount_of(info.path, dev, theirs or mounts)
        if mount is None and info.path is None:
            continue  # pipes, sockets, anonymous inodes: not files
        rows.append({"path": info.path, "dev": dev, "ino": ino, "size": info.size,
                     "fstype": mount.fstype if mount else None,
                     "mountpoint": mount.mountpoint if mount else None,
                     "host_path": namespaces.host_path(info.path, info.pid, dev, ino) if theirs else None})
    return pd.DataFrame(rows)
