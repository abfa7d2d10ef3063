"""The lean load (``load_trace(lean=True)``, what ``readtrace report`` uses): reads apart with only the
columns a read needs, text as categoricals, every row kept, and the very same analysis as a full load."""

import numpy as np
import pandas as pd
import pytest

from lab.synthetic import FUSE_DEV, NODE, files_frame, load_case, opens, worker_reads
from readtrace.analyze import analyze
from readtrace.errors import TraceError
from readtrace.report.jsonreport import report_json
from readtrace.trace import READ_COLUMNS, READ_OPS, TABLES, TraceWriter, load_trace, write_trace

GCS = "/mnt/model/model.safetensors"


def _mixed_trace(path):
    """Row groups of every kind: mixed (open + reads), reads only, other events only. Also reads
    without a kernel open-file id, an EOF read, a failed read, a merged run of reads (count 4), an mmap
    with faults by a forked child, page-cache misses and FUSE requests."""
    case = load_case("shared", cold=True)
    events = case["events"]
    writer = TraceWriter(path)
    writer.append("files", case["files"])
    writer.append("events", events.iloc[:40])  # the open + the first reads
    writer.append("events", events.iloc[40:])  # reads only
    writer.append("events", {
        "ts_ns": [10, 11, 12, 13, 14, 15], "pid": [300, 300, 300, 300, 300, 301],
        "tid": [300, 300, 300, 300, 300, 301], "op": ["open", "read", "pread", "mmap", "fork", "readv"],
        "fd": [5, 5, 5, 5, -1, 5], "ofd": [0, 0, 0, 0, 0, 0], "path": [GCS, None, None, GCS, None, None],
        "dev": [FUSE_DEV, 0, 0, FUSE_DEV, 0, 0], "ino": [NODE, 0, 0, NODE, 0, 0],
        "offset": [-1, 0, 4096, 0, -1, 8192], "size": [-1, 4096, 4096, 1 << 20, -1, 4096],
        "ret": [5, 4096, 0, 0, 301, -5], "arg": [0, 0, 0, 0x7F0000000000, 301, 0]})
    writer.append("events", {  # a row group of one merged run: 4 reads of 4 KiB (the recorder's count)
        "ts_ns": [16], "pid": [300], "tid": [300], "op": ["read"], "fd": [5], "ofd": [0], "offset": [16384],
        "size": [16384], "ret": [16384], "latency_ns": [4000], "count": [4]})
    faults = pd.DataFrame({"ts_ns": 20 + np.arange(64), "pid": 301, "tid": 301, "op": "fault", "dev": FUSE_DEV,
                           "ino": NODE, "offset": np.arange(64) * 4096, "size": 4096})
    writer.append("pages", pd.concat([case["pages"], faults], ignore_index=True))
    writer.append("fuse", case["fuse"])
    return writer.close(case["meta"])


def _sorted(df):
    """Comparable regardless of row order and dtypes; numeric nulls read as 0 in a lean load."""
    numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])]
    return df.fillna({c: 0 for c in numeric}).astype({c: object for c in df.columns if c not in numeric}) \
        .sort_values(list(df.columns)).reset_index(drop=True)


def test_lean_load_keeps_every_row_and_value(tmp_path):
    path = _mixed_trace(tmp_path / "t.rtrace")
    full, lean = load_trace(path), load_trace(path, lean=True)
    is_read = full.events["op"].isin(READ_OPS)
    assert list(lean.reads.columns) == list(READ_COLUMNS)
    assert list(lean.others.columns) == TABLES["events"].names == list(full.others.columns)
    assert len(lean.reads) == is_read.sum() > 0 and len(lean.others) == (~is_read).sum() == 4
    pd.testing.assert_frame_equal(_sorted(lean.reads), _sorted(full.events[is_read][list(READ_COLUMNS)]),
                                  check_dtype=False)
    pd.testing.assert_frame_equal(_sorted(lean.others), _sorted(full.events[~is_read]), check_dtype=False)
    for name in ("pages", "fuse", "files"):
        pd.testing.assert_frame_equal(_sorted(getattr(lean, name)), _sorted(getattr(full, name)), check_dtype=False)
    assert isinstance(lean.reads["path"].dtype, pd.CategoricalDtype)
    assert isinstance(lean.pages["op"].dtype, pd.CategoricalDtype)
    assert lean.reads["pid"].dtype == np.int32 and lean.reads["offset"].dtype == np.int64


def test_readers_mean_the_same_in_full_and_lean_loads(tmp_path):
    """reads/runs(): one row per recorded run; calls(): one per call; others: the rest; events: all."""
    path = _mixed_trace(tmp_path / "t.rtrace")
    for t in (load_trace(path), load_trace(path, lean=True)):
        runs, calls = t.runs(), t.calls()
        assert runs is t.reads and set(runs["count"]) == {1, 4}
        assert len(calls) == len(runs) + 3 and (calls["count"] == 1).all()
        assert calls["ret"].sum() == runs["ret"].sum()
        assert not t.others["op"].isin(READ_OPS).any() and t.reads["ret"].notna().all()
        assert len(t.events) == len(t.reads) + len(t.others)  # lean: read again, in full
        assert list(t.events.columns) == TABLES["events"].names
    run = calls[calls["offset"].between(16384, 16384 + 3 * 4096) & (calls["tid"] == 300)]
    assert sorted(run["offset"]) == [16384, 20480, 24576, 28672] and set(run["size"]) == {4096}


@pytest.mark.parametrize("case", ["mixed", "shared", "own", "sequential"])
def test_lean_analysis_equals_full(tmp_path, case):
    path = tmp_path / "t.rtrace"
    path = _mixed_trace(path) if case == "mixed" else write_trace(path, **load_case(case, cold=True))
    full, lean = report_json(analyze(load_trace(path))), report_json(analyze(load_trace(path, lean=True)))
    assert lean == full
    if case == "mixed":
        assert full["summary"]["page_faults"] == 64 and full["files"][0]["empty_reads"] == 1
        assert full["summary"]["reads"] == load_case("shared")["events"]["op"].eq("pread").sum() + 1 + 4  # + the 4 KiB read, + the run


def test_lean_load_reports_damage(tmp_path):
    path = write_trace(tmp_path / "d.rtrace", **load_case("own"))
    (path / "events.parquet").write_bytes((path / "events.parquet").read_bytes()[:100])
    with pytest.raises(TraceError, match="corrupt trace: events.parquet"):
        load_trace(path, lean=True)


def test_lean_empty_trace(tmp_path):
    t = load_trace(write_trace(tmp_path / "e.rtrace", files=files_frame(GCS, 1, "ext4")), lean=True)
    assert len(t.reads) == 0 and list(t.reads.columns) == list(READ_COLUMNS) and len(t.others) == 0
    assert len(t.calls()) == 0 and len(t.events) == 0


def test_lean_column_of_one_value_takes_no_memory(tmp_path):
    """A column whose row groups all hold one value (Parquet statistics) loads as that value broadcast:
    read-only, no memory per row; a column of two values in two row groups loads in full."""
    writer = TraceWriter(tmp_path / "c.rtrace")
    for fd in (3, 3, 4):
        writer.append("events", {"ts_ns": np.arange(5), "pid": 7, "tid": 7, "op": "pread", "fd": fd, "ofd": -9,
                                 "offset": np.arange(5) * 10, "size": 10, "ret": 10})
    reads = load_trace(writer.close({}), lean=True).reads
    ofd, fd = reads["ofd"].to_numpy(), reads["fd"].to_numpy()
    assert ofd.strides == (0,) and not ofd.flags.writeable and ofd.dtype == np.int64 and (ofd == -9).all()
    assert fd.strides != (0,) and fd.tolist() == [3] * 10 + [4] * 5 and fd.dtype == np.int32


@pytest.mark.parametrize("layout", ["shared", "own", "pairs"])
def test_lean_int32_columns_near_the_limit_report_as_int64(tmp_path, layout):
    """Read sizes and latencies that fit in int32 load as int32 (half the memory); values at the
    limit (ret = 2**31 - 1) in every row give the very report of int64 columns: byte sums far above
    2**31 exact. ``pairs``: each task reads runs of two contiguous reads, the runs backwards."""
    limit = 2**31 - 1
    reads = worker_reads(2, 1500, limit, layout == "shared", path=GCS)
    row = np.arange(len(reads))
    second = (row // 2) % 2 if layout == "pairs" else row % 2  # of a pair (a task's every other read)
    reads["ret"] = reads["size"] = limit - second  # varying: not one value broadcast
    reads["latency_ns"] = limit - row % 7
    if layout == "pairs":
        task, pair = row % 2, 749 - row // 4
        reads["offset"] = (task * 750 + pair) * 2 * limit + second * limit
    events = pd.concat([opens(reads, GCS), reads], ignore_index=True)
    path = write_trace(tmp_path / "n.rtrace", events=events,
                       files=files_frame(GCS, 3000 * limit, "fuse.gcsfuse"))
    full, lean = load_trace(path), load_trace(path, lean=True)
    assert {lean.reads[c].dtype for c in ("size", "ret", "latency_ns")} == {np.dtype(np.int32)}
    assert full.events["ret"].dtype == np.int64
    expected = report_json(analyze(full))
    assert report_json(analyze(lean)) == expected
    assert expected["summary"]["bytes_read"] == sum(reads["ret"].tolist()) > 2**42
