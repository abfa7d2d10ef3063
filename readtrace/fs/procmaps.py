"""The one /proc/PID/maps parser: which files a live process maps, by (kernel dev, inode); and which
processes map a file or hold it open (/proc/PID/fd), to say who keeps its pages cached."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from readtrace.fs.mounts import kernel_dev


def mapped_files(pid: int) -> dict[tuple[int, int], str]:
    """(kernel dev, ino) -> path of the files mapped in a live process (empty once it exited, or
    where its maps are not ours to read)."""
    found = {}
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and parts[4] != "0":
            major, minor = (int(x, 16) for x in parts[3].split(":"))
            found[(kernel_dev(major, minor), int(parts[4]))] = parts[5]
    return found


def mapped_by(path: str, exclude: Iterable[int] = ()) -> list[str]:
    """"PID (comm)" of every process that maps ``path`` now (but those in ``exclude``)."""
    try:
        st = os.stat(path)
    except OSError:
        return []
    key = (kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino)
    skip = set(exclude)
    return _named(pid for pid in _pids() if pid not in skip and key in mapped_files(pid))


def opened_by(path: str) -> list[str]:
    """"PID (comm)" of every process with an open fd on ``path`` now (its own fds count too). By the
    fd links' names: a stat of each would ask every file's file system, a hung FUSE daemon included."""
    target = os.path.realpath(path)
    return _named(pid for pid in _pids() if _holds_open(pid, target))


def _holds_open(pid: int, target: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone, or not ours to read
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _named(pids) -> list[str]:
    found = []
    for pid in pids:
        try:
            found.append(f"{pid} ({Path(f'/proc/{pid}/comm').read_text().strip()})")
        except OSError:  # gone since
            continue
    return found
