"""Mounts and FUSE daemons: where each traced file lives, and who serves each FUSE mount."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEV_FUSE = "/dev/fuse"
FUSE_CONNECTIONS = Path("/sys/fs/fuse/connections")


def kernel_dev(major: int, minor: int) -> int:
    """The kernel's dev_t encoding (what tracepoints and i_sb->s_dev hold): major << 20 | minor."""
    return (major << 20) | minor


@dataclass(frozen=True)
class Mount:
    dev: int  # kernel encoding
    mountpoint: str
    fstype: str

    @property
    def is_fuse(self) -> bool:
        return self.fstype == "fuse" or self.fstype.startswith(("fuse.", "fuseblk"))


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="replace")


def read_mounts(pid: int | str = "self") -> list[Mount]:
    """Mounts as seen by ``pid`` (its mount namespace), from /proc/<pid>/mountinfo."""
    mounts = []
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        major, minor = (int(x) for x in fields[2].split(":"))
        mounts.append(Mount(kernel_dev(major, minor), _unescape(fields[4]), right.split()[0]))
    return mounts


def mount_of(path: str | None, dev: int, mounts: list[Mount]) -> Mount | None:
    """The mount holding a file: the last mount of its device (overmounts come later), else by path."""
    same_dev = [m for m in mounts if m.dev == dev]
    if path:
        under = [m for m in (same_dev or mounts)
                 if path == m.mountpoint or path.startswith(m.mountpoint.rstrip("/") + "/")]
        if under:
            return max(under, key=lambda m: len(m.mountpoint))
    return same_dev[-1] if same_dev else None


def fuse_connections(mounts: list[Mount]) -> set[int]:
    """FUSE connection ids of the FUSE mounts: the minor of the mount's device."""
    return {m.dev & 0xFFFFF for m in mounts if m.is_fuse}


def fuse_daemons() -> set[int]:
    """Processes holding /dev/fuse open: the daemons that read FUSE requests.

    Which connection each one serves is read in kernel from the /dev/fuse file itself
    (probes/fuse.bpf.c), so a daemon serving another mount adds no rows.
    """
    daemons = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:  # gone, or not ours to look at
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == DEV_FUSE:
                    daemons.add(int(proc.name))
                    break
            except OSError:
                continue
    daemons.discard(os.getpid())
    return daemons
