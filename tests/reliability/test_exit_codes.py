"""Item 10 of issue 8: one exit-code table (readtrace.errors.ExitStatus, README "Guarantees"), each
code tested where it is produced. Ctrl-C in fix and demo is 130; simfs option errors are 2, path errors 5."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from readtrace.errors import ExitStatus
from readtrace.simfs import mount_at
from readtrace.trace import write_trace
from reliability.conftest import READTRACE, one_line, readtrace


def test_the_table_is_the_documented_one():
    table = {s.name: int(s) for s in ExitStatus}
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name, code in table.items():
        assert f"| {code} | `{name}` |" in readme, f"README's exit-code table lacks {code} {name}"


def _as_from_a_terminal() -> None:
    """A command started from a terminal takes Ctrl-C by default. A test run started in the
    background (``.ci/run &``) inherits SIGINT ignored, Python keeps it ignored, and so would readtrace."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_group(proc: subprocess.Popen, ready, timeout_s: float = 120) -> None:
    """Wait until ``ready(line)`` on the output, then Ctrl-C as a terminal sends it: to the group."""
    deadline = time.monotonic() + timeout_s
    for line in proc.stdout:
        if ready(line) or time.monotonic() > deadline:
            break
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)


def test_ctrl_c_in_fix_exits_130(tmp_path, leftovers):
    script = tmp_path / "slow.py"
    script.write_text("import time\nprint('loading', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen(READTRACE + ["fix", "--compare", "--no-record", "--files", str(script), "--",
                                         sys.executable, str(script)], cwd=tmp_path, env=leftovers.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=_as_from_a_terminal)
    _interrupt_group(proc, lambda line: "run" in line.lower())
    rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == ExitStatus.INTERRUPTED, rest
    assert "readtrace: interrupted" in rest and "Traceback" not in rest


@pytest.mark.fuse
def test_ctrl_c_in_demo_exits_130_and_unmounts(need_fuse, tmp_path, leftovers):
    proc = subprocess.Popen(READTRACE + ["demo", "--no-record", "--size-mib", "8", "--latency-ms", "200"],
                            cwd=tmp_path, env=leftovers.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, preexec_fn=_as_from_a_terminal)
    seen = []

    def ready(line):
        seen.append(line)
        return line.startswith("5. ")

    _interrupt_group(proc, ready)
    rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == ExitStatus.INTERRUPTED, "".join(seen) + rest
    assert "Traceback" not in rest
    mnt = Path(next(x for x in seen if x.startswith("2. lab mount: ")).split(": ")[1].split(" (")[0])
    assert mount_at(mnt) is None and not mnt.parent.exists()


@pytest.mark.parametrize("option", [["--latency-ms", "-1"], ["--max-read-kib", "1"], ["--max-backend", "0"],
                                    ["--profile", "s3"], ["--bandwidth-mbps", "0"]])
def test_simfs_option_errors_are_usage_errors(tmp_path, option):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    p = readtrace(["simfs", tmp_path / "src", tmp_path / "mnt", *option], cwd=tmp_path)
    assert p.returncode == ExitStatus.USAGE, p.stderr
    assert "Traceback" not in p.stderr and mount_at(tmp_path / "mnt") is None


@pytest.mark.parametrize("case", ["missing-src", "file-mnt", "busy-mnt"])
def test_simfs_path_errors_are_bad_input(tmp_path, case):
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    if case == "missing-src":
        src = tmp_path / "nope"
    elif case == "file-mnt":
        mnt = tmp_path / "f"
        mnt.write_text("x")
    else:
        (mnt / "x").write_text("x")
    p = readtrace(["simfs", src, mnt], cwd=tmp_path)
    assert p.returncode == ExitStatus.BAD_INPUT
    assert one_line(p.stderr).startswith("readtrace: simfs ")


@pytest.mark.parametrize("damage", ["no-meta", "bad-json", "truncated", "wrong-format", "unknown-version"])
def test_corrupt_or_truncated_traces_exit_4(tmp_path, damage):
    trace = tmp_path / "t.rtrace"
    write_trace(trace, meta={"command": ["x"]}, events={"ts_ns": [1, 2], "op": ["read", "read"]})
    meta = trace / "meta.json"
    if damage == "no-meta":
        meta.unlink()
    elif damage == "bad-json":
        meta.write_text("{not json")
    elif damage == "truncated":
        events = trace / "events.parquet"
        events.write_bytes(events.read_bytes()[:100])
    elif damage == "wrong-format":
        meta.write_text('{"format": "something-else", "version": 1}')
    else:
        meta.write_text(meta.read_text().replace('"version": ', '"version": 99, "old_version": '))
    p = readtrace(["report", trace], cwd=tmp_path)
    assert p.returncode == ExitStatus.BAD_TRACE
    assert one_line(p.stderr).startswith(f"readtrace: {trace}")
