"""`readtrace report`: terminal, JSON, HTML and Perfetto outputs, rendered into strings and files."""

import base64
import io
import json
import re
from dataclasses import replace

import pytest

from lab.synthetic import load_case
from readtrace.analyze import analyze
from readtrace.analyze.storage.whatif import own_mount_predictions
from readtrace.cli import main
from readtrace.report import report_json
from readtrace.report.html import render_html
from readtrace.report.perfetto import chrome_trace
from readtrace.report.terminal import TerminalReport
from readtrace.trace import make_trace, write_trace


@pytest.fixture
def seed_trace(tmp_path):
    return write_trace(tmp_path / "seed.rtrace", **load_case("shared"))


def test_terminal_report_lines():
    a = analyze(make_trace(**load_case("shared", read_ms=20)))
    out = io.StringIO()
    TerminalReport(a).render(out, width=200, color=False)
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith("5.12 s wall; 5.12 s (100%) waiting on FUSE reads of model.safetensors by 4 threads")
    assert lines[1].startswith("fixed: ~") and "predicted on this mount (gcsfuse model" in lines[1]
    assert lines[2].startswith("readtrace report")
    assert "read 64 MiB from 1 file(s) by 4 task(s) in 4 process(es): 256 reads" in lines[4]
    assert any(line.startswith("[HIGH] SHARED_FD_INTERLEAVE  4 tasks read /mnt/model/model.safetensors")
               for line in lines)
    assert "    ReadFile (inode 2, PID 101, handle 1, offset 0, 262144 bytes)" in lines
    assert any("/mnt/model/model.safetensors" in line and "fuse.gcsfuse" in line and "64 MiB" in line
               for line in lines)
    assert lines[-2] == "next: readtrace fix --compare TRACE"
    assert "\x1b[" not in text  # no colour codes when asked for none


def test_json_keys_are_stable_and_strict():
    d = report_json(analyze(make_trace(**load_case("shared", read_ms=20))))
    json.dumps(d, allow_nan=False)
    f = d["files"][0]
    for key in ("path", "fstype", "bytes_read", "consecutive_fraction", "sequential_fraction", "random_fraction"):
        assert key in f
    assert f["path"] == "/mnt/model/model.safetensors" and f["bytes_read"] == 64 << 20
    for key in ("bytes_read", "cache_miss_bytes", "fuse_requests", "fuse_read_requests",
                "handle_consecutive_fraction", "lost_events", "wall_s"):
        assert key in d["summary"]
    assert d["summary"]["fuse_read_requests"] == 256 and d["summary"]["cache_miss_bytes"] is None
    assert {s["kind"] for s in d["streams"]} == {"task", "process", "ofd", "fuse_handle", "file"}
    task = next(s for s in d["streams"] if s["kind"] == "task")
    assert task["interleave_score"] is None and task["ofd"] is None
    ofd = next(s for s in d["streams"] if s["kind"] == "ofd")
    assert re.fullmatch(r"0x[0-9a-f]+", ofd["ofd"]) and ofd["interleaved"] is True
    code = d["findings"][0]
    assert code["code"] == "SHARED_FD_INTERLEAVE" and code["severity"] == "high" and code["evidence"]


def test_empty_trace_reports_everywhere():
    a = analyze(make_trace())
    out = io.StringIO()
    TerminalReport(a).render(out, width=120, color=False)
    assert "No findings" in out.getvalue()
    json.dumps(report_json(a), allow_nan=False)
    html = render_html(a, own_mount_predictions(a))
    assert html.count("Not shown:") == 5
    assert chrome_trace(a)["traceEvents"] == []


def test_cli_json_default_trace_and_errors(seed_trace, tmp_path, monkeypatch, capsys):
    assert main(["report", str(seed_trace), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["trace"] == str(seed_trace) and d["findings"][0]["code"] == "SHARED_FD_INTERLEAVE"
    monkeypatch.chdir(tmp_path)
    assert main(["report", "--json"]) == 0  # newest *.rtrace in the current directory
    assert json.loads(capsys.readouterr().out)["trace"] == "seed.rtrace"
    assert main(["report", "--json", "--threshold", "interleave_min_score=1.5"]) == 0
    assert "SHARED_FD_INTERLEAVE" not in {f["code"] for f in json.loads(capsys.readouterr().out)["findings"]}

    assert main(["report", str(tmp_path / "nope.rtrace")]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such trace" in err
    (tmp_path / "bad.rtrace").mkdir()
    assert main(["report", str(tmp_path / "bad.rtrace")]) == 4
    assert "incomplete trace" in capsys.readouterr().err
    assert main(["report", str(seed_trace), "--threshold", "bogus=1"]) == 2
    assert capsys.readouterr().err.startswith("readtrace: --threshold 'bogus=1'")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main(["report"]) == 4
    assert "record one with" in capsys.readouterr().err


def test_cli_html_and_perfetto_files(seed_trace, tmp_path, capsys):
    html, perf = tmp_path / "r.html", tmp_path / "p.json"
    assert main(["report", str(seed_trace), "--html", str(html), "--perfetto", str(perf)]) == 0
    out = capsys.readouterr().out
    assert f"HTML report: {html}" in out and "SHARED_FD_INTERLEAVE" in out
    page = html.read_text()
    pngs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)
    assert len(pngs) == 4 and all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    # the page leads with the time split and the fixed prediction, then the predicted-vs-measured plot
    head = page.index("<pre>")
    assert page.index("wall;", head) < page.index("fixed: ~", head) < page.index("Findings")
    assert page.index("fixed: ~") < page.index("Measured vs predicted load time") < page.index("Findings")
    assert "Not shown: no page-cache view in this trace" in page
    assert not re.search(r"(src|href)=['\"]https?:", page)  # offline: nothing fetched
    trace = json.loads(perf.read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 256 + 256 and trace["metadata"]["slices_left_out"] == 0
    assert {e["name"] for e in slices} == {"read", "FUSE READ"}
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert "pid 101" in names and "FUSE handle 1 (node 2)" in names
    # never overwrite silently
    assert main(["report", str(seed_trace), "--html", str(html)]) == 1  # ExitStatus.ERROR, as for record
    assert "use --force" in capsys.readouterr().err
    assert main(["report", str(seed_trace), "--html", str(html), "--force"]) == 0


def test_perfetto_caps_slices():
    t = chrome_trace(analyze(make_trace(**load_case("shared"))), max_events=100)
    assert sum(e["ph"] == "X" for e in t["traceEvents"]) == 100
    assert t["metadata"]["slices_left_out"] == 412


def _libraries_and_checkpoint():
    """The seed case plus the libraries a real load reads: the table leads with the checkpoint."""
    import pandas as pd

    from lab.synthetic import files_frame

    frames = load_case("shared")
    libs = [f"/opt/venv/lib/python3.11/site-packages/torch/lib/lib{n}.so" for n in ("torch_cpu", "c10", "gomp")]
    libs += ["/opt/venv/lib/python3.11/site-packages/torch/__pycache__/serialization.cpython-311.pyc"]
    big = 400 << 20  # bigger than the checkpoint: still folded
    ev = pd.DataFrame({"ts_ns": 5 + pd.RangeIndex(len(libs)), "pid": 100, "tid": 100, "op": "read",
                       "fd": 10 + pd.RangeIndex(len(libs)), "ofd": -100 - pd.RangeIndex(len(libs)), "path": libs,
                       "offset": 0, "size": big, "ret": big})
    files = pd.concat([frames["files"], *(files_frame(p, big, "ext4", dev=8 << 20, ino=50 + i)
                                          for i, p in enumerate(libs))])
    return make_trace(**{**frames, "events": pd.concat([frames["events"], ev]), "files": files})


@pytest.mark.parametrize("width", [80, 120, 140])
def test_terminal_fits_the_width_and_leads_with_data_files(width):
    a = analyze(_libraries_and_checkpoint())
    assert list(a.files["role"]) == ["data"] + ["code"] * 4 and a.files["path"].iloc[0].endswith(".safetensors")
    out = io.StringIO()
    TerminalReport(a).render(out, width=width, color=False)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= width
    table = lines[lines.index(next(x for x in lines if x.startswith("Files read"))):]
    assert "model.safetensors" in table[4] and table[5].startswith("└")  # one data row, no library rows
    assert any(line.startswith("+ 4 code and library files (.so, .py, .pyc ...): 1.56 GiB read") for line in lines)
    streams = next(i for i, x in enumerate(lines) if x.startswith("Open files and FUSE handles"))
    header = lines[streams + 2]
    assert "score" in header and ("p50" in header) == (width >= 120)


def test_paths_are_shortened_with_the_common_directory_once():
    from readtrace.report.fit import common_dir, shorten

    paths = ["/data/ckpt/run-7/model-00001-of-00002.safetensors", "/data/ckpt/run-7/model-00002-of-00002.safetensors"]
    assert common_dir(paths) == "/data/ckpt/run-7" and common_dir(paths[:1] * 3) == ""
    assert shorten(paths[0], 60, "/data/ckpt/run-7") == "…/model-00001-of-00002.safetensors"
    assert shorten("/a/very/long/directory/name/model.safetensors", 30) == "/a/very/lon…/model.safetensors"
    assert len(shorten("/x/" + "m" * 40 + ".safetensors", 20)) == 20


def test_html_caveats_a_prediction_off_its_own_recording():
    """The chart's model replays this recording on its own mount: 256 reads that each waited 20 ms
    while the daemon answered in 40 us is predicted at a fraction of the 5.1 s it took: the page says
    so beside the chart (issue 22); the lines of the summary are real line breaks, not a literal \\n."""
    from readtrace.report.plots import prediction_caveat

    a = analyze(make_trace(**load_case("shared", read_ms=20)))
    own = own_mount_predictions(a)
    assert own and own[0].predicted_s < 0.75 * a.summary.wall_s
    why = prediction_caveat(a, own)
    assert why.startswith("Caveat: the model predicts this recording at ") and "% under" in why
    page = render_html(a, own)
    assert "<p class='caveat'>Caveat: the model predicts" in page
    header = page[page.index("<pre>"):page.index("</pre>")]
    assert "\\n" not in header and header.count("\n") >= 4
    # a prediction within 25 % of the recording: no caveat
    assert prediction_caveat(a, [replace(own[0], predicted_s=1.2 * a.summary.wall_s)]) is None


def test_the_gcsfuse_replay_only_where_the_file_system_keeps_a_reader_per_handle():
    """A local ext4 file taking turns on one fd: no "gcsfuse requests" column in the table, null in --json
    (issue 22); on a gcsfuse mount both are there."""
    for fstype, applies in (("ext4", False), ("fuse.gcsfuse", True)):
        a = analyze(make_trace(**load_case("shared", fstype=fstype, with_fuse=False)))
        out = io.StringIO()
        TerminalReport(a).render(out, width=200, color=False)
        assert ("gcsfuse requests" in out.getvalue()) is applies
        ofd = next(s for s in report_json(a)["streams"] if s["kind"] == "ofd")
        assert (ofd["gcsfuse_requests"] is not None) is applies and (ofd["gcsfuse_read_type"] is not None) is applies
