"""`fix` runs a trace's recorded command only from a trace of the invoking user or root, and says what
it runs first (issue 24: root's `fix --compare` ran `sh -c 'id > pwned'` from another user's trace)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from readtrace.errors import ExitStatus
from readtrace.trace import write_trace
from reliability.conftest import one_line, readtrace

NOBODY = 65534
PWN = ["sh", "-c", "id > pwned"]


def _trace(where: Path, command: list[str], cwd: Path, owner: int | None = None) -> Path:
    trace = write_trace(where / "theirs.rtrace", meta={"command": command, "cwd": str(cwd)})
    if owner is not None:
        for path in (trace, *trace.iterdir()):
            os.chown(path, owner, owner)
    return trace


@pytest.mark.parametrize("how", [["fix", "--compare", "--no-record"], ["fix", "--compare", "--no-record", "TRACE"],
                                 ["fix", "TRACE"]])
def test_a_trace_another_user_owns_is_refused(tmp_path, need_root, how):
    trace = _trace(tmp_path, PWN, tmp_path, owner=NOBODY)
    done = readtrace([str(trace) if a == "TRACE" else a for a in how], cwd=tmp_path)
    line = one_line(done.stderr)
    assert done.returncode == ExitStatus.USAGE
    assert "owned by nobody" in line and "--trust-trace" in line and "not run" in line
    assert not (tmp_path / "pwned").exists()


def test_a_trace_others_can_write_is_refused(tmp_path):
    trace = _trace(tmp_path, PWN, tmp_path)
    trace.chmod(0o777)
    done = readtrace(["fix", str(trace)], cwd=tmp_path)
    assert done.returncode == ExitStatus.USAGE and "writable by group or others" in one_line(done.stderr)
    assert not (tmp_path / "pwned").exists()


def test_a_trace_whose_meta_is_a_link_is_refused(tmp_path):
    trace = _trace(tmp_path, ["true"], tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({**json.loads((trace / "meta.json").read_text()), "command": PWN}))
    (trace / "meta.json").unlink()
    (trace / "meta.json").symlink_to(elsewhere)
    done = readtrace(["fix", str(trace)], cwd=tmp_path)
    assert done.returncode == ExitStatus.USAGE and "meta.json is a symbolic link" in one_line(done.stderr)
    assert not (tmp_path / "pwned").exists()


def test_trust_trace_runs_it_and_says_what_it_runs_first(tmp_path, need_root):
    work = tmp_path / "work"
    work.mkdir()
    trace = _trace(tmp_path, PWN, work, owner=NOBODY)
    done = readtrace(["fix", "--trust-trace", str(trace)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("readtrace: running the command recorded in") and "(owner nobody)" in first
    assert "sh -c 'id > pwned'" in first and f"(cwd {work})" in first
    assert (work / "pwned").exists()


def test_an_own_trace_runs_and_is_shown(tmp_path):
    trace = _trace(tmp_path, ["sh", "-c", "echo ran > ran"], tmp_path)
    done = readtrace(["fix", str(trace)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sh -c 'echo ran > ran'" in done.stderr.splitlines()[0] and (tmp_path / "ran").exists()


def test_a_group_writable_trace_of_the_users_private_group_runs(unprivileged_user):
    """umask 002 (user private groups) makes meta.json group-writable: the group is the user's own."""
    user = unprivileged_user
    work = user.home / "upg"
    user.run(["mkdir", "-p", str(work)], check=True)
    trace = write_trace(work / "mine.rtrace", meta={"command": ["sh", "-c", "id -u > ran"], "cwd": str(work)})
    for path in (trace, *trace.iterdir()):
        os.chown(path, user.uid, user.gid)
        path.chmod(0o775 if path.is_dir() else 0o664)
    sudo = {**os.environ, "SUDO_UID": str(user.uid), "SUDO_GID": str(user.gid), "SUDO_USER": user.name}
    done = readtrace(["fix", str(trace)], cwd=work, env=sudo)
    assert done.returncode == 0, done.stderr
    assert (work / "ran").read_text().strip() == str(user.uid)
    os.chown(trace / "meta.json", user.uid, NOBODY)  # a group others are in (or may be): refused
    done = readtrace(["fix", str(trace)], cwd=work, env=sudo)
    assert done.returncode == ExitStatus.USAGE and "writable by group or others" in one_line(done.stderr)

