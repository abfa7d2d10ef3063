"""Whose command ``fix`` reruns: a recorded command comes from a trace's ``meta.json``, so it is run
only from a trace that the invoking user (the sudo user under sudo) or root owns and that no one else
can change; ``--trust-trace`` overrides that after the user read the command."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import stat
from pathlib import Path

from readtrace.errors import UsageError
from readtrace.escape import printable
from readtrace.owners import user_name, writable_by_others
from readtrace.validate import json_value

MAX_META = 16 << 20  # a meta.json larger than this is not read here (load_trace judges it)


def invoking_uid() -> int:
    """The user readtrace acts for: the invoking user under sudo, else the effective user."""
    from readtrace.record.launch import sudo_credentials

    creds = sudo_credentials()
    return creds.uid if creds else os.geteuid()


def checked_trace(trace: str | os.PathLike, *, trust: bool = False) -> tuple[str, dict | None]:
    """(the name of the owner of ``trace``, its ``meta.json`` as read from the file that was checked).

    The directory and ``meta.json`` are opened once (``meta.json`` without following a link) and
    checked on those open files, so what is checked is what is read: UsageError when a user other
    than the invoking one and root owns either or can write them, unless ``trust``. None for the meta
    when it cannot be read here (load_trace then says why)."""
    me = invoking_uid()
    owners, loose = set(), []

    def check(name: str, info: os.stat_result) -> None:
        owners.add(info.st_uid)
        if writable_by_others(info) and not stat.S_ISLNK(info.st_mode):
            loose.append(name)

    meta, linked = None, False
    with contextlib.suppress(OSError):
        check(Path(trace).name, os.lstat(trace))
    with contextlib.ExitStack() as stack:
        try:
            dfd = os.open(trace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            stack.callback(os.close, dfd)
            check(Path(trace).name, os.fstat(dfd))
            fd = os.open("meta.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            stack.callback(os.close, fd)
            info = os.fstat(fd)
            check("meta.json", info)
            if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_META:
                with contextlib.suppress(ValueError):
                    meta = json_value(os.pread(fd, MAX_META, 0))
        except OSError as e:
            linked = e.errno == errno.ELOOP  # meta.json is a symlink; else missing ...: load_trace says so
    foreign = sorted(owners - {me, 0})
    owner = user_name(foreign[0] if foreign else max(owners, default=me))
    if trust or not (foreign or loose or linked):
        return owner, meta if isinstance(meta, dict) else None
    why = (f"owned by {owner}, not by {user_name(me)} or root" if foreign
           else f"writable by group or others ({', '.join(sorted(set(loose)))})" if loose
           else "not what it seems: its meta.json is a symbolic link")
    raise UsageError(f"{printable(trace)}: the trace is {why}, so its recorded command is not run; "
                     "read it (meta.json \"command\") and add --trust-trace to run it anyway")


def describe(command: list[str], cwd: str | None, trace: str | os.PathLike, owner: str) -> str:
    """The line said before a recorded command runs."""
    return (f"running the command recorded in {printable(trace)} (owner {printable(owner)}): "
            f"{printable(shlex.join(command))} (cwd {printable(cwd or os.getcwd())})")
