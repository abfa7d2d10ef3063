"""Who may change a file or directory: the one rule readtrace trusts inputs and directories by (a
trace's recorded command, ``fix --keep DIR``, the state directory)."""

from __future__ import annotations

import grp
import os
import pwd


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
