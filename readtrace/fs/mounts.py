"""Mounts and FUSE daemons: the one mountinfo parser and Mount type, where a file lives, who serves
each FUSE mount, and taking a FUSE mount down (``force_unmount``)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from readtrace.errors import ReadtraceError

DEV_FUSE = "/dev/fuse"
FUSE_CONNECTIONS = Path("/sys/fs/fuse/connections")


def kernel_dev(major: int, minor: int) -> int:
    """The kernel's dev_t encoding (what tracepoints and i_sb->s_dev hold): major << 20 | minor."""
    return (major << 20) | minor


@dataclass(frozen=True)
class Mount:
    """One line of /proc/<pid>/mountinfo."""

    dev: int  # kernel encoding (major << 20 | minor)
    mountpoint: str
    fstype: str  # e.g. ext4, fuse.gcsfuse, nfs4, tmpfs
    source: str = ""
    options: str = ""  # the mount's options, then the super block's (e.g. "ro,nosuid;max_read=1048576")
    root: str = "/"  # the directory of the file system mounted here (a bind mount's source within it)

    @property
    def is_fuse(self) -> bool:
        return is_fuse(self.fstype)

    @property
    def dev_name(self) -> str:
        """The "major:minor" name of the device, also its /sys/class/bdi entry."""
        return f"{self.dev >> 20}:{self.dev & 0xFFFFF}"


def is_fuse(fstype: str) -> bool:
    return fstype == "fuse" or fstype.startswith(("fuse.", "fuseblk"))


_OCTAL = re.compile(rb"\\([0-7]{3})")


def unescape(field: str | bytes) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...); the other bytes of a
    name are its UTF-8 as is. Decode the escapes on the bytes, then the UTF-8."""
    raw = field if isinstance(field, bytes) else field.encode("utf-8", "surrogateescape")
    return _OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), raw).decode("utf-8", "replace")


def parse_mountinfo(data: bytes) -> list[Mount]:
    """The mounts of a mountinfo file's contents, in order (later lines stack over earlier ones)."""
    mounts = []
    for line in data.splitlines():
        left, _, right = line.partition(b" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        major, _, minor = fields[2].partition(b":")
        options = f"{fields[5].decode(errors='replace')};{tail[2].decode(errors='replace')}" \
            if len(fields) > 5 and len(tail) > 2 else ""
        mounts.append(Mount(kernel_dev(int(major), int(minor)), unescape(fields[4]), tail[0].decode(),
                            unescape(tail[1]) if len(tail) > 1 else "", options, unescape(fields[3])))
    return mounts


def read_mounts(pid: int | str = "self", *, mountinfo: str | os.PathLike | None = None) -> list[Mount]:
    """Mounts as seen by ``pid`` (its mount namespace), from /proc/<pid>/mountinfo (or ``mountinfo``).
    Read live, a FUSE mount without a subtype (plain ``fuse``, e.g. bindfs) is named ``fuse.<daemon>``
    after the process serving it, where one is found, so the knowledge table can tell daemons apart."""
    mounts = parse_mountinfo(Path(mountinfo or f"/proc/{pid}/mountinfo").read_bytes())
    if mountinfo is None and any(m.fstype in ("fuse", "fuseblk") for m in mounts):
        daemons = _daemon_commands()
        mounts = [_named(m, daemons) if m.fstype in ("fuse", "fuseblk") else m for m in mounts]
    return mounts


def _named(mount: Mount, daemons: list[tuple[str, list[str]]]) -> Mount:
    name = next((comm for comm, argv in daemons if any(_names(a, mount.mountpoint) for a in argv)), None)
    return replace(mount, fstype=f"{mount.fstype}.{name}") if name else mount


def _names(arg: str, point: str) -> bool:
    """Does a daemon's argument name this mount point? (A daemon that went to the background may have
    changed directory since it was given a relative path.)"""
    arg = os.path.normpath(arg)
    return arg == point if os.path.isabs(arg) else point.endswith("/" + arg)


def _daemon_commands() -> list[tuple[str, list[str]]]:
    """(comm, argv) of every process holding /dev/fuse open."""
    out = []
    for pid in sorted(fuse_daemons()):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        out.append((comm, [a for a in argv[1:] if a and not a.startswith("-")]))
    return out


def mount_of(path: str | None, dev: int, mounts: list[Mount]) -> Mount | None:
    """The mount holding a file: the last mount of its device (overmounts come later), else by path."""
    same_dev = [m for m in mounts if m.dev == dev]
    if path:
        under = [m for m in (same_dev or mounts)
                 if path == m.mountpoint or path.startswith(m.mountpoint.rstrip("/") + "/")]
        if under:
            return max(under, key=lambda m: len(m.mountpoint))
    return same_dev[-1] if same_dev else None


def file_mount(path: str | os.PathLike, *, mountinfo: str | os.PathLike | None = None) -> Mount | None:
    """The mount holding an existing file: same device, longest mount point over its real path."""
    real = os.path.realpath(path)
    st = os.stat(real)
    mounts = read_mounts(mountinfo=mountinfo)
    dev = kernel_dev(os.major(st.st_dev), os.minor(st.st_dev))
    return mount_of(real, dev, [m for m in mounts if m.dev == dev])


def mount_at(mountpoint: str | os.PathLike) -> Mount | None:
    """The mount whose mount point is exactly ``mountpoint`` (the last: mounts stack), or None."""
    want = os.path.realpath(mountpoint)
    return next((m for m in reversed(read_mounts()) if m.mountpoint == want), None)


def force_unmount(mountpoint: str | Path) -> bool:
    """Unmount with fusermount3, lazily when busy. True when something was unmounted."""
    if mount_at(mountpoint) is None:
        return False
    for flags in ("-u", "-uz"):
        done = subprocess.run(["fusermount3", flags, str(mountpoint)], capture_output=True, text=True)
        if done.returncode == 0:
            return True
    raise ReadtraceError(f"could not unmount {mountpoint}: {done.stderr.strip()}")


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
