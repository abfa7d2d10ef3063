"""``report_json(analysis) -> dict``: exactly what ``readtrace report --json`` prints (stable keys)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import IO

import numpy as np
import pandas as pd

from readtrace.analyze import Analysis, Finding
from readtrace.report.prose import render

REPORT_VERSION = 1

FILE_KEYS = (
    "path", "role", "fstype", "fs_family", "mountpoint", "dev", "ino", "size", "bytes_read", "read_bytes", "mmap_bytes",
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


def _records(df: pd.DataFrame, keys: tuple[str, ...]) -> list[dict]:
    present = [k for k in keys if k in df.columns]
    return [plain(r) for r in df[present].to_dict("records")]


def _stream_records(a: Analysis) -> list[dict]:
    df = a.streams.copy()
    df["ofd"] = [None if k != "ofd" else f"{o & 0xFFFFFFFFFFFFFFFF:#x}"
                 for k, o in zip(df["kind"], df["ofd"], strict=True)]
    df["fh"] = pd.Series([int(h) if k == "fuse_handle" else None  # exact u64: never through float NaN
                          for k, h in zip(df["kind"], df["fh"], strict=True)], index=df.index, dtype=object)
    records = _records(df, STREAM_KEYS)
    for r in records:
        if r["kind"] not in ("ofd", "fuse_handle"):
            for k in _SHARED_ONLY:
                r[k] = None
    return records


def _finding(f: Finding) -> dict:
    """A finding's figures plus its rendered ``message``/``recommendation`` (the evidence stays rows)."""
    p = render(f)
    return plain({"code": f.code, "severity": f.severity, "message": p.message,
                  "recommendation": p.recommendation, **f.data()})


def report_json(a: Analysis, predictions: list | None = None) -> dict:
    """The whole report as plain data (files, streams, findings, summary; ``what_if`` with
    ``predictions`` from readtrace.analyze.whatif)."""
    extra = {"what_if": [plain(p.data()) for p in predictions]} if predictions is not None else {}
    return {**extra,
        "report_version": REPORT_VERSION,
        "completeness": a.completeness.as_dict(),
        "trace": a.trace_path,
        "summary": plain(a.summary),
        "tasks": _records(a.tasks, TASK_KEYS),
        "files": _records(a.files, FILE_KEYS),
        "streams": _stream_records(a),
        "findings": [_finding(f) for f in a.findings],
        "thresholds": plain(asdict(a.thresholds)),
    }


def write_json(a: Analysis, out: IO[str], predictions: list | None = None) -> None:
    json.dump(report_json(a, predictions), out, indent=2)
    out.write("\n")
