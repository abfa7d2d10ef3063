"""The load's own time that the union of its data waits hides, where several tasks wait on data.

``wall - data_wait_s`` (the union of the data waits taken off the wall) is what a load whose data
waits vanished still takes when one task reads. Where several tasks read (forked workers, a thread
pool), the union also covers the time a worker spent on its own work (on a CPU, or waiting for one)
while another waited: a fixed load still pays that on the path that ends it. That path, per task:

- the load's first task (the parent, the main thread) outside the fan-out, the stretch from the first
  other reader's start to the last one's end: ``wall - data_wait_s`` already charges it;
- inside the fan-out, the slowest task's own time: each other reader's CPU and run-queue time, and
  the parent's where its own exceeds what its time outside the fan-out can hold (it waits for its
  workers there, ``pool.map``, ``join``). ``wall - data_wait_s`` charges the fan-out's time that no
  task waited on data (start-up, the barrier, results sent back); the rest is hidden.

rclone at 20 ms, 256 MiB, 4 forked workers: 0.37 s own in the slowest worker, 0.25 s of the fan-out
without a data wait: 0.12 s hidden. Needs the scheduler view (each task's CPU time); without it, or
with one task waiting on data, nothing is hidden and a load is predicted as before.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from readtrace.analyze.views.grouping import union_length

NS = 1e9


def hidden_s(spans: pd.DataFrame, start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> float:
    """Seconds of the slowest task's own time inside the fan-out that the union of the data waits
    covers (0: one task waited on data, or no scheduler view). ``spans``: per tid (the index) its
    ``first_ns``, ``last_ns``, ``cpu_ns`` and ``runq_ns`` (timesplit's task spans); ``start``, ``end``,
    ``tid``: the waits on data files."""
    readers = pd.unique(tid)
    if len(readers) < 2 or "cpu_ns" not in spans or spans["cpu_ns"].isna().all():
        return 0.0
    root = spans["first_ns"].idxmin()
    workers = spans.loc[[t for t in readers if t != root]]
    lo, hi = int(workers["first_ns"].min()), int(workers["last_ns"].max())
    run = spans["cpu_ns"].fillna(0) + spans["runq_ns"].fillna(0)
    own = max(float(run[workers.index].max()), _parent_inside_ns(spans.loc[root], run[root], lo, hi))
    return max(own - _unwaited_ns(start, end, lo, hi), 0.0) / NS


def _parent_inside_ns(span: pd.Series, run_ns: float, lo: int, hi: int) -> float:
    """The parent's own time that must lie inside the fan-out [lo, hi): what its time outside cannot hold."""
    first, last = int(span["first_ns"]), int(span["last_ns"])
    outside = (last - first) - max(min(last, hi) - max(first, lo), 0)
    return max(float(run_ns) - outside, 0.0)


def _unwaited_ns(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> float:
    """Nanoseconds of [lo, hi) during which no task waited on data."""
    on = (start < hi) & (end > lo)
    s, e = np.clip(start[on], lo, hi), np.clip(end[on], lo, hi)
    order = np.argsort(s, kind="stable")
    waited = union_length(np.zeros(len(s), dtype=np.int64), 1, s[order], e[order])[0] if len(s) else 0.0
    return float(hi - lo) - float(waited)
