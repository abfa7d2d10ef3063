"""Ordinary errors are one line on stderr with a named exit code, never a traceback; nothing is left
behind (no partial output, no temporary siblings) and inputs are unchanged."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import require

from lab.synthetic import load_case
from readtrace.errors import ExitStatus
from readtrace.trace import write_trace
from reliability.conftest import tmpfs_at

READTRACE = [sys.executable, "-m", "readtrace"]


def readtrace(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*READTRACE, *args], capture_output=True, text=True, timeout=300, **kw)


def one_line(done: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    """Exit ``code`` and exactly one ``readtrace: `` line on stderr holding every needle."""
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("readtrace")]
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def digest(path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.rtrace", **load_case("shared", workers=2, chunks=8))


@pytest.fixture
def full_dir(tmp_path, need_root):
    """A 64 KiB tmpfs, filled up; unmounted after."""
    with tmpfs_at(tmp_path / "full", "size=64k") as d:
        with open(d / "filler", "wb") as f, pytest.raises(OSError):
            f.write(b"\0" * (1 << 20))
            f.flush()
        yield d


def test_html_into_a_missing_directory(trace, tmp_path):
    done = readtrace("report", str(trace), "--html", str(tmp_path / "no" / "r.html"))
    one_line(done, ExitStatus.ERROR, "cannot write", str(tmp_path / "no" / "r.html"), "No such file or directory")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("flag", ["--html", "--perfetto"])
def test_report_file_onto_a_full_disk(trace, full_dir, flag):
    done = readtrace("report", str(trace), flag, str(full_dir / "r.out"))
    one_line(done, ExitStatus.ERROR, "cannot write", "No space left on device")
    assert sorted(p.name for p in full_dir.iterdir()) == ["filler"]  # no half file, no temporary


def test_json_onto_a_full_disk(trace, full_dir):
    with open(full_dir / "r.json", "w") as out:
        done = subprocess.run([*READTRACE, "report", str(trace), "--json"], stdout=out, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    one_line(done, ExitStatus.ERROR, "cannot write standard output: No space left on device")


def test_terminal_report_into_dev_full(trace):
    with open("/dev/full", "w") as out:
        done = subprocess.run([*READTRACE, "report", str(trace)], stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    one_line(done, ExitStatus.ERROR, "cannot write standard output")


def test_report_with_stdout_closed(trace):
    done = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *READTRACE, "report", str(trace)],
                          capture_output=True, text=True, timeout=300)
    one_line(done, ExitStatus.ERROR, "cannot write standard output: it is closed")


def test_record_with_stdout_closed_keeps_the_commands_exit_code(tmp_path):
    from workloads import ebpf_ready

    ok, why = ebpf_ready()
    require(ok, why)
    out = tmp_path / "closed.rtrace"
    done = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *READTRACE, "record", "-o", str(out), "--", "true"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert json.loads((out / "meta.json").read_text())["exit_code"] == 0


def test_fix_files_given_a_directory(tmp_path):
    (tmp_path / "ckpt").mkdir()
    done = readtrace("fix", "--compare", "--files", str(tmp_path / "ckpt"), "--", "true")
    assert done.returncode == ExitStatus.USAGE and "Traceback" not in done.stderr
    assert "not a regular file (a directory" in done.stderr.splitlines()[-1]


def test_fix_keep_given_a_file(tmp_path):
    keep = tmp_path / "notes.txt"
    keep.write_text("mine\n")
    done = readtrace("fix", "--compare", "--keep", str(keep), "--", "true")
    assert done.returncode == ExitStatus.USAGE and "exists and is not a directory" in done.stderr.splitlines()[-1]
    assert keep.read_text() == "mine\n"


@pytest.mark.parametrize("argv", [["report"], ["record", "--", "true"]])
def test_a_deleted_current_directory(tmp_path, argv):
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"import os, sys, runpy; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); " \
             f"sys.argv = ['readtrace', *{argv!r}]; runpy.run_module('readtrace', run_name='__main__')"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    one_line(done, ExitStatus.USAGE, "the current directory no longer exists")


@pytest.mark.parametrize(("column", "value", "type_"), [("offset", "x", pa.string()), ("ts_ns", 1.5, pa.float64()),
                                                        ("path", 7, pa.int64()), ("op", 1, pa.int32())])
def test_a_parquet_table_with_the_wrong_schema(tmp_path, column, value, type_):
    t = write_trace(tmp_path / "bad.rtrace", **load_case("shared", workers=2, chunks=8))
    table = pq.read_table(t / "events.parquet")
    array = pa.array([value] * table.num_rows, type_)
    pq.write_table(table.set_column(table.schema.get_field_index(column), column, array), t / "events.parquet")
    before = digest(t)
    done = readtrace("report", str(t))
    one_line(done, ExitStatus.BAD_TRACE, "events.parquet", f"column {column} is")
    assert digest(t) == before


@pytest.mark.parametrize(("key", "value"), [("rows", "x"), ("wall_s", "abc"), ("t0_ns", "x"), ("lost_events", "many"),
                                            ("interrupted", "no"), ("command", 5), ("survivors", ["a"])])
def test_meta_values_of_the_wrong_type(trace, key, value):
    meta = json.loads((trace / "meta.json").read_text())
    meta[key] = value
    (trace / "meta.json").write_text(json.dumps(meta))
    done = readtrace("report", str(trace), "--json")
    one_line(done, ExitStatus.BAD_TRACE, "corrupt meta.json", repr(key))
    assert done.stdout == ""


def test_the_loader_given_a_directory(tmp_path):
    from readtrace.loader.loader import load_file

    (tmp_path / "model.safetensors").mkdir()
    with pytest.raises(IsADirectoryError) as e:  # as open() raises it: with the name (before: none)
        load_file(tmp_path / "model.safetensors")
    assert e.value.filename == str(tmp_path / "model.safetensors")


@pytest.mark.fuse
def test_a_simfs_daemon_killed_mid_load_names_the_file(tmp_path, need_fuse, need_root):
    import torch
    from safetensors.torch import save_file

    from readtrace.loader.loader import load_file
    from readtrace.simfs import force_unmount, mount

    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    save_file({f"w{i}": torch.rand(1024, 1024) for i in range(16)}, src / "model.safetensors")  # 64 MiB
    before = hashlib.sha256((src / "model.safetensors").read_bytes()).hexdigest()
    sim = mount(src, mnt, latency_ms=50, max_read_kib=128, bandwidth_mbps=20)
    failure: list[BaseException] = []

    def load():
        try:
            load_file(mnt / "model.safetensors")
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            failure.append(e)

    loader = threading.Thread(target=load)
    try:
        loader.start()
        time.sleep(0.5)
        os.kill(sim.daemon_pid, signal.SIGKILL)
        loader.join(60)
    finally:
        sim.unmount()
        force_unmount(mnt)
    assert not loader.is_alive() and failure, "the load finished before the daemon was killed"
    e = failure[0]
    assert isinstance(e, OSError) and e.errno == errno.ENOTCONN, repr(e)  # before: bare, no file name
    assert e.filename == str(mnt / "model.safetensors") and "FUSE daemon of its mount died" in e.strerror
    assert hashlib.sha256((src / "model.safetensors").read_bytes()).hexdigest() == before
