"""Who may change a file or directory: the one rule readtrace trusts inputs and directories by (a
trace's recorded command, ``fix --keep DIR``, the state directory)."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

INIT_USER_NS = "user:[4026531837]"  # PROC_USER_INIT_INO: the host's user namespace


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def writable_by_others(st: os.stat_result) -> bool:
    """Whether a user other than the owner (and root) may write it: world-writable, or group-writable
    unless the group is the owner's own private group (named like the owner, no other member: the
    user-private-group scheme under which umask 002 makes every new file group-writable)."""
    if st.st_mode & 0o002:
        return True
    if not st.st_mode & 0o020:
        return False
    owner = user_name(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid)
    except KeyError:
        return True
    return group.gr_name != owner or bool(set(group.gr_mem) - {owner})


def user_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/user")
    except OSError:
        return INIT_USER_NS


def is_host_root() -> bool:
    """Root of the host, not the "root" of a user namespace (its files there belong to someone else)."""
    return os.geteuid() == 0 and user_namespace() == INIT_USER_NS


def host_uid() -> int:
    """This process's effective uid as the host sees it (/proc/self/uid_map), for names outside the namespace."""
    euid = os.geteuid()
    try:
        lines = Path("/proc/self/uid_map").read_text().splitlines()
    except OSError:
        return euid
    for line in lines:
        inside, outside, count = (int(v) for v in line.split())
        if inside <= euid < inside + count:
            return outside + euid - inside
    return euid
