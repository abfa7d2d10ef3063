"""Values that must be rejected (each threshold and option declares its range: one validator), and text
from a trace that must never reach the terminal raw (ESC sequences, markup, over-long paths)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys

import pytest
from conftest import require

from lab.synthetic import load_case
from readtrace.analyze import Thresholds
from readtrace.analyze.rules.thresholds import RANGES
from readtrace.cli import main
from readtrace.errors import ExitStatus, ReadtraceError
from readtrace.escape import printable
from readtrace.trace import write_trace

EVIL = "/mnt/model/\x1b]0;pwned\x07\x1b[2J[bold]x[/bold]\nFAKE LINE.safetensors"


def _run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.rtrace", **load_case("shared", workers=2, chunks=8))


@pytest.mark.parametrize("assignment", ["evidence_lines=-3", "small_request_size=0", "small_request_fraction=nan",
                                        "cold_cache_miss_fraction=-1", "gcsfuse_seek_window=inf",
                                        "small_request_size=1.5", "interleave_min_tasks=1"])
def test_bad_thresholds_are_usage_errors(trace, assignment):
    rc, out, err = _run(["report", str(trace), "--threshold", assignment])
    assert rc == ExitStatus.USAGE and out == ""
    assert err.startswith(f"readtrace: --threshold {assignment!r}: ") and err.count("\n") == 1 and " is not " in err


def test_every_threshold_declares_its_range_and_the_library_checks_it():
    assert set(RANGES) == set(Thresholds.names())
    assert all(RANGES[n].holds(getattr(Thresholds(), n)) for n in Thresholds.names())  # defaults are valid
    with pytest.raises(ReadtraceError, match="evidence_lines=-3: must be an integer >= 0"):
        Thresholds(evidence_lines=-3)
    with pytest.raises(ReadtraceError, match="small_request_fraction=nan"):
        Thresholds(small_request_fraction=math.nan)
    assert Thresholds().override(["interleave_min_score=1.5"]).interleave_min_score == 1.5  # > 1: rule off


@pytest.mark.parametrize(("argv", "message"), [
    (["report", "T", "--streams", "-5"], "argument --streams: '-5' is not an integer >= 0"),
    (["simfs", "/tmp", "/mnt", "--latency-ms", "nan"], "argument --latency-ms: 'nan' is not a number >= 0"),
    (["simfs", "/tmp", "/mnt", "--bandwidth-mbps", "0"], "argument --bandwidth-mbps: '0' is not a number > 0"),
    (["simfs", "/tmp", "/mnt", "--max-read-kib", "2"], "argument --max-read-kib: '2' is not an integer >= 4"),
])
def test_bad_option_values_are_usage_errors(argv, message):
    done = subprocess.run([sys.executable, "-m", "readtrace", *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == ExitStatus.USAGE and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].endswith(message)


def test_simfs_settings_use_the_same_ranges():
    from readtrace.simfs.config import SimConfig

    with pytest.raises(ReadtraceError, match=r"latency_ms must be a number >= 0 \(got nan\)"):
        SimConfig(src="/s", mountpoint="/m", log="/l", latency_ms=math.nan)


def test_printable_escapes_control_characters_only():
    assert printable("a\x1b[31mb\x07\n\t\u202e") == "a\\e[31mb\\x07\\n\\t\\u202e"
    assert printable("modèle/权重 ok.safetensors") == "modèle/权重 ok.safetensors"


def test_control_characters_in_file_names_never_reach_the_terminal_raw(tmp_path):
    frames = load_case("shared", workers=2, chunks=8, path=EVIL)
    frames["files"]["path"] = EVIL
    trace = write_trace(tmp_path / "evil.rtrace", **frames)
    html = tmp_path / "r.html"
    rc, out, err = _run(["report", str(trace), "--html", str(html)])
    assert (rc, err) == (0, "")
    assert "\x1b" not in out and "\x07" not in out and "FAKE LINE" not in out.split("\\n")[0]
    assert "\\e]0;pwned\\x07\\e[2J[bold]x[/bold]\\nFAKE LINE" in out.replace("\n", "")  # visible, markup literal
    assert "\x1b" not in html.read_text() and "\\e]0;pwned" in html.read_text()
    rc, out, _ = _run(["report", str(trace), "--json"])
    assert json.loads(out)["files"][0]["path"] == EVIL  # data stays exact; JSON escapes it itself
    assert "\x1b" not in out


def test_error_lines_escape_the_path(tmp_path):
    rc, out, err = _run(["report", str(tmp_path / "x\x1b[2J.rtrace")])
    assert rc == ExitStatus.BAD_TRACE and "\x1b" not in err and "x\\e[2J.rtrace: no such trace" in err


def test_a_path_longer_than_the_probe_buffer_is_marked_cut(tmp_path):
    from workloads import ebpf_ready

    ok, why = ebpf_ready()
    require(ok, why)
    deep = tmp_path / ("d" * 120) / ("e" * 120)
    deep.mkdir(parents=True)
    (deep / "model.bin").write_bytes(b"x" * 4096)
    long_path = deep / "model.bin"
    assert len(str(long_path).encode()) > 255
    out = tmp_path / "long.rtrace"
    done = subprocess.run([sys.executable, "-m", "readtrace", "record", "-q", "-o", str(out), "--", "cat",
                           str(long_path)], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["truncated_paths"] >= 1
    rep = subprocess.run([sys.executable, "-m", "readtrace", "report", str(out), "--json"], capture_output=True,
                         text=True, timeout=300)
    paths = [f["path"] for f in json.loads(rep.stdout)["files"]]
    cut = [p for p in paths if p.endswith("…")]
    assert cut and str(long_path).startswith(cut[0][:-1]) and len(cut[0][:-1].encode()) == 255
