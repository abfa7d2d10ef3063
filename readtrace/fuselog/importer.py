"""``readtrace import gcsfuse LOG``: a trace with the FUSE view from gcsfuse's own log, alone or joined
onto a recorded application view (``onto``).

The join: the log's inode is the inode the application saw (jacobsa/fuse reports the inode id as
``st_ino``), so each inode goes to the FUSE file of the app trace with that inode, and the request
takes that mount's connection (the minor of its dev). The log's ``PID`` is the requesting thread:
it gets the process of that thread in the app trace. Time: the log's clock (wall clock, or line
order) is shifted so its first read lands on the app's first access to those files; a log without
timestamps is spread in order over the span of those accesses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from readtrace.errors import InputError, UsageError
from readtrace.fuselog.gcsfuse import GcsfuseLog, parse_lines
from readtrace.trace import format as trace_format
from readtrace.trace import views
from readtrace.trace.schema import PAGE_OPS, READ_OPS

FSTYPE = "fuse.gcsfuse"
_MINOR_MASK = (1 << 20) - 1


@dataclass
class ImportResult:
    path: Path
    reads: int
    lines: int
    malformed: int
    joined: bool
    note: str


def read_log(path: str | os.PathLike) -> GcsfuseLog:
    """Parse the log file; an unreadable file or one without a single ReadFile line is an error."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            log = parse_lines(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read the log: {e.strerror}") from e
    if len(log) == 0:
        bad = f", {log.malformed} malformed ReadFile line(s)" if log.malformed else ""
        raise InputError(f"{path}: no gcsfuse ReadFile lines in {log.lines} line(s){bad} "
                             "(was gcsfuse run with --log-severity=trace?)")
    return log


def _standalone_files(log: GcsfuseLog, inodes: np.ndarray) -> pd.DataFrame:
    ends = pd.Series(np.add(log.offset, log.size)).groupby(np.asarray(log.nodeid)).max()
    return pd.DataFrame({
        "path": [log.path_of(int(i)) or f"<gcsfuse inode {int(i)}>" for i in inodes],
        "dev": 0, "ino": inodes, "size": [int(ends.get(int(i), -1)) for i in inodes],
        "fstype": FSTYPE, "mountpoint": ""})


def _app_fuse_files(app: trace_format.Trace) -> pd.DataFrame:
    files = app.files
    return files[files["fstype"].fillna("").str.startswith("fuse") & (files["ino"] > 0)]


def _accesses_on(app: trace_format.Trace, inodes: set[int]) -> pd.DataFrame:
    """ts_ns, tid of the app's reads and faults on those inodes (any FUSE mount)."""
    frames = []
    for table, ops in ((app.events, READ_OPS), (app.pages, PAGE_OPS)):
        if len(table):
            frames.append(table.loc[table["ino"].isin(inodes) & table["op"].isin(ops), ["ts_ns", "tid"]])
    return pd.concat(frames) if frames else pd.DataFrame({"ts_ns": [], "tid": []})


def _align_times(fuse: pd.DataFrame, log: GcsfuseLog, acc: pd.DataFrame) -> str:
    if acc.empty:
        return "log clock kept (the app view has no access to these inodes)"
    first, last = int(acc["ts_ns"].min()), int(acc["ts_ns"].max())
    if log.timed:
        fuse["ts_ns"] += first - int(fuse["ts_ns"].min())
        return "log times shifted so the first ReadFile meets the app's first access to the file"
    n = len(fuse)
    fuse["ts_ns"] = first + (np.arange(n, dtype=np.int64) * max(last - first, n)) // max(n - 1, 1)
    return "the log has no times: its lines spread in order over the app's accesses to the file"


def _join(fuse: pd.DataFrame, log: GcsfuseLog, app: trace_format.Trace) -> tuple[pd.DataFrame, dict]:
    """FUSE rows joined onto the app trace; the files table gains the inodes it lacks."""
    known = _app_fuse_files(app).drop_duplicates("ino")
    connection = pd.Series((known["dev"].to_numpy() & _MINOR_MASK), index=known["ino"].to_numpy())
    fuse["connection"] = fuse["nodeid"].map(connection).fillna(0).astype(np.int64)
    tid_pid = pd.concat([t[["tid", "pid"]] for t in (app.events, app.pages) if len(t)] or
                        [pd.DataFrame({"tid": [], "pid": []})]).drop_duplicates("tid").set_index("tid")["pid"]
    matched = fuse["tid"].isin(tid_pid.index)
    fuse.loc[matched, "pid"] = fuse.loc[matched, "tid"].map(tid_pid).astype(np.int64)
    inodes = set(np.unique(fuse["nodeid"]).tolist())
    clock = _align_times(fuse, log, _accesses_on(app, inodes & set(connection.index.tolist())))
    missing = np.array(sorted(inodes - set(connection.index.tolist())), dtype=np.int64)
    files = pd.concat([app.files, _standalone_files(log, missing)], ignore_index=True) if len(missing) \
        else app.files
    info = {"inodes_matched": len(inodes) - len(missing), "inodes": len(inodes),
            "threads_matched": int(fuse.loc[matched, "tid"].nunique()), "threads": int(fuse["tid"].nunique()),
            "clock": clock}
    return files, info


def import_gcsfuse(log_path: str | os.PathLike, output: str | os.PathLike, onto: str | os.PathLike | None = None,
                   force: bool = False) -> ImportResult:
    """Write ``output`` with the FUSE view from the log (and, with ``onto``, the app trace's views)."""
    log = read_log(log_path)
    fuse = pd.DataFrame(log.fuse_columns())
    source = {"source": f"gcsfuse log {os.path.abspath(log_path)}", "formats": sorted(log.formats),
              "lines": log.lines, "read_lines": len(log), "malformed_lines": log.malformed,
              "malformed_examples": log.malformed_examples, "timed": log.timed,
              "reply_bytes": "unknown (the log does not give them)"}
    if onto is None:
        files = _standalone_files(log, np.unique(fuse["nodeid"]))
        meta = {"backend": views.BACKEND_GCSFUSE_LOG, "command": None, "exit_code": None,
                "missing_views": [views.SYSCALLS, views.PAGE_FAULTS, views.PAGE_CACHE], "fuse_view": source}
        path = trace_format.write_trace(output, meta=meta, fuse=fuse, files=files, force=force)
        note = "times from the log" if log.timed else "no times in the log: line order is time order"
        return ImportResult(path, len(log), log.lines, log.malformed, False, note)
    app = trace_format.load_trace(onto)
    if len(app.fuse):
        raise UsageError(f"{onto} already has a FUSE view ({len(app.fuse)} requests); import onto a trace "
                             "recorded without one")
    files, info = _join(fuse, log, app)
    meta = {k: v for k, v in app.meta.items() if k not in ("format", "version", "rows")}
    meta["missing_views"] = [v for v in views.missing_views(app.meta) if v != views.FUSE]
    meta["fuse_view"] = {**source, **info, "onto": os.path.abspath(onto)}
    path = trace_format.write_trace(output, meta=meta, events=app.events, pages=app.pages, fuse=fuse,
                                    files=files, force=force)
    return ImportResult(path, len(log), log.lines, log.malformed, True, info["clock"])
