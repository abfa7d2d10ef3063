"""Item 3 (and part of 10) of issue 8, as a real unprivileged user: doctor prints its table and fix
line; record without eBPF rights gives the doctor's line and exit 3; unreadable traces say why."""

from __future__ import annotations

import pytest

from readtrace.errors import ExitStatus
from readtrace.trace import write_trace
from reliability.conftest import one_line


def test_doctor_prints_its_table_and_fix_line_for_everyone(unprivileged_user):
    p = unprivileged_user.readtrace("doctor")
    assert p.returncode == ExitStatus.PREREQUISITE, p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    assert "readtrace doctor" in p.stdout and "root or CAP_BPF+CAP_PERFMON" in p.stdout
    assert "fix (root or CAP_BPF+CAP_PERFMON): run it with sudo: sudo readtrace ..." in p.stdout.splitlines()
    assert f"uid {unprivileged_user.uid}" in p.stdout
    assert "tracefs" in p.stdout and "required prerequisite(s) missing" in p.stdout


def test_record_with_the_ebpf_backend_gives_the_doctors_line(unprivileged_user):
    p = unprivileged_user.readtrace("record", "--backend", "ebpf", "-o", "x.rtrace", "--", "true")
    assert p.returncode == ExitStatus.PREREQUISITE
    line = one_line(p.stderr)
    assert "root or CAP_BPF+CAP_PERFMON" in line and "fix: run it with sudo" in line and "readtrace doctor" in line
    assert not (unprivileged_user.home / "x.rtrace").exists()


@pytest.mark.parametrize("name", ["meta.json", "events.parquet"])
def test_an_unreadable_trace_says_permission_denied_not_corrupt(unprivileged_user, tmp_path, name):
    trace = unprivileged_user.home / f"root-{name}.rtrace"
    write_trace(trace, meta={"command": ["x"]})
    (trace / name).chmod(0o600)  # root's, not readable by the user
    p = unprivileged_user.readtrace("report", str(trace))
    assert p.returncode == ExitStatus.BAD_TRACE
    line = one_line(p.stderr)
    assert f"cannot read {name}: permission denied (it belongs to uid 0" in line and "corrupt" not in line
