"""`readtrace record` picks its backend from the one prerequisite check: where eBPF cannot see the
command (a container's own PID namespace, the "root" of a user namespace) it records with strace."""

from __future__ import annotations

import shutil
import subprocess
import sys

from conftest import require

from readtrace.trace import load_trace

READTRACE = [sys.executable, "-m", "readtrace"]


def _notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "eBPF not available" in line]


def test_own_pid_namespace_records_with_ptrace(tmp_path):
    """eBPF there would match the wrong pids (measured: 0 records); ptrace works inside the namespace."""
    require(shutil.which("unshare") is not None and shutil.which("strace") is not None, "unshare/strace missing")
    p = subprocess.run(["unshare", "--pid", "--fork", "--mount", "--mount-proc", *READTRACE, "record", "-o",
                        str(tmp_path / "t.rtrace"), "--", "cat", "/etc/services"],
                       capture_output=True, text=True, timeout=120)
    require(p.returncode == 0 or "unshare" not in p.stderr, f"unshare refused: {p.stderr.strip()[-200:]}")
    assert p.returncode == 0, p.stderr
    (notice,) = _notices(p.stderr)
    assert "host PID namespace" in notice
    trace = load_trace(tmp_path / "t.rtrace")
    assert trace.meta["backend"] == "ptrace"
    assert (trace.events["path"] == "/etc/services").any()


def test_user_namespace_root_is_not_privileged(unprivileged_user):
    require(shutil.which("unshare") is not None, "unshare missing")
    out = unprivileged_user.home / "ns.rtrace"
    p = unprivileged_user.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc",
                               unprivileged_user.python, "-m", "readtrace", "record", "-o", out, "--", "cat",
                               "/etc/services"], timeout=120)
    assert p.returncode == 0, p.stderr
    (notice,) = _notices(p.stderr)
    assert "user namespace" in notice
    assert load_trace(out).meta["backend"] == "ptrace"
