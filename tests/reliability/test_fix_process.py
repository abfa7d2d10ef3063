"""Issue 24: `readtrace fix` runs the user's command as a shell would and never leaves it behind.

A missing command is 127 and a file that cannot run 126 (plain `fix` printed a traceback); a recorded
working directory that is gone is said so; SIGTERM and SIGHUP stop `fix` like Ctrl-C: exit 130, the
run's process group terminated, the work and shim directories removed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from readtrace.errors import ExitStatus
from readtrace.trace import write_trace
from reliability.conftest import READTRACE, one_line, readtrace


@pytest.mark.parametrize("compare", [False, True], ids=["fix", "compare"])
def test_a_missing_or_unrunnable_command(tmp_path, leftovers, compare):
    mode = ["--compare", "--no-record"] if compare else []
    (tmp_path / "data.bin").write_bytes(b"\0" * 64)
    (tmp_path / "data.bin").chmod(0o644)
    (tmp_path / "garbage").write_bytes(b"\x7fELF garbage")
    (tmp_path / "garbage").chmod(0o755)
    for command, code, said in ((["/nonexistent"], ExitStatus.NOT_FOUND, "No such file or directory"),
                                (["no-such-command-xyz"], ExitStatus.NOT_FOUND, "command not found"),
                                (["./data.bin"], ExitStatus.CANNOT_EXECUTE, "Permission denied"),
                                (["./garbage"], ExitStatus.CANNOT_EXECUTE, "Exec format error"),
                                ([str(tmp_path)], ExitStatus.CANNOT_EXECUTE, "Is a directory")):
        p = readtrace(["fix", *mode, "--", *command], cwd=tmp_path, env=leftovers.env, timeout=120)
        assert p.returncode == code, (command, p.stderr)
        assert "Traceback" not in p.stderr and said in p.stderr.strip().splitlines()[-1], command
        if command[0] != "./garbage":  # a bad format shows at the exec: after compare's first progress line
            one_line(p.stderr)


def test_the_command_s_own_exit_code_and_signal(tmp_path, leftovers):
    p = readtrace(["fix", "--", "sh", "-c", "exit 3"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 3, p.stderr
    p = readtrace(["fix", "--", "sh", "-c", "kill -9 $$"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 128 + signal.SIGKILL, p.stderr


@pytest.mark.parametrize("compare", [False, True], ids=["fix", "compare"])
def test_a_trace_whose_working_directory_is_gone(tmp_path, leftovers, compare):
    gone = tmp_path / "gone"
    write_trace(tmp_path / "t.rtrace", meta={"command": ["true"], "cwd": str(gone)})
    mode = ["--compare", "--no-record"] if compare else []
    p = readtrace(["fix", *mode, "t.rtrace"], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == ExitStatus.BAD_INPUT, p.stderr
    assert "Traceback" not in p.stderr
    line = p.stderr.strip().splitlines()[-1]  # after the line that shows the recorded command
    assert f"working directory {gone} no longer exists" in line and "not found" not in line


def _isolated(tmp_path: Path, env: dict) -> dict:
    """Temp and state directories of the case's own: what fix leaves there is its own."""
    for name in ("tmp", "state"):
        (tmp_path / name).mkdir(mode=0o700)
    return {**env, "TMPDIR": str(tmp_path / "tmp"), "READTRACE_STATE_DIR": str(tmp_path / "state")}


def _running(leftovers, name: str, timeout_s: float = 60) -> list[int]:
    """The case's processes whose command is ``name``, once there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [p for p in leftovers.processes() if _comm(p) == name]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{name} never started")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("how", ["fix", "fix-shell", "compare"])
def test_a_stopped_fix_exits_130_and_leaves_nothing(tmp_path, leftovers, sig, how):
    env = _isolated(tmp_path, leftovers.env)
    (tmp_path / "ckpt.bin").write_bytes(b"\0" * 4096)
    command = {"fix": ["fix", "--", "sleep", "77"],
               "fix-shell": ["fix", "--", "sh", "-c", "sleep 77; echo done"],
               "compare": ["fix", "--compare", "--no-record", "--files", "ckpt.bin",
                           "--", "sleep", "77"]}[how]
    proc = subprocess.Popen(READTRACE + command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _running(leftovers, "sleep")
        time.sleep(0.3)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitStatus.INTERRUPTED, err
    assert "readtrace: interrupted" in err and "Traceback" not in err, err
    deadline = time.monotonic() + 10
    while leftovers.processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leftovers.processes(), "the run was left running"
    assert not os.listdir(tmp_path / "tmp"), "work or shim directory left"
    assert not os.listdir(tmp_path / "state"), "a note left for a later run to clean"
