"""Which mount a file lives on (from /proc/self/mountinfo), and what that means for making it cold."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fstype: str  # e.g. ext4, fuse.gcsfuse, nfs4, tmpfs
    source: str


def mount_of(path: str | os.PathLike, mountinfo: str = "/proc/self/mountinfo") -> Mount | None:
    """The mount holding ``path``: same device, longest mount point that prefixes its real path."""
    real = os.path.realpath(path)
    st = os.stat(real)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    best: Mount | None = None
    with open(mountinfo, encoding="utf-8", errors="replace") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 2 or fields[2] != dev:
                continue
            point = _unescape(fields[4])
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and (best is None or len(point) > len(best.mount_point)):
                best = Mount(point, tail[0], _unescape(tail[1]))
    return best


NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "lustre", "ceph", "glusterfs", "9p", "virtiofs", "beegfs",
              "gpfs", "wekafs")
MEMORY_FS = ("tmpfs", "ramfs", "hugetlbfs")


def is_remote(path: str | os.PathLike) -> bool:
    """On a FUSE or network file system (False when it cannot be told)."""
    try:
        mount = mount_of(path)
    except OSError:
        return False
    fstype = mount.fstype if mount else ""
    return fstype == "fuse" or fstype.startswith(("fuse.", "fuseblk")) or fstype in NETWORK_FS


def cold_cache_caveat(fstype: str) -> str | None:
    """Why dropping the kernel page cache may not make a file on ``fstype`` cold (None: it does)."""
    if fstype == "fuse" or fstype.startswith(("fuse.", "fuseblk")):
        return (f"{fstype}: the FUSE daemon may keep its own cache (gcsfuse file cache, rclone VFS cache) "
                "that posix_fadvise cannot evict; only the kernel page cache was dropped")
    if fstype in NETWORK_FS:
        return f"{fstype}: server-side caches cannot be evicted from this machine"
    if fstype in MEMORY_FS:
        return f"{fstype}: the file lives in memory and cannot be made cold"
    return None


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field
