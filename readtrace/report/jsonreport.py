"""``report_json(analysis) -> dict``: exactly what ``readtrace report --json`` prints (stable keys)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import IO

import numpy as np
import pandas as pd

from readtrace.analyze import Analysis, Finding
from readtrace.fs.knowledge import fs_profile
from readtrace.report.prose import render

REPORT_VERSION = 1
LIST_FILES = 100  # files --json lists without --all (the most important first: remote, then most read)
LIST_STREAMS = 100  # streams of each kind --json lists without --all (interleaved ones always)

FILE_KEYS = (
    "path", "role", "hidden", "fstype", "fs_family", "mountpoint", "dev", "ino", "size", "bytes_read", "read_bytes", "mmap_bytes",
    "reads", "page_faults", "unique_bytes", "reread_amplification",
    "consecutive_fraction", "sequential_fraction", "random_fraction", "seek_fraction", "merged_sequential_fraction",
    "open_files", "fuse_handles", "fuse_read_requests", "fuse_read_bytes",
    "cache_miss_bytes", "cache_miss_unique_bytes", "cache_refetched_bytes", "cache_miss_fraction",
    "readahead_windows", "readahead_bytes", "tasks", "concurrency", "latency_p50_us", "latency_p99_us",
    "empty_reads", "failed_reads", "size_hist", "top_sizes", "top_strides",
)
STREAM_KEYS = (
    "kind", "stream", "path", "fstype", "pid", "tid", "ofd", "fh", "accesses", "faults", "bytes", "unique_bytes",
    "reread_amplification", "consecutive_fraction", "sequential_fraction", "random_fraction", "seek_fraction",
    "in_order_fraction", "consecutive_count_fraction", "sequential_count_fraction", "random_count_fraction", "seek_count_fraction", "in_order_count_fraction",
    "latency_p50_us", "latency_p99_us", "first_ts_ns", "last_ts_ns", "tasks", "concurrency",
    "cache_miss_bytes", "readahead_bytes", "readahead_windows", "task_consecutive_fraction", "task_sequential_fraction", "task_in_order_fraction",
    "min_task_consecutive_fraction", "interleave_score", "interleaved",
    "gcsfuse_seeks", "gcsfuse_requests", "gcsfuse_sequential_requests", "gcsfuse_read_type", "gcsfuse_random_after",
    "size_hist", "top_sizes", "top_strides",
)
TASK_KEYS = ("tid", "pid", "wall_s", "io_wait_s", "read_wait_s", "fault_wait_s", "fuse_wait_s", "cpu_s", "runq_s",
             "other_off_s")
# Columns that only mean something for shared streams (open files, FUSE handles): null elsewhere.
_SHARED_ONLY = {k for k in STREAM_KEYS if k.startswith(("task_", "min_task", "interleave", "gcsfuse_"))}


def plain(value):
    """A JSON-ready Python value: numpy scalars unwrapped, NaN -> None, containers recursed."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [plain(v) for v in value]
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _column(values: pd.Series) -> list:
    """One column as JSON-ready Python values, converted as a whole (no per-row dicts of numpy scalars)."""
    kind = values.dtype.kind
    if kind == "f":
        v = values.to_numpy()
        out = v.astype(object)
        out[~np.isfinite(v)] = None
        return out.tolist()
    if kind in "iub":
        return values.tolist()
    # text, or lists/dicts the analysis built from Python ints: only missing values need mapping here
    return [None if v is None or v is pd.NA or (isinstance(v, float) and not math.isfinite(v)) else v
            for v in values.astype(object).tolist()]


def _numpy_value(value):
    """``json.dumps`` default: a numpy scalar or array still nested in a column's lists."""
    if isinstance(value, np.ndarray | np.generic):
        return plain(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _rows(columns: dict[str, list]) -> list[dict]:
    keys = list(columns)
    return [dict(zip(keys, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _records(df: pd.DataFrame, keys: tuple[str, ...]) -> list[dict]:
    return _rows({k: _column(df[k]) for k in keys if k in df.columns})


def _stream_records(streams: pd.DataFrame) -> list[dict]:
    kind = streams["kind"].to_numpy()
    columns = {k: _column(streams[k]) for k in STREAM_KEYS if k in streams.columns}
    is_ofd, is_handle = kind == "ofd", kind == "fuse_handle"
    columns["ofd"] = [f"{o & 0xFFFFFFFFFFFFFFFF:#x}" if yes else None
                      for o, yes in zip(streams["ofd"].tolist(), is_ofd, strict=True)]
    columns["fh"] = [int(h) if yes else None  # exact u64: never through float NaN
                     for h, yes in zip(streams["fh"].tolist(), is_handle, strict=True)]
    unshared = ~(is_ofd | is_handle)
    # the gcsfuse replay says nothing where the file system keeps no per-handle reader (fs/knowledge.py)
    kinds = streams["fstype"].astype(object).fillna("") if "fstype" in streams else pd.Series([""] * len(streams))
    no_replay = ~kinds.map(lambda t: fs_profile(t).per_handle_stream).to_numpy(dtype=bool)
    for k in _SHARED_ONLY & columns.keys():
        col = np.array(columns[k], dtype=object)
        col[unshared | (no_replay & k.startswith("gcsfuse_"))] = None
        columns[k] = col.tolist()
    return _rows(columns)


def listed_streams(streams: pd.DataFrame, per_kind: int = LIST_STREAMS) -> pd.DataFrame:
    """The streams --json lists by default: every interleaved one, then the first ``per_kind`` of each
    kind (streams are sorted by kind, then bytes)."""
    rank = streams.groupby("kind", sort=False).cumcount().to_numpy()
    return streams[(rank < per_kind) | streams["interleaved"].to_numpy(dtype=bool)]


def _finding(f: Finding) -> dict:
    """A finding's figures plus its rendered ``message``/``recommendation`` (the evidence stays rows)."""
    p = render(f)
    return plain({"code": f.code, "severity": f.severity, "message": p.message,
                  "recommendation": p.recommendation, **f.data()})


def report_json(a: Analysis, predictions: list | None = None, everything: bool = False) -> dict:
    """The report as plain data (files, streams, findings, summary; ``what_if`` with ``predictions``
    from readtrace.analyze.storage.whatif). By default the first LIST_FILES files and LIST_STREAMS streams of
    each kind (``listing`` counts the rest); ``everything``: all of them."""
    extra = {"what_if": [plain(p.data()) for p in predictions]} if predictions is not None else {}
    files = a.files if everything else a.files.head(LIST_FILES)
    streams = a.streams if everything else listed_streams(a.streams)
    return {
        "report_version": REPORT_VERSION,
        "completeness": a.completeness.as_dict(),
        **extra,
        "trace": a.trace_path,
        "summary": plain(a.summary.data()),
        "listing": {"all": everything, "files": len(a.files), "files_listed": len(files),
                    "streams": len(a.streams), "streams_listed": len(streams),
                    **({} if everything else {"everything": "readtrace report --json --all"})},
        "tasks": _records(a.tasks, TASK_KEYS),
        "files": _records(files, FILE_KEYS),
        "streams": _stream_records(streams),
        "findings": [_finding(f) for f in a.findings],
        "thresholds": plain(asdict(a.thresholds)),
    }


def write_json(a: Analysis, out: IO[str], predictions: list | None = None, everything: bool = False) -> None:
    """Indented; ``everything`` (tens of MB for big traces) on one line: json's C encoder only runs
    without indentation, 10x faster."""
    report = report_json(a, predictions, everything)
    out.write(json.dumps(report, separators=(",", ":"), default=_numpy_value) if everything
              else json.dumps(report, indent=2, default=_numpy_value))
    out.write("\n")
