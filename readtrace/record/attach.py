"""Attach to processes already running: find them, their threads and descendants in /proc, and recover
what they had open before the probes attached (open files with their position and flags, file
mappings), so reads through an fd opened earlier are named and keep their open file description.

The open file description's identity is the kernel's ``struct file *``, which /proc does not show:
``resolve_ofds`` borrows each fd with pidfd_getfd(2) (the same open file description) and issues
``lseek(fd, 0, SEEK_CUR)`` on it while the recorder's own process is traced, so the probes record the
struct file, dev and inode of each (the decoder takes those records as the recovery and drops the
rest of the recorder's). What happened before the attach (reads, the opens' own times) is not known.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import stat
from dataclasses import dataclass, field
from pathlib import Path

from readtrace.errors import InputError
from readtrace.fs.mounts import file_mount, kernel_dev

SYS_PIDFD_GETFD = 438  # x86_64
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Process:
    """One attached process: its threads (tid -> comm) and command line."""

    pid: int
    threads: dict[int, str]
    cmdline: list[str]
    ppid: int


@dataclass(frozen=True)
class OpenFile:
    """A regular file open in an attached process at attach time (/proc/PID/fd and fdinfo)."""

    pid: int
    fd: int
    path: str
    dev: int  # kernel encoding (major << 20 | minor)
    ino: int
    size: int
    flags: int
    pos: int


@dataclass(frozen=True)
class Mapping:
    """A file mapping of an attached process at attach time (one line of /proc/PID/maps)."""

    pid: int
    start: int
    end: int
    offset: int
    dev: int
    ino: int
    path: str


@dataclass
class Recovered:
    """What the processes held when the recording started."""

    files: list[OpenFile] = field(default_factory=list)
    mappings: list[Mapping] = field(default_factory=list)

    def named(self) -> dict[tuple[int, int], tuple[str, int]]:
        """(dev, ino) -> (path, size) of what was recovered."""
        found = {(m.dev, m.ino): (m.path, _size(m.path)) for m in self.mappings}
        found.update({(f.dev, f.ino): (f.path, f.size) for f in self.files})
        return found


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def parse_pids(text: str) -> list[int]:
    """``PID[,PID...]`` -> pids (InputError naming what is not one)."""
    pids = []
    for part in text.split(","):
        if not part.strip().isdigit() or int(part) <= 0:
            raise InputError(f"{part.strip()!r} is not a process id ({{option}} PID[,PID...])", option="pid")
        pids.append(int(part))
    return pids


@dataclass(frozen=True)
class Cgroup:
    """A cgroup v2 directory to record: its id is the directory's inode number."""

    path: str
    id: int


def cgroup_dir(path: str) -> Cgroup:
    """``path`` as a cgroup v2 directory (InputError when it is not one)."""
    real = os.path.realpath(path)
    try:
        mount = file_mount(real) if os.path.isfile(os.path.join(real, "cgroup.procs")) else None
    except OSError:
        mount = None
    if mount is None or mount.fstype != "cgroup2":
        raise InputError(f"{path}: not a cgroup v2 directory (one under a cgroup2 mount, with a cgroup.procs)")
    return Cgroup(real, os.stat(real).st_ino)


def cgroup_pids(cgroup: Cgroup) -> set[int]:
    """The processes in the cgroup and in every cgroup below it, now."""
    pids: set[int] = set()
    for here, _dirs, _files in os.walk(cgroup.path):
        text = _read(os.path.join(here, "cgroup.procs")) or ""
        pids.update(int(p) for p in text.split() if p.isdigit())
    return pids


def _stat_fields(pid: int) -> tuple[str, int]:
    """(state, ppid) from /proc/PID/stat (the comm may hold spaces and parentheses)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[1])


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def process(pid: int) -> Process | None:
    """The live process ``pid`` with its threads, or None (gone, a zombie or a thread id)."""
    try:
        state, ppid = _stat_fields(pid)
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return None
    if state in ("Z", "X") or pid not in tids:
        return None
    threads = {tid: (_read(f"/proc/{pid}/task/{tid}/comm") or "").strip() for tid in tids}
    cmdline = (_read(f"/proc/{pid}/cmdline") or "").split("\0")
    return Process(pid, threads, [c for c in cmdline if c] or [threads[pid]], ppid)


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def check_pids(pids: list[int]) -> dict[int, Process]:
    """The named processes (InputError for one that does not exist or already exited)."""
    found = {}
    for pid in pids:
        proc = process(pid)
        if proc is None:
            raise InputError(f"no process with pid {pid}")
        found[pid] = proc
    return found


def descendants(roots: set[int]) -> dict[int, Process]:
    """Every live process whose ancestry reaches ``roots`` (the roots included)."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        try:
            children.setdefault(_stat_fields(pid)[1], []).append(pid)
        except (OSError, ValueError):
            continue
    found, todo = {}, list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        proc = process(pid)
        if proc is None:
            continue
        found[pid] = proc
        todo.extend(children.get(pid, []))
    return found


def _fdinfo(pid: int, fd: int) -> dict[str, str]:
    text = _read(f"/proc/{pid}/fdinfo/{fd}") or ""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def open_files(pid: int) -> list[OpenFile]:
    """Regular files open in ``pid`` now (the fd link's target stat'ed: a deleted file too)."""
    try:
        fds = sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return []
    found = []
    for fd in fds:
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        info = _fdinfo(pid, fd)
        with contextlib.suppress(ValueError, KeyError):
            found.append(OpenFile(pid, fd, path, kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino,
                                  st.st_size, int(info["flags"].strip(), 8), int(info["pos"].strip())))
    return found


def file_mappings(pid: int) -> list[Mapping]:
    """The file-backed mappings of ``pid`` now, one per /proc/PID/maps line."""
    found = []
    for line in (_read(f"/proc/{pid}/maps") or "").splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/") or parts[4] == "0":
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        major, minor = (int(x, 16) for x in parts[3].split(":"))
        found.append(Mapping(pid, start, end, int(parts[2], 16), kernel_dev(major, minor), int(parts[4]), parts[5]))
    return found


def recover(pids) -> Recovered:
    """The open files and file mappings of ``pids`` now."""
    out = Recovered()
    for pid in sorted(pids):
        out.files.extend(open_files(pid))
        out.mappings.extend(file_mappings(pid))
    return out


def _pidfd_getfd(pidfd: int, fd: int) -> int:
    got = _libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
    if got < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return got


def borrow_fds(files: list[OpenFile]) -> dict[int, OpenFile]:
    """Our copies of the processes' open files (pidfd_getfd: the same open file description): our fd ->
    the file. A file that cannot be borrowed (the process exited, the fd was closed) is left out."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    borrowed: dict[int, OpenFile] = {}
    pidfds: dict[int, int] = {}
    try:
        for f in files:
            try:
                if f.pid not in pidfds:
                    pidfds[f.pid] = os.pidfd_open(f.pid)
                ours = _pidfd_getfd(pidfds[f.pid], f.fd)
            except OSError:
                continue
            borrowed[ours] = f
    finally:
        for pidfd in pidfds.values():
            os.close(pidfd)
    return borrowed


def touch_borrowed(borrowed: dict[int, OpenFile]) -> None:
    """``lseek(fd, 0, SEEK_CUR)`` on each borrowed fd: the position does not move, and the probes (our
    process traced meanwhile) record each one's struct file, dev and inode."""
    for ours in borrowed:
        with contextlib.suppress(OSError):
            os.lseek(ours, 0, os.SEEK_CUR)


def give_back(borrowed: dict[int, OpenFile]) -> None:
    for ours in borrowed:
        with contextlib.suppress(OSError):
            os.close(ours)
