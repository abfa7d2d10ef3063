"""The unprivileged_user fixture itself: a real user without root's rights who can run readtrace."""

from __future__ import annotations

import os
import pwd

import pytest


def test_is_a_real_user_without_privileges(unprivileged_user):
    u = unprivileged_user
    assert pwd.getpwnam(u.name).pw_uid == u.uid != 0
    out = u.run(["id", "-u"]).stdout.strip()
    assert out == str(u.uid)
    groups = u.run(["id", "-G"]).stdout.split()
    assert groups == [str(u.gid)]  # no supplementary groups inherited from root
    status = u.run(["grep", "CapEff", "/proc/self/status"]).stdout.split()[1]
    assert int(status, 16) == 0
    assert not u.can_read("/etc/shadow")


def test_runs_this_checkouts_readtrace(unprivileged_user):
    done = unprivileged_user.run(["readtrace", "--version"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("readtrace ")
    where = unprivileged_user.run([unprivileged_user.python, "-c", "import readtrace; print(readtrace.__file__)"])
    assert where.stdout.strip().endswith("readtrace/__init__.py")


def test_leftovers_of_a_dead_session_are_removed(unprivileged_user):
    import subprocess

    from unprivileged import MARK, PREFIX, remove_leftovers

    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"{PREFIX}{dead.pid}x"
    subprocess.run(["useradd", "--no-create-home", "--comment", f"{MARK} {dead.pid}", name], check=True)
    try:
        assert name in remove_leftovers()
        with pytest.raises(KeyError):
            pwd.getpwnam(name)
        assert pwd.getpwnam(unprivileged_user.name)  # a live session's user stays
    finally:
        subprocess.run(["userdel", name], capture_output=True)
    assert os.geteuid() == 0
