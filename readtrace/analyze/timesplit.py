"""Where the load's time went: per task and for the whole load, wall time, time waiting on file I/O
(read syscalls, page faults on file mappings, FUSE replies), on a CPU, waiting for a CPU, and the rest.

Two sources, best first:
- ``sched``: the recorder's wait rows (off the CPU inside a read of a file or a file fault,
  probes/sched.bpf.c) and per-thread totals in ``meta["sched"]``;
- ``syscalls``: without them (older traces, other backends), the read syscalls' own latency and the
  FUSE requests' latency stand in for the waits; CPU time is then unknown.

``io_wait_s`` of the load is the union over its tasks of their waits on files: the wall time during
which at least one task of the load waited on a file. It is what a storage model predicts
(the what-if model replaces it: predicted = wall - io_wait + predicted io_wait).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from readtrace.analyze.accesses import SOURCE_READ, Accesses
from readtrace.analyze.fileindex import FileIndex
from readtrace.analyze.roles import file_roles
from readtrace.trace.schema import READ_OPS, WAIT_IN

NS = 1e9


@dataclass
class Waits:
    """One row per stretch a task waited on a known file: [start, end) in ns, tid, pid, file id,
    ``fault`` (a page fault on a mapping) or not (a read)."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    pid: np.ndarray
    file: np.ndarray
    fault: np.ndarray
    source: str

    def __len__(self) -> int:
        return len(self.start)


def union_by_group(start: np.ndarray, end: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1: total length of the union of its [start, end) intervals (vectorized: the
    groups are laid out one after another on the time axis, then one sort and a running max)."""
    out = np.zeros(n, dtype=np.int64)
    if len(start) == 0:
        return out
    base = int(start.min())
    span = int(end.max()) - base + 1
    shift = group.astype(np.int64) * span - base
    order = np.lexsort((start, group))
    s, e = (start + shift)[order], np.maximum.accumulate((end + shift)[order])
    new = np.r_[True, s[1:] > e[:-1]]
    firsts = np.flatnonzero(new)
    lasts = np.r_[firsts[1:] - 1, len(s) - 1]
    np.add.at(out, group[order][firsts], e[lasts] - s[firsts])
    return out


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Total length of the union of [start, end) intervals."""
    return int(union_by_group(start, end, np.zeros(len(start), dtype=np.int64), 1)[0])


def sched_waits(events: pd.DataFrame, index: FileIndex) -> Waits | None:
    """The recorder's wait rows on files it can name, or None when the trace has none."""
    w = events[events["op"] == "wait"]
    if w.empty:
        return None
    w = w[np.isin(w["arg"].to_numpy(), [WAIT_IN.index("read"), WAIT_IN.index("fault")])]
    file = index.lookup(w["dev"].to_numpy(), w["ino"].to_numpy(), w["path"], add=False)
    known = file >= 0
    start = w["ts_ns"].to_numpy(dtype=np.int64)[known]
    return Waits(start, start + w["latency_ns"].to_numpy(dtype=np.int64)[known],
                 w["tid"].to_numpy().astype(np.int64)[known], w["pid"].to_numpy().astype(np.int64)[known],
                 file[known], w["arg"].to_numpy()[known] == WAIT_IN.index("fault"), "sched")


def syscall_waits(app: Accesses, fuse: Accesses) -> Waits:
    """Without wait rows: read syscalls' latency, and FUSE requests' latency (a fault's requester
    waited for it; a request inside a read of the same task overlaps that read: the union per task
    counts it once)."""
    reads = (app.source == SOURCE_READ) & (app.file >= 0) & (app.latency > 0)
    fz = (fuse.latency > 0) & (fuse.file >= 0)
    start = np.concatenate([app.ts[reads], fuse.ts[fz]])
    return Waits(start, start + np.concatenate([app.latency[reads], fuse.latency[fz]]),
                 np.concatenate([app.tid[reads], fuse.tid[fz]]).astype(np.int64),
                 np.concatenate([app.pid[reads], fuse.pid[fz]]).astype(np.int64),
                 np.concatenate([app.file[reads], fuse.file[fz]]),
                 np.r_[np.zeros(int(reads.sum()), bool), np.ones(int(fz.sum()), bool)], "syscalls")


def _task_spans(events: pd.DataFrame, waits: Waits, sched: list[dict] | None) -> pd.DataFrame:
    """Per task: pid, first and last ns seen, and the scheduler's totals where recorded. Read rows
    count through their waits only (a lean trace keeps them apart: the same answer either way)."""
    events = events[~events["op"].isin(READ_OPS)]
    ev = pd.DataFrame({"tid": np.r_[events["tid"].to_numpy().astype(np.int64), waits.tid],
                       "pid": np.r_[events["pid"].to_numpy().astype(np.int64), waits.pid],
                       "first_ns": np.r_[events["ts_ns"].to_numpy(dtype=np.int64), waits.start],
                       "last_ns": np.r_[events["ts_ns"].to_numpy(dtype=np.int64), waits.end]})
    spans = ev.groupby("tid").agg(pid=("pid", "first"), first_ns=("first_ns", "min"), last_ns=("last_ns", "max"))
    if sched:
        acct = pd.DataFrame(sched).set_index("tid")
        spans = spans.join(acct[["cpu_ns", "runq_ns", "off_ns"]], how="left")
        seen = acct[acct["last_ns"] > acct["first_ns"]]
        spans.loc[seen.index.intersection(spans.index), "first_ns"] = seen["first_ns"]
        spans.loc[seen.index.intersection(spans.index), "last_ns"] = seen["last_ns"]
    return spans


def time_split(events: pd.DataFrame, waits: Waits, files: pd.DataFrame, meta: dict) -> tuple[dict, pd.DataFrame,
                                                                                            pd.Series]:
    """(summary fields, one row per task, wait seconds per file id (union over the tasks))."""
    named = files["path"].reindex(waits.file).fillna("").str.startswith("/").to_numpy()
    if not named.all():  # pipes, sockets: a read that waits there is not file I/O
        waits = Waits(*(getattr(waits, k)[named] for k in ("start", "end", "tid", "pid", "file", "fault")),
                      waits.source)
    sched = meta.get("sched") if waits.source == "sched" else None
    spans = _task_spans(events, waits, sched)
    tids = spans.index.to_numpy()
    task = np.searchsorted(tids, waits.tid)
    n = len(tids)
    fstype = files["fstype"].reindex(waits.file).fillna("").to_numpy(dtype=str)
    on_fuse = np.char.startswith(fstype, "fuse")
    every = union_by_group(waits.start, waits.end, task, n)
    reads = ~waits.fault
    read = union_by_group(waits.start[reads], waits.end[reads], task[reads], n)
    fuse = union_by_group(waits.start[on_fuse], waits.end[on_fuse], task[on_fuse], n)
    tasks = pd.DataFrame({"tid": tids, "pid": spans["pid"].to_numpy(),
                          "wall_s": (spans["last_ns"] - spans["first_ns"]).to_numpy() / NS,
                          "io_wait_s": every / NS, "read_wait_s": read / NS, "fault_wait_s": (every - read) / NS,
                          "fuse_wait_s": fuse / NS})
    for col in ("cpu", "runq", "off"):
        tasks[f"{col}_s"] = spans[f"{col}_ns"].to_numpy() / NS if f"{col}_ns" in spans else np.nan
    tasks["other_off_s"] = tasks["off_s"] - tasks["io_wait_s"]  # sleeping, joining, blocked elsewhere
    tasks = tasks.drop(columns="off_s").sort_values("io_wait_s", ascending=False, kind="stable")
    # per file: the union over tasks of the waits on it (wall time the load waited on that file)
    codes, uniq = pd.factorize(waits.file)
    per_file = pd.Series(union_by_group(waits.start, waits.end, codes, len(uniq)) / NS, index=uniq)
    io = union_ns(waits.start, waits.end) / NS
    data = file_roles(files["path"].reindex(waits.file)) == "data"
    wall = meta.get("wall_s")
    top = per_file.idxmax() if len(per_file) else None
    top_tasks = 0
    if top is not None:  # the tasks that waited on that file for more than 1 % of its wait
        on_top = waits.file == top
        per_task = pd.Series(waits.end[on_top] - waits.start[on_top]).groupby(waits.tid[on_top]).sum()
        top_tasks = int((per_task >= 0.01 * per_task.sum()).sum())
    top_fault = bool(waits.fault[waits.file == top].mean() > 0.5) if top is not None else False
    summary = {
        "time_split_source": waits.source,
        "io_wait_s": io, "io_wait_fraction": io / wall if wall else None,
        "read_wait_s": union_ns(waits.start[reads], waits.end[reads]) / NS,
        "fault_wait_s": union_ns(waits.start[~reads], waits.end[~reads]) / NS,
        "fuse_wait_s": union_ns(waits.start[on_fuse], waits.end[on_fuse]) / NS,
        "data_wait_s": union_ns(waits.start[data], waits.end[data]) / NS,  # on data files (not libraries)
        "io_wait_task_s": float(every.sum() / NS),  # thread-seconds: tasks waiting at once count each
        "cpu_s": float(tasks["cpu_s"].sum()) if sched else None,
        "runq_s": float(tasks["runq_s"].sum()) if sched else None,
        "wait_file": files["path"].get(top) if top is not None else None,
        "wait_file_s": float(per_file.max()) if len(per_file) else 0.0,
        "wait_file_fuse": bool(str(files["fstype"].get(top, "")).startswith("fuse")) if top is not None else False,
        "wait_file_faults": top_fault,
        "wait_tasks": top_tasks,
    }
    return summary, tasks.reset_index(drop=True), per_file
