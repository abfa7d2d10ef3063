"""Processes recorded in other PID and mount namespaces (a container, a pod without hostPID).

Their ids as the container sees them come from /proc/PID/task/TID/status (``NStgid``/``NSpid``: one id per
nested PID namespace, the innermost last), read when the recorder first meets each task (at the attach,
or when its fork is drained, ~20 ms later: a task gone by then stays unnamed). The paths they pass are
their mount namespace's; where the host sees the same file is found from that namespace's mountinfo
(read when a process of it is met or execs, and at the end): the mount holding the path gives the file system and the directory within
it, a host mount of the same file system that shows that directory gives the host's path, checked by
device and inode. A file mounted only inside the namespace (a tmpfs of the container's) has none.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from readtrace.fs.mounts import Mount, kernel_dev, mount_of, read_mounts


@dataclass(frozen=True)
class TaskIds:
    """One recorded task in a namespace other than the recorder's: host ids and the container's."""

    pid: int
    tid: int
    ns_pid: int  # in the innermost PID namespace of the task
    ns_tid: int
    pid_ns: int  # namespace ids: the inode numbers of /proc/PID/ns/pid and /proc/PID/ns/mnt
    mnt_ns: int


def namespace_id(pid: int | str, kind: str) -> int:
    return os.stat(f"/proc/{pid}/ns/{kind}").st_ino


def inner_ids(pid: int, tid: int) -> tuple[int, int] | None:
    """(pid, tid) of a task in its innermost PID namespace (None: gone, or a kernel without NSpid)."""
    ids = {}
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            name, _, values = line.partition(":")
            if name in ("NStgid", "NSpid"):
                ids[name] = int(values.split()[-1])
    return (ids["NStgid"], ids["NSpid"]) if len(ids) == 2 else None


def _under(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def _join(top: str, path: str, below: str) -> str:
    """``path`` (under ``below``) moved under ``top``."""
    rest = os.path.relpath(path, below)
    return os.path.normpath(top if rest == "." else os.path.join(top, rest))


def _same_file(path: str, dev: int, ino: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (kernel_dev(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino) == (dev, ino)


def host_path(path: str, dev: int, ino: int, inner: list[Mount], host: list[Mount]) -> str | None:
    """Where the host sees the file a process of another mount namespace names ``path`` (its mounts:
    ``inner``), or None where no host mount shows it. Checked by device and inode when ``ino`` is known;
    of several host paths, ``path`` itself where the host has the file there too, else the latest mount's."""
    mount = mount_of(path, dev, inner)
    if mount is None or mount.dev != dev or not _under(path, mount.mountpoint):
        return None
    within = _join(mount.root, path, mount.mountpoint)  # the path inside the file system
    found = []
    for h in reversed(host):  # later mounts stack over earlier ones
        if h.dev == dev and _under(within, h.root):
            candidate = _join(h.mountpoint, within, h.root)
            if not ino or _same_file(candidate, dev, ino):
                found.append(candidate)
    return path if path in found else next(iter(found), None)  # the same path where the host has it too


@dataclass
class Namespaces:
    """The namespaces of the recorded tasks, against the recorder's own."""

    pid_ns: int = field(default_factory=lambda: namespace_id("self", "pid"))
    mnt_ns: int = field(default_factory=lambda: namespace_id("self", "mnt"))
    host_mounts: list[Mount] = field(default_factory=read_mounts)
    tasks: dict[int, TaskIds] = field(default_factory=dict)  # tid -> ids, tasks in other namespaces only
    mounts: dict[int, list[Mount]] = field(default_factory=dict)  # mount namespace -> its mounts
    _ns_of: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (PID namespace, mount namespace)
    _seen: set[int] = field(default_factory=set)

    def _namespaces(self, pid: int, parent: int) -> tuple[int, int] | None:
        """(PID, mount) namespace of process ``pid``; one gone already has its ``parent``'s (a fork shares
        them unless it asked for new ones). Another mount namespace's mounts are read again with each new
        process met in it (a container mounts its volumes after its first process started)."""
        if pid not in self._ns_of:
            try:
                self._ns_of[pid] = (namespace_id(pid, "pid"), namespace_id(pid, "mnt"))
            except OSError:
                if parent not in self._ns_of:
                    return None
                self._ns_of[pid] = self._ns_of[parent]
            mnt = self._ns_of[pid][1]
            if mnt != self.mnt_ns:
                self._read_mounts(mnt, pid, parent)
        return self._ns_of[pid]

    def _read_mounts(self, mnt: int, *holders: int) -> None:
        """Add what the first of ``holders`` still in mount namespace ``mnt`` shows to its mounts (a mount
        gone since stays known: a file read on it before keeps its place)."""
        for holder in holders:
            try:
                if namespace_id(holder, "mnt") != mnt:
                    continue  # gone, and its pid taken by another process
                now = read_mounts(holder)
            except OSError:
                continue
            known = self.mounts.get(mnt, [])
            seen = set(known)
            self.mounts[mnt] = known + [m for m in now if m not in seen]
            return

    def exec_seen(self, pid: int) -> None:
        """Process ``pid`` exec'd: a container's entry point runs once its runtime mounted the volumes."""
        ns = self._ns_of.get(pid)
        if ns is not None and ns[1] != self.mnt_ns:
            self._read_mounts(ns[1], pid)

    def refresh(self) -> None:
        """Read the other mount namespaces' mounts again (before the files table: mounts made since)."""
        by_namespace: dict[int, list[int]] = {}
        for pid, (_pid_ns, mnt) in self._ns_of.items():
            if mnt != self.mnt_ns:
                by_namespace.setdefault(mnt, []).append(pid)
        for mnt, pids in by_namespace.items():
            self._read_mounts(mnt, *pids)

    def note(self, pid: int, tid: int, inner_tid: int = 0, parent: int = 0) -> None:
        """Meet task ``tid`` of process ``pid`` (once): its ids in its namespace where they differ.
        ``inner_tid``: its id there as the fork probe read it (0: read /proc/PID/task/TID/status)."""
        if tid in self._seen:
            return
        self._seen.add(tid)
        ns = self._namespaces(pid, parent)
        if ns is None or ns == (self.pid_ns, self.mnt_ns):
            return
        ids: tuple[int, int] | None = (pid, tid)
        if ns[0] != self.pid_ns:
            leader = self.tasks.get(pid)
            if inner_tid and (tid == pid or leader is not None):
                ids = (inner_tid if tid == pid else leader.ns_tid, inner_tid)
            else:
                try:
                    ids = inner_ids(pid, tid)
                except (OSError, ValueError):  # gone already: its ids there stay unknown
                    ids = None
        if ids is not None:
            self.tasks[tid] = TaskIds(pid, tid, *ids, *ns)

    def mounts_of(self, pid: int) -> list[Mount] | None:
        """The mounts process ``pid`` saw when it was met, where its mount namespace is not ours."""
        return self.mounts.get(self._ns_of.get(pid, (0, self.mnt_ns))[1])

    def host_path(self, path: str | None, pid: int, dev: int, ino: int) -> str | None:
        """The host's path of a file process ``pid`` named ``path`` (None: ours, or none on the host)."""
        inner = self.mounts_of(pid)
        return host_path(path, dev, ino, inner, self.host_mounts) if inner and path else None

    def rows(self) -> list[dict]:
        """The tasks table (trace/schema.TASKS)."""
        return [asdict(t) for t in self.tasks.values()]
