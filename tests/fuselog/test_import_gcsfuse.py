"""`readtrace import gcsfuse`: the seed's lines, gcsfuse's JSON and text formats, bad input, the join."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from readtrace.analyze import analyze
from readtrace.cli import main
from readtrace.errors import ExitStatus
from readtrace.fuselog.gcsfuse import parse_lines
from readtrace.fuselog.importer import import_gcsfuse
from readtrace.trace import load_trace, write_trace

SEED = Path("/work/shared/seeds/gcsfuse-shared-fd-diffusers.txt")
SEED_LINES = [  # the four lines, exactly as the seed quotes them
    "connection.go:420] <- ReadFile (inode 2, PID 77, handle 1, offset 529453056, 262144 bytes)",
    "connection.go:420] <- ReadFile (inode 2, PID 78, handle 1, offset 531812352, 262144 bytes)",
    "connection.go:420] <- ReadFile (inode 2, PID 79, handle 1, offset 534171648, 262144 bytes)",
    "connection.go:420] <- ReadFile (inode 2, PID 50, handle 1, offset 527351808, 4096 bytes)",
]
MiB = 1 << 20


def _debug(op: int, text: str, line: int = 453) -> str:
    """jacobsa/fuse Connection.debugLog's message with gcsfuse's "fuse_debug: " prefix."""
    return f"fuse_debug: Op 0x{op:08x} {f'connection.go:{line}':>24}] {text}"


def _json_line(ts_ns: int, message: str) -> str:
    return json.dumps({"timestamp": {"seconds": ts_ns // 10**9, "nanos": ts_ns % 10**9}, "severity": "TRACE",
                       "message": message, "mount-id": "bucket-1a2b3c4d"}, separators=(",", ":"))


def _text_line(ts_ns: int, message: str) -> str:
    stamp = datetime.fromtimestamp(ts_ns / 1e9).strftime("%d/%m/%Y %I:%M:%S.%f")  # Go: 02/01/2006 03:04:05.000000
    return f'time="{stamp}" severity=TRACE message={json.dumps(message)} mount-id=bucket-1a2b3c4d'


def _interleaved_session(fmt, workers=3, reads=40, size=MiB, t0=1_754_207_548_000_000_000):
    """A lookup, then ``workers`` threads taking turns on handle 7 over their own stretches, with replies."""
    render = _json_line if fmt == "json" else _text_line
    lines = [render(t0, _debug(2, '<- LookUpInode (parent 1, name "unet.safetensors", PID 100)')),
             render(t0 + 1000, _debug(2, "-> LookUpInode (inode 5)", 578))]
    op, ts = 10, t0 + 10_000
    for i in range(reads):
        for w in range(workers):
            offset = (w * reads + i) * size
            lines.append(render(ts, _debug(op, f"<- ReadFile (inode 5, PID {101 + w}, handle 7, offset {offset}, "
                                                f"{size} bytes)")))
            lines.append(render(ts + 2_000_000, _debug(op, "-> ReadFile ()", 578)))
            op, ts = op + 2, ts + 3_000_000
    return lines


def _codes(trace_path) -> list[str]:
    return [f.code for f in analyze(load_trace(trace_path, lean=True)).findings]


def test_seed_lines_are_in_the_seed_and_import_flagged(tmp_path):
    assert all(line in SEED.read_text() for line in SEED_LINES)
    log = tmp_path / "seed.log"
    log.write_text("".join(line + "\n" for line in SEED_LINES))
    result = import_gcsfuse(log, tmp_path / "seed.rtrace")
    assert (result.reads, result.malformed) == (4, 0)
    trace = load_trace(result.path)
    assert trace.meta["backend"] == "gcsfuse-log"
    assert set(trace.meta["missing_views"]) == {"syscalls", "page_faults", "page_cache"}
    assert trace.fuse["tid"].tolist() == [77, 78, 79, 50]  # file order is time order
    assert trace.fuse["offset"].tolist() == [529453056, 531812352, 534171648, 527351808]
    assert trace.fuse["size"].tolist() == [262144, 262144, 262144, 4096]
    assert set(trace.fuse["fh"]) == {1} and set(trace.fuse["nodeid"]) == {2}
    a = analyze(load_trace(result.path, lean=True))
    shared = [f for f in a.findings if f.code == "SHARED_FD_INTERLEAVE"]
    # found, but HIGH needs seconds: four requests of a file the log cannot name cost nothing known
    assert shared and shared[0].severity == "warn" and shared[0].cost_s is None
    assert {"inode": 2, "tid": 78, "handle": 1, "offset": 531812352, "bytes": 262144}.items() <= \
        shared[0].evidence[1].items()


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_gcsfuse_formats_interleaved(tmp_path, fmt):
    log = tmp_path / f"gcsfuse.{fmt}.log"
    lines = _interleaved_session(fmt)
    log.write_text("\n".join(lines) + "\n")
    parsed = parse_lines(lines)
    assert parsed.timed and parsed.formats == {fmt} and parsed.malformed == 0
    assert len(parsed) == 120
    assert parsed.path_of(5) == "unet.safetensors"
    assert set(parsed.latency_ns) == {2_000_000}  # request -> reply by op id
    assert parsed.ts_ns[1] - parsed.ts_ns[0] == 3_000_000
    out = tmp_path / "t.rtrace"
    assert main(["import", "gcsfuse", str(log), "-o", str(out)]) == 0
    trace = load_trace(out)
    assert trace.files["path"].tolist() == ["unet.safetensors"]
    assert "SHARED_FD_INTERLEAVE" in _codes(out)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_one_sequential_reader_not_flagged(tmp_path, fmt):
    render = _json_line if fmt == "json" else _text_line
    log = tmp_path / "seq.log"
    log.write_text("\n".join(render(1_754_207_548_000_000_000 + i * 10**6,
                                    _debug(10 + i, f"<- ReadFile (inode 3, PID 9, handle 2, offset {i * MiB}, "
                                                   f"{MiB} bytes)")) for i in range(64)) + "\n")
    import_gcsfuse(log, tmp_path / "seq.rtrace")
    assert _codes(tmp_path / "seq.rtrace") == []


def test_text_clock_passing_noon(tmp_path):
    """The text format's 12-hour clock: 11:59:59 then 12:00:00 (printed 12 -> hour 0) stays in order."""
    before = datetime(2026, 12, 1, 11, 59, 59, 500000).timestamp() * 10**9
    lines = [_text_line(int(before + i * 400_000_000),
                        _debug(i + 2, f"<- ReadFile (inode 2, PID 7, handle 1, offset {i * 4096}, 4096 bytes)"))
             for i in range(3)]
    assert re.search(r'time="01/12/2026 12:00:00', lines[2])
    ts = parse_lines(lines).ts_ns
    assert ts == sorted(ts) and ts[2] - ts[0] == 800_000_000


def test_malformed_lines_counted_not_fatal(tmp_path, capsys):
    log = tmp_path / "mixed.log"
    log.write_text("\n".join([
        SEED_LINES[0],
        "connection.go:420] <- ReadFile (inode abc, PID 564246, handle 0, offset 34603008, 1048576 bytes)",
        '{"timestamp": {"seconds": 1, "nanos"',  # a cut-off JSON line about a ReadFile
        "some other daemon line",
        SEED_LINES[1],
    ]).replace('"nanos"', '"nanos" ReadFile') + "\n")
    assert main(["import", "gcsfuse", str(log), "-o", str(tmp_path / "m.rtrace")]) == 0
    err = capsys.readouterr().err
    assert "2 ReadFile requests from 5 lines, 2 malformed ReadFile line(s) skipped" in err
    meta = load_trace(tmp_path / "m.rtrace").meta
    assert meta["fuse_view"]["malformed_lines"] == 2


@pytest.mark.parametrize("content", [None, "", "I1201 10:00:00 mount.go] mounted\n"])
def test_empty_or_unreadable_log_one_line(tmp_path, content):
    log = tmp_path / "x.log"
    if content is not None:
        log.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "readtrace", "import", "gcsfuse", str(log), "-o",
                           str(tmp_path / "x.rtrace")], capture_output=True, text=True)
    assert proc.returncode == ExitStatus.BAD_INPUT
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.rtrace").exists()


def _app_trace(path, dev=(0 << 20) | 53):
    """An app view: three threads of pid 100 faulting unet.safetensors (inode 5) on a gcsfuse mount."""
    pages = [{"ts_ns": 5_000_000 + i, "pid": 100, "tid": 101 + i % 3, "op": "fault", "dev": dev, "ino": 5,
              "path": "/mnt/gcs/unet.safetensors", "offset": i * 4096, "size": 4096} for i in range(30)]
    events = [{"ts_ns": 4_000_000, "pid": 100, "tid": 100, "op": "open", "fd": 3, "path": "/mnt/gcs/unet.safetensors",
               "dev": dev, "ino": 5}]
    files = [{"path": "/mnt/gcs/unet.safetensors", "dev": dev, "ino": 5, "size": 120 * MiB,
              "fstype": "fuse.gcsfuse", "mountpoint": "/mnt/gcs"}]
    return write_trace(path, meta={"backend": "ptrace", "missing_views": ["page_faults", "page_cache", "fuse"],
                                   "t0_ns": 0}, events=events, pages=pages, files=files)


@pytest.mark.parametrize("fmt", ["json", "plain"])
def test_join_onto_app_view(tmp_path, fmt):
    app = _app_trace(tmp_path / "app.rtrace")
    lines = _interleaved_session("json")
    if fmt == "plain":  # the lines as a bug report quotes them: no times, no op ids
        lines = [re.sub(r"^.*?(connection\.go)", r"\1", json.loads(x)["message"]) for x in lines]
    log = tmp_path / "g.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "joined.rtrace"
    assert main(["import", "gcsfuse", str(log), "-o", str(out), "--onto", str(app)]) == 0
    trace = load_trace(out)
    assert set(trace.fuse["connection"]) == {53}  # the app's gcsfuse mount
    assert set(trace.fuse["pid"]) == {100} and set(trace.fuse["tid"]) == {101, 102, 103}
    assert trace.fuse["ts_ns"].min() == 5_000_000  # aligned onto the app's first access
    assert trace.meta["fuse_view"]["inodes_matched"] == 1 and trace.meta["fuse_view"]["threads_matched"] == 3
    assert "fuse" not in trace.meta["missing_views"] and len(trace.pages) == 30
    a = analyze(load_trace(out, lean=True))
    hit = [f for f in a.findings if f.code == "SHARED_FD_INTERLEAVE"]
    assert hit and hit[0].view == "fuse_handle" and hit[0].file == "/mnt/gcs/unet.safetensors"
