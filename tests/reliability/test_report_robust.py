"""Issue 24: `readtrace report` never crashes on what a trace holds or on where it prints.

A load that reads its checkpoint only through a mapping has no open-file stream among the top files:
the stream table's selection is empty (pandas 3 then took the whole index and NaN task counts);
an output encoding that cannot write "…" or "µ" gets ASCII stand-ins instead of a traceback.
"""

from __future__ import annotations

import io
import os
import sys
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import require
from workloads import ebpf_ready

from lab.synthetic import load_case
from readtrace.analyze import analyze
from readtrace.report.terminal import TerminalReport, relevant_streams
from readtrace.trace import load_trace, make_trace, write_trace
from reliability.conftest import readtrace

# The fd is closed before the first page is touched: no open-file stream of the file at all.
MAPPED_ONLY = """import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
os.close(fd)
print(sum(m[i] for i in range(0, len(m), 4096)))
"""


def test_no_open_file_stream_among_the_top_files_selects_nothing():
    streams = pd.DataFrame({"kind": ["task", "process", "file"], "interleaved": [False] * 3,
                            "file_id": [7, 7, 7], "bytes": [10, 10, 10], "tasks": [1, 1, 1]})
    a = SimpleNamespace(streams=streams, files=pd.DataFrame(index=pd.Index([7], name="file_id")))
    picked = relevant_streams(a, ("fuse_handle", "ofd"), 12)
    assert picked.empty and list(picked.columns) == list(streams.columns)


def test_report_of_a_synthetic_trace_without_open_file_streams(tmp_path):
    frames = load_case("sequential", with_fuse=False)
    a = analyze(make_trace(**frames))
    a.streams = a.streams[a.streams["kind"] != "ofd"].reset_index(drop=True)  # as a mapping-only load has
    out = io.StringIO()
    TerminalReport(a).render(out, width=160, color=False)
    assert "model.safetensors" in out.getvalue()


@pytest.mark.ebpf
def test_report_of_a_mapping_only_load_on_a_local_file(tmp_path, leftovers):
    require(*ebpf_ready())
    (tmp_path / "map.py").write_text(MAPPED_ONLY)
    (tmp_path / "w.bin").write_bytes(os.urandom(2 << 20))
    p = readtrace(["record", "-q", "-o", "t.rtrace", "--", sys.executable, "-S", "map.py", "w.bin"],
                  cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0, p.stderr
    assert str(tmp_path / "w.bin") in set(load_trace(tmp_path / "t.rtrace").files["path"])
    p = readtrace(["report", "t.rtrace"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    p = readtrace(["report", "t.rtrace", "--html", "r.html"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0 and (tmp_path / "r.html").stat().st_size > 0, p.stderr


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_report_on_an_output_that_cannot_encode_unicode(tmp_path, encoding):
    deep = "/mnt/" + "/".join(f"répertoire-{i}" for i in range(12)) + "/modèle-ü→✓.safetensors"
    write_trace(tmp_path / "t.rtrace", **load_case("shared", path=deep))
    env = {**os.environ, "PYTHONIOENCODING": encoding, "COLUMNS": "100"}
    p = readtrace(["report", "t.rtrace"], cwd=tmp_path, env=env, encoding=encoding)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "..." in p.stdout and "\\u2713" in p.stdout  # "…" as "...", the rest as escapes
    assert "SHARED_FD_INTERLEAVE" in p.stdout


def test_error_line_on_an_ascii_stderr(tmp_path):
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    p = readtrace(["report", "nicht-da-…-✓.rtrace"], cwd=tmp_path, env=env)
    assert p.returncode == 4 and "Traceback" not in p.stderr, p.stderr
    assert "nicht-da-...-\\u2713.rtrace" in p.stderr


def test_fix_lines_on_an_ascii_output(tmp_path):
    gone = tmp_path / "gone-…-✓"
    write_trace(tmp_path / "t.rtrace", meta={"command": ["true"], "cwd": str(gone)})
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    p = readtrace(["fix", "--compare", "--no-record", "t.rtrace"], cwd=tmp_path, env=env, encoding="ascii")
    assert p.returncode == 5 and "Traceback" not in p.stderr, p.stderr
    assert "gone-...-\\u2713" in p.stderr.strip().splitlines()[-1]
