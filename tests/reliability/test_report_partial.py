"""A partial trace says so at the top of every report output: terminal, JSON, HTML, Perfetto metadata."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from lab.synthetic import load_case
from readtrace.cli import main
from readtrace.trace import write_trace
from readtrace.trace.completeness import completeness

PARTIAL_META = {
    "interrupted": {"interrupted": True},
    "lost": {"lost_events": 1234, "lost_detail": {"events_ring_full": 1234, "strs_ring_full_or_slot_clash": 0}},
    "disk_full": {"partial": True, "partial_reasons": ["disk full (no space left on device) at 12.5 s"],
                  "dropped_records": 777},
    "daemonised": {"survivors": [4242, 4243]},
}
REASON = {"interrupted": "interrupted", "lost": "1,234 events lost", "disk_full": "disk full (no space left on device) at 12.5 s (777 records dropped)",
          "daemonised": "2 process(es) of the traced tree still ran"}


def _run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _trace(tmp_path, meta: dict):
    frames = load_case("shared", workers=2, chunks=8)
    frames["meta"] = {**frames["meta"], **meta}
    return write_trace(tmp_path / "t.rtrace", **frames)


@pytest.mark.parametrize("kind", list(PARTIAL_META))
def test_every_output_starts_with_the_partial_line(tmp_path, kind):
    trace = _trace(tmp_path, PARTIAL_META[kind])
    html, perfetto = tmp_path / "r.html", tmp_path / "r.json"
    rc, out, err = _run(["report", str(trace), "--html", str(html), "--perfetto", str(perfetto)])
    assert (rc, err) == (0, "")
    first = out.splitlines()[0]
    assert first.startswith("PARTIAL TRACE: ") and REASON[kind] in first
    rc, out, _ = _run(["report", str(trace), "--json"])
    report = json.loads(out)
    assert list(report)[:2] == ["report_version", "completeness"]
    assert report["completeness"]["complete"] is False and REASON[kind] in report["completeness"]["reasons"][0]
    assert report["summary"]["complete"] is False
    page = html.read_text()
    body = page[page.index("<body>") + len("<body>"):]
    assert body.startswith("<div class='partial'>PARTIAL TRACE: ") and REASON[kind] in body[:400]
    chrome = json.loads(perfetto.read_text())
    assert list(chrome)[0] == "metadata" and chrome["metadata"]["complete"] is False
    assert REASON[kind] in chrome["metadata"]["reasons"][0]
    assert chrome["traceEvents"][0]["ph"] == "i" and chrome["traceEvents"][0]["name"].startswith("PARTIAL TRACE")


def test_a_complete_trace_has_no_partial_line(tmp_path):
    trace = _trace(tmp_path, {"interrupted": False, "lost_events": 0, "survivors": []})
    rc, out, _ = _run(["report", str(trace)])
    assert rc == 0 and "PARTIAL TRACE" not in out
    rc, out, _ = _run(["report", str(trace), "--json"])
    assert json.loads(out)["completeness"] == {"complete": True, "reasons": []}


def test_reasons_add_up_most_serious_first():
    done = completeness({"partial": True, "interrupted": True, "lost_events": {"a": 2, "b": 3},
                         "survivors": list(range(9))})
    assert not done.complete and len(done.reasons) == 4
    assert done.reasons[0] == "the recorder stopped early: figures are lower bounds"
    assert "5 events lost" in done.reasons[2] and "pid 0, 1, 2, 3, 4 ..." in done.reasons[3]
    assert completeness({}).complete and completeness({"lost_events": "x", "survivors": "y"}).complete
