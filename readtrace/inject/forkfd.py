"""An open file of its own for each forked worker: the ``own-fd-per-fork`` fix, and the baseline's
check for workers that inherited the parent's open checkpoint file.

A worker forked after its parent opened a checkpoint shares the parent's open file description: one
FUSE handle, whose read-ahead stream every worker's pread moves (gcsfuse, rclone: a new backend
request per jump). After each fork (``os.register_at_fork``, installed by the rerun's sitecustomize,
and again when an exec'd Python child starts with such an fd), the child's fds open on the named
checkpoint files (matched by st_dev/st_ino) get an open file description of their own: the same path
opened again with the same status flags, its file offset and close-on-exec flag copied, ``dup2``'d onto
the same fd number. Only regular files opened read-only are touched; a path that now names another
file leaves the fd alone; nothing is written. Mappings made before the fork stay as they were.
Standard library only: it runs in every child of the rerun, before the child's own code.
"""

from __future__ import annotations

import fcntl
import os
import stat

from readtrace.inject.failclosed import guarded

_FD_DIR = "/proc/self/fd"
# status flags an open() can set again; O_APPEND/O_ASYNC make no sense on a read-only checkpoint
_KEPT_FLAGS = os.O_DIRECT | os.O_NOATIME | os.O_NONBLOCK | getattr(os, "O_LARGEFILE", 0)


def identities(paths) -> dict[tuple[int, int], str]:
    """(st_dev, st_ino) -> path of each regular file among ``paths`` (those that stat)."""
    out = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.setdefault((st.st_dev, st.st_ino), path)
    return out


def open_on(files: dict[tuple[int, int], str]) -> list[tuple[int, str]]:
    """(fd, path) of this process's read-only fds on ``files`` (or, with ``files`` empty, on any
    regular file: the discovery run names the files it finds this way)."""
    found = []
    try:
        fds = [int(name) for name in os.listdir(_FD_DIR)]
    except OSError:
        return found
    for fd in fds:
        try:
            st = os.fstat(fd)
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or flags & os.O_ACCMODE != os.O_RDONLY:
            continue
        path = files.get((st.st_dev, st.st_ino)) if files else _link(fd)
        if path:
            found.append((fd, path))
    return found


def reopen(fd: int, path: str) -> bool:
    """Give ``fd`` an open file description of its own on ``path`` (offset, status and close-on-exec
    flags kept). False, and ``fd`` untouched, where ``path`` no longer names fd's file or it fails."""
    try:
        old = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        if not stat.S_ISREG(old.st_mode) or flags & os.O_ACCMODE != os.O_RDONLY:
            return False
        new = os.open(path, os.O_RDONLY | (flags & _KEPT_FLAGS))
    except OSError:
        return False
    try:
        st = os.fstat(new)
        if (st.st_dev, st.st_ino) != (old.st_dev, old.st_ino):
            return False  # replaced or renamed since the parent opened it: the worker keeps what it had
        os.lseek(new, os.lseek(fd, 0, os.SEEK_CUR), os.SEEK_SET)
        os.dup2(new, fd, inheritable=os.get_inheritable(fd))
        return True
    except OSError:
        return False
    finally:
        os.close(new)


def reopen_all(files: dict[tuple[int, int], str]) -> list[tuple[int, str]]:
    """Reopen every read-only fd of this process on ``files``; the (fd, path) pairs it reopened."""
    return [(fd, path) for fd, path in open_on(files) if reopen(fd, path)] if files else []


def _link(fd: int) -> str | None:
    try:
        path = os.readlink(f"{_FD_DIR}/{fd}")
    except OSError:
        return None
    return path if path.startswith("/") and not path.endswith(" (deleted)") else None


@guarded("fork handler set-up")
def install(rerun) -> None:
    """For a rerun (``protocol.Rerun``) that names its checkpoint files, records a manifest or asks for
    ``own-fd-per-fork``: after every fork, and now (an exec'd Python child may have inherited an fd),
    find this process's fds on those files; under ``own-fd-per-fork`` reopen them; note each in the manifest (``fork:shared-fd``:
    the discovery and baseline runs tell ``fix --compare`` that workers shared the parent's file).
    Handlers are inherited by forked children, so a worker that forks again is covered as well."""
    from readtrace.rerun.protocol import OWN_FD_PER_FORK, append_manifest

    # plain `readtrace fix` names its files as the ones to prefetch; with none named at all, the
    # strategy (asked for by name) takes any read-only regular file a worker inherited
    files = identities(rerun.files or rerun.prefetch_files)
    fix = rerun.strategy == OWN_FD_PER_FORK
    if not files and not rerun.manifest and not fix:
        return

    @guarded("per-fork file check")
    def check(when: str) -> None:
        found = open_on(files)
        if not found:
            return
        done = {fd for fd, path in found if reopen(fd, path)} if fix else set()
        if rerun.manifest:
            from readtrace.rerun.records import ForkCall  # on the first note: the hook itself stays lean

            append_manifest(rerun.manifest, [ForkCall(file=path, fd=fd, when=when, reopened=fd in done,
                                                      pid=os.getpid()) for fd, path in found])

    os.register_at_fork(after_in_child=lambda: check("fork"))
    if files:
        check("exec")
