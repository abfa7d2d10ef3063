"""Item 12 of issue 8: no simfs log left in /tmp without --log; a SIGKILLed foreground simfs or demo
leaves mount, daemon and temp dir, and the next `readtrace simfs --unmount` (or demo) cleans them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from readtrace.simfs import mount_at
from reliability.conftest import READTRACE, readtrace

pytestmark = pytest.mark.fuse


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "a.bin").write_bytes(b"x" * 4096)
    return src, mnt


def _start_simfs(src, mnt, env, *extra) -> tuple[subprocess.Popen, Path, int]:
    """A foreground `readtrace simfs` (or --daemon); returns it, its log and its daemon pid once mounted."""
    proc = subprocess.Popen(READTRACE + ["simfs", str(src), str(mnt), "--profile", "local", *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    found = re.search(r"daemon pid (\d+); log (\S+)", line)
    assert found, line + proc.stderr.read()
    assert mount_at(mnt) is not None
    return proc, Path(found.group(2)), int(found.group(1))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_foreground_simfs_without_log_leaves_no_file(need_fuse, tmp_path, leftovers):
    src, mnt = _tree(tmp_path)
    proc, log, daemon = _start_simfs(src, mnt, leftovers.env)
    assert log.parent.name.startswith("readtrace-simfs-") and log.exists()
    (mnt / "a.bin").read_bytes()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert json.loads(out)["requests"] >= 1  # the counters, read before the log went
    assert not log.parent.exists() and mount_at(mnt) is None and not _alive(daemon)


def test_daemon_simfs_without_log_is_cleaned_by_unmount(need_fuse, tmp_path, leftovers):
    src, mnt = _tree(tmp_path)
    proc, log, daemon = _start_simfs(src, mnt, leftovers.env, "--daemon")
    assert proc.wait(timeout=30) == 0 and log.exists()
    p = readtrace(["simfs", "--unmount", mnt], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0 and f"simfs: unmounted {mnt}" in p.stderr
    assert not log.parent.exists() and mount_at(mnt) is None and not _alive(daemon)


def test_a_sigkilled_foreground_simfs_is_cleaned_by_the_next_unmount(need_fuse, tmp_path, leftovers):
    src, mnt = _tree(tmp_path)
    proc, log, daemon = _start_simfs(src, mnt, leftovers.env)
    proc.kill()
    proc.wait(timeout=10)
    assert mount_at(mnt) is not None and _alive(daemon) and log.exists()  # what a SIGKILL leaves
    p = readtrace(["simfs", "--unmount", mnt], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0, p.stderr
    assert "cleaned up after a killed run" in p.stderr and "Traceback" not in p.stderr
    deadline = time.monotonic() + 5
    while _alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mount_at(mnt) is None and not _alive(daemon) and not log.parent.exists()


def test_a_sigkilled_demo_is_cleaned_up_after(need_fuse, tmp_path, leftovers):
    proc = subprocess.Popen(READTRACE + ["demo", "--no-record", "--size-mib", "8", "--latency-ms", "200"],
                            env=leftovers.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    mnt = None
    for line in proc.stdout:
        if line.startswith("2. lab mount: "):
            mnt = Path(line.split(": ")[1].split(" (")[0])
        if line.startswith("5. "):
            break
    assert mnt is not None and mount_at(mnt) is not None
    time.sleep(1)  # the workload is running, reading the mount
    proc.kill()
    proc.wait(timeout=10)
    temp = mnt.parent
    assert temp.name.startswith("readtrace-demo-") and temp.exists()
    p = readtrace(["simfs", "--unmount", mnt], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 0, p.stderr
    assert f"mount {mnt}" in p.stderr and f"temp {temp}" in p.stderr
    deadline = time.monotonic() + 10
    while leftovers.processes() and time.monotonic() < deadline:  # the workload got SIGTERM (PDEATHSIG)
        time.sleep(0.1)
    assert not temp.exists() and mount_at(mnt) is None


def test_unmount_of_something_else_is_refused(need_fuse, tmp_path, leftovers):
    p = readtrace(["simfs", "--unmount", tmp_path], cwd=tmp_path, env=leftovers.env)
    assert p.returncode == 5 and f"not a simfs mount: {tmp_path}" in p.stderr
