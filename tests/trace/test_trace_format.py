"""Trace format: writer -> reader round trip, defaults, and every way a trace can be unusable."""

import json

import pandas as pd
import pytest

from readtrace.errors import ReadtraceError, TraceError
from readtrace.trace import (
    FORMAT_VERSION,
    TABLES,
    TraceWriter,
    default_trace_name,
    load_trace,
    make_trace,
    newest_trace,
    write_trace,
)


def _events():
    return pd.DataFrame({
        "ts_ns": [10, 20, 30],
        "pid": [100, 100, 101],
        "tid": [100, 102, 101],
        "op": ["open", "pread", "read"],
        "fd": [3, 3, 3],
        "ofd": [0xFFFF888012345678 - 2**64, 0xFFFF888012345678 - 2**64, 7],
        "path": ["/m/a.safetensors", None, "/m/a.safetensors"],
        "offset": [-1, 4096, 0],
        "size": [-1, 1 << 20, 1 << 20],
        "ret": [3, 1 << 20, 12],
        "latency_ns": [5, 1000, 2000],
    })


def test_round_trip_preserves_values_and_dtypes(tmp_path):
    path = tmp_path / "t.rtrace"
    writer = TraceWriter(path)
    ev = _events()
    writer.append("events", ev.iloc[:2])
    writer.append("events", ev.iloc[2:])
    writer.append("pages", [{"ts_ns": 1, "pid": 1, "tid": 1, "op": "miss", "dev": (8 << 20) | 1,
                             "ino": 12, "offset": 0, "size": 4096}])
    writer.append("fuse", {"ts_ns": [5], "unique": [42], "opcode": [15], "fh": [1], "offset": [0],
                           "size": [131072]})
    writer.close({"command": ["python", "x.py"], "exit_code": 0, "lost_events": 0})

    t = load_trace(path)
    assert t.meta["version"] == FORMAT_VERSION
    assert t.meta["command"] == ["python", "x.py"]
    assert t.meta["rows"] == {"events": 3, "pages": 1, "fuse": 1, "files": 0, "python_calls": 0, "tasks": 0}
    assert list(t.events.columns) == TABLES["events"].names
    assert t.events["offset"].tolist() == [-1, 4096, 0]
    assert t.events["ofd"].iloc[0] == 0xFFFF888012345678 - 2**64
    assert pd.isna(t.events["path"].iloc[1])
    assert t.events["dev"].tolist() == [0, 0, 0]  # defaulted column
    assert t.fuse["nodeid"].tolist() == [0] and t.fuse["size"].tolist() == [131072]
    assert t.pages["dev"].iloc[0] == (8 << 20) | 1
    assert len(t.files) == 0 and list(t.files.columns) == TABLES["files"].names


def test_make_trace_matches_disk_dtypes(tmp_path):
    mem = make_trace(events=_events())
    path = write_trace(tmp_path / "x.rtrace", events=_events())
    disk = load_trace(path)
    pd.testing.assert_frame_equal(mem.events, disk.events)
    assert (mem.events.dtypes == disk.events.dtypes).all()


def test_unknown_column_rejected():
    with pytest.raises(ValueError, match="unknown columns"):
        make_trace(events={"ts_ns": [1], "bogus": [2]})


def test_no_silent_overwrite(tmp_path):
    path = write_trace(tmp_path / "t.rtrace", events=_events())
    with pytest.raises(ReadtraceError, match="exists; use force to overwrite"):  # the CLI says --force
        TraceWriter(path)
    write_trace(path, events=_events().iloc[:1], force=True)
    assert len(load_trace(path).events) == 1


@pytest.mark.parametrize("damage, message", [
    ("no_meta", "incomplete trace"),
    ("newer", "version 99 is not supported"),
    ("older", "version 1 was written by an older readtrace"),
    ("foreign", "not a readtrace trace"),
    ("garbled_meta", "corrupt meta.json"),
    ("truncated_parquet", "corrupt trace: events.parquet"),
    ("missing_table", "pages.parquet is missing"),
    ("rows_mismatch", "meta says 7"),
])
def test_damaged_traces_are_rejected_by_name(tmp_path, damage, message):
    path = write_trace(tmp_path / "t.rtrace", events=_events(), meta={"command": ["x"]})
    meta_path = path / "meta.json"
    meta = json.loads(meta_path.read_text())
    if damage == "no_meta":
        meta_path.unlink()
    elif damage == "newer":
        meta["version"] = 99
        meta_path.write_text(json.dumps(meta))
    elif damage == "older":  # v1: signed ids with -1 for unknown; refused, not reinterpreted
        meta["version"] = 1
        meta_path.write_text(json.dumps(meta))
    elif damage == "foreign":
        meta["format"] = "something-else"
        meta_path.write_text(json.dumps(meta))
    elif damage == "garbled_meta":
        meta_path.write_text("{not json")
    elif damage == "truncated_parquet":
        data = (path / "events.parquet").read_bytes()
        (path / "events.parquet").write_bytes(data[: len(data) // 2])
    elif damage == "missing_table":
        (path / "pages.parquet").unlink()
    elif damage == "rows_mismatch":
        meta["rows"]["events"] = 7
        meta_path.write_text(json.dumps(meta))
    with pytest.raises(TraceError, match=message):
        load_trace(path)


def test_missing_and_not_a_directory(tmp_path):
    with pytest.raises(TraceError, match="no such trace"):
        load_trace(tmp_path / "nope.rtrace")
    f = tmp_path / "file.rtrace"
    f.write_text("x")
    with pytest.raises(TraceError, match="not a readtrace trace"):
        load_trace(f)


def test_newest_trace_and_default_name(tmp_path):
    with pytest.raises(TraceError, match="no .rtrace trace"):
        newest_trace(tmp_path)
    a = write_trace(tmp_path / "a.rtrace")
    b = write_trace(tmp_path / "b.rtrace")
    import os
    os.utime(a, (1, 1))
    assert newest_trace(tmp_path) == b
    assert default_trace_name(["/usr/bin/python3", "load.py"], 77) == "readtrace-python3-77.rtrace"
    assert default_trace_name(["./my load"], 5) == "readtrace-my_load-5.rtrace"
