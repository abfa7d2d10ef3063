"""Read fronts inferred from residency samples: how many places a file was being read at once, and
whether each moved forward, without knowing the threads (the unprivileged page view).

Each ``resident`` row is a run of pages that entered the page cache between two samples. A run that
starts within ``gap`` after (or ``back`` before) the end of a known front extends it; any other run
opens a new front. Fronts that are active over overlapping times advanced through the file at once.
On one mmap mapping, several concurrent fronts that each move forward are the shared-mapping
interleave the eBPF fault view shows directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

MiB = 1 << 20
RESIDENT_OPS = ("resident",)


@dataclass
class Front:
    first_offset: int
    end: int
    first_ts: int
    last_ts: int
    steps: int = 1
    forward: int = 1  # steps that continued forward from the front's end
    bytes: int = 0

    @property
    def sequential_fraction(self) -> float:
        return self.forward / self.steps


@dataclass
class FrontSummary:
    fronts: list[Front] = field(default_factory=list)  # the fronts worth naming (>= min_bytes)
    concurrent: int = 0  # most fronts active at one time
    sampled_bytes: int = 0  # bytes that became resident


def track(rows: pd.DataFrame, gap: int = 4 * MiB, back: int = 1 * MiB) -> list[Front]:
    """Fronts of one file from its ``resident`` rows (ts_ns, offset, size)."""
    fronts: list[Front] = []
    rows = rows.sort_values(["ts_ns", "offset"], kind="stable")
    for ts, offset, size in zip(rows["ts_ns"].tolist(), rows["offset"].tolist(), rows["size"].tolist(), strict=True):
        best, best_dist = None, None
        for f in fronts:
            dist = offset - f.end
            if -back <= dist <= gap and (best is None or abs(dist) < best_dist):
                best, best_dist = f, abs(dist)
        if best is None:
            fronts.append(Front(offset, offset + size, ts, ts, bytes=size))
            continue
        best.steps += 1
        best.forward += offset >= best.end - back
        best.end = max(best.end, offset + size)
        best.last_ts = ts
        best.bytes += size
    return fronts


def _most_at_once(fronts: list[Front]) -> int:
    if not fronts:
        return 0
    events = sorted([(f.first_ts, 1) for f in fronts] + [(f.last_ts, -1) for f in fronts],
                    key=lambda e: (e[0], -e[1]))
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def summarize(rows: pd.DataFrame, min_bytes: int = 1 * MiB, min_steps: int = 3) -> FrontSummary:
    """The fronts of one file that read at least ``min_bytes`` in ``min_steps`` samples, and how many
    of them were active at once."""
    named = [f for f in track(rows) if f.bytes >= min_bytes and f.steps >= min_steps]
    return FrontSummary(fronts=sorted(named, key=lambda f: f.first_offset), concurrent=_most_at_once(named),
                        sampled_bytes=int(np.sum(rows["size"])) if len(rows) else 0)


@dataclass
class Mapped:
    """A file the syscall view saw mapped, with the fronts its residency samples show."""

    file: int
    pid: int  # the process that mapped it (first mmap)
    mappings: int  # mmap calls of the file
    tasks: int  # threads and forked children of that process the syscall view saw (+ itself)
    sampled: FrontSummary
    runs_in_order_fraction: float  # of the sampled runs in time order: continuing the previous one's end


def _in_order_fraction(rows: pd.DataFrame, gap: int, back: int) -> float:
    rows = rows.sort_values(["ts_ns", "offset"], kind="stable")
    offset, end = rows["offset"].to_numpy(), (rows["offset"] + rows["size"]).to_numpy()
    if len(offset) < 2:
        return 1.0
    step = offset[1:] - end[:-1]
    return float(np.mean((step >= -back) & (step <= gap)))


def mapped_files(events: pd.DataFrame, pages: pd.DataFrame, index, gap: int = 1 * MiB, back: int = 1 * MiB
                 ) -> dict[int, Mapped]:
    """Per mapped file with sampled residency: its fronts (``pages``: page_rows with file ids)."""
    from readtrace.analyze.views.accesses import app_files

    named = app_files(events, index)
    mmaps = named[named["op"] == "mmap"]
    resident = pages[pages["op"].isin(RESIDENT_OPS)]
    out = {}
    for file_id, group in mmaps.groupby("file"):
        rows = resident[resident["file"] == file_id]
        if file_id < 0 or rows.empty:
            continue
        pid = int(group["pid"].iloc[0])
        spawned = events[(events["pid"] == pid) & events["op"].isin(("thread", "fork"))]
        out[int(file_id)] = Mapped(int(file_id), pid, len(group), 1 + len(spawned), summarize(rows),
                                   _in_order_fraction(rows, gap, back))
    return out
