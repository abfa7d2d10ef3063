"""Scale: `report` on 270k streams, on offsets past 16 TiB and on a run of 2**40 calls (synthetic traces
through the writer and the CLI; the real recordings are in test_scale_record.py)."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from lab.synthetic import small_files
from readtrace.cli import main
from readtrace.trace import write_trace
from readtrace.trace.runs import MAX_CALLS


def report_json(trace) -> dict:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["report", str(trace), "--json"])
    assert (rc, err.getvalue()) == (0, "")
    return json.loads(out.getvalue())


@pytest.mark.slow
def test_270k_streams_give_a_report(tmp_path):
    """Before: ValueError 'assignment destination is read-only' in grouping.union_length (>= 2**18 groups)."""
    n = 270_000
    report = report_json(write_trace(tmp_path / "many.rtrace", **small_files(n)))
    assert report["summary"]["files"] == n and report["summary"]["bytes_read"] == 100 * n
    assert report["summary"]["reads"] == 2 * n


def test_offsets_past_16_tib_give_exact_unique_bytes(tmp_path):
    """Before: the same crash for one sparse file read at 2**62 next to one read at 0."""
    frames = small_files(2, offsets=(4096, 0))
    ev = frames["events"]
    second = (ev["ino"] == 11) & (ev["op"] == "pread")
    ev.loc[second, "offset"] += 1 << 62
    frames["files"]["size"] = [8192, (1 << 62) + 8192]
    report = report_json(write_trace(tmp_path / "sparse.rtrace", **frames))
    by_path = {f["path"]: f for f in report["files"]}
    assert by_path["/m/d0/f1"]["unique_bytes"] == 100 and by_path["/m/d0/f0"]["unique_bytes"] == 100
    assert report["completeness"] == {"complete": True, "reasons": []}


@pytest.mark.slow
def test_a_run_of_2_40_calls_is_bounded_and_says_so(tmp_path):
    """Before: numpy tried to allocate 128 TiB expanding one merged row of count=2**40."""
    frames = small_files(1, offsets=(0,))
    ev = frames["events"]
    reads = ev["op"] == "pread"
    calls = 1 << 40
    ev.loc[reads, ["size", "ret"]] = 4096 * calls
    ev.loc[reads, "latency_ns"] = calls
    ev["count"] = np.where(reads, calls, 1)
    frames["files"]["size"] = 4096 * calls
    report = report_json(write_trace(tmp_path / "run.rtrace", **frames))
    assert report["summary"]["bytes_read"] == 4096 * calls  # bytes stay exact
    assert report["summary"]["reads"] <= MAX_CALLS
    assert not report["completeness"]["complete"]
    assert "analysed as rows of" in report["completeness"]["reasons"][0]
