"""Whose command ``fix`` reruns: a recorded command comes from a trace's ``meta.json``, so it is run
only from a trace that the invoking user (the sudo user under sudo) or root owns and that no one else
can change; ``--trust-trace`` overrides that after the user read the command."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from readtrace.errors import UsageError
from readtrace.escape import printable
from readtrace.owners import user_name, writable_by_others


def invoking_uid() -> int:
    """The user readtrace acts for: the invoking user under sudo, else the effective user."""
    from readtrace.record.launch import sudo_credentials

    creds = sudo_credentials()
    return creds.uid if creds else os.geteuid()


def trace_owner(trace: str | os.PathLike, *, trust: bool = False) -> str:
    """The name of the owner of ``trace`` (its directory and ``meta.json``, links not followed);
    UsageError when another user owns either or can write them, unless ``trust``."""
    me = invoking_uid()
    path = Path(trace)
    owners, loose = set(), []
    for part in (path, path / "meta.json"):
        for st in (os.lstat, os.stat):
            try:
                info = st(part)
            except OSError:
                continue  # missing: load_trace says so
            owners.add(info.st_uid)
            if writable_by_others(info) and not stat.S_ISLNK(info.st_mode):
                loose.append(part.name)
    foreign = sorted(owners - {me, 0})
    owner = user_name(foreign[0] if foreign else max(owners, default=me))
    if trust or not (foreign or loose):
        return owner
    why = (f"owned by {owner}, not by {user_name(me)} or root" if foreign
           else f"writable by group or others ({', '.join(sorted(set(loose)))})")
    raise UsageError(f"{printable(trace)}: the trace is {why}, so its recorded command is not run; "
                     "read it (meta.json \"command\") and add --trust-trace to run it anyway")


def describe(command: list[str], cwd: str | None, trace: str | os.PathLike, owner: str) -> str:
    """The line said before a recorded command runs."""
    return (f"running the command recorded in {printable(trace)} (owner {printable(owner)}): "
            f"{printable(shlex.join(command))} (cwd {printable(cwd or os.getcwd())})")
