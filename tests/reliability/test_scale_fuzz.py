"""Every integer value the trace schema allows gives a report or one clear line with exit 4 (never a
traceback, never an unbounded allocation). Synthetic traces written through the trace writer."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.synthetic import load_case
from readtrace.cli import main
from readtrace.trace import TABLES, runs, write_trace

INT_COLUMNS = [(table, f.name) for table, schema in TABLES.items() if table != "files"
               for f in schema if pa.types.is_integer(f.type)]
INT_COLUMNS += [("files", f.name) for f in TABLES["files"] if pa.types.is_integer(f.type)]


def _bounds(table: str, column: str) -> tuple[int, int]:
    t = TABLES[table].field(column).type
    bits = t.bit_width
    return (0, (1 << bits) - 1) if pa.types.is_unsigned_integer(t) else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _edges(lo: int, hi: int) -> list[int]:
    near = [lo, lo + 1, -(1 << 31), -2, -1, 0, 1, 2, 4095, 4096, (1 << 31) - 1, 1 << 32, 1 << 40, 1 << 44,
            (1 << 44) + 1, 1 << 62, (1 << 63) - 1, (1 << 64) - 1, hi - 1, hi]
    return sorted({v for v in near if lo <= v <= hi})


def values_for(table: str, column: str) -> st.SearchStrategy[int]:
    lo, hi = _bounds(table, column)
    return st.one_of(st.sampled_from(_edges(lo, hi)), st.integers(lo, hi))


def _frames() -> dict:
    frames = load_case("shared", workers=2, chunks=4, chunk=64 * 1024, cold=True)
    ev = frames["events"]
    # one loader call around the reads (the Python call view), so its columns are fuzzed on a real row
    frames["python_calls"] = pd.DataFrame({
        "ts_ns": [int(ev["ts_ns"].min()) - 1], "end_ns": [int(ev["ts_ns"].max()) + 1],
        "pid": [int(ev["pid"].iloc[0])], "tid": [int(ev["tid"].iloc[0])], "depth": [0],
        "call": ["safetensors.torch.load_file"], "chain": ["safetensors.torch.load_file"],
        "path": [frames["files"]["path"].iloc[0]], "ok": [1]})
    # the tasks seen in a container (record --cgroup): each worker with its in-namespace ids
    pids = sorted(int(p) for p in ev["pid"].dropna().unique())
    frames["tasks"] = pd.DataFrame({"pid": pids, "tid": pids, "ns_pid": range(1, len(pids) + 1),
                                    "ns_tid": range(1, len(pids) + 1), "pid_ns": 4026532000, "mnt_ns": 4026532001})
    # ... and the meta that makes the report attribute the reads to it (analyze/views/attribution.py)
    frames["meta"] = {"python_calls": {"rows": 1, "entry_points": {"safetensors.torch.load_file": {
        "library": "safetensors", "version": "0", "accepts": ["backend"], "values": {"backend": ["pread"]}}}}}
    return frames


@st.composite
def mutations(draw):
    """A few (table, column, value, every row?) changes of the seed case at once."""
    picks = draw(st.lists(st.sampled_from(INT_COLUMNS), min_size=1, max_size=3, unique=True))
    return [(t, c, draw(values_for(t, c)), draw(st.booleans())) for t, c in picks]


def _set(frames: dict, table: str, column: str, values) -> None:
    df = frames[table]
    if column not in df.columns:
        df[column] = 0
    df[column] = df[column].astype(object)
    if isinstance(values, list):
        df[column] = [values[i % len(values)] for i in range(len(df))]
    else:
        df.loc[df.index[0], column] = values


def _report(frames: dict, where: Path) -> tuple[int, str, str]:
    import contextlib
    import io

    trace = write_trace(where / "t.rtrace", **frames)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["report", str(trace), "--json"])
    return rc, out.getvalue(), err.getvalue()


def _check(frames: dict, what) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(runs, "MAX_CALLS", 1 << 14)  # the bound itself, kept small for many examples
        rc, out, err = _report(frames, Path(tmp))
    assert rc in (0, 4), (what, err)
    if rc == 0:
        report = json.loads(out)
        assert report["report_version"] >= 1 and "completeness" in report
        assert err == "", (what, err)
    else:
        assert err.startswith("readtrace: ") and err.count("\n") == 1, (what, err)


@pytest.mark.slow
@pytest.mark.parametrize(("table", "column"), INT_COLUMNS, ids=[f"{t}.{c}" for t, c in INT_COLUMNS])
def test_every_edge_value_of_a_column_gives_a_report_or_exit_4(table, column):
    """Row i of the table carries the column's i-th edge value (0, -1, 2**31-1, 2**62, 2**63-1, 2**64-1 ...)."""
    frames = _frames()
    _set(frames, table, column, _edges(*_bounds(table, column)))
    _check(frames, (table, column))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_random_integer_values_give_a_report_or_exit_4(changes):
    frames = _frames()
    for table, column, value, every_row in changes:
        _set(frames, table, column, [value] if every_row else value)
    _check(frames, changes)
