"""The terminal report: a summary, the files, the shared streams, the findings, the next command.

``TerminalReport(analysis)`` builds rich renderables from data; ``render(out)`` writes them to a
stream (tests render into a StringIO and compare lines).
"""

from __future__ import annotations

import os
import shlex
from typing import IO

import pandas as pd
from rich.console import Console, Group, RenderableType
from rich.text import Text

from readtrace.analyze import Analysis
from readtrace.escape import printable
from readtrace.fs.knowledge import fs_profile
from readtrace.report.fit import Column, fitted_table
from readtrace.report.mountprofile import basis_line
from readtrace.report.prose import (
    container_lines,
    findings_line,
    fixed_line,
    reads_from_lines,
    render,
    time_lines,
    what_if_lines,
)
from readtrace.report.units import fmt_bytes, fmt_count, fmt_pct

SEVERITY_STYLE = {"high": "bold red", "warn": "yellow", "info": "cyan"}
STREAM_ROWS = 12
PIPED_WIDTH = 140


FILE_ROWS = 10


def _is_terminal(out) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def relevant_streams(a: Analysis, kinds: tuple[str, ...], limit: int, top_files: int = 3) -> pd.DataFrame:
    """The streams a reader needs: interleaved ones first, then those of the most important files
    (remote first, then most read), by kind (handles before tasks) and bytes."""
    s = a.streams
    keep = s["kind"].isin(kinds) & (s["interleaved"] | s["file_id"].isin(a.files.index[:top_files])) \
        & (s["bytes"] > 0)  # rows with nothing to say: --json
    if "path" in s:
        keep &= s["path"].fillna("").str.startswith("/")
    order = {k: i for i, k in enumerate(("fuse_handle", "ofd", "process", "task", "file"))}
    picked = s[keep]
    # from the selection itself: a Series assigned to an empty frame would bring back its whole index
    picked = picked.assign(_kind=picked["kind"].map(order), _not=~picked["interleaved"])
    return picked.sort_values(["_not", "_kind", "bytes"], ascending=[True, True, False], kind="stable") \
        .drop(columns=["_kind", "_not"]).head(limit)


def table_files(a: Analysis) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(data files, code files) the tables show: rows without a path or bytes are left to --json."""
    files = a.files[a.files["hidden"].isna()] if "hidden" in a.files else a.files
    return files[files["role"] == "data"], files[files["role"] == "code"]


def replay_applies(fstype: str) -> bool:
    """The gcsfuse replay's request count means something on this file system (a per-handle reader)."""
    return fs_profile(fstype).per_handle_stream


def _us(x) -> str:
    if x is None or pd.isna(x):
        return "-"
    return f"{x / 1000:.3g} ms" if x >= 1000 else f"{x:.3g} µs"


class TerminalReport:
    """Renderables for one analysis; ``streams`` rows at most (the rest: --json)."""

    def __init__(self, a: Analysis, streams: int = STREAM_ROWS, predictions: list | None = None):
        self.a = a
        self.stream_rows = streams
        self.predictions = predictions or []  # whatif.Prediction rows of --what-if

    def completeness(self) -> RenderableType | None:
        """The first line of the report when the trace is partial."""
        done = self.a.completeness
        return None if done.complete else Text(done.headline(), style="bold red")

    def header(self) -> RenderableType:
        s = self.a.summary
        cmd = " ".join(shlex.quote(str(c)) for c in s.command) if isinstance(s.command, list) else "-"
        t = Text()
        for line in time_lines(s):  # each escaped on its own: a file name may hold a newline
            t.append(printable(line) + "\n", style="bold")
        fixed = fixed_line(s)
        if fixed:
            t.append(fixed + "\n", style="bold green")
        for line in reads_from_lines(s.reads_from):
            t.append(printable(line) + "\n", style="bold")
        t.append("readtrace report", style="bold")
        t.append(f"  {printable(self.a.trace_path or '(in memory)')}\n")
        wall = "-" if s.wall_s is None else f"{s.wall_s:.3g} s"
        t.append(f"command: {printable(cmd)}   exit {s.exit_code}   wall {wall}\n")
        for line in container_lines(s):  # ids and paths as a container sees them
            t.append(printable(line) + "\n")
        t.append(f"read {fmt_bytes(s.bytes_read)} from {s.files} file(s) by {s.tasks} task(s) in "
                 f"{s.processes} process(es): {s.reads} reads, {s.page_faults} mmap faults")
        if s.fuse_read_requests:
            t.append(f", {s.fuse_read_requests} FUSE reads "
                     f"({fmt_pct(s.handle_consecutive_fraction)} consecutive on the handles)")
        if s.cache_miss_bytes is not None:
            t.append(f"; page-cache misses {fmt_bytes(s.cache_miss_bytes)}")
        t.append(f"\n{printable(basis_line(self.a.measured, self._data_mount()))}", style="dim")
        if s.not_seen:
            t.append(f"\nrecorded with {s.backend}; not seen:", style="yellow")
            for line in s.not_seen:
                t.append(f"\n  - {printable(line)}", style="yellow")
        return t

    def _data_mount(self) -> str | None:
        """The mount point of the largest data file on a remote or FUSE mount (None: none)."""
        f = self.a.files
        far = f[(f["role"] == "data") & (f["fstype"].fillna("").str.startswith("fuse") | f["remote"].fillna(False))]
        points = far.sort_values("size", ascending=False)["mountpoint"].dropna()
        return str(points.iloc[0]) if len(points) else None

    def files(self, width: int = PIPED_WIDTH) -> RenderableType:
        """Data files first (checkpoints, anything big), code and libraries folded into one line."""
        data, code = table_files(self.a)
        cols = [Column("file", path=True), Column("fs", 2, right=False), Column("read"), Column("consec", 1),
                Column("seq", 3), Column("random", 3), Column("after seek", 1), Column("cache miss", 1),
                Column("FUSE reads", 2), Column("faults", 2)]
        rows = [[f["path"] or "?", f["fstype"] or "?", fmt_bytes(f["bytes_read"]),
                 fmt_pct(f["consecutive_fraction"]), fmt_pct(f["sequential_fraction"]),
                 fmt_pct(f["random_fraction"]), fmt_pct(f["seek_fraction"]), fmt_pct(f["cache_miss_fraction"]),
                 fmt_count(f["fuse_read_requests"]), fmt_count(f["page_faults"])]
                for _, f in data.head(FILE_ROWS).iterrows()]
        table = fitted_table("Files read (fractions as each open file saw them, byte-weighted)", cols, rows, width)
        notes = []
        if len(data) > FILE_ROWS:
            notes.append(f"{len(data) - FILE_ROWS} more data files (less read): readtrace report --json")
        hidden = int(self.a.files["hidden"].notna().sum()) if "hidden" in self.a.files else 0
        if hidden:
            notes.append(f"{hidden} file(s) without a path or without bytes read left out: readtrace report --json")
        if len(code):
            notes.append(f"+ {fmt_count(len(code))} code and library files (.so, .py, .pyc ...): "
                         f"{fmt_bytes(code['bytes_read'].sum())} read, {fmt_count(code['page_faults'].sum())} "
                         f"faults, {fmt_count(code['fuse_read_requests'].sum())} FUSE reads")
        return Group(table, *(Text(n, style="dim") for n in notes)) if notes else table

    def streams(self, width: int = PIPED_WIDTH) -> RenderableType:
        s = self.a.streams
        shown = relevant_streams(self.a, ("fuse_handle", "ofd"), self.stream_rows)
        cols = [Column("stream", right=False), Column("file", path=True), Column("tasks"), Column("bytes"),
                Column("consec"), Column("after seek", 2), Column("tasks' own consec", 3), Column("score"),
                Column("gcsfuse requests", 1), Column("p50", 1)]
        rows = []
        replay = [replay_applies(t) for t in shown["fstype"]]
        for (_, r), applies in zip(shown.iterrows(), replay, strict=True):
            score = "-" if pd.isna(r["interleave_score"]) else f"{r['interleave_score']:.2f}"
            rows.append([r["stream"], r["path"], str(int(r["tasks"])), fmt_bytes(r["bytes"]),
                         fmt_pct(r["consecutive_fraction"]), fmt_pct(r["seek_fraction"]),
                         fmt_pct(r["task_consecutive_fraction"]),
                         Text(score, style="bold red" if r["interleaved"] else ""),
                         f"{fmt_count(r['gcsfuse_requests'])} ({r['gcsfuse_read_type']})" if applies else "-",
                         _us(r["latency_p50_us"])])
        if not any(replay):  # a per-handle reader's replay means nothing on these file systems
            cols.pop(8)
            rows = [r[:8] + r[9:] for r in rows]
        table = fitted_table("Open files and FUSE handles (merged over their tasks)", cols, rows, width)
        hidden = len(s) - len(shown)
        note = Text(f"{hidden} more streams (per task, process, file, smaller files): readtrace report --json",
                    style="dim")
        return Group(table, note) if hidden else table

    def findings(self) -> RenderableType:
        if not self.a.findings:
            return Text("No findings: nothing in this trace looks slow for its file system.", style="green")
        parts: list[RenderableType] = [Text(findings_line(self.a.findings, self.a.summary.wall_s, self.a.thresholds), style="bold")]
        for f in self.a.findings:
            p = render(f)
            t = Text()
            if f.cause:  # how the cause above shows: one line under it (its figures: --json)
                t.append(f"  + {f.code}", style="dim bold")
                t.append(f"  {printable(p.message)}", style="dim")
                parts.append(t)
                continue
            t.append(f"[{f.severity.upper()}] {f.code}", style=SEVERITY_STYLE.get(f.severity, ""))
            t.append(f"  {printable(p.message)}\n")
            for line in p.evidence:
                t.append(f"    {printable(line)}\n", style="dim")
            if f.basis and not f.inferred:  # an inferred basis is in the message already
                t.append(f"    seen in: {f.basis}\n", style="dim")
            t.append(f"  -> {printable(p.recommendation)}")
            parts.append(t)
        return Group(*parts)

    def next_command(self) -> RenderableType:
        target = printable(shlex.quote(self.a.trace_path)) if self.a.trace_path else "TRACE"
        return Text(f"next: readtrace fix --compare {target}", style="bold")

    def what_if(self) -> RenderableType | None:
        if not self.predictions:
            return None
        head = Text("What if (predicted load time as recorded and fixed; analyze/storage/whatif.py)", style="bold")
        return Group(head, *(Text(line) for line in what_if_lines(self.predictions)))

    def renderables(self, width: int = PIPED_WIDTH) -> list[RenderableType]:
        parts = [self.completeness(), self.header(), self.files(width), self.streams(width), self.what_if(), self.findings(),
                 self.next_command()]
        return [p for p in parts if p is not None]

    def render(self, out: IO[str], width: int | None = None, color: bool | None = None) -> None:
        if width is None and not _is_terminal(out) and "COLUMNS" not in os.environ:
            width = PIPED_WIDTH  # a log or a pipe: rich's 80 columns would crush the paths
        console = Console(file=out, width=width, force_terminal=color, no_color=color is False,
                          highlight=False, soft_wrap=False, markup=False)  # no [markup] from file names
        for r in self.renderables(console.width):
            console.print(r)
            console.print()
