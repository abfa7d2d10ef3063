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

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from readtrace.analyze.summary import TimeSplit
from readtrace.analyze.views import criticalpath
from readtrace.analyze.views.accesses import SOURCE_READ, Accesses
from readtrace.analyze.views.fileindex import FileIndex
from readtrace.analyze.views.grouping import (
    first_in_group,
    one_value,
    running_max_in_group,
    take,
    union_length,
)
from readtrace.analyze.views.roles import file_roles
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


def _union_sorted(s: np.ndarray, e: np.ndarray, g: np.ndarray | None, n: int) -> np.ndarray:
    """Per group: union length of intervals already sorted by (group, start) (grouping.union_length:
    no packing of the groups on one int64 time axis, which overflowed for times near 2**63)."""
    if len(s) == 0:
        return np.zeros(n, dtype=np.int64)
    codes = np.broadcast_to(np.int64(0), len(s)) if g is None else g  # one group: no codes per row
    return union_length(codes, n, s, e).astype(np.int64)


class Unions:
    """Union lengths of one set of intervals, per group and over subsets, sorting once per grouping."""

    def __init__(self, start: np.ndarray, end: np.ndarray, group: np.ndarray | None = None, n: int = 1):
        in_time = bool((start[1:] >= start[:-1]).all())  # the trace's accesses usually are
        if n == 1:
            group = None
        if group is None and in_time:  # nothing to sort: views of the caller's arrays
            self.order, self.s, self.e, self.g = None, start, end, None
        else:
            if group is None:
                self.order = np.argsort(start, kind="stable")
            elif in_time:  # a stable sort of small group codes keeps the time order within each group
                self.order = np.argsort(group.astype(np.int16 if n < 2**15 else np.int64), kind="stable")
            else:
                self.order = np.lexsort((start, group))
            self.s, self.e = start[self.order], end[self.order]
            self.g = None if group is None else group[self.order]
        self.n = n
        self._all = None  # the union of every interval, once asked

    def per_group(self, mask: np.ndarray | None = None) -> np.ndarray:
        if mask is not None and not mask.any():
            return np.zeros(self.n, dtype=np.int64)
        if mask is None or mask.all():
            if self._all is None:
                self._all = _union_sorted(self.s, self.e, self.g, self.n)
            return self._all
        m = mask if self.order is None else mask[self.order]
        return _union_sorted(self.s[m], self.e[m], None if self.g is None else self.g[m], self.n)

    def total(self, mask: np.ndarray | None = None) -> int:
        return int(self.per_group(mask).sum())


def union_by_group(start: np.ndarray, end: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1: total length of the union of its [start, end) intervals."""
    return Unions(start, end, group, n).per_group()


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Total length of the union of [start, end) intervals."""
    return Unions(start, end).total()


def shared_by_file(start: np.ndarray, end: np.ndarray, file: np.ndarray) -> pd.Series:
    """Per file id: its share of the load's wait, each instant of waiting split equally among the files
    waited on at that instant. The shares add up to the union of the waits (never above the wall),
    where the files' own unions overlap whenever tasks wait on several files at once."""
    codes, uniq = pd.factorize(file)
    if len(uniq) <= 1:
        return pd.Series(np.array([union_ns(start, end)] * len(uniq), dtype=np.float64) / NS, index=uniq)
    order = np.lexsort((start, codes))
    c, s, e = codes[order], start[order], end[order]
    # each wait's stretch not covered by an earlier wait on the same file: disjoint segments per file
    reach = running_max_in_group(c, e)
    lo = np.maximum(s, np.r_[s[:1], reach[:-1]])
    np.copyto(lo, s, where=first_in_group(c))
    keep = e > lo
    c, lo, hi = c[keep], lo[keep], e[keep]
    bounds = np.concatenate([lo, hi])
    by_time = np.argsort(bounds, kind="stable")
    active = np.cumsum(np.r_[np.ones(len(lo)), -np.ones(len(hi))][by_time])  # files waited on after each bound
    step = np.diff(bounds[by_time]).astype(np.float64)
    weight = np.r_[0.0, np.cumsum(np.where(active[:-1] > 0, step / np.maximum(active[:-1], 1), 0.0))]
    at = np.empty(len(bounds), dtype=np.int64)
    at[by_time] = np.arange(len(bounds))
    share = weight[at[len(lo):]] - weight[at[:len(lo)]]
    return pd.Series(np.bincount(c, weights=share, minlength=len(uniq)) / NS, index=uniq)


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
    if reads.all() and not fz.any():  # every access a timed read (a big read trace): views, no copies
        return Waits(app.ts, app.ts + app.latency, app.tid, app.pid, app.file, np.zeros(len(app), bool),
                     "syscalls") if (app.ts[1:] >= app.ts[:-1]).all() else _sorted(app, reads)
    return _sorted_waits(app, fuse, reads, fz)


def _sorted(app: Accesses, reads: np.ndarray) -> Waits:
    no_fuse = Accesses(**{f.name: getattr(app, f.name)[:0] for f in dataclasses.fields(app)})
    return _sorted_waits(app, no_fuse, reads, np.zeros(0, bool))


def _sorted_waits(app: Accesses, fuse: Accesses, reads: np.ndarray, fz: np.ndarray) -> Waits:
    start = np.concatenate([app.ts[reads], fuse.ts[fz]])
    cols = (start, start + np.concatenate([app.latency[reads], fuse.latency[fz]]),
            np.concatenate([app.tid[reads], fuse.tid[fz]]),
            np.concatenate([app.pid[reads], fuse.pid[fz]]),
            np.concatenate([app.file[reads], fuse.file[fz]]),
            np.r_[np.zeros(int(reads.sum()), bool), np.ones(int(fz.sum()), bool)])
    if not (start[1:] >= start[:-1]).all():  # in time order once: every union after it sorts less
        order = np.argsort(start, kind="stable")
        cols = tuple(c[order] for c in cols)
    return Waits(*cols, "syscalls")


def _task_spans(events: pd.DataFrame, waits: Waits, sched: list[dict] | None) -> pd.DataFrame:
    """Per task: pid, first and last ns seen, and the scheduler's totals where recorded. Read rows
    count through their waits only (a lean trace keeps them apart: the same answer either way)."""
    events = events[~events["op"].isin(READ_OPS)]
    ev = pd.DataFrame({"tid": events["tid"].to_numpy().astype(np.int64), "pid": events["pid"].to_numpy().astype(np.int64),
                       "first_ns": events["ts_ns"].to_numpy(dtype=np.int64),
                       "last_ns": events["ts_ns"].to_numpy(dtype=np.int64)})
    if len(waits):  # per task of the waits, no sort (waits can be every read of a big trace)
        codes, uniq = pd.factorize(waits.tid)
        first_row = np.zeros(len(uniq), dtype=np.int64)
        first_row[codes[::-1]] = np.arange(len(codes))[::-1]  # each task's first wait: its pid
        first_ns = np.full(len(uniq), np.iinfo(np.int64).max)
        last_ns = np.full(len(uniq), np.iinfo(np.int64).min)
        np.minimum.at(first_ns, codes, waits.start)
        np.maximum.at(last_ns, codes, waits.end)
        ev = pd.concat([ev, pd.DataFrame({"tid": waits.tid[first_row], "pid": waits.pid[first_row],
                                          "first_ns": first_ns, "last_ns": last_ns})], ignore_index=True)
    spans = ev.groupby("tid").agg(pid=("pid", "first"), first_ns=("first_ns", "min"), last_ns=("last_ns", "max"))
    if sched:
        acct = pd.DataFrame(sched).set_index("tid")
        spans = spans.join(acct[["cpu_ns", "runq_ns", "off_ns"]], how="left")
        seen = acct[acct["last_ns"] > acct["first_ns"]]
        spans.loc[seen.index.intersection(spans.index), "first_ns"] = seen["first_ns"]
        spans.loc[seen.index.intersection(spans.index), "last_ns"] = seen["last_ns"]
    return spans


def _besides_hidden_s(spans: pd.DataFrame, waits: Waits, data: np.ndarray) -> float:
    """``criticalpath.hidden_s`` of the waits on data files (``data``: a mask of ``waits``); without the
    scheduler view 0, before any copy of the waits (a read trace's are every read)."""
    if "cpu_ns" not in spans:
        return 0.0
    return criticalpath.hidden_s(spans, *(take(v, data) for v in (waits.start, waits.end, waits.tid)))


def time_split(events: pd.DataFrame, waits: Waits, files: pd.DataFrame, wall: float | None,
               sched: list[dict] | None
               ) -> tuple[TimeSplit, pd.DataFrame, pd.Series, pd.Series]:
    """(the summary's time split, one row per task, wait seconds per file id (union over the tasks), each
    file's share of the load's wait (``shared_by_file``: the shares add up to ``io_wait_s``)). ``wall``:
    the load's wall seconds (None: unknown); ``sched``: the trace's ``meta["sched"]``."""
    ids = one_value(np.maximum(waits.file, 0))  # file ids index the files table (0..n-1)
    by_id = files.reindex(np.arange(int(ids.max(initial=-1)) + 1))
    named = take(by_id["path"].fillna("").str.startswith("/").to_numpy(), ids)
    if not named.all():  # pipes, sockets: a read that waits there is not file I/O
        waits = Waits(*(getattr(waits, k)[named] for k in ("start", "end", "tid", "pid", "file", "fault")),
                      waits.source)
        ids = ids[named]
    sched = sched if waits.source == "sched" else None
    spans = _task_spans(events, waits, sched)
    tids = spans.index.to_numpy()
    task = np.searchsorted(tids, waits.tid)
    n = len(tids)
    on_fuse = take(by_id["fstype"].fillna("").str.startswith("fuse").to_numpy(), ids)
    data = take(np.asarray(file_roles(by_id["path"]) == "data"), ids)
    reads = ~waits.fault
    overall = Unions(waits.start, waits.end)
    dur = None
    if waits.source == "sched" or reads.all():  # a task's waits follow one another: sums are unions
        dur = (waits.end - waits.start).astype(np.float64)
        every, read, fuse = (np.bincount(task, weights=dur if m is None or m.all() else np.where(m, dur, 0),
                                         minlength=n).astype(np.int64) for m in (None, reads, on_fuse))
    else:  # a FUSE request inside a read of the same task: counted once
        per_task = Unions(waits.start, waits.end, task, n)
        every, read, fuse = per_task.per_group(), per_task.per_group(reads), per_task.per_group(on_fuse)
    tasks = pd.DataFrame({"tid": tids, "pid": spans["pid"].to_numpy(),
                          "wall_s": (spans["last_ns"] - spans["first_ns"]).to_numpy() / NS,
                          "io_wait_s": every / NS, "read_wait_s": read / NS, "fault_wait_s": (every - read) / NS,
                          "fuse_wait_s": fuse / NS})
    for col in ("cpu", "runq", "off"):
        tasks[f"{col}_s"] = spans[f"{col}_ns"].to_numpy() / NS if f"{col}_ns" in spans else np.nan
    tasks["other_off_s"] = tasks["off_s"] - tasks["io_wait_s"]  # sleeping, joining, blocked elsewhere
    tasks = tasks.drop(columns="off_s").sort_values("io_wait_s", ascending=False, kind="stable")
    # per file: the union over tasks of the waits on it (wall time the load waited on that file)
    if len(waits) and waits.file.min() == waits.file.max():  # one file: no codes per wait
        per_file = pd.Series(np.array([overall.total()], dtype=np.int64) / NS, index=waits.file[:1].copy())
    else:  # several files, or no waits
        codes, uniq = pd.factorize(waits.file)
        per_file = pd.Series(union_by_group(waits.start, waits.end, codes, len(uniq)) / NS, index=uniq)
    io = overall.total() / NS
    top = per_file.idxmax() if len(per_file) else None
    top_tasks, on_top = 0, None
    if top is not None:  # the tasks that waited on that file for more than 1 % of its wait
        on_top = waits.file == top
        top_task, waited = task, waits.end - waits.start if dur is None else dur  # bincount: float weights
        if not on_top.all():
            top_task, waited = top_task[on_top], waited[on_top]
        waited = np.bincount(top_task, weights=waited, minlength=n)[np.bincount(top_task, minlength=n) > 0]
        top_tasks = int((waited >= 0.01 * waited.sum()).sum())
    top_fault = bool(waits.fault[on_top].mean() > 0.5) if top is not None else False
    split = TimeSplit(
        time_split_source=waits.source,
        io_wait_s=io, io_wait_fraction=io / wall if wall else None,
        read_wait_s=overall.total(reads) / NS, fault_wait_s=overall.total(~reads) / NS,
        fuse_wait_s=overall.total(on_fuse) / NS,
        data_wait_s=overall.total(data) / NS,
        io_wait_task_s=float(every.sum() / NS),
        cpu_s=float(tasks["cpu_s"].sum()) if sched else None,
        runq_s=float(tasks["runq_s"].sum()) if sched else None,
        wait_file=files["path"].get(top) if top is not None else None,
        wait_file_s=float(per_file.max()) if len(per_file) else 0.0,
        wait_file_fuse=bool(str(files["fstype"].get(top, "")).startswith("fuse")) if top is not None else False,
        wait_file_faults=top_fault,
        wait_tasks=top_tasks,
        besides_hidden_s=_besides_hidden_s(spans, waits, data) if wall else 0.0,
    )
    share = per_file if len(per_file) <= 1 else shared_by_file(waits.start, waits.end, waits.file)
    return split, tasks.reset_index(drop=True), per_file, share
