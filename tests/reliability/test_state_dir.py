"""READTRACE_STATE_DIR that others can write is refused, and a note never leads a removal elsewhere
(issue 24: a note planted in /tmp made root's next run delete a root-owned ``readtrace-*`` dir)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from readtrace import runstate
from readtrace.errors import ExitStatus
from reliability.conftest import one_line, readtrace, tmpfs_at

NOBODY = 65534


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _plant(state, victim, owner: int = NOBODY):
    note = state / f"fix-{_dead_pid()}-abcdef.json"
    note.write_text(json.dumps({"kind": "fix", "owner_pid": _dead_pid(), "owner_start": "1",
                                "temp_paths": [str(victim)]}))
    os.chown(note, owner, owner)
    return note


def _victim(where):
    victim = where / f"{runstate.PREFIX}fix-precious"
    victim.mkdir()
    (victim / "data").write_text("keep me\n")
    return victim


@pytest.mark.parametrize("argv", [["fix", "--", "true"], ["record", "-o", "t.rtrace", "--", "true"]],
                         ids=["fix", "record"])
@pytest.mark.parametrize(("mode", "group"), [(0o1777, 0), (0o777, 0), (0o770, NOBODY)])
def test_a_state_dir_others_can_write_is_refused_and_nothing_is_removed(tmp_path, need_root, mode, group, argv):
    state = tmp_path / "shared"  # like /tmp: world-writable, sticky or not; or writable by a shared group
    state.mkdir()
    state.chmod(mode)
    os.chown(state, 0, group)
    victim = _victim(tmp_path)
    _plant(state, victim)
    done = readtrace(argv, cwd=tmp_path, env={**os.environ, runstate.STATE_DIR_ENV: str(state)})
    line = one_line(done.stderr)
    assert done.returncode == ExitStatus.USAGE
    assert str(state) in line and "writable by group or others" in line and runstate.STATE_DIR_ENV in line
    assert (victim / "data").read_text() == "keep me\n"


def test_tmp_itself_is_refused(monkeypatch):
    monkeypatch.setenv(runstate.STATE_DIR_ENV, "/tmp")
    with pytest.raises(PermissionError, match="writable by group or others"):
        runstate.state_dir()
    assert runstate.register("fix", temp_paths=["/tmp/x"]) is None  # nothing noted there either


def test_a_note_never_removes_through_a_link_or_what_it_does_not_own(tmp_path, monkeypatch):
    """Our own state dir, our own note: still only a ``readtrace-*`` path of ours reached without a link."""
    state = tmp_path / "state"
    monkeypatch.setenv(runstate.STATE_DIR_ENV, str(state))
    real = tmp_path / "real"
    real.mkdir()
    victim = _victim(real)
    (tmp_path / "link").symlink_to(real)
    other = tmp_path / "other"
    other.mkdir()
    foreign = _victim(other)
    os.chown(foreign, NOBODY, NOBODY)
    runstate.state_dir()
    for path in (tmp_path / "link" / victim.name, foreign, "readtrace-relative"):
        note = state / f"fix-{_dead_pid()}-{abs(hash(str(path))) % 999999:06d}.json"
        note.write_text(json.dumps({"kind": "fix", "owner_pid": _dead_pid(), "owner_start": "1",
                                    "temp_paths": [str(path)]}))
    assert runstate.clean_stale() == []
    assert (victim / "data").read_text() == "keep me\n" and (foreign / "data").read_text() == "keep me\n"
    assert list(state.glob("*.json")) == []  # the notes themselves are gone


def test_a_note_owned_by_someone_else_is_ignored(tmp_path, monkeypatch, need_root):
    state = tmp_path / "state"
    monkeypatch.setenv(runstate.STATE_DIR_ENV, str(state))
    runstate.state_dir()
    victim = _victim(tmp_path)
    note = _plant(state, victim)
    assert runstate.clean_stale() == []
    assert (victim / "data").exists() and note.exists()


def test_a_temp_dir_with_a_mount_inside_stays_also_when_its_name_has_spaces(tmp_path, monkeypatch, need_root):
    """mountinfo writes a space as \\040: the mounts below a temp path are found from the one mountinfo
    reader (fs/mounts.py, unescaped), so a stale note never removes the files of a mount inside it."""
    state = tmp_path / "state"
    monkeypatch.setenv(runstate.STATE_DIR_ENV, str(state))
    runstate.state_dir()
    temp = tmp_path / f"{runstate.PREFIX}fix a b"
    temp.mkdir()
    with tmpfs_at(temp / "mounted c", "size=64k") as inside:
        (inside / "data").write_text("keep me\n")
        note = state / f"fix-{_dead_pid()}-abcdef.json"
        note.write_text(json.dumps({"kind": "fix", "owner_pid": _dead_pid(), "owner_start": "1",
                                    "temp_paths": [str(temp)]}))
        assert runstate.clean_stale() == []
        assert (inside / "data").read_text() == "keep me\n"
